//! The kernel backend: the pfprof module samples, this process only consumes.
//!
//! The monitor's own open of `/dev/pfprof` is its session: it adds the processes it was
//! given (`--pid`, the command) with `PFPROF_IOC_ADD`, and takes in `/proc/pfprof/status`
//! registrations with `PFPROF_IOC_FOLLOW`: a bare `monitor` every one it may see,
//! `monitor run` those of its command's descendants (`work` registers itself). Unless
//! `--no-attribution`, it asks the module to record where they fault
//! (`PFPROF_IOC_ATTRIBUTE`) first, so that each process is recorded from its joining.

mod attribute;

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use shared_layout::device::{Device, DeviceError, DeviceWaiter, Follow};
use shared_layout::{Area, Mode};

use super::{Backend, BackendError, ExitWatch, OnEnd, Selection, Stopper};
use crate::attribution::{Attribution, Feed};
use crate::system::error::SystemError;
use crate::system::procstat;
use attribute::{KernelAttributor, Shared};

pub struct Kernel {
    device: Device,
    period: Duration,
    inherit: bool,
    waits_for_registrations: bool,
    /// Whether faults are attributed, and, when they are, from where, until `produce`
    /// hands it to the feed.
    attribution: Attribution,
    attributor: Option<KernelAttributor>,
    feed: Option<Arc<Feed>>,
    /// Processes the module said it did not record, at most.
    unattributed: Option<Arc<AtomicU32>>,
}

/// Asks the module to attribute the selection's faults, one minor fault in
/// `minor_sampling`; why not when it cannot.
fn attribute(
    device: &Device,
    selection: &Selection,
    minor_sampling: u64,
) -> Result<(Attribution, KernelAttributor), String> {
    if selection.cgroup.is_some() {
        return Err("the pfprof module does not attribute a cgroup's faults \
                    (--backend procfs does, where perf events are allowed)"
            .into());
    }
    if !selection.inherit {
        return Err(
            "the pfprof module attributes the faults of processes counted with \
                    their descendants only (without --no-inherit), or use --backend procfs"
                .into(),
        );
    }
    let one_in = u32::try_from(minor_sampling)
        .map_err(|_| format!("--minor-sampling {minor_sampling} is more than the module takes"))?;
    let region = device.attribute(one_in).map_err(|e| match e {
        DeviceError::AttributionRefused => refusal_advice(attribution_setting()),
        e => e.to_string(),
    })?;
    let attribution = Attribution::On {
        minor_sampling: region.minor_sampling(),
        // Kernel counters count the faults the kernel takes for the process too.
        kernel_faults: true,
    };
    let attributor = KernelAttributor::new(region, procstat::boot_ticks(), &selection.pids);
    Ok((attribution, attributor))
}

/// Where the loaded module says who may attribute faults: its `attribution` parameter.
const ATTRIBUTION_PARAMETER: &str = "/sys/module/pfprof/parameters/attribution";

/// The module's `attribution` parameter, if it can be read.
fn attribution_setting() -> Option<u32> {
    std::fs::read_to_string(ATTRIBUTION_PARAMETER)
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Why the module refused to attribute this session's faults and what would allow it,
/// by its `attribution` parameter (0: nobody may; 1, its default: openers with
/// CAP_PERFMON or CAP_SYS_ADMIN, as kernel.perf_event_paranoid 3 allows perf events).
fn refusal_advice(setting: Option<u32>) -> String {
    match setting {
        Some(0) => "the pfprof module is loaded with attribution=0: it attributes no \
                    session's faults; reload it with attribution=1 (openers with CAP_PERFMON) \
                    or attribution=2 (every opener)"
            .into(),
        _ => "the pfprof module attributes faults for openers with CAP_PERFMON only; run as \
              root or load pfprof with attribution=2"
            .into(),
    }
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
        // Before the processes join: each is recorded from its joining.
        let (attribution, attributor) = match selection.attribution {
            Some(minor_sampling) => match attribute(&device, selection, minor_sampling) {
                Ok((attribution, attributor)) => (attribution, Some(attributor)),
                Err(why) => (Attribution::Off(why), None),
            },
            None => (
                Attribution::Off("turned off (--no-attribution)".into()),
                None,
            ),
        };
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
            attribution,
            unattributed: attributor.as_ref().map(KernelAttributor::unattributed),
            attributor,
            feed: None,
        })
    }

    fn name(&self) -> &'static str {
        "kernel"
    }

    fn adopt(&mut self, pid: u32) -> Result<(), BackendError> {
        if let Some(attributor) = self.attributor.as_mut() {
            attributor.follow(pid);
        }
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
        command: Option<u32>,
        _on_end: OnEnd,
    ) -> Result<Option<Box<dyn ExitWatch>>, BackendError> {
        let mut watch = None;
        let feed = match self.attributor.take() {
            Some(attributor) => {
                let shared = Shared::start(attributor, self.period)
                    .map_err(SystemError::doing("starting the faults thread"))?;
                watch = command.map(|_| shared.exit_watch());
                Feed::pulling(self.attribution.clone(), Box::new(shared))
            }
            None => Feed::new(self.attribution.clone()),
        };
        self.feed = Some(Arc::new(feed));
        // The module samples already; it sees the command's exit once it is reaped.
        if self.waits_for_registrations {
            eprintln!(
                "{}: waiting for processes to register (echo \"R $$\" > /proc/pfprof/status)",
                crate::program_name()
            );
        }
        Ok(watch)
    }

    fn attribution(&self) -> Option<Arc<Feed>> {
        self.feed.clone()
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

    fn first_sample_marks_the_start(&self) -> bool {
        // The module's first sample ends the period that began as the process joined.
        false
    }

    fn finish(self) -> Result<Vec<String>, BackendError> {
        // The module's count needs no note; the cgroup's cross-check is the profile's.
        let unattributed = (self.unattributed).map_or(0, |n| n.load(Ordering::Relaxed));
        Ok((unattributed > 0)
            .then(|| {
                format!(
                    "{unattributed} of the profiled processes were not attributed, or not \
                     wholly (the module's events cover max_fault_threads threads a session, \
                     their children's included, only processes counted with their \
                     descendants, and none after an exec of a setuid program): their \
                     faults are counted, not placed"
                )
            })
            .into_iter()
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_attribution_says_what_would_allow_it_by_the_modules_setting() {
        let perfmon = "the pfprof module attributes faults for openers with CAP_PERFMON only; \
                       run as root or load pfprof with attribution=2";
        // The default, and a module whose parameter cannot be read.
        assert_eq!(refusal_advice(Some(1)), perfmon);
        assert_eq!(refusal_advice(None), perfmon);
        assert_eq!(
            refusal_advice(Some(0)),
            "the pfprof module is loaded with attribution=0: it attributes no session's \
             faults; reload it with attribution=1 (openers with CAP_PERFMON) or \
             attribution=2 (every opener)"
        );
    }
}
