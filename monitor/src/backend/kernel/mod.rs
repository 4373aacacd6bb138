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

use super::{Backend, BackendError, ExitWatch, OnEnd, Selection, Stopper};
use crate::attribution::Feed;

pub struct Kernel {
    device: Device,
    period: Duration,
    inherit: bool,
    waits_for_registrations: bool,
}

impl Backend for Kernel {
    type Waiter = DeviceWaiter;

    fn open(selection: &Selection, period_ms: Option<u32>) -> Result<Kernel, BackendError> {
        let device = Device::open().map_err(BackendError::Device)?;
        let period = Duration::from_nanos(device.info().period_ns);
        if let Some(ms) = period_ms.filter(|&ms| Duration::from_millis(ms.into()) != period) {
            return Err(BackendError::PeriodMismatch {
                module_ms: period.as_millis(),
                asked_ms: ms,
            });
        }
        for &pid in &selection.pids {
            device
                .add(pid, selection.inherit, false)
                .map_err(BackendError::Device)?;
        }
        if let Some(cgroup) = &selection.cgroup {
            device
                .add_cgroup(cgroup.fd().as_fd())
                .map_err(BackendError::Device)?;
        }
        let waits_for_registrations =
            selection.pids.is_empty() && !selection.command && selection.cgroup.is_none();
        if waits_for_registrations {
            device
                .follow(Follow::All, selection.inherit)
                .map_err(BackendError::Device)?;
        }
        Ok(Kernel {
            device,
            period,
            inherit: selection.inherit,
            waits_for_registrations,
        })
    }

    fn name(&self) -> &'static str {
        "kernel"
    }

    fn adopt(&mut self, pid: u32) -> Result<(), BackendError> {
        // Held before exec: its whole life is counted, as its rusage is.
        self.device
            .add(pid, self.inherit, true)
            .map_err(BackendError::Device)?;
        // Its descendants that register themselves are in its tree already, unless
        // --no-inherit: then they join on their own.
        self.device
            .follow(Follow::Descendants(pid), self.inherit)
            .map_err(BackendError::Device)
    }

    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, DeviceWaiter), BackendError> {
        let area = self.device.start(mode).map_err(BackendError::Device)?;
        Ok((area, self.device.waiter()))
    }

    fn produce(
        &mut self,
        _area: &Arc<Area>,
        _command: Option<u32>,
        _on_end: OnEnd,
    ) -> Result<Option<Box<dyn ExitWatch>>, BackendError> {
        // The module samples already; it sees the command's exit once it is reaped.
        if self.waits_for_registrations {
            eprintln!(
                "{}: waiting for processes to register (echo \"R $$\" > /proc/pfprof/status)",
                crate::cli::program_name()
            );
        }
        Ok(None)
    }

    fn attribution(&self) -> Option<Arc<Feed>> {
        // The module's attribution is to come through ABI 5 (issue 29).
        None
    }

    fn stopper(&self) -> Stopper {
        let ender = self.device.ender();
        // The module writes the last sample of our processes and ends the session.
        Box::new(move || ender.end().map_err(BackendError::Device))
    }

    fn grace(&self) -> Duration {
        3 * self.period + Duration::from_millis(500)
    }

    fn ring_advice(&self) -> &'static str {
        "the pfprof module and this monitor disagree \
         (reload pfprof.ko built from this tree, or use --backend procfs)"
    }

    fn finish(self) -> Result<Vec<String>, BackendError> {
        // The module's count needs no note; the cgroup's cross-check is the profile's.
        Ok(Vec::new())
    }
}
