//! Another user against the module: nobody, the device open to all as the udev rule
//! leaves it, and a setuid-root program nobody may run but not read.

use std::fs;
use std::os::unix::fs::{chown, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::Command;

use anyhow::{ensure, Context, Result};
use shared_layout::abi;

pub(crate) const NOBODY: u32 = 65534;

/// The device as the udev rule leaves it: anyone may open a session.
pub(crate) fn open_to_all() -> Result<()> {
    fs::set_permissions(abi::DEVICE_PATH, fs::Permissions::from_mode(0o666))
        .context("chmod /dev/pfprof")
}

/// A directory nobody may write its CSVs to.
pub(crate) fn nobodys_dir() -> Result<&'static str> {
    let dir = "/tmp/nobody";
    fs::create_dir_all(dir)?;
    chown(dir, Some(NOBODY), Some(NOBODY))?;
    Ok(dir)
}

/// Nobody registers its own process `pid` through /proc/pfprof/status.
pub(crate) fn register_as_nobody(pid: u32) -> Result<()> {
    let said = Command::new(std::env::current_exe()?)
        .uid(NOBODY)
        .gid(NOBODY)
        .args(["hardening-child", "status", "R", &pid.to_string()])
        .output()?;
    ensure!(
        String::from_utf8_lossy(&said.stdout).trim() == "ok",
        "nobody registering {pid}: {said:?}"
    );
    Ok(())
}

/// Where the tests put a setuid-root copy of this binary: what nobody may run
/// and may not read once it runs.
const SETUID_COPY: &str = "/tmp/setuid-guest";

/// A setuid-root copy of this binary (the /tmp tmpfs allows setuid).
pub(crate) fn setuid_copy() -> Result<&'static str> {
    fs::copy(std::env::current_exe()?, SETUID_COPY).context("copying the guest binary")?;
    fs::set_permissions(SETUID_COPY, fs::Permissions::from_mode(0o4755))?;
    Ok(SETUID_COPY)
}
