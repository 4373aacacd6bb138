//! SIGINT, SIGTERM and SIGHUP (a dropped ssh session): forwarded to the command `monitor
//! run` started, or turned into a stop of the session at once, from the thread that
//! receives them, so that the profile ends within a few milliseconds whatever the
//! consumer is waiting for, with everything written. `--duration` and `--count` end it
//! as a SIGTERM does ([`Signals::end_after`], [`Signals::end_as_sigterm`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::Duration;

use nix::sys::signal::Signal;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;

use crate::backend::{BackendError, Stopper};
use crate::command::child;
use crate::system::error::SystemError;

#[derive(Clone)]
pub struct Signals {
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    received: AtomicUsize,
    /// The pid to forward to, 0 for nobody. Held while a signal is sent, so that once
    /// `forward_to(0)` returns no signal to the old pid is under way.
    child: Mutex<u32>,
    stop_requested: AtomicBool,
    /// Taken by the first stop; `None` before the session started or after.
    stopper: Mutex<Option<Stopper>>,
    stop_error: Mutex<Option<BackendError>>,
    /// The profile is over: a `--duration` that runs out now changes nothing.
    over: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing is left half-updated under these locks: a panic elsewhere does not matter.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Signals {
    pub fn install() -> Result<Signals, SystemError> {
        let system = SystemError::doing;
        let shared = Arc::new(Shared::default());
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP])
            .map_err(system("installing the SIGINT/SIGTERM/SIGHUP handlers"))?;
        let handler = Signals {
            shared: Arc::clone(&shared),
        };
        thread::Builder::new()
            .name("pfprof-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    handler.received(origin.signal, origin.cause);
                }
            })
            .map_err(system("starting the signal thread"))?;
        Ok(Signals { shared })
    }

    /// Signals that no handler delivers: a fleet monitor's target, which its fleet stops
    /// with [`Signals::request_stop`]. A handler of its own per target would be a thread
    /// and a descriptor that outlive the target, one more at every restart of a service.
    pub fn unhooked() -> Signals {
        Signals {
            shared: Arc::default(),
        }
    }

    fn received(&self, signal: i32, cause: Cause) {
        let first = self.shared.received.fetch_add(1, Ordering::AcqRel) == 0;
        let pid = lock(&self.shared.child);
        if *pid != 0 && first {
            // The first signal goes to the command, whose exit then ends the session.
            if forwards(cause) {
                if let Ok(signal) = Signal::try_from(signal) {
                    // Gone already: its exit ends the session anyway.
                    let _ = child::signal(*pid, signal);
                }
            }
            return;
        }
        drop(pid);
        // No command, or the second signal: end the session ourselves.
        self.request_stop();
    }

    /// After `duration`, what a SIGTERM from `kill` does: the command `monitor run`
    /// started gets it (as from timeout(1)), or the session stops; not once the profile
    /// is over.
    pub fn end_after(&self, duration: Duration) -> Result<(), SystemError> {
        let signals = self.clone();
        thread::Builder::new()
            .name("pfprof-duration".into())
            .spawn(move || {
                thread::sleep(duration);
                signals.end_as_sigterm();
            })
            .map_err(SystemError::doing("starting the --duration timer"))?;
        Ok(())
    }

    /// Now, what a SIGTERM from `kill` does (see [`Signals::end_after`]).
    pub fn end_as_sigterm(&self) {
        if !self.shared.over.load(Ordering::Acquire) {
            self.received(SIGTERM, Cause::Unknown);
        }
    }

    /// The profile is over: what comes now is the exporters' linger.
    pub fn profile_over(&self) {
        self.shared.over.store(true, Ordering::Release);
    }

    /// Forward the first signal to `pid` from now on (0: nobody).
    pub fn forward_to(&self, pid: u32) {
        *lock(&self.shared.child) = pid;
    }

    /// The session has started: `stopper` ends it. Runs at once if a stop was requested
    /// before.
    pub fn stop_with(&self, stopper: Stopper) {
        *lock(&self.shared.stopper) = Some(stopper);
        if self.stop_requested() {
            self.run_stopper();
        }
    }

    /// End the session (a signal, or the output's reader went away); only the first
    /// request does anything.
    pub fn request_stop(&self) {
        self.shared.stop_requested.store(true, Ordering::Release);
        self.run_stopper();
    }

    fn run_stopper(&self) {
        let stopper = lock(&self.shared.stopper).take();
        if let Some(Err(e)) = stopper.map(|stop| stop()) {
            lock(&self.shared.stop_error).get_or_insert(e);
        }
    }

    /// How many SIGINT, SIGTERM and SIGHUP have arrived so far: a later count tells of a new one.
    pub fn received_count(&self) -> usize {
        self.shared.received.load(Ordering::Acquire)
    }

    /// Whether the session is being stopped rather than ending by itself.
    pub fn stop_requested(&self) -> bool {
        self.shared.stop_requested.load(Ordering::Acquire)
    }

    /// Why stopping failed, if it did.
    pub fn take_stop_error(&self) -> Option<BackendError> {
        lock(&self.shared.stop_error).take()
    }
}

/// Whether a signal that reached us must be passed on to the command. Not the
/// terminal's (Ctrl-C, sent by the kernel): the command is in our process group and got
/// it already, and a second SIGINT makes many programs quit without cleaning up.
fn forwards(cause: Cause) -> bool {
    cause != Cause::Kernel
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU32;

    use signal_hook::low_level::siginfo::Sent;

    use super::*;

    #[test]
    fn signals_from_the_terminal_are_not_forwarded_twice_but_those_from_kill_are() {
        assert!(!forwards(Cause::Kernel));
        assert!(forwards(Cause::Sent(Sent::User)));
        assert!(forwards(Cause::Sent(Sent::Queue)));
        assert!(forwards(Cause::Unknown));
    }

    fn counting_stopper(count: &Arc<AtomicU32>) -> Stopper {
        let count = Arc::clone(count);
        Box::new(move || {
            count.fetch_add(1, Ordering::SeqCst);
            Ok(())
        })
    }

    #[test]
    fn a_signal_without_a_command_stops_the_session_once_even_before_it_started() {
        let signals = Signals::unhooked();
        let stops = Arc::new(AtomicU32::new(0));
        signals.received(SIGINT, Cause::Kernel);
        signals.stop_with(counting_stopper(&stops));
        signals.received(SIGTERM, Cause::Unknown);
        assert_eq!(stops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn with_a_command_the_first_signal_is_its_own_and_the_second_stops_the_session() {
        let signals = Signals::unhooked();
        let stops = Arc::new(AtomicU32::new(0));
        signals.stop_with(counting_stopper(&stops));
        // A pid from the terminal: nothing is sent, so no real process is needed.
        signals.forward_to(u32::MAX >> 1);
        signals.received(SIGINT, Cause::Kernel);
        assert_eq!(stops.load(Ordering::SeqCst), 0);
        signals.received(SIGINT, Cause::Kernel);
        assert_eq!(stops.load(Ordering::SeqCst), 1);
    }
}
