//! The procfs backend's producer: a thread that reads every profiled process each period
//! (faults from `/proc/<pid>/stat`, CPU time from its CPU clock), with its descendants
//! when it inherits ([`crate::tree`]), and feeds the per-period deltas to a [`Producer`]
//! on a memfd area, playing the module's role in the very same protocol.
//!
//! Between periods it sleeps in poll() on an eventfd (events from other threads) and on a
//! pidfd per process that is not our child, so an exit is seen at once and the process's
//! last counts are read while it is a zombie, before its parent reaps it.

use std::collections::HashMap;
use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use shared_layout::abi::{self, Sample};
use shared_layout::producer::{Finish, Producer};
use shared_layout::{Area, ProtocolError};

use crate::procstat::{Probe, ProcessCounters, Stat, StatError};
use crate::tree::Tree;

/// How long the last sample may wait for a free slot before the session is canceled anyway.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);
/// The widest window in which the timestamp and every CPU clock of a sample are read, so
/// that reading adds no error of its own to a period's CPU time. (The kernel's own lag,
/// up to a tick, is [`CpuCap`]'s.) A sampler preempted inside the window reads again, at
/// most `CLOCK_READ_TRIES` times.
const CLOCK_WINDOW_NS: u64 = 50_000;
const CLOCK_READ_TRIES: u32 = 3;

/// A process to profile and what to count from.
pub struct Target {
    pub pid: u32,
    /// Counts already accounted for: zero for a child we forked (it is profiled from
    /// its first instruction), the counters at attach time for `--pid` (with its
    /// descendants' when it inherits).
    pub baseline: ProcessCounters,
    /// Our own child: its exit is reported with [`Event::Exited`] and its last counts
    /// come from wait4(), so /proc vanishing is not the end of it.
    pub child: bool,
    /// Its start time ([`crate::procstat::Stat::start`]): a stat of another start time
    /// is another process that got the pid after ours was gone.
    pub start: u64,
    probe: Probe,
    /// Readable once a process that is not our child has exited.
    pidfd: Option<OwnedFd>,
    /// Its descendants, when they count with it (inherit).
    tree: Option<Tree>,
    /// Its own stat as last counted: while its CPU clock stands still, it is unchanged.
    last: Option<Stat>,
}

impl Target {
    /// A running process, counted from its counters now; with `inherit`, with its
    /// descendants.
    pub fn attach(pid: u32, inherit: bool) -> Result<Target, StatError> {
        let mut probe = Probe::open(pid)?;
        let stat = probe.read()?;
        let mut target = Target {
            pid,
            baseline: stat.counters,
            child: false,
            start: stat.start,
            // Without pidfds (Linux < 5.3) the exit is seen at the next period.
            pidfd: pidfd_open(pid).ok(),
            probe,
            tree: inherit.then(|| Tree::new(pid)),
            last: None,
        };
        target.baseline = target.counts(&stat, true);
        Ok(target)
    }

    /// Our child, not reaped yet (its pid is still its own), counted from zero: the
    /// kernel zeroes a process's counters at fork. With `inherit`, with its descendants.
    pub fn child(pid: u32, inherit: bool) -> Result<Target, StatError> {
        let mut probe = Probe::open(pid)?;
        Ok(Target {
            pid,
            baseline: ProcessCounters::default(),
            child: true,
            start: probe.read()?.start,
            pidfd: None,
            probe,
            tree: inherit.then(|| Tree::new(pid)),
            last: None,
        })
    }

    /// Whether its CPU time is read in nanoseconds (else in clock ticks).
    pub fn nanoseconds(&self) -> bool {
        self.probe.nanoseconds()
    }

    /// Its threads as last read (with its descendants' when it inherits, and those of
    /// descendants that left since the read before): how many CPUs it could keep busy.
    fn threads(&self) -> u64 {
        match &self.tree {
            Some(tree) => tree.threads(),
            None => self.last.map_or(1, |stat| stat.threads),
        }
    }

    /// What counts of it given its own stat (`fresh`: just read, else as last counted):
    /// its own counters, or its tree's total.
    fn counts(&mut self, stat: &Stat, fresh: bool) -> ProcessCounters {
        self.last = Some(*stat);
        match &mut self.tree {
            Some(tree) => tree.total(stat, fresh),
            None => stat.counters,
        }
    }
}

