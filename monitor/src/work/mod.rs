//! The `work` workload generator ([`workload`]) and its self-registration with the
//! module ([`registration`]).

pub mod registration;
pub mod workload;
