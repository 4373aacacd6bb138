//! The procfs backend's producer: a thread that reads `/proc/<pid>/stat` of every profiled
//! process each period and feeds the per-period deltas to a [`Producer`] on a memfd area,
//! playing the module's role in the very same protocol.

use std::collections::HashMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use shared_layout::abi::{self, Sample};
use shared_layout::producer::{Finish, Producer};
use shared_layout::{Area, ProtocolError};

use crate::procstat::{self, ProcessCounters, StatError};

/// How long the last sample may wait for a free slot before the session is canceled anyway.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);

/// A process to profile and what to count from.
#[derive(Clone, Copy, Debug)]
pub struct Target {
    pub pid: u32,
    /// Counts already accounted for: zero for a child we forked (it is profiled from
    /// its first instruction), the counters at attach time for `--pid`.
    pub baseline: ProcessCounters,
    /// Our own child: its exit is reported with [`Event::Exited`] and its last counts
    /// come from wait4(), so /proc vanishing is not the end of it.
    pub child: bool,
    /// Its start time ([`procstat::Stat::start`]): a stat of another start time is
    /// another process that got the pid after ours was gone.
    pub start: u64,
}

impl Target {
    /// A running process, counted from its counters now.
    pub fn attach(pid: u32) -> Result<Target, StatError> {
        let stat = procstat::read(pid)?;
        Ok(Target {
            pid,
            baseline: stat.counters,
            child: false,
            start: stat.start,
        })
    }

    /// Our child, not reaped yet (its pid is still its own), counted from zero: the
    /// kernel zeroes a process's counters at fork.
    pub fn child(pid: u32) -> Result<Target, StatError> {
        Ok(Target {
            pid,
            baseline: ProcessCounters::default(),
            child: true,
            start: procstat::read(pid)?.start,
        })
    }
}

/// What the sampler is told from outside.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// A child was reaped; `totals` is its wait4() rusage.
    Exited { pid: u32, totals: ProcessCounters },
    /// Write the last sample and end the session now.
    Stop,
}

#[derive(Debug, thiserror::Error)]
pub enum SamplerError {
    #[error(transparent)]
    Stat(#[from] StatError),
    #[error("feeding the ring")]
    Protocol(#[from] ProtocolError),
}

/// How the session ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct SamplerReport {
    /// Counts that could not be written before the session was canceled (the consumer
    /// stopped taking samples); zero when every count reached the ring.
    pub unflushed: Sample,
}

pub struct Sampler {
    events: Sender<Event>,
    thread: JoinHandle<Result<SamplerReport, SamplerError>>,
}

impl Sampler {
    /// Starts sampling `targets` every `period` into `area`.
    pub fn spawn(
        area: Arc<Area>,
        targets: Vec<Target>,
        period: Duration,
    ) -> std::io::Result<Sampler> {
        let (events, rx) = mpsc::channel();
        let thread = thread::Builder::new()
            .name("pfprof-sampler".into())
            .spawn(move || run(Producer::new(area), targets, period, &rx))?;
        Ok(Sampler { events, thread })
    }

    /// A handle to send [`Event`]s from other threads.
    pub fn events(&self) -> Sender<Event> {
        self.events.clone()
    }

