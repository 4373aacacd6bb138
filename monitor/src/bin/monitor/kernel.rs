//! The kernel backend: the pfprof module samples, this process only consumes.

use std::ffi::OsString;
use std::time::Duration;

use monitor::child;
use monitor::registration::{self, RegistrationError};
use monitor::source::Source;
use shared_layout::device::{Device, DeviceError};
use shared_layout::LayoutError;

use crate::session::{self, Backend, Settings, SignalState};
use crate::{cannot_profile, usage, Usage, UsageContext};

/// The processes `monitor` registered itself, unregistered when the user stops.
struct Kernel {
    registered: Vec<u32>,
    period: Duration,
}

impl Backend for Kernel {
    fn stop(&mut self) -> anyhow::Result<()> {
        // The module writes their last sample and ends the session once nobody else is
        // registered; otherwise the grace period runs out and we take what is ready.
        unregister_all(&mut self.registered, registration::unregister)
    }

    fn grace(&self) -> Duration {
        3 * self.period + Duration::from_millis(500)
    }

    fn ring_error(&self) -> &'static str {
        "reading samples from the ring failed: the pfprof module and this monitor disagree \
         (reload pfprof.ko built from this tree, or use --backend procfs)"
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // On an error path: leave no process registered behind us.
        let _ = self.stop();
    }
}

/// Unregisters every pid in `registered` with `unregister`, even after one fails (none
/// may stay registered behind us), and returns the first error.
fn unregister_all(
    registered: &mut Vec<u32>,
    mut unregister: impl FnMut(u32) -> Result<(), RegistrationError>,
) -> anyhow::Result<()> {
    let mut first_error = None;
    for pid in registered.drain(..) {
        match unregister(pid) {
            Ok(())
            | Err(RegistrationError::NotRegistered(_) | RegistrationError::NoSuchProcess(_)) => {}
            Err(e) => {
                first_error.get_or_insert_with(|| {
                    anyhow::Error::new(e).context(format!("unregistering process {pid}"))
                });
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// The module's errors the user can act on: not loaded, no permission, ABI mismatch, busy.
fn device_error(e: DeviceError) -> anyhow::Error {
    let actionable = matches!(
        e,
        DeviceError::NotLoaded { .. }
            | DeviceError::PermissionDenied { .. }
            | DeviceError::AbiMismatch { .. }
            | DeviceError::Busy { .. }
            | DeviceError::Layout(LayoutError::VersionMismatch { .. })
    );
    let hint = "cannot use the pfprof module (--backend procfs works without it)";
    let e = anyhow::Error::new(e);
    if actionable {
        e.context(Usage(hint.into()))
    } else {
        e.context(hint)
    }
}

/// Registers `pid` with `register` and adds it to `registered`, the processes to
/// unregister at the end. A process that registered itself (`work` does) is profiled as
/// it is, and stays registered: it unregisters itself.
fn register_with(
    registered: &mut Vec<u32>,
    pid: u32,
    register: impl FnOnce(u32) -> Result<(), RegistrationError>,
) -> anyhow::Result<()> {
    match register(pid) {
        Ok(()) => registered.push(pid),
        Err(RegistrationError::AlreadyRegistered(_)) => {}
        Err(e) => return Err(e).usage_context(|| cannot_profile(pid)),
    }
    Ok(())
}

pub fn profile(
    mut settings: Settings,
    pids: &[u32],
    command: Option<Vec<OsString>>,
    period_ms: Option<u32>,
) -> anyhow::Result<u8> {
    let device = Device::open().map_err(device_error)?;
    let info = device.info();
    let period = Duration::from_nanos(info.period_ns);
    if let Some(ms) = period_ms.filter(|&ms| Duration::from_millis(ms.into()) != period) {
        return Err(usage(format!(
            "the module samples every {} ms: --period-ms {ms} needs the procfs backend, \
             or reload the module with period_ms={ms}",
            period.as_millis()
        )));
    }
    let signals = SignalState::install()?;
    let mut backend = Kernel {
        registered: Vec::new(),
        period,
    };
    // Everything is registered before the session starts: the module ends a session
    // when its last registered process leaves, which an unrelated one could do before
    // ours registered. Faults taken before the start reach the first sample.
    for &pid in pids {
        register_with(&mut backend.registered, pid, registration::register)?;
    }
    let cannot_start = || {
        "cannot start the command (check its name, its permissions and that you may write /proc/pfprof/status)".to_owned()
    };
    // The child registers itself between fork and exec and waits there: no fault is
    // missed. Dropped on an error below, it never runs.
    let held = command
        .as_deref()
        .map(|argv| child::spawn_held(argv, true).usage_context(cannot_start))
        .transpose()?;
    let area = device.start(settings.mode).map_err(device_error)?;
    let source = Source::new(area.clone(), device.waiter(), settings.interval);
    let reaper = match held {
        Some(held) => {
            let pid = held.release().usage_context(cannot_start)?;
            signals.forward_to(pid);
            // The module sees the exit once the child is reaped and ends the session.
            Some(session::reap(pid, &signals, |_| {})?)
        }
        None => {
            if pids.is_empty() {
                eprintln!(
                    "monitor: waiting for processes to register (echo \"R $$\" > /proc/pfprof/status)"
                );
            }
            None
        }
    };

    let outcome = session::consume(&mut settings, &area, source, &signals, &mut backend)?;
    let (child, code) = session::child_outcome(reaper, outcome.stopped)?;
    session::finish(&settings, &area, &outcome, child)?;
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_that_registered_itself_is_profiled_and_left_registered() {
        let mut registered = Vec::new();
        register_with(&mut registered, 42, |pid| {
            Err(RegistrationError::AlreadyRegistered(pid))
        })
        .unwrap();
        assert!(registered.is_empty());
    }

    #[test]
    fn a_process_we_registered_is_unregistered_at_the_end() {
        let mut registered = Vec::new();
        register_with(&mut registered, 42, |_| Ok(())).unwrap();
        assert_eq!(registered, [42]);
    }

    #[test]
    fn a_process_that_cannot_be_registered_is_a_usage_error() {
        let mut registered = Vec::new();
        let err = register_with(&mut registered, 42, |pid| {
            Err(RegistrationError::NoSuchProcess(pid))
        })
        .unwrap_err();
        assert!(err.is::<Usage>(), "{err:#}");
        assert!(registered.is_empty());
    }

    #[test]
    fn every_process_is_unregistered_even_after_a_failure_and_the_first_error_is_returned() {
        let mut registered = vec![1, 2, 3];
        let mut tried = Vec::new();
        let err = unregister_all(&mut registered, |pid| {
            tried.push(pid);
            match pid {
                1 => Err(RegistrationError::PermissionDenied),
                2 => Err(RegistrationError::NotLoaded),
                _ => Ok(()),
            }
        })
        .unwrap_err();
        assert_eq!(tried, [1, 2, 3]);
        assert!(registered.is_empty());
        assert_eq!(err.to_string(), "unregistering process 1");
    }

    #[test]
    fn processes_that_are_gone_or_unregistered_already_are_not_an_error() {
        let mut registered = vec![1, 2];
        unregister_all(&mut registered, |pid| match pid {
            1 => Err(RegistrationError::NoSuchProcess(pid)),
            _ => Err(RegistrationError::NotRegistered(pid)),
        })
        .unwrap();
    }
}
