//! Starting the command `monitor run` profiles, and reaping it with its rusage.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::process::CommandExt;
use std::process::Command;

use shared_layout::abi::PROC_PATH;

use crate::procstat::Counters;
use crate::report::ExitStatus;

#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("no command given")]
    NoCommand,
    #[error("cannot run {command:?}")]
    Spawn {
        command: OsString,
        #[source]
        source: io::Error,
    },
}

/// Starts `argv`. With `register`, the child writes `R <its pid>` to the module's
/// registration file between fork and exec, so the module counts every fault of the
/// command; a failed registration fails the spawn and the command never runs.
pub fn spawn(argv: &[OsString], register: bool) -> Result<u32, SpawnError> {
    let (program, args) = argv.split_first().ok_or(SpawnError::NoCommand)?;
    let mut command = Command::new(program);
    command.args(args);
    if register {
        let path = CString::new(PROC_PATH).expect("PROC_PATH has no NUL byte");
        // SAFETY: the hook runs in the forked child before exec and only makes
        // async-signal-safe calls (getpid, open, write, close) on stack memory and on
        // `path`, allocated before the fork.
        unsafe {
            command.pre_exec(move || register_self(&path));
        }
    }
    let child = command.spawn().map_err(|source| SpawnError::Spawn {
        command: program.clone(),
        source,
    })?;
    // Dropping `Child` neither waits nor kills: `wait` reaps it with wait4().
    Ok(child.id())
}

/// `R <getpid()>\n` to the registration file, without allocating (we are between fork
/// and exec of a possibly multi-threaded parent).
fn register_self(path: &CString) -> io::Result<()> {
    let mut buf = [0u8; 16];
    // SAFETY: getpid has no preconditions.
    let mut pid = unsafe { libc::getpid() } as u32;
    let mut start = buf.len() - 1;
    buf[start] = b'\n';
    loop {
        start -= 1;
        buf[start] = b'0' + (pid % 10) as u8;
        pid /= 10;
        if pid == 0 {
            break;
        }
    }
    start -= 2;
    buf[start..start + 2].copy_from_slice(b"R ");
    let line = &buf[start..];
    // SAFETY: `path` is a valid C string; the flags ask for nothing unusual.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `line` is a live buffer of `line.len()` bytes; `fd` is ours.
    let written = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
    let result = if written < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    // SAFETY: `fd` is ours and closed once.
    unsafe { libc::close(fd) };
    result
}

/// Reaps the child `pid` with wait4(): how it ended and everything it used, its own
/// counts plus those of the descendants it waited for, exactly as the kernel kept them.
pub fn wait(pid: u32) -> io::Result<(ExitStatus, Counters)> {
    let mut status = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `status` and `usage` are live locals wait4 fills in.
        let ret = unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) };
        if ret >= 0 {
            break;
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
    let exit = if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled(libc::WTERMSIG(status))
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    };
    let tv_ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    Ok((
        exit,
        Counters {
            minor: usage.ru_minflt as u64,
            major: usage.ru_majflt as u64,
            cpu_ns: tv_ns(usage.ru_utime) + tv_ns(usage.ru_stime),
        },
    ))
}

/// Sends `signal` to the child `pid` (forwarding SIGINT/SIGTERM to the profiled command).
pub fn signal(pid: u32, signal: i32) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
