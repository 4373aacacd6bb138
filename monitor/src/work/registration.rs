//! Registering processes with the pfprof module through `/proc/pfprof/status`.

use std::fs::OpenOptions;
use std::io::{self, ErrorKind, Write};
use std::path::Path;

use shared_layout::abi::PROC_PATH;

#[derive(Debug, thiserror::Error)]
pub enum RegistrationError {
    #[error("{PROC_PATH} does not exist: the pfprof module is not loaded")]
    NotLoaded,
    #[error("permission denied writing {PROC_PATH}")]
    PermissionDenied,
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("process {0} is already registered")]
    AlreadyRegistered(u32),
    #[error("process {0} is not registered")]
    NotRegistered(u32),
    #[error("writing {PROC_PATH}")]
    Io(u32, #[source] io::Error),
}

/// Whether the module's registration file exists (the module is loaded).
pub fn available() -> bool {
    Path::new(PROC_PATH).exists()
}

/// `R <pid>`: the module samples `pid` from now on.
pub fn register(pid: u32) -> Result<(), RegistrationError> {
    command('R', pid)
}

/// `U <pid>`: the module stops sampling `pid` (it also drops processes that exit).
pub fn unregister(pid: u32) -> Result<(), RegistrationError> {
    command('U', pid)
}

fn command(op: char, pid: u32) -> Result<(), RegistrationError> {
    let mut file = OpenOptions::new()
        .write(true)
        .open(PROC_PATH)
        .map_err(|e| match e.kind() {
            ErrorKind::NotFound => RegistrationError::NotLoaded,
            ErrorKind::PermissionDenied => RegistrationError::PermissionDenied,
            _ => RegistrationError::Io(pid, e),
        })?;
    // One write per command: the module parses each write on its own.
    file.write_all(format!("{op} {pid}\n").as_bytes())
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ESRCH) => RegistrationError::NoSuchProcess(pid),
            Some(libc::EEXIST) => RegistrationError::AlreadyRegistered(pid),
            Some(libc::ENOENT) => RegistrationError::NotRegistered(pid),
            Some(libc::EACCES | libc::EPERM) => RegistrationError::PermissionDenied,
            _ => RegistrationError::Io(pid, e),
        })
}
