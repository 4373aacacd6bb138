//! The `work` workload generator ([`workload`], and the file it may map: [`filemap`]) and
//! its self-registration with the module ([`registration`]).

pub mod filemap;
pub mod registration;
pub mod workload;