/// libc, not nix: nix 0.31 has no pidfd_open.
fn pidfd_open(pid: u32) -> nix::Result<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = Errno::result(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) })?;
    // SAFETY: the descriptor was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
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
    #[error("waiting for the next period")]
    Wait(#[source] std::io::Error),
}

/// A process that exited and was reaped by its parent before its last counts could be
/// read: what it did since `since` is missing from the profile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unread {
    pub pid: u32,
    /// How long before its exit was noticed it was last read.
    pub since: Duration,
}

/// How the session ended.
#[derive(Clone, Debug, Default)]
pub struct SamplerReport {
    /// Counts that could not be written before the session was canceled (the consumer
    /// stopped taking samples); zero when every count reached the ring.
    pub unflushed: Sample,
    /// Processes whose last counts could not be read.
    pub unread: Vec<Unread>,
}

/// Sends [`Event`]s to the sampler from any thread, waking it.
#[derive(Clone)]
pub struct Events {
    tx: Sender<Event>,
    bell: Arc<EventFd>,
}

impl Events {
    /// Tells the sampler; an ended sampler has nothing left to be told.
    pub fn send(&self, event: Event) {
        if self.tx.send(event).is_ok() {
            // Cannot fail short of the counter overflowing, which a read resets.
            let _ = self.bell.write(1);
        }
    }
}

pub struct Sampler {
    events: Events,
    thread: JoinHandle<Result<SamplerReport, SamplerError>>,
}

