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

/// Where the tests put a setuid-nobody copy: root runs it as nobody (its effective
/// uid changed), and it is not dumpable then, as any setuid program is.
const SETUID_NOBODY_COPY: &str = "/tmp/setuid-nobody-guest";

/// A setuid-root copy of this binary (the /tmp tmpfs allows setuid).
pub(crate) fn setuid_copy() -> Result<&'static str> {
    copy_setuid(SETUID_COPY, 0)
}

/// A copy of this binary setuid to nobody.
pub(crate) fn setuid_nobody_copy() -> Result<&'static str> {
    copy_setuid(SETUID_NOBODY_COPY, NOBODY)
}

/// A copy of this binary at `path`, owned by `owner` and setuid to it.
fn copy_setuid(path: &'static str, owner: u32) -> Result<&'static str> {
    fs::copy(std::env::current_exe()?, path).context("copying the guest binary")?;
    // Before the mode: a chown clears the setuid bit.
    chown(path, Some(owner), Some(owner))?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o4755))?;
    Ok(path)
}
