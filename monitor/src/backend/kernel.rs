//! The kernel backend: the pfprof module samples, this process only consumes.
//!
//! The monitor's own open of `/dev/pfprof` is its session: it adds the processes it was
//! given (`--pid`, the command) with `PFPROF_IOC_ADD`, and takes in `/proc/pfprof/status`
//! registrations with `PFPROF_IOC_FOLLOW`: a bare `monitor` every one it may see,
//! `monitor run` those of its command's descendants (`work` registers itself).

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use shared_layout::device::{Device, DeviceWaiter, Follow};
use shared_layout::{Area, Mode};

use super::{Backend, Selection};
use crate::command::child::Running;
use crate::command::signals::Stopper;
use crate::profile::error::ProfileError;
use crate::rows::source::Ending;
use crate::system::cgroup::{self, Cgroup};
use crate::system::procstat::ProcessCounters;

pub struct Kernel {
    device: Device,
    period: Duration,
    inherit: bool,
    waits_for_registrations: bool,
    /// `--cgroup`, and its `memory.stat` faults when the profile started.
    cgroup: Option<(Arc<Cgroup>, Option<ProcessCounters>)>,
}

impl Backend for Kernel {
    type Waiter = DeviceWaiter;

    fn open(selection: &Selection, period_ms: Option<u32>) -> Result<Kernel, ProfileError> {
        let device = Device::open().map_err(ProfileError::Device)?;
        let period = Duration::from_nanos(device.info().period_ns);
        if let Some(ms) = period_ms.filter(|&ms| Duration::from_millis(ms.into()) != period) {
            return Err(ProfileError::PeriodMismatch {
                module_ms: period.as_millis(),
                asked_ms: ms,
            });
        }
        for &pid in &selection.pids {
            device
                .add(pid, selection.inherit, false)
                .map_err(ProfileError::Device)?;
        }
        // Its memory.stat before, for the summary's cross-check.
        let cgroup = match &selection.cgroup {
            Some(c) => {
                let before = cgroup::memory_faults(c.path());
                device
                    .add_cgroup(c.fd().as_fd())
                    .map_err(ProfileError::Device)?;
                Some((Arc::clone(c), before))
            }
            None => None,
        };
        let waits_for_registrations =
            selection.pids.is_empty() && !selection.command && cgroup.is_none();
        if waits_for_registrations {
            device
                .follow(Follow::All, selection.inherit)
                .map_err(ProfileError::Device)?;
        }
        Ok(Kernel {
            device,
            period,
            inherit: selection.inherit,
            waits_for_registrations,
            cgroup,
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
        _command: Option<&mut Running>,
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
        Ok(self
            .cgroup
            .iter()
            .map(|(c, before)| cgroup::memory_note(c, *before))
            .collect())
    }
}
