//! The kernel backend: the pfprof module samples, this process only consumes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use shared_layout::device::{Device, DeviceWaiter};
use shared_layout::{Area, Mode};

use super::{Backend, Targets};
use crate::error::ProfileError;
use crate::procstat::ProcessCounters;
use crate::registration::{self, RegistrationError};
use crate::signals::Stopper;
use crate::source::Ending;

pub struct Kernel {
    device: Device,
    period: Duration,
    /// The processes the monitor registered itself, unregistered when it stops.
    registered: Arc<Mutex<Vec<u32>>>,
    waits_for_registrations: bool,
}

impl Backend for Kernel {
    type Waiter = DeviceWaiter;

    fn open(targets: &Targets) -> Result<Kernel, ProfileError> {
        let device = Device::open().map_err(ProfileError::Device)?;
        let period = Duration::from_nanos(device.info().period_ns);
        if let Some(ms) = targets
            .period_ms
            .filter(|&ms| Duration::from_millis(ms.into()) != period)
        {
            return Err(ProfileError::PeriodMismatch {
                module_ms: period.as_millis(),
                asked_ms: ms,
            });
        }
        let kernel = Kernel {
            device,
            period,
            registered: Arc::default(),
            waits_for_registrations: targets.pids.is_empty() && !targets.command,
        };
        // Everything is registered before the session starts: the module ends a session
        // when its last registered process leaves, which an unrelated one could do before
        // ours registered. Faults taken before the start reach the first sample.
        for &pid in &targets.pids {
            register_with(&mut lock(&kernel.registered), pid, registration::register)?;
        }
        Ok(kernel)
    }

    fn name(&self) -> &'static str {
        "kernel"
    }

    fn command_registers_itself(&self) -> bool {
        // It registers between fork and exec and waits there: no fault is missed.
        true
    }

    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, DeviceWaiter), ProfileError> {
        let area = self.device.start(mode).map_err(ProfileError::Device)?;
        Ok((area, self.device.waiter()))
    }

    fn produce(
        &mut self,
        _area: &Arc<Area>,
        _command: Option<u32>,
        _ending: Arc<Ending>,
    ) -> Result<(), ProfileError> {
        // The module samples already; it sees the command's exit once it is reaped.
        if self.waits_for_registrations {
            eprintln!(
                "monitor: waiting for processes to register (echo \"R $$\" > /proc/pfprof/status)"
            );
        }
        Ok(())
    }

    fn on_command_exit(&self) -> Box<dyn FnOnce(ProcessCounters) + Send> {
        Box::new(|_| {})
    }

    fn stopper(&self) -> Stopper {
        let registered = Arc::clone(&self.registered);
        // The module writes their last sample and ends the session once nobody else is
        // registered; otherwise the grace period runs out and we take what is ready.
        Box::new(move || unregister_all(&mut lock(&registered), registration::unregister))
    }

    fn grace(&self) -> Duration {
        3 * self.period + Duration::from_millis(500)
    }

    fn ring_advice(&self) -> &'static str {
        "the pfprof module and this monitor disagree \
         (reload pfprof.ko built from this tree, or use --backend procfs)"
    }

    fn finish(self) -> Result<Vec<String>, ProfileError> {
        Ok(Vec::new())
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        // On an error path: leave no process registered behind us.
        let _ = unregister_all(&mut lock(&self.registered), registration::unregister);
    }
}

fn lock(registered: &Mutex<Vec<u32>>) -> std::sync::MutexGuard<'_, Vec<u32>> {
    // A list of pids is never left half-updated.
    registered.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Unregisters every pid in `registered` with `unregister`, even after one fails (none
/// may stay registered behind us), and returns the first error.
fn unregister_all(
    registered: &mut Vec<u32>,
    mut unregister: impl FnMut(u32) -> Result<(), RegistrationError>,
) -> Result<(), ProfileError> {
    let mut first_error = None;
    for pid in registered.drain(..) {
        match unregister(pid) {
            Ok(())
            | Err(RegistrationError::NotRegistered(_) | RegistrationError::NoSuchProcess(_)) => {}
            Err(source) => {
                first_error.get_or_insert(ProfileError::Unregister { pid, source });
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

/// Registers `pid` with `register` and adds it to `registered`, the processes to
/// unregister at the end. A process that registered itself (`work` does) is profiled as
/// it is, and stays registered: it unregisters itself.
fn register_with(
    registered: &mut Vec<u32>,
    pid: u32,
    register: impl FnOnce(u32) -> Result<(), RegistrationError>,
) -> Result<(), ProfileError> {
    match register(pid) {
        Ok(()) => registered.push(pid),
        Err(RegistrationError::AlreadyRegistered(_)) => {}
        Err(source) => return Err(ProfileError::Register { pid, source }),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Blame;

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
        assert_eq!(err.blame(), Blame::Usage, "{err:#?}");
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
