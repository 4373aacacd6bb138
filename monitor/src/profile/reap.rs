//! The command `monitor run` started, once the profile runs: reaped on a thread of its
//! own, and the exit code it leaves `monitor`.

use std::io;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::consume::End;
use super::error::ProfileError;
use crate::command::child::{self, Running};
use crate::command::signals::Signals;
use crate::output::summary::ChildReport;
use crate::rows::source::Ending;
use crate::system::error::SystemError;
use crate::system::exit::ExitStatus;

/// How long a stopped profile waits for its command to exit, having sent it the signal.
const EXIT_WAIT: Duration = Duration::from_millis(50);

pub(super) type Reaper = JoinHandle<io::Result<ChildReport>>;

/// A thread that reaps the command `monitor run` started, stops forwarding signals to
/// its pid, announces the end, and tells whoever watches the command's exit (the
/// producer that counts it, [`Running::watch_exit`]) before and after the reap.
pub(super) fn spawn(
    mut command: Running,
    signals: &Signals,
    ending: Arc<Ending>,
) -> Result<Reaper, SystemError> {
    let signals = signals.clone();
    thread::Builder::new()
        .name("pfprof-reaper".into())
        .spawn(move || {
            let pid = command.pid();
            // Stop forwarding while the pid is still the command's, and only then reap
            // it: a reaped pid may be given to someone else.
            let exited = child::wait_exited(pid);
            signals.forward_to(0);
            exited?;
            ending.announce();
            command.exited();
            let (status, totals, usage) = child::wait(pid)?;
            command.reaped(totals);
            Ok(ChildReport {
                minor: totals.minor,
                major: totals.major,
                cpu_ns: totals.cpu_ns,
                usage,
                status,
            })
        })
        .map_err(SystemError::doing(
            "starting the thread that waits for the command",
        ))
}

/// The command's rusage and the exit code `monitor` ends with: the command's own; when
/// the profile ended before the command, 130 (interrupted) after a signal, 141 (as a
/// writer killed by SIGPIPE) after the output was closed.
pub(super) fn command_outcome(
    reaper: Option<Reaper>,
    end: End,
) -> Result<(Option<ChildReport>, u8), ProfileError> {
    let Some(reaper) = reaper else {
        return Ok((None, 0));
    };
    let waited = Instant::now();
    while end != End::Finished && !reaper.is_finished() {
        if waited.elapsed() >= EXIT_WAIT {
            let signal = match end {
                End::OutputClosed => Signal::SIGPIPE,
                _ => Signal::SIGINT,
            };
            return Ok((None, ExitStatus::Signaled(signal as i32).code()));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let report = reaper
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .map_err(ProfileError::Reap)?;
    Ok((Some(report), report.status.code()))
}