impl Sampler {
    /// Starts sampling `targets` every `period` into `area`; `on_end` runs once the
    /// session is canceled.
    pub fn spawn(
        area: Arc<Area>,
        targets: Vec<Target>,
        period: Duration,
        on_end: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Sampler> {
        let (tx, rx) = mpsc::channel();
        let bell = Arc::new(EventFd::from_flags(
            EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
        )?);
        let events = Events {
            tx,
            bell: Arc::clone(&bell),
        };
        let thread = thread::Builder::new()
            .name("pfprof-sampler".into())
            .spawn(move || {
                let report = run(Producer::new(area), targets, period, &rx, &bell);
                on_end();
                report
            })?;
        Ok(Sampler { events, thread })
    }

    /// A handle to send [`Event`]s from other threads.
    pub fn events(&self) -> Events {
        self.events.clone()
    }

    /// Waits for the sampler to end (every process gone, or [`Event::Stop`]).
    pub fn join(self) -> Result<SamplerReport, SamplerError> {
        self.thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    }
}

struct Profiled {
    target: Target,
    /// What has been counted of it (its tree's total when it inherits), never lowered.
    seen: ProcessCounters,
    /// Its CPU clock, read in the sample's window.
    cpu_now: Option<std::io::Result<u64>>,
    /// When it was last read.
    read_at: Instant,
    /// Its threads when it was last read.
    threads: u64,
}

fn profiled(targets: Vec<Target>) -> HashMap<u32, Profiled> {
    let now = Instant::now();
    targets
        .into_iter()
        .map(|target| {
            (
                target.pid,
                Profiled {
                    seen: target.baseline,
                    cpu_now: None,
                    threads: target.threads(),
                    target,
                    read_at: now,
                },
            )
        })
        .collect()
}

/// What woke the sampler.
enum Woken {
    /// The period is over.
    Period,
    /// The bell rang (events are waiting), or these processes exited.
    Early { rang: bool, exited: Vec<u32> },
}

/// Sleeps until `deadline`, an event, or the exit of a process watched by pidfd.
fn sleep(
    procs: &HashMap<u32, Profiled>,
    bell: &EventFd,
    deadline: Instant,
) -> Result<Woken, SamplerError> {
    let left = deadline.saturating_duration_since(Instant::now());
    // Rounded up: waking a little early would take a sample a period too soon.
    let ms = left.as_nanos().div_ceil(1_000_000);
    let timeout =
        PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
    let watched: Vec<(u32, &OwnedFd)> = procs
        .iter()
        .filter_map(|(&pid, p)| Some((pid, p.target.pidfd.as_ref()?)))
        .collect();
    let mut fds: Vec<PollFd> = std::iter::once(bell.as_fd())
        .chain(watched.iter().map(|(_, fd)| fd.as_fd()))
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    match poll(&mut fds, timeout) {
        Ok(0) => return Ok(Woken::Period),
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(SamplerError::Wait(e.into())),
    }
    let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
    let rang = ready(&fds[0]);
    if rang {
        // Non-blocking: a read that finds the count at zero just fails.
        let _ = bell.read();
    }
    let exited = watched
        .iter()
        .zip(&fds[1..])
        .filter(|(_, fd)| ready(fd))
        .map(|((pid, _), _)| *pid)
        .collect();
    Ok(Woken::Early { rang, exited })
}

fn run(
    mut producer: Producer,
    targets: Vec<Target>,
    period: Duration,
    events: &Receiver<Event>,
    bell: &EventFd,
) -> Result<SamplerReport, SamplerError> {
    let mut procs = profiled(targets);
    let mut report = SamplerReport::default();
    // Counts of processes that left since the last sample.
    let mut pending = Sample::default();
    // The threads that could have run since the last sample.
    let mut threads = 0;
    let mut cap = CpuCap::new(period);
    let mut next = Instant::now() + period;

    // Whatever happens, the session must end canceled, or the consumer waits forever.
    let outcome = (|| -> Result<(), SamplerError> {
        // The first sample marks where the profile starts (and holds what the processes
        // did before it, a command's exec): the consumer measures every later period from
        // a timestamp, never from a nominal period.
        pending.time_ns = poll_all(&mut procs, &mut pending, &mut threads)?;
        cap.apply(&mut pending, std::mem::take(&mut threads));
        producer.record(std::mem::take(&mut pending))?;
        loop {
            let (rang, exited) = match sleep(&procs, bell, next)? {
                Woken::Period => (false, Vec::new()),
                Woken::Early { rang, exited } => (rang, exited),
            };
            for pid in exited {
                if let Some(mut p) = procs.remove(&pid) {
                    threads += read_last(&mut p, &mut pending, &mut report.unread);
                }
            }
            // Every event rings the bell after it is sent: a silent bell, no events.
            while let Some(event) = rang.then(|| events.try_recv().ok()).flatten() {
                match event {
                    Event::Exited { pid, totals } => {
                        if let Some(mut p) = procs.remove(&pid) {
                            pending += advance(&mut p.seen, totals);
                            threads += p.threads;
                        }
                    }
                    Event::Stop => {
                        pending.time_ns = poll_all(&mut procs, &mut pending, &mut threads)?;
                        return Ok(());
                    }
                }
            }
            // Every process gone: the last sample now, with the partial period.
            if procs.is_empty() {
                return Ok(());
            }
            if Instant::now() >= next {
                next += period;
                let time_ns = poll_all(&mut procs, &mut pending, &mut threads)?;
                if procs.is_empty() {
                    return Ok(());
                }
                pending.time_ns = time_ns;
                cap.apply(&mut pending, std::mem::take(&mut threads));
                producer.record(std::mem::take(&mut pending))?;
            }
        }
    })();
    // The last sample: whatever the processes did since the previous one.
    if pending.time_ns == 0 {
        pending.time_ns = abi::monotonic_ns();
    }
    cap.flush(&mut pending);
    let recorded = producer.record(pending);
    let finished = producer.finish(Instant::now() + FINISH_TIMEOUT);
    outcome?;
    recorded?;
    report.unflushed = match finished? {
        Finish::Flushed => Sample::default(),
        Finish::Unflushed(s) => s,
    };
    Ok(report)
}

/// A process that is not our child exited: read its final counts while it is a zombie;
/// if its parent reaped it already, say what is missing. Returns how many threads it
/// could have run since it was last read.
fn read_last(p: &mut Profiled, pending: &mut Sample, unread: &mut Vec<Unread>) -> u64 {
    match p.target.probe.read() {
        Ok(stat) if stat.start == p.target.start => {
            let now = p.target.counts(&stat, true);
            *pending += advance(&mut p.seen, now);
            p.threads.max(p.target.threads())
        }
        _ => {
            unread.push(Unread {
                pid: p.target.pid,
                since: p.read_at.elapsed(),
            });
            p.threads
        }
    }
}

/// Reads every CPU clock inside one window of at most [`CLOCK_WINDOW_NS`] (retrying
/// when preempted) and returns the window's start: the sample's timestamp.
fn read_clocks(procs: &mut HashMap<u32, Profiled>) -> u64 {
    let mut tries = 0;
    loop {
        let start = abi::monotonic_ns();
        for p in procs.values_mut() {
            p.cpu_now = p.target.probe.cpu_ns();
        }
        tries += 1;
        if abi::monotonic_ns() - start <= CLOCK_WINDOW_NS || tries == CLOCK_READ_TRIES {
            return start;
        }
    }
}

/// Adds what every process did since it was last read to `pending`, and to `threads` how
/// many threads it could have run meanwhile (the more of its count then and now);
/// forgets processes that are gone, except children, whose final counts wait4() will
/// bring. Returns the timestamp the counts belong to.
fn poll_all(
    procs: &mut HashMap<u32, Profiled>,
    pending: &mut Sample,
    threads: &mut u64,
) -> Result<u64, StatError> {
    let time_ns = read_clocks(procs);
    let mut gone = Vec::new();
    for (&pid, p) in procs.iter_mut() {
        // As last read: it did not run (its clock stood still), or it is gone.
        *threads += p.threads;
        let cpu_now = p.cpu_now.take();
        // Faults are counted to the thread that takes them: a process whose CPU clock has
        // not moved took none (nor forked or reaped a child), and its stat (the costly
        // read) would say nothing new. Only where its exit is seen by other means (pidfd,
        // reaper): stat is how a zombie is seen otherwise.
        let unchanged = p.target.last.filter(|last| {
            matches!(&cpu_now, Some(Ok(ns)) if *ns == last.counters.cpu_ns)
                && (p.target.child || p.target.pidfd.is_some())
        });
        let (stat, fresh) = match unchanged {
            // Alone, it has nothing new; so has a tree of it alone, since only a process
            // that runs forks: its descendants, if it has any, may have.
            Some(_) if p.target.tree.as_ref().is_none_or(Tree::is_root_alone) => {
                p.read_at = Instant::now();
                continue;
            }
            Some(last) => (last, false),
            None => match p.target.probe.read_with_cpu(cpu_now) {
                Ok(stat) if stat.start == p.target.start => (stat, true),
                // Ok: another process has the pid now, ours is gone.
                Ok(_) | Err(StatError::NoSuchProcess(_)) => {
                    if !p.target.child {
                        gone.push(pid);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        let now = p.target.counts(&stat, fresh);
        *pending += advance(&mut p.seen, now);
        p.read_at = Instant::now();
        // More now than at the last read: the new ones could have run too.
        let now_threads = p.target.threads();
        *threads += now_threads.saturating_sub(p.threads);
        p.threads = now_threads;
        // A zombie's counters are final; its parent may never reap it.
        if stat.exited && !p.target.child {
            gone.push(pid);
        }
    }
    for pid in gone {
        procs.remove(&pid);
    }
    Ok(time_ns)
}

/// Keeps a sample's CPU time within what its threads could have used: the kernel brings
/// the CPU time of another process's running thread up to date only at its ticks and
/// context switches, so a busy thread's clock, read each period, may lag by up to a
/// tick at one read and not at the next: that period would show more than its length
/// of CPU (up to ~1.2 of it at 50 ms), the period before as much less.
///
/// A sample's CPU time is capped at (threads that could have run) × (its period), and
/// what is above is carried into the next samples, which take it as far as their own
/// cap allows; the last sample takes whatever is left, so the total is unchanged. The
/// carry never exceeds what the lag can explain, `CARRY_PER_THREAD` per thread (or one
/// period per thread, when longer): beyond that the threads were more than counted
/// (threads or children that started and ended between two reads), and the CPU time is
/// shown in its own period, above the cap.
struct CpuCap {
    /// The nominal period: the first sample's (the report measures it so too).
    period_ns: u64,
    /// The previous sample's timestamp.
    previous: Option<u64>,
    /// CPU time read but not shown yet, ns.
    carry: u64,
}

/// The most CPU time carried per thread, when the period is shorter: a thread's clock
/// lags by less than a kernel tick (1 to 10 ms), twice over for safety.
const CARRY_PER_THREAD: Duration = Duration::from_millis(20);

impl CpuCap {
    fn new(period: Duration) -> CpuCap {
        CpuCap {
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX),
            previous: None,
            carry: 0,
        }
    }

    /// Caps `sample`'s CPU time, given how many `threads` could have run in its period.
    fn apply(&mut self, sample: &mut Sample, threads: u64) {
        let length = match self.previous.replace(sample.time_ns) {
            Some(previous) => sample.time_ns.saturating_sub(previous),
            None => self.period_ns,
        };
        let threads = threads.max(1);
        let cap = threads.saturating_mul(length);
        let limit = threads.saturating_mul(length.max(CARRY_PER_THREAD.as_nanos() as u64));
        let cpu = sample.cpu_ns.saturating_add(self.carry);
        sample.cpu_ns = cpu.min(cap);
        self.carry = cpu - sample.cpu_ns;
        if self.carry > limit {
            sample.cpu_ns += self.carry - limit;
            self.carry = limit;
        }
    }

    /// The last sample: it takes whatever is left.
    fn flush(&mut self, sample: &mut Sample) {
        sample.cpu_ns = sample
            .cpu_ns
            .saturating_add(std::mem::take(&mut self.carry));
    }
}

/// What `now` adds to what was `seen` of a process, as a sample to add to the pending one
/// (`time_ns` 0: it keeps its own), raising `seen` to it. A count below what was seen
/// adds nothing and lowers nothing: a tree's total may dip for a pass (a child its
/// parent's list missed; CPU time, whose reaped part is in clock ticks), and what it
/// recovers then is not new.
fn advance(seen: &mut ProcessCounters, now: ProcessCounters) -> Sample {
    let new = now.saturating_sub(*seen);
    *seen = seen.max(now);
    Sample {
        time_ns: 0,
        minor: new.minor,
        major: new.major,
        cpu_ns: new.cpu_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_given_to_another_process_is_not_counted_as_the_one_profiled() {
        for child in [false, true] {
            let mut me = Target::attach(std::process::id(), false).unwrap();
            // Our pid with another start time: a process that had our pid before us.
            me.baseline = ProcessCounters::default();
            me.child = child;
            me.start = me.start.wrapping_sub(1);
            let mut procs = profiled(vec![me]);
            let mut pending = Sample::default();
            poll_all(&mut procs, &mut pending, &mut 0).unwrap();
            assert_eq!(pending, Sample::default(), "child: {child}");
            // A child's last counts come from wait4(): it stays until Event::Exited.
            assert_eq!(procs.is_empty(), !child);
        }
    }

    #[test]
    fn the_process_that_still_holds_the_pid_is_counted() {
        let mut me = Target::attach(std::process::id(), false).unwrap();
        let baseline = me.baseline;
        me.baseline = ProcessCounters::default();
        let mut procs = profiled(vec![me]);
        let mut pending = Sample::default();
        poll_all(&mut procs, &mut pending, &mut 0).unwrap();
        assert!(pending.minor >= baseline.minor && pending.minor > 0);
    }

    const MS: u64 = 1_000_000;

    /// Samples every `period` ms from `start` with these raw CPU deltas (ms), capped
    /// for `threads`, the last one flushed; their rows' cpu_util (the report's
    /// [`crate::report::Timeline`]) and CPU times.
    fn capped(period: u64, threads: u64, raw_ms: &[f64]) -> (Vec<f64>, Vec<u64>) {
        let mut cap = CpuCap::new(Duration::from_millis(period));
        let mut timeline = crate::report::Timeline::new(Duration::from_millis(period));
        let (mut utils, mut cpu) = (Vec::new(), Vec::new());
        for (i, raw) in raw_ms.iter().enumerate() {
            let mut sample = Sample {
                time_ns: 1_000 * MS + i as u64 * period * MS,
                cpu_ns: (raw * MS as f64) as u64,
                ..Sample::default()
            };
            if i + 1 == raw_ms.len() {
                cap.flush(&mut sample);
            } else {
                cap.apply(&mut sample, threads);
            }
            utils.push(timeline.row(&sample).cpu_util);
            cpu.push(sample.cpu_ns);
        }
        (utils, cpu)
    }

    fn total_ns(raw_ms: &[f64]) -> u64 {
        raw_ms.iter().map(|raw| (raw * MS as f64) as u64).sum()
    }

    #[test]
    fn a_busy_thread_whose_clock_lags_shows_at_most_one_cpu_and_the_same_total() {
        // One thread busy all along, its clock read every 50 ms a tick (4 ms) late or on
        // time: the raw deltas swing around 50 ms, up to 1.19 of a period.
        let raw = [
            44.0, 54.0, 50.0, 59.5, 40.5, 52.0, 50.0, 48.0, 56.0, 46.0, 30.0,
        ];
        assert!(raw.iter().any(|&ms| ms / 50.0 > 1.1));
        let (utils, cpu) = capped(50, 1, &raw);
        let (last, full) = utils.split_last().unwrap();
        assert!(full.iter().all(|&u| u <= 1.0), "{utils:?}");
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
        // The clock was 6 ms late at the first read, as much on time at the last: the
        // carry, which the last sample takes.
        assert_eq!(*last, 36.0 / 50.0);
        assert_eq!(&cpu[1..10], &[50 * MS; 9]);
    }

    #[test]
    fn a_process_with_more_threads_may_use_as_many_cpus() {
        let raw = [100.0, 110.0, 90.0, 100.0];
        let (utils, cpu) = capped(50, 2, &raw);
        assert_eq!(utils, [2.0, 2.0, 2.0, 2.0]);
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
    }

    #[test]
    fn cpu_time_beyond_what_a_lag_explains_is_shown_in_its_own_period() {
        // Counted as one thread, but three ran (threads that started and ended between
        // two reads): at most one period's cap is carried, the rest is shown where it
        // came, above the cap, never held back for the end of the profile.
        let raw = [150.0; 6];
        let (utils, cpu) = capped(50, 1, &raw);
        assert_eq!(utils, [2.0, 3.0, 3.0, 3.0, 3.0, 4.0]);
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
    }

    #[test]
    fn the_carry_outlasts_a_period_shorter_than_a_tick() {
        // 2 ms periods, a thread busy from the third, its clock 4 ms late then on time.
        let raw = [0.0, 0.0, 0.0, 0.0, 6.0, 2.0, 2.0, 1.0];
        let (utils, cpu) = capped(2, 1, &raw);
        let (last, full) = utils.split_last().unwrap();
        assert!(full.iter().all(|&u| u <= 1.0), "{utils:?}");
        // Two periods' worth carried, then taken by the last sample.
        assert_eq!(*last, 2.5);
        assert_eq!(cpu.iter().sum::<u64>(), total_ns(&raw));
    }

    #[test]
    fn a_count_below_what_was_seen_adds_nothing_and_what_it_recovers_is_not_new() {
        let minor = |minor| ProcessCounters {
            minor,
            ..ProcessCounters::default()
        };
        let mut seen = minor(100);
        assert_eq!(advance(&mut seen, minor(150)).minor, 50);
        // A tree's total dips: a child its parent's list missed.
        assert_eq!(advance(&mut seen, minor(120)).minor, 0);
        assert_eq!(seen, minor(150));
        assert_eq!(advance(&mut seen, minor(160)).minor, 10);
    }

    #[test]
    fn a_process_that_did_not_run_is_not_read_again_and_counts_nothing() {
        let mut sleeper = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = sleeper.id();
        // Stopped, it cannot run: its CPU clock stands still.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap()
            .contains(") T ")
        {
            thread::sleep(Duration::from_millis(5));
        }
        let mut procs = profiled(vec![Target::attach(pid, false).unwrap()]);
        // A fault count it never had: a stat read would replace it.
        let target = &mut procs.get_mut(&pid).unwrap().target;
        let invented = target.last.map(|last| Stat {
            counters: ProcessCounters {
                minor: u64::MAX,
                ..last.counters
            },
            ..last
        });
        target.last = invented;
        let mut pending = Sample::default();
        poll_all(&mut procs, &mut pending, &mut 0).unwrap();
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert_eq!(pending, Sample::default());
        assert_eq!(procs[&pid].target.last, invented, "stat was read again");
    }

    #[test]
    fn the_exit_of_a_process_that_is_not_our_child_wakes_the_sampler_at_once() {
        // Not our child: a grandchild, orphaned to init (or a subreaper) when sh exits.
        let out = std::process::Command::new("sh")
            .args(["-c", "sleep 0.3 & echo $!"])
            .output()
            .unwrap();
        let pid: u32 = String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let target = Target::attach(pid, false).unwrap();
        assert!(target.pidfd.is_some(), "no pidfd on this kernel");
        let procs = profiled(vec![target]);
        let bell = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
        // A deadline far away: only the exit can end this wait.
        let woken = sleep(&procs, &bell, Instant::now() + Duration::from_secs(3600)).unwrap();
        assert!(matches!(woken, Woken::Early { rang: false, ref exited } if exited == &[pid]));
    }
}
