//! The kernel backend: the pfprof module samples, this process only consumes.
//!
//! The monitor's own open of `/dev/pfprof` is its session: it adds the processes it was
//! given (`--pid`, the command) with `PFPROF_IOC_ADD`, and takes in `/proc/pfprof/status`
//! registrations with `PFPROF_IOC_FOLLOW`: a bare `monitor` every one it may see,
//! `monitor run` those of its command's descendants (`work` registers itself).

use std::sync::Arc;
use std::time::Duration;

use shared_layout::device::{Device, DeviceWaiter, Follow};
use shared_layout::{Area, Mode};

use super::{Backend, Targets};
use crate::error::ProfileError;
use crate::procstat::ProcessCounters;
use crate::signals::Stopper;
use crate::source::Ending;

pub struct Kernel {
    device: Device,
    period: Duration,
    inherit: bool,
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
        for &pid in &targets.pids {
            device
                .add(pid, targets.inherit, false)
                .map_err(ProfileError::Device)?;
        }
        let waits_for_registrations = targets.pids.is_empty() && !targets.command;
        if waits_for_registrations {
            device
                .follow(Follow::All, targets.inherit)
                .map_err(ProfileError::Device)?;
        }
        Ok(Kernel {
            device,
            period,
            inherit: targets.inherit,
            waits_for_registrations,
        })
    }

    fn name(&self) -> &'static str {
        "kernel"
    }

    fn adopt(&mut self, pid: u32) -> Result<(), ProfileError> {
        // Held before exec: its whole life is counted, as its rusage is.
        self.device
            .add(pid, self.inherit, true)
            .map_err(ProfileError::Device)?;
        // Its descendants that register themselves are in its tree already, unless
        // --no-inherit: then they join on their own.
        self.device
            .follow(Follow::Descendants(pid), self.inherit)
            .map_err(ProfileError::Device)
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
        let ender = self.device.ender();
        // The module writes the last sample of our processes and ends the session.
        Box::new(move || ender.end().map_err(ProfileError::Device))
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
