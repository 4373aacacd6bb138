//! A system call the profile depends on failed: what it was doing, and the OS's error.

use std::io;

#[derive(Debug, thiserror::Error)]
#[error("{what}")]
pub struct SystemError {
    pub what: &'static str,
    #[source]
    pub source: io::Error,
}

impl SystemError {
    /// Maps an I/O error to a `SystemError` that says it happened while doing `what`.
    pub fn doing(what: &'static str) -> impl Fn(io::Error) -> SystemError {
        move |source| SystemError { what, source }
    }
}
