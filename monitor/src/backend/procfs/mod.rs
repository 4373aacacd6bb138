//! The procfs backend: a sampler thread ([`sampler`]) reads /proc and produces into a
//! memfd area; the consumer is the same code as with the module.
//!
//! The sampler reads each selected process ([`process`]) with its descendants
//! ([`tree`]) and the members of a selected cgroup ([`members`]), their memory
//! ([`memory`]), and keeps each sample's CPU time within what its threads could use
//! ([`cap`]).

mod cap;
pub mod members;
pub mod memory;
pub mod process;
pub mod sampler;
pub mod tree;

use std::sync::Arc;
use std::time::Duration;

use shared_layout::wait::FutexWaiter;
use shared_layout::{abi, Area, Mode, Sample};

use super::{Backend, BackendError, ExitWatch, OnEnd, Selection, Stopper};
use crate::system::cgroup::Cgroup;
use crate::system::error::SystemError;
use crate::system::procstat::{self, Probe, ProcessCounters};
use members::Members;
use process::Process;
use sampler::{Event, Events, Sampler};

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
    ring_pages: u64,
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
        Ok(Procfs {
            period: Duration::from_millis(period_ms.into()),
            ticks: processes.iter().any(|p| !p.nanoseconds()),
            processes,
            sampler: None,
            events: None,
            inherit: selection.inherit,
            unlisted: selection.inherit && !procstat::children_listed(),
            cgroup: selection.cgroup.clone(),
            ring_pages: selection.ring_pages,
        })
    }

    fn name(&self) -> &'static str {
        "procfs"
    }

    fn adopt(&mut self, _pid: u32) -> Result<(), BackendError> {
        // Attached in `produce`, counted from zero: it is our child.
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
            let process = Process::child(pid, self.inherit)
                .map_err(|source| BackendError::Attach { pid, source })?;
            self.ticks |= !process.nanoseconds();
            processes.push(process);
        }
        let members = (self.cgroup.clone()).map(Members::new);
        let sampler = Sampler::spawn(Arc::clone(area), processes, members, self.period, on_end)
            .map_err(SystemError::doing("starting the sampler"))?;
        let events = sampler.events();
        let watch = command.map(|_| -> Box<dyn ExitWatch> {
            Box::new(FinalCounts {
                events: events.clone(),
                inherit: self.inherit,
                own: None,
            })
        });
        self.events = Some(events);
        self.sampler = Some(sampler);
        Ok(watch)
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

/// The command's last counts for the sampler, which takes them once the command is
/// reaped: its own, from its zombie, when it counts alone; else wait4()'s, its own and
/// those of the descendants it waited for.
struct FinalCounts {
    events: Events,
    inherit: bool,
    /// Its zombie's counts, read before the reap.
    own: Option<ProcessCounters>,
}

impl ExitWatch for FinalCounts {
    fn exited(&mut self, pid: u32) {
        // Its zombie's stat has its own counts (and its CPU clock its own time) until the
        // reap; wait4() adds its reaped children's.
        if !self.inherit {
            self.own = (Probe::open(pid).and_then(|mut zombie| zombie.read()))
                .ok()
                .map(|stat| stat.counters);
        }
    }

    fn reaped(self: Box<Self>, pid: u32, totals: ProcessCounters) {
        // A zombie that could not be read: wait4()'s, the nearest there is.
        let totals = self.own.unwrap_or(totals);
        self.events.send(Event::Exited { pid, totals });
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
