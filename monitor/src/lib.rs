//! pfprof's monitor and workload generator: everything but argument parsing, which lives
//! in the binaries.

pub mod backend;
pub mod child;
pub mod error;
pub mod output;
pub mod plot;
pub mod procstat;
pub mod registration;
pub mod report;
pub mod sampler;
pub mod session;
pub mod signals;
pub mod source;
pub mod tree;
pub mod workload;
