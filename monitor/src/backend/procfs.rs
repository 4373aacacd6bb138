//! The procfs backend: a sampler thread reads /proc and produces into a memfd area; the
//! consumer is the same code as with the module.

use std::sync::Arc;
use std::time::Duration;

use shared_layout::wait::FutexWaiter;
use shared_layout::{abi, Area, Mode, Sample};

use super::{Backend, Targets};
use crate::error::ProfileError;
use crate::procstat::{self, ProcessCounters};
use crate::sampler::{Event, Events, Sampler, Target};
use crate::signals::Stopper;
use crate::source::Ending;

pub struct Procfs {
    period: Duration,
    /// `--pid` processes until `produce` hands them to the sampler.
    targets: Vec<Target>,
    sampler: Option<Sampler>,
    events: Option<Events>,
    /// The command `monitor run` started.
    command: Option<u32>,
    /// Processes count with their descendants.
    inherit: bool,
    /// They do, but the kernel does not list children: only reaped ones count.
    unlisted: bool,
    /// A process whose CPU clock could not be read is measured in clock ticks.
    ticks: bool,
}

impl Backend for Procfs {
    type Waiter = FutexWaiter;

    fn open(targets: &Targets) -> Result<Procfs, ProfileError> {
        if targets.pids.is_empty() && !targets.command {
            return Err(ProfileError::NothingToProfile);
        }
        let targets_now = targets
            .pids
            .iter()
            .map(|&pid| {
                Target::attach(pid, targets.inherit)
                    .map_err(|source| ProfileError::Attach { pid, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let period_ms = targets.period_ms.unwrap_or(abi::PERIOD_MS_DEFAULT);
        Ok(Procfs {
            period: Duration::from_millis(period_ms.into()),
            ticks: targets_now.iter().any(|t| !t.nanoseconds()),
            targets: targets_now,
            sampler: None,
            events: None,
            command: None,
            inherit: targets.inherit,
            unlisted: targets.inherit && !procstat::children_listed(),
        })
    }

    fn name(&self) -> &'static str {
        "procfs"
    }

    fn adopt(&mut self, _pid: u32) -> Result<(), ProfileError> {
        // Attached in `produce`, counted from zero: it is our child.
        Ok(())
    }

    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, FutexWaiter), ProfileError> {
        let area = Area::create_memfd(abi::BUFFER_PAGES_DEFAULT.into(), mode, self.period)
            .map_err(ProfileError::Memfd)?;
        Ok((Arc::new(area), FutexWaiter))
    }

    fn produce(
        &mut self,
        area: &Arc<Area>,
        command: Option<u32>,
        ending: Arc<Ending>,
    ) -> Result<(), ProfileError> {
        let mut targets = std::mem::take(&mut self.targets);
        if let Some(pid) = command {
            let target = Target::child(pid, self.inherit)
                .map_err(|source| ProfileError::Attach { pid, source })?;
            self.ticks |= !target.nanoseconds();
            targets.push(target);
        }
        let on_end = move || ending.ring();
        let sampler =
            Sampler::spawn(Arc::clone(area), targets, self.period, on_end).map_err(|source| {
                ProfileError::System {
                    what: "starting the sampler",
                    source,
                }
            })?;
        self.events = Some(sampler.events());
        self.sampler = Some(sampler);
        self.command = command;
        Ok(())
    }

    fn on_command_exit(&self) -> Box<dyn FnOnce(ProcessCounters) + Send> {
        let (events, command) = (self.events.clone(), self.command);
        // The sampler takes the command's last counts from wait4().
        Box::new(move |totals| {
            if let (Some(events), Some(pid)) = (events, command) {
                events.send(Event::Exited { pid, totals });
            }
        })
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

    fn finish(mut self) -> Result<Vec<String>, ProfileError> {
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
        let report = sampler.join().map_err(ProfileError::Sampler)?;
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

impl Drop for Procfs {
    fn drop(&mut self) {
        // On an error path: the sampler must not outlive the profile.
        if let (Some(events), Some(_)) = (&self.events, &self.sampler) {
            events.send(Event::Stop);
        }
    }
}