    /// Waits for the sampler to end (every process gone, or [`Event::Stop`]).
    pub fn join(self) -> Result<SamplerReport, SamplerError> {
        drop(self.events);
        self.thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

struct Profiled {
    seen: ProcessCounters,
    child: bool,
    start: u64,
}

fn profiled(targets: Vec<Target>) -> HashMap<u32, Profiled> {
    targets
        .into_iter()
        .map(|t| {
            (
                t.pid,
                Profiled {
                    seen: t.baseline,
                    child: t.child,
                    start: t.start,
                },
            )
        })
        .collect()
}

fn run(
    mut producer: Producer,
    targets: Vec<Target>,
    period: Duration,
    events: &Receiver<Event>,
) -> Result<SamplerReport, SamplerError> {
    let origin = Instant::now();
    let mut procs = profiled(targets);
    // Counts of processes that left since the last sample.
    let mut pending = Sample::default();
    let mut next = origin + period;

    // Whatever happens, the session must end canceled, or the consumer waits forever.
    let outcome = (|| -> Result<(), SamplerError> {
        loop {
            match events.recv_timeout(next.saturating_duration_since(Instant::now())) {
                Ok(Event::Exited { pid, totals }) => {
                    if let Some(p) = procs.remove(&pid) {
                        pending += delta(p.seen, totals);
                    }
                    if procs.is_empty() {
                        // The last sample ends on the period boundary like every other,
                        // not a moment after the previous one (a rate spike).
                        thread::sleep(next.saturating_duration_since(Instant::now()));
                        return Ok(());
                    }
                }
                Ok(Event::Stop) | Err(RecvTimeoutError::Disconnected) => {
                    poll(&mut procs, &mut pending)?;
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    next += period;
                    poll(&mut procs, &mut pending)?;
                    if procs.is_empty() {
                        return Ok(());
                    }
                    pending.time_ns = abi::monotonic_ns();
                    producer.record(std::mem::take(&mut pending))?;
                }
            }
        }
    })();
    // The last sample: whatever the processes did since the previous one.
    pending.time_ns = abi::monotonic_ns();
    let recorded = producer.record(pending);
    let finished = producer.finish(Instant::now() + FINISH_TIMEOUT);
    outcome?;
    recorded?;
    Ok(SamplerReport {
        unflushed: match finished? {
            Finish::Flushed => Sample::default(),
            Finish::Unflushed(s) => s,
        },
    })
}

/// Adds what every process did since it was last read to `pending`; forgets processes
/// that are gone, except children, whose final counts wait4() will bring.
fn poll(procs: &mut HashMap<u32, Profiled>, pending: &mut Sample) -> Result<(), StatError> {
    let mut gone = Vec::new();
    for (&pid, p) in procs.iter_mut() {
        match procstat::read(pid) {
            Ok(stat) if stat.start == p.start => {
                *pending += delta(p.seen, stat.counters);
                p.seen = stat.counters;
                // A zombie's counters are final; its parent may never reap it.
                if stat.exited && !p.child {
                    gone.push(pid);
                }
            }
            // Ok: another process has the pid now, ours is gone.
            Ok(_) | Err(StatError::NoSuchProcess(_)) if !p.child => gone.push(pid),
            Ok(_) | Err(StatError::NoSuchProcess(_)) => {}
            Err(e) => return Err(e),
        }
    }
    for pid in gone {
        procs.remove(&pid);
    }
    Ok(())
}

/// `now - seen` as a sample to add to the pending one (`time_ns` 0: it keeps its own),
/// never negative: stat's tick-granular CPU time can trail rusage's.
fn delta(seen: ProcessCounters, now: ProcessCounters) -> Sample {
    Sample {
        time_ns: 0,
        minor: now.minor.saturating_sub(seen.minor),
        major: now.major.saturating_sub(seen.major),
        cpu_ns: now.cpu_ns.saturating_sub(seen.cpu_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_given_to_another_process_is_not_counted_as_the_one_profiled() {
        let me = Target::attach(std::process::id()).unwrap();
        // Our pid with another start time: a process that had our pid before us.
        let before_us = |child| Target {
            baseline: ProcessCounters::default(),
            child,
            start: me.start.wrapping_sub(1),
            ..me
        };
        for child in [false, true] {
            let mut procs = profiled(vec![before_us(child)]);
            let mut pending = Sample::default();
            poll(&mut procs, &mut pending).unwrap();
            assert_eq!(pending, Sample::default(), "child: {child}");
            // A child's last counts come from wait4(): it stays until Event::Exited.
            assert_eq!(procs.is_empty(), !child);
        }
    }

    #[test]
    fn the_process_that_still_holds_the_pid_is_counted() {
        let me = Target::attach(std::process::id()).unwrap();
        let mut procs = profiled(vec![Target {
            baseline: ProcessCounters::default(),
            ..me
        }]);
        let mut pending = Sample::default();
        poll(&mut procs, &mut pending).unwrap();
        assert!(pending.minor >= me.baseline.minor && pending.minor > 0);
    }
}
