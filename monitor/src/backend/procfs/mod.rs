//! The procfs backend: a sampler thread ([`sampler`]; one for all of a fleet's targets)
//! reads /proc and produces into a memfd area; the consumer is the same code as with the
//! module.
//!
//! The sampler reads each selected process ([`process`]) with its descendants
//! ([`tree`]) and the members of a selected cgroup ([`members`]), their memory
//! ([`memory`]), and keeps each sample's CPU time within what its threads could use
//! ([`cap`]). Each period's faults are attributed to the processes that took them
//! ([`who`]) and, through perf events ([`perf`]), to the mappings they fell in
//! ([`attribute`], [`maps`], as the events recorded them: [`recorded`]).

mod attribute;
mod cap;
pub mod fleet_faults;
pub mod maps;
pub mod members;
pub mod memory;
pub mod perf;
pub mod process;
mod recorded;
pub mod sampler;
pub mod tree;
pub mod who;

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

use shared_layout::wait::FutexWaiter;
use shared_layout::{abi, Area, Mode, Sample};

use super::{Backend, BackendError, ExitWatch, OnEnd, Selection, Stopper};
use crate::attribution::{Attribution, Feed};
use crate::system::cgroup::Cgroup;
use crate::system::error::SystemError;
use crate::system::procstat::{self, Probe, ProcessCounters, Stat};
use attribute::{Attributor, FaultSource};
use fleet_faults::FleetFaults;
use members::Members;
use perf::{FaultEvents, PerfError, Watched};
use process::Process;
use sampler::{Event, Events, Sampler, SamplerPool};

pub struct Procfs {
    period: Duration,
    /// `--pid` processes until `produce` hands them to the sampler.
    processes: Vec<Process>,
    sampler: Option<Sampler>,
    events: Option<Events>,
    /// Processes count with their descendants.
    inherit: bool,
    /// They do, but the kernel does not list children: only reaped ones count.
    unlisted: bool,
    /// A process whose CPU clock could not be read is measured in clock ticks.
    ticks: bool,
    /// `--cgroup`, whose members the sampler counts.
    cgroup: Option<Arc<Cgroup>>,
    /// The fault events until `produce` hands them to the sampler; why there are none.
    fault_events: Result<FaultSource, String>,
    /// Where the sampler puts each period's table, once it runs.
    feed: Option<Arc<Feed>>,
    /// When the profile began, in clock ticks after boot (before the command's fork).
    began: u64,
    /// When the command was adopted (`CLOCK_MONOTONIC`, ns): held since its fork, it is
    /// counted from there.
    adopted_ns: Option<u64>,
    /// The ring, in pages.
    ring_pages: u64,
    /// A fleet's thread that samples a cgroup alone with the other targets'.
    sampler_pool: Option<SamplerPool>,
}

impl Backend for Procfs {
    type Waiter = FutexWaiter;

