//! pfprof's monitor and workload generator: everything but argument parsing and error
//! reporting, which live in the binaries.

pub mod child;
pub mod plot;
pub mod procstat;
pub mod registration;
pub mod report;
pub mod sampler;
pub mod source;
pub mod workload;
