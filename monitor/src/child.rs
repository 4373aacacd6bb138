//! Starting the command `monitor run` profiles, and reaping it with its rusage.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread::{self, JoinHandle};

use shared_layout::abi::PROC_PATH;

use crate::procstat::ProcessCounters;
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

/// Starts `argv` now; the procfs backend's way.
pub fn spawn(argv: &[OsString]) -> Result<u32, SpawnError> {
    spawn_held(argv, false)?.release()
}

/// A command forked and held between fork and exec until [`Held::release`]; dropping it
/// instead makes the command fail before it runs anything.
pub struct Held {
    /// One byte lets the child exec; end of file makes it give up.
    go: File,
    spawner: JoinHandle<Result<u32, SpawnError>>,
}

impl Held {
    /// Lets the command exec; its pid once it runs.
    pub fn release(self) -> Result<u32, SpawnError> {
        // A child that died meanwhile makes this fail; the spawner says why.
        let _ = (&self.go).write_all(b"G");
        drop(self.go);
        self.spawner
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

/// Forks `argv` and holds it before exec (see [`Held`]). With `register`, the child first
/// writes `R <its pid>` to the module's registration file, so the module counts every
/// fault of the command and the caller can start the session once the command is
/// registered and before it runs; a failed registration fails the spawn.
pub fn spawn_held(argv: &[OsString], register: bool) -> Result<Held, SpawnError> {
    let (program, args) = argv.split_first().ok_or(SpawnError::NoCommand)?;
    let failed = |source| SpawnError::Spawn {
        command: program.clone(),
        source,
    };
    let (ready_rx, ready_tx) = pipe().map_err(failed)?;
    let (go_rx, go_tx) = pipe().map_err(failed)?;
    let go_tx_in_child = go_tx.as_raw_fd();
    let path = CString::new(PROC_PATH).expect("PROC_PATH has no NUL byte");
    let mut command = Command::new(program);
    command.args(args);
    // SAFETY: the hook runs in the forked child before exec and only makes
    // async-signal-safe calls (getpid, open, read, write, close) on stack memory, on
    // `path`, allocated before the fork, and on file descriptors it owns.
    unsafe {
        command.pre_exec(move || {
            if register {
                register_self(&path)?;
            }
            hold(&ready_tx, go_tx_in_child, &go_rx)
        });
    }
    // spawn() returns only once the child has exec'd: it waits in a thread of its own.
    let spawner = thread::Builder::new()
        .name("pfprof-spawn".into())
        .spawn({
            let program = program.clone();
            move || {
                let child = command.spawn();
                // Closes our copies of the child's pipe ends (owned by the hook).
                drop(command);
                let child = child.map_err(|source| SpawnError::Spawn {
                    command: program,
                    source,
                })?;
                // Dropping `Child` neither waits nor kills: `wait` reaps it with wait4().
                Ok(child.id())
            }
        })
        .map_err(failed)?;
    match File::from(ready_rx).read_exact(&mut [0]) {
        Ok(()) => Ok(Held {
            go: File::from(go_tx),
            spawner,
        }),
        // The child failed before it was ready: the spawner has the reason.
        Err(_) => {
            drop(go_tx);
            let outcome = spawner
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            Err(match outcome {
                Err(e) => e,
                Ok(pid) => {
                    // Killed before it was ready: nothing ran, reap it.
                    let _ = wait(pid);
                    failed(io::Error::other("it was killed before it could start"))
                }
            })
        }
    }
}

/// A pipe whose ends are closed on exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` is a live array of the two ints pipe2 fills in.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded: both are open descriptors nobody else owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// In the child between fork and exec: say it is ready and wait for the go. Our copy of
/// the go pipe's write end is closed first, so the parent giving up (or dying) reads
/// as end of file here.
fn hold(ready_tx: &OwnedFd, go_tx: RawFd, go_rx: &OwnedFd) -> io::Result<()> {
    // The monitor's handlers for these, inherited by the fork, would make the held child
    // ignore a Ctrl-C; exec resets them anyway.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: signal() is async-signal-safe; SIG_DFL is always a valid disposition.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
    // SAFETY: `go_tx` is the child's own copy of an open descriptor, closed once.
    unsafe { libc::close(go_tx) };
    let byte = [0u8];
    // SAFETY: `byte` is a live 1-byte buffer; the descriptor is ours.
    retry(|| unsafe { libc::write(ready_tx.as_raw_fd(), byte.as_ptr().cast(), 1) })?;
    let mut go = [0u8];
    // SAFETY: as above.
    match retry(|| unsafe { libc::read(go_rx.as_raw_fd(), go.as_mut_ptr().cast(), 1) })? {
        1 => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::ECANCELED)),
    }
}