    fn open(selection: &Selection, period_ms: Option<u32>) -> Result<Procfs, BackendError> {
        if selection.pids.is_empty() && !selection.command && selection.cgroup.is_none() {
            return Err(BackendError::NothingToProfile);
        }
        let processes = selection
            .pids
            .iter()
            .map(|&pid| {
                Process::attach(pid, selection.inherit)
                    .map_err(|source| BackendError::Attach { pid, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let period_ms = period_ms.unwrap_or(abi::PERIOD_MS_DEFAULT);
        let fault_events = match (selection.attribution, &selection.fleet_faults) {
            // A fleet's target: its share of the fleet's events, none of its own.
            (Some(_), Some(fleet)) => fleet_target(fleet, selection),
            (Some(minor_sampling), None) => open_events(selection, minor_sampling)
                .map(FaultSource::Own)
                .map_err(|e| off(&e)),
            (None, _) => Err("turned off (--no-attribution)".to_owned()),
        };
        Ok(Procfs {
            period: Duration::from_millis(period_ms.into()),
            ticks: processes.iter().any(|p| !p.nanoseconds()),
            processes,
            sampler: None,
            events: None,
            inherit: selection.inherit,
            unlisted: selection.inherit && !procstat::children_listed(),
            cgroup: selection.cgroup.clone(),
            fault_events,
            feed: None,
            began: procstat::boot_ticks(),
            adopted_ns: None,
            ring_pages: selection.ring_pages,
            sampler_pool: selection.sampler_pool.clone(),
        })
    }

    fn name(&self) -> &'static str {
        "procfs"
    }

    fn adopt(&mut self, pid: u32) -> Result<(), BackendError> {
        // Its counters are attached in `produce`, counted from zero: it is our child. Its
        // fault events count from its exec, and follow what it starts.
        self.adopted_ns = Some(shared_layout::abi::monotonic_ns());
        if let Ok(FaultSource::Own(events)) = &mut self.fault_events {
            let target = Watched::Task {
                tid: pid,
                from_exec: true,
            };
            if let Err(e) = events.attach(target) {
                self.fault_events = Err(off(&e));
            }
        }
        Ok(())
    }

    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, FutexWaiter), BackendError> {
        let area =
            Area::create_memfd(self.ring_pages, mode, self.period).map_err(BackendError::Memfd)?;
        Ok((Arc::new(area), FutexWaiter))
    }

    fn produce(
        &mut self,
        area: &Arc<Area>,
        command: Option<u32>,
        on_end: OnEnd,
    ) -> Result<Option<Box<dyn ExitWatch>>, BackendError> {
        let mut processes = std::mem::take(&mut self.processes);
        if let Some(pid) = command {
            // Released before the sampler runs: its counts began when it was adopted.
            let forked = (self.adopted_ns).unwrap_or_else(shared_layout::abi::monotonic_ns);
            let process = Process::child(pid, self.inherit, forked)
                .map_err(|source| BackendError::Attach { pid, source })?;
            self.ticks |= !process.nanoseconds();
            processes.push(process);
        }
        let members = (self.cgroup.clone()).map(Members::new);
        let fault_events = std::mem::replace(&mut self.fault_events, Err(String::new()));
        let (attribution, attributor) = match fault_events {
            Ok(events) if events.is_empty() => (
                Attribution::Off("no fault event could be opened: every thread was gone".into()),
                None,
            ),
            Ok(events) => (
                Attribution::On {
                    minor_sampling: events.minor_sampling(),
                    kernel_faults: events.kernel_faults(),
                },
                Some(Attributor::new(events)),
            ),
            Err(why) => (Attribution::Off(why), None),
        };
        let feed = Arc::new(Feed::new(attribution));
        let attribution = sampler::SamplerAttribution {
            feed: Arc::clone(&feed),
            attributor,
            began: self.began,
        };
        self.feed = Some(feed);
        // A fleet's target (a cgroup alone, no fault events) is sampled on the pool's
        // thread; what has processes or events to wait on, on a thread of its own.
        let polls_rings = (attribution.attributor.as_ref()).is_some_and(Attributor::polls_rings);
        let pooled = (self.sampler_pool.as_ref()).filter(|_| processes.is_empty() && !polls_rings);
        let sampler = match (pooled, members) {
            (Some(pool), Some(members)) => {
                let area = Arc::clone(area);
                Sampler::pooled(pool, area, members, self.period, attribution, on_end)
            }
            (_, members) => Sampler::spawn(
                Arc::clone(area),
                processes,
                members,
                self.period,
                attribution,
                on_end,
            ),
        }
        .map_err(SystemError::doing("starting the sampler"))?;
        let events = sampler.events();
        let watch = command.map(|_| -> Box<dyn ExitWatch> {
            Box::new(FinalCounts {
                events: events.clone(),
                inherit: self.inherit,
                zombie: None,
            })
        });
        self.events = Some(events);
        self.sampler = Some(sampler);
        Ok(watch)
    }

    fn attribution(&self) -> Option<Arc<Feed>> {
        self.feed.clone()
    }

    fn stopper(&self) -> Stopper {
        let events = self.events.clone();
        Box::new(move || {
            if let Some(events) = events {
                events.send(Event::Stop);
            }
            Ok(())
        })
    }

    fn grace(&self) -> Duration {
        self.period + Duration::from_secs(2)
    }

    fn ring_advice(&self) -> &'static str {
        "the monitor's own sampler broke the protocol (a bug: please report it with this message)"
    }

    fn first_sample_marks_the_start(&self) -> bool {
        // sampler.rs: it is taken as sampling starts, before the first period.
        true
    }

    fn finish(mut self) -> Result<Vec<String>, BackendError> {
        let mut notes = Vec::new();
        if self.ticks {
            notes.push(
                "CPU time is in clock ticks (10 ms): a process's CPU clock could not be read"
                    .to_owned(),
            );
        }
        if self.unlisted {
            notes.push(
                "this kernel does not list children in /proc (CONFIG_PROC_CHILDREN): \
                 descendants count only once reaped, through their parent's counts"
                    .to_owned(),
            );
        }
        let Some(sampler) = self.sampler.take() else {
            return Ok(notes);
        };
        let report = sampler.join().map_err(BackendError::Sampler)?;
        if report.unflushed != Sample::default() {
            notes.push(format!(
                "the consumer stopped before the last sample could be written: {} minor and \
                 {} major faults are missing from the output",
                report.unflushed.minor, report.unflushed.major
            ));
        }
        if report.late > 0 {
            notes.push(format!(
                "the fleet's sampler thread came late {} times, a round of passes longer than a \
                 period: those periods' counts are in the next row",
                report.late
            ));
        }
        for unread in &report.unread {
            notes.push(format!(
                "process {} exited and its parent reaped it before its last counts could be \
                 read: what it did in its last {} ms is missing",
                unread.pid,
                unread.since.as_millis()
            ));
        }
        Ok(notes)
    }
}

/// Opens the fault events of the selected processes (every thread, and with `inherit`
/// every descendant's) and of the cgroup; the command's come in `adopt`.
fn open_events(selection: &Selection, minor_sampling: u64) -> Result<FaultEvents, PerfError> {
    let mut events = FaultEvents::new(minor_sampling)?;
    let mut pids = selection.pids.clone();
    while let Some(pid) = pids.pop() {
        for tid in perf::threads(pid) {
            events.attach(Watched::Task {
                tid,
                from_exec: false,
            })?;
        }
        // What the processes start from now on inherits their events; their descendants
        // from before need their own.
        if selection.inherit {
            pids.extend(procstat::children(pid));
        }
    }
    if let Some(cgroup) = &selection.cgroup {
        events.attach(Watched::Cgroup(cgroup.fd().as_fd()))?;
    }
    Ok(events)
}

/// The cgroup's share of the fleet's events.
fn fleet_target(fleet: &FleetFaults, selection: &Selection) -> Result<FaultSource, String> {
    let cgroup = (selection.cgroup.as_deref())
        .ok_or_else(|| "a fleet's target is a cgroup: no cgroup selected".to_owned())?;
    let target = fleet.target(cgroup).map_err(|e| e.to_string())?;
    Ok(FaultSource::Fleet(target))
}

/// Why faults are not attributed, and what would allow it, as the summary says it.
fn off(e: &PerfError) -> String {
    format!("{e}; {}", e.advice())
}

/// The command's last counts for the sampler, which takes them once the command is
/// reaped: its own, from its zombie, when it counts alone; else wait4()'s, its own and
/// those of the descendants it waited for. Its zombie's own faults either way, for
/// the faults by process.
struct FinalCounts {
    events: Events,
    inherit: bool,
    /// Its zombie's stat, read before the reap.
    zombie: Option<Stat>,
}

impl ExitWatch for FinalCounts {
    fn exited(&mut self, pid: u32) {
        // Its zombie's stat has its own counts (and its CPU clock its own time) until the
        // reap; wait4() adds its reaped children's.
        self.zombie = (Probe::open(pid).and_then(|mut zombie| zombie.read())).ok();
    }

    fn reaped(self: Box<Self>, pid: u32, totals: ProcessCounters) {
        // A zombie that could not be read: wait4()'s, the nearest there is.
        let totals = match self.zombie {
            Some(zombie) if !self.inherit => zombie.counters,
            _ => totals,
        };
        let zombie = self.zombie;
        self.events.send(Event::Exited {
            pid,
            totals,
            zombie,
        });
    }
}

impl Drop for Procfs {
    fn drop(&mut self) {
        // On an error path: the sampler must not outlive the profile.
        if let (Some(events), Some(_)) = (&self.events, &self.sampler) {
            events.send(Event::Stop);
        }
    }
}
