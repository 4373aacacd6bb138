//! Starting the command `monitor run` profiles, telling whoever counts it of its end, and
//! reaping it with its rusage.

use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread::{self, JoinHandle};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::{self, SigHandler, Signal};
use nix::sys::wait::{self, Id, WaitPidFlag};
use nix::unistd::{self, Pid};

use crate::backend::ExitWatch;
use crate::system::exit::Blame;
use crate::system::exit::ExitStatus;
use crate::system::procstat::{self, ProcessCounters, Usage};

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
    /// Our side of starting it failed (pipes, threads).
    #[error("preparing to run {command:?}")]
    Setup {
        command: OsString,
        #[source]
        source: io::Error,
    },
}

impl SpawnError {
    /// As shells report it: 127 for a command that is not there, 126 for one that is
    /// and cannot be executed.
    pub fn blame(&self) -> Blame {
        match self {
            SpawnError::Spawn { source, .. } => match source.kind() {
                io::ErrorKind::NotFound => Blame::CommandNotFound,
                _ => Blame::CommandNotExecutable,
            },
            SpawnError::Setup { .. } => Blame::Internal,
            SpawnError::NoCommand => Blame::Usage,
        }
    }
}

/// Starts `argv` now, not held.
pub fn spawn(argv: &[OsString]) -> Result<u32, SpawnError> {
    spawn_held(argv)?.release()
}

/// The command once it runs, until it is reaped; the producer that counts it may watch
/// for its end ([`Running::watch_exit`]).
pub struct Running {
    pid: u32,
    watch: Option<Box<dyn ExitWatch>>,
}

impl Running {
    pub fn new(pid: u32) -> Running {
        Running { pid, watch: None }
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// `watch` is told of the command's end, first while its zombie is there, then with
    /// its final counts.
    pub fn watch_exit(&mut self, watch: Box<dyn ExitWatch>) {
        self.watch = Some(watch);
    }

    /// The command has exited; called before it is reaped.
    pub fn exited(&mut self) {
        if let Some(watch) = self.watch.as_mut() {
            watch.exited(self.pid);
        }
    }

    /// The command was reaped ([`wait`]) with these counts.
    pub fn reaped(self, totals: ProcessCounters) {
        if let Some(watch) = self.watch {
            watch.reaped(self.pid, totals);
        }
    }
}

/// A command forked and held between fork and exec until [`Held::release`]; dropping it
/// instead makes the command fail before it runs anything.
pub struct Held {
    pid: u32,
    /// One byte lets the child exec; end of file makes it give up.
    go: File,
    spawner: JoinHandle<Result<u32, SpawnError>>,
}

impl Held {
    /// The held child's pid: it can be profiled before it runs.
    pub fn pid(&self) -> u32 {
        self.pid
    }

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

/// What the held child writes on the ready pipe: ready, followed by its pid (4 bytes in
/// native order).
const READY: u8 = b'R';

/// Forks `argv` and holds it before exec (see [`Held`]).
pub fn spawn_held(argv: &[OsString]) -> Result<Held, SpawnError> {
    let (program, args) = argv.split_first().ok_or(SpawnError::NoCommand)?;
    let setup = |source| SpawnError::Setup {
        command: program.clone(),
        source,
    };
    let (ready_rx, ready_tx) = pipe().map_err(setup)?;
    let (go_rx, go_tx) = pipe().map_err(setup)?;
    let go_tx_in_child = std::os::fd::AsRawFd::as_raw_fd(&go_tx);
    let mut command = Command::new(program);
    command.args(args);
    // SAFETY: the hook runs in the forked child before exec and only makes
    // async-signal-safe calls (signal, getpid, read, write, close) on stack memory and on
    // file descriptors it owns.
    unsafe {
        command.pre_exec(move || hold(&ready_tx, go_tx_in_child, &go_rx));
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
        .map_err(setup)?;
    let mut ready = [0u8; 5];
    if File::from(ready_rx).read_exact(&mut ready).is_ok() && ready[0] == READY {
        let pid = u32::from_ne_bytes([ready[1], ready[2], ready[3], ready[4]]);
        return Ok(Held {
            pid,
            go: File::from(go_tx),
            spawner,
        });
    }
    // The child failed before it was ready: the spawner has the reason.
    drop(go_tx);
    let outcome = spawner
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    Err(match outcome {
        Err(e) => e,
        Ok(pid) => {
            // Killed before it was ready: nothing ran, reap it.
            let _ = wait(pid);
            setup(io::Error::other("it was killed before it could start"))
        }
    })
}

/// A pipe whose ends are closed on exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    Ok(unistd::pipe2(OFlag::O_CLOEXEC)?)
}

/// In the child between fork and exec: say it is ready and wait for the go. Our copy of
/// the go pipe's write end is closed first, so the parent giving up (or dying) reads
/// as end of file here.
fn hold(ready_tx: &OwnedFd, go_tx: RawFd, go_rx: &OwnedFd) -> io::Result<()> {
    // The monitor's handlers for these, inherited by the fork, would make the held child
    // ignore a Ctrl-C; exec resets them anyway.
    for sig in [Signal::SIGINT, Signal::SIGTERM] {
        // SAFETY: SIG_DFL installs no handler: nothing can run in a bad context.
        unsafe { signal::signal(sig, SigHandler::SigDfl) }?;
    }
    // SAFETY: `go_tx` is the child's own copy of an open descriptor (the parent's copy is
    // another process's), closed once, here.
    unistd::close(unsafe { OwnedFd::from_raw_fd(go_tx) })?;
    let mut ready = [READY, 0, 0, 0, 0];
    ready[1..].copy_from_slice(&(unistd::getpid().as_raw() as u32).to_ne_bytes());
    retry(|| unistd::write(ready_tx, &ready))?;
    let mut go = [0u8];
    match retry(|| unistd::read(go_rx, &mut go))? {
        1 => Ok(()),
        _ => Err(io::Error::from_raw_os_error(libc::ECANCELED)),
    }
}

/// Repeats a system call interrupted by a signal.
fn retry<T>(mut call: impl FnMut() -> nix::Result<T>) -> nix::Result<T> {
    loop {
        match call() {
            Err(Errno::EINTR) => {}
            other => return other,
        }
    }
}

fn pid_of(pid: u32) -> Pid {
    // Pids come from the kernel or from a --pid the CLI bounded to 1..=i32::MAX.
    Pid::from_raw(pid as libc::pid_t)
}

/// Waits until the child `pid` has ended, without reaping it: until [`wait`], its pid
/// stays its own and cannot be given to another process.
pub fn wait_exited(pid: u32) -> io::Result<()> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    retry(|| wait::waitid(Id::Pid(pid_of(pid)), flags))?;
    Ok(())
}

/// Reaps the child `pid` once it has ended: how it ended and everything it used, its own
/// counts plus those of the descendants it waited for, exactly as the kernel kept them.
///
/// CPU time is rusage's (microseconds), or the exited process's own CPU clock when that
/// is more (nanoseconds: rusage truncates), so that per-period nanosecond readings taken
/// while it ran never exceed its total.
pub fn wait(pid: u32) -> io::Result<(ExitStatus, ProcessCounters, Usage)> {
    wait_exited(pid)?;
    let clock_ns = procstat::cpu_clock(pid).and_then(|clock| procstat::cpu_ns(clock).ok());
    let mut status = 0;
    // SAFETY: rusage is plain old data; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // libc, not nix: nix's wait functions do not return the rusage.
    retry(|| {
        // SAFETY: `status` and `usage` are live locals wait4 fills in.
        Errno::result(unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut usage) })
    })?;
    let exit = if libc::WIFSIGNALED(status) {
        ExitStatus::Signaled(libc::WTERMSIG(status))
    } else {
        ExitStatus::Exited(libc::WEXITSTATUS(status))
    };
    let tv_ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    let rusage_cpu_ns = tv_ns(usage.ru_utime) + tv_ns(usage.ru_stime);
    Ok((
        exit,
        ProcessCounters {
            minor: usage.ru_minflt as u64,
            major: usage.ru_majflt as u64,
            cpu_ns: rusage_cpu_ns.max(clock_ns.unwrap_or(0)),
        },
        Usage {
            user_ns: tv_ns(usage.ru_utime),
            system_ns: tv_ns(usage.ru_stime),
            // In KiB on Linux.
            max_rss_bytes: (usage.ru_maxrss as u64).saturating_mul(1024),
        },
    ))
}

