//! The Prometheus exporter: the metrics in Prometheus' text formats ([`exposition`], which
//! the textfile exporter writes too) and the HTTP server a Prometheus scrapes ([`http`]).

pub mod exposition;
pub mod http;