/// Repeats a system call interrupted by a signal.
fn retry(mut call: impl FnMut() -> isize) -> io::Result<isize> {
    loop {
        let ret = call();
        if ret >= 0 {
            return Ok(ret);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
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

/// Waits until the child `pid` has ended, without reaping it: until [`wait`], its pid
/// stays its own and cannot be given to another process.
pub fn wait_exited(pid: u32) -> io::Result<()> {
    // SAFETY: siginfo_t is plain old data; all-zero is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    loop {
        // SAFETY: `info` is a live local waitid fills in.
        let ret = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if ret == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Reaps the child `pid` with wait4(): how it ended and everything it used, its own
/// counts plus those of the descendants it waited for, exactly as the kernel kept them.
pub fn wait(pid: u32) -> io::Result<(ExitStatus, ProcessCounters)> {
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
        ProcessCounters {
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;

    /// `sh -c 'touch <file>'` and the file it creates once it runs.
    fn toucher(name: &str) -> (Vec<OsString>, PathBuf) {
        let file = std::env::temp_dir().join(format!("pfprof-child-{}-{name}", std::process::id()));
        let _ = std::fs::remove_file(&file);
        let argv = ["sh", "-c", "touch \"$0\""]
            .iter()
            .map(OsString::from)
            .chain([file.clone().into_os_string()])
            .collect();
        (argv, file)
    }

    #[test]
    fn a_held_command_runs_only_once_released() {
        let (argv, file) = toucher("released");
        let held = spawn_held(&argv, false).unwrap();
        thread::sleep(Duration::from_millis(200));
        assert!(!file.exists(), "the command ran before it was released");
        let pid = held.release().unwrap();
        assert_eq!(wait(pid).unwrap().0, ExitStatus::Exited(0));
        assert!(file.exists());
        std::fs::remove_file(file).unwrap();
    }

    #[test]
    fn a_held_command_dropped_without_release_never_runs() {
        let (argv, file) = toucher("dropped");
        drop(spawn_held(&argv, false).unwrap());
        thread::sleep(Duration::from_millis(300));
        assert!(!file.exists(), "the command ran");
    }

    #[test]
    fn waiting_for_the_exit_leaves_the_pid_to_the_zombie_until_it_is_reaped() {
        let pid = spawn(&["sh".into(), "-c".into(), "exit 3".into()]).unwrap();
        wait_exited(pid).unwrap();
        let stat = crate::procstat::read(pid).expect("still there, not reaped");
        assert!(stat.exited);
        assert_eq!(wait(pid).unwrap().0, ExitStatus::Exited(3));
    }

    #[test]
    fn a_command_that_does_not_exist_fails_at_release() {
        let held = spawn_held(&["/nonexistent/pfprof-command".into()], false).unwrap();
        let err = held.release().unwrap_err();
        assert!(matches!(err, SpawnError::Spawn { .. }), "{err:?}");
    }

    #[test]
    fn a_command_that_cannot_register_fails_before_it_runs() {
        if crate::registration::available() {
            return; // the module is loaded here: registration would succeed
        }
        let (argv, file) = toucher("unregistered");
        let err = spawn_held(&argv, true).err();
        assert!(matches!(err, Some(SpawnError::Spawn { .. })), "{err:?}");
        assert!(!file.exists(), "the command ran");
    }
}