/// Sends `signal` to the child `pid` (forwarding SIGINT/SIGTERM to the profiled command).
pub fn signal(pid: u32, sig: Signal) -> io::Result<()> {
    Ok(signal::kill(pid_of(pid), sig)?)
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
        let held = spawn_held(&argv).unwrap();
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
        drop(spawn_held(&argv).unwrap());
        thread::sleep(Duration::from_millis(300));
        assert!(!file.exists(), "the command ran");
    }

    #[test]
    fn waiting_for_the_exit_leaves_the_pid_to_the_zombie_until_it_is_reaped() {
        let pid = spawn(&["sh".into(), "-c".into(), "exit 3".into()]).unwrap();
        wait_exited(pid).unwrap();
        let stat = crate::system::procstat::read(pid).expect("still there, not reaped");
        assert!(stat.exited);
        assert_eq!(wait(pid).unwrap().0, ExitStatus::Exited(3));
    }

    #[test]
    fn a_command_that_does_not_exist_fails_at_release_with_127() {
        let held = spawn_held(&["/nonexistent/pfprof-command".into()]).unwrap();
        let err = held.release().unwrap_err();
        assert!(matches!(err, SpawnError::Spawn { .. }), "{err:?}");
        assert_eq!(err.blame(), Blame::CommandNotFound);
    }

    #[test]
    fn a_file_that_cannot_be_executed_fails_with_126() {
        let held = spawn_held(&["/dev/null".into()]).unwrap();
        let err = held.release().unwrap_err();
        assert_eq!(err.blame(), Blame::CommandNotExecutable, "{err:?}");
    }

    #[test]
    fn the_cpu_time_of_a_reaped_child_is_at_least_what_its_clock_said_while_it_ran() {
        let pid = spawn(&[
            "sh".into(),
            "-c".into(),
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done".into(),
        ])
        .unwrap();
        let clock = procstat::cpu_clock(pid).expect("a CPU clock for our child");
        let running = procstat::cpu_ns(clock).unwrap();
        let (_, totals, _) = wait(pid).unwrap();
        assert!(
            totals.cpu_ns >= running && totals.cpu_ns > 0,
            "{totals:?} < {running}"
        );
    }
}
