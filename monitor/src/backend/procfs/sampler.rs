//! Twin of `kmod/sampler.c` (and of the collection in `kmod/members.c`): the session's
//! sampler, on the same absolute deadlines, those it was held up past skipped. A pass here
//! is the module's collection: each process's change since what was last `seen` of it
//! (`->seen`) goes to the `pending` sample (`s->pending`) through `advance`
//! (`pfprof_advance`); a sample the ring cannot take stays pending in the [`Producer`]
//! (twin of `kmod/ring.c`), merged into the next, as the module's does.
//!
//! The procfs backend's producer: a thread that reads every profiled process each period
//! (faults from `/proc/<pid>/stat`, CPU time from its CPU clock, memory from statm and
//! status, [`super::memory`]), with its descendants when it inherits ([`super::tree`]),
//! and feeds the per-period deltas and the memory at each period's end to a [`Producer`]
//! on a memfd area, playing the module's role in the very same protocol.
//!
//! Between periods it sleeps in poll() on an eventfd (events from other threads), on a
//! pidfd per process that is not our child, so an exit is seen at once and the process's
//! last counts are read while it is a zombie, before its parent reaps it, and on the fault
//! events' rings, drained when half full. Before each sample it gives the consumer the
//! period's table ([`crate::attribution`]): who took the faults ([`super::who`]) and,
//! where the events are open, where ([`super::attribute`]).
//!
//! A fleet's targets (each a cgroup alone, without fault events) are sampled by one
//! thread for all, a [`SamplerPool`]: each target keeps its counts and its ring, and the
//! thread passes every target that is due, in the order of their deadlines, which fall
//! on one grid of periods so that one wake-up serves them all.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use shared_layout::abi::{self, Sample};
use shared_layout::producer::{Finish, Producer};
use shared_layout::{Area, ProtocolError};

use super::attribute::{Attributor, Ending};
use super::cap::CpuCap;
use super::fleet_faults::DRAIN_WAIT;
use super::members::Members;
use super::memory::Memory;
use super::process::Process;
use super::tree::Tree;
use super::who::Who;
use crate::attribution::{Feed, PeriodTable};
use crate::system::procstat::{ProcessCounters, Stat, StatError};

/// How long the last sample may wait for a free slot before the session is canceled anyway.
const FINISH_TIMEOUT: Duration = Duration::from_secs(5);
/// The widest window in which the timestamp and every CPU clock of a sample are read, so
/// that reading adds no error of its own to a period's CPU time. (The kernel's own lag,
/// up to a tick, is [`CpuCap`]'s.) A sampler preempted inside the window reads again, at
/// most `CLOCK_READ_TRIES` times.
const CLOCK_WINDOW_NS: u64 = 50_000;
const CLOCK_READ_TRIES: u32 = 3;

/// What the sampler is told from outside.
#[derive(Clone, Copy, Debug)]
pub enum Event {
    /// A child was reaped; `totals`: what it counts for (its own counts when it counts
    /// alone, else wait4()'s rusage); `zombie`: its stat read before the reap, its own
    /// final faults.
    Exited {
        pid: u32,
        totals: ProcessCounters,
        zombie: Option<Stat>,
    },
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
    #[error("the fleet's sampler thread ended before this target's session")]
    PoolEnded,
    #[error("the fleet's sampler thread failed on this target (a bug: please report it)")]
    PoolPanicked,
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
    /// Periods whose pass came too late, its deadline passed before the pass before it was
    /// done (a round of a fleet thread's passes longer than a period): their counts are in
    /// the next sample.
    pub late: u64,
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
    ended: Ended,
}

/// Where a sampler's report comes from.
enum Ended {
    /// Its own thread's end.
    Thread(JoinHandle<Result<SamplerReport, SamplerError>>),
    /// The pool's thread, once it has ended the session.
    Pooled(Receiver<Result<SamplerReport, SamplerError>>),
}

/// Where each period's table goes, and the fault events when they are open.
pub struct SamplerAttribution {
    pub feed: Arc<Feed>,
    pub attributor: Option<Attributor>,
    /// When the profile began, in clock ticks after boot: a process started since counts
    /// its own faults from its fork ([`Who`]).
    pub began: u64,
}

impl SamplerAttribution {
    /// Faults attributed to no mapping (`why`), the processes' own counted from their
    /// first read, or from their fork if they start now or later.
    pub fn off(why: &str) -> SamplerAttribution {
        SamplerAttribution {
            feed: Arc::new(Feed::new(crate::attribution::Attribution::Off(why.into()))),
            attributor: None,
            began: crate::system::procstat::boot_ticks(),
        }
    }
}

impl Sampler {
    /// Starts sampling `processes` and the `cgroup`'s members every `period` into `area`,
    /// each period's table into `attribution`'s feed; `on_end` runs once the session is
    /// canceled.
    pub fn spawn(
        area: Arc<Area>,
        processes: Vec<Process>,
        cgroup: Option<Members>,
        period: Duration,
        attribution: SamplerAttribution,
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
                let cgroup = cgroup.map(|members| CgroupCount {
                    members,
                    seen: ProcessCounters::default(),
                });
                let report = run(
                    Producer::new(area),
                    processes,
                    cgroup,
                    attribution,
                    period,
                    &rx,
                    &bell,
                );
                on_end();
                report
            })?;
        Ok(Sampler {
            events,
            ended: Ended::Thread(thread),
        })
    }

    /// Starts sampling the `cgroup`'s members every `period` into `area` on the `pool`'s
    /// thread, as [`Sampler::spawn`] does on one of its own.
    pub fn pooled(
        pool: &SamplerPool,
        area: Arc<Area>,
        cgroup: Members,
        period: Duration,
        attribution: SamplerAttribution,
        on_end: impl FnOnce() + Send + 'static,
    ) -> std::io::Result<Sampler> {
        let (tx, rx) = mpsc::channel();
        let (report_tx, report_rx) = mpsc::sync_channel(1);
        let cgroup = CgroupCount {
            members: cgroup,
            seen: ProcessCounters::default(),
        };
        pool.add(Pooled {
            counts: Counts::new(Vec::new(), Some(cgroup), attribution),
            // One target's full ring must not hold up the others' passes.
            producer: Producer::new(area).never_waiting(),
            period,
            next: Instant::now(),
            first: true,
            late: 0,
            events: rx,
            on_end: Box::new(on_end),
            report: report_tx,
            stopping: None,
            ending: None,
        })?;
        Ok(Sampler {
            events: Events {
                tx,
                bell: Arc::clone(&pool.inbox.bell),
            },
            ended: Ended::Pooled(report_rx),
        })
    }

    /// A handle to send [`Event`]s from other threads.
    pub fn events(&self) -> Events {
        self.events.clone()
    }

    /// Waits for the sampler to end (every process gone, or [`Event::Stop`]).
    pub fn join(self) -> Result<SamplerReport, SamplerError> {
        match self.ended {
            Ended::Thread(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Ended::Pooled(report) => report.recv().unwrap_or(Err(SamplerError::PoolEnded)),
        }
    }
}

struct Profiled {
    process: Process,
    /// What has been counted of it (its tree's total when it inherits), never lowered.
    seen: ProcessCounters,
    /// Its CPU clock, read in the sample's window.
    cpu_now: Option<std::io::Result<u64>>,
    /// When it was last read.
    read_at: Instant,
    /// Its threads when it was last read.
    threads: u64,
    /// Its CPU clock moved at the last pass.
    ran: bool,
}

fn profiled(processes: Vec<Process>) -> HashMap<u32, Profiled> {
    let now = Instant::now();
    processes
        .into_iter()
        .map(|process| {
            (
                process.pid,
                Profiled {
                    seen: process.baseline,
                    cpu_now: None,
                    threads: process.threads(),
                    process,
                    read_at: now,
                    ran: true,
                },
            )
        })
        .collect()
}

/// What woke the sampler.
enum Woken {
    /// The period is over.
    Period,
    /// The bell sounded (`bell`: events are waiting), these processes exited, or a fault
    /// event's ring is half full (`rings`; `hung_up`: the positions of ring descriptors
    /// that hung up, their events' tasks gone).
    Early {
        bell: bool,
        exited: Vec<u32>,
        rings: bool,
        hung_up: Vec<usize>,
    },
}

/// Sleeps until `deadline`, an event, the exit of a process watched by pidfd, or a ring
/// of `rings` half full.
fn sleep(
    procs: &HashMap<u32, Profiled>,
    bell: &EventFd,
    rings: &[BorrowedFd],
    deadline: Instant,
) -> Result<Woken, SamplerError> {
    let left = deadline.saturating_duration_since(Instant::now());
    // Rounded up: waking a little early would take a sample a period too soon.
    let ms = left.as_nanos().div_ceil(1_000_000);
    let timeout =
        PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX);
    let watched: Vec<(u32, &OwnedFd)> = procs
        .iter()
        .filter_map(|(&pid, p)| Some((pid, p.process.pidfd.as_ref()?)))
        .collect();
    let mut fds: Vec<PollFd> = std::iter::once(bell.as_fd())
        .chain(watched.iter().map(|(_, fd)| fd.as_fd()))
        .chain(rings.iter().copied())
        .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
        .collect();
    match poll(&mut fds, timeout) {
        Ok(0) => return Ok(Woken::Period),
        Ok(_) | Err(Errno::EINTR) => {}
        Err(e) => return Err(SamplerError::Wait(e.into())),
    }
    let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
    let sounded = ready(&fds[0]);
    if sounded {
        // Non-blocking: a read that finds the count at zero just fails.
        let _ = bell.read();
    }
    let exited = watched
        .iter()
        .zip(&fds[1..])
        .filter(|(_, fd)| ready(fd))
        .map(|((pid, _), _)| *pid)
        .collect();
    let rings = &fds[1 + watched.len()..];
    let hung_up = |fd: &PollFd| {
        fd.revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
    };
    Ok(Woken::Early {
        bell: sounded,
        exited,
        rings: rings.iter().any(ready),
        hung_up: (rings.iter().enumerate())
            .filter(|(_, fd)| hung_up(fd))
            .map(|(i, _)| i)
            .collect(),
    })
}

/// A cgroup's members and what was counted of them.
struct CgroupCount {
    members: Members,
    seen: ProcessCounters,
}

/// Adds what the cgroup's members did since the last pass to `pending`, with what they
/// hold now to its memory, and their threads to `threads`, each member's own faults to
/// `who`; forgets the cgroup once it is removed: that selection has ended.
fn poll_cgroup(
    cgroup: &mut Option<CgroupCount>,
    pending: &mut Sample,
    threads: &mut u64,
    who: &mut Who,
) {
    let Some(counted) = cgroup else {
        return;
    };
    let before = counted.members.threads();
    match counted.members.pass() {
        Some(total) => {
            for (pid, stat) in counted.members.stats() {
                who.observe(pid, stat);
            }
            add_counts(pending, advance(&mut counted.seen, total));
            let memory = memory_of(pending) + counted.members.memory();
            set_memory(pending, memory);
            *threads += before.max(counted.members.threads());
        }
        None => {
            *threads += before;
            *cgroup = None;
        }
    }
}

fn run(
    mut producer: Producer,
    processes: Vec<Process>,
    cgroup: Option<CgroupCount>,
    attribution: SamplerAttribution,
    period: Duration,
    events: &Receiver<Event>,
    bell: &EventFd,
) -> Result<SamplerReport, SamplerError> {
    let mut counts = Counts::new(processes, cgroup, attribution);
    // Whatever happens, the session must end canceled, or the consumer waits forever.
    let outcome = sample_until_the_end(&mut counts, &mut producer, period, events, bell);
    let recorded = counts.record_last(&mut producer, Instant::now() + DRAIN_WAIT);
    let finished = producer.finish(Instant::now() + FINISH_TIMEOUT);
    report(counts, outcome.and(recorded), finished, 0)
}

/// How a session ended: `outcome`, and `finished`, what its last sample's writing
/// managed; `late`: its passes that came too late.
fn report(
    counts: Counts,
    outcome: Result<(), SamplerError>,
    finished: Result<Finish, ProtocolError>,
    late: u64,
) -> Result<SamplerReport, SamplerError> {
    outcome?;
    Ok(SamplerReport {
        unflushed: match finished? {
            Finish::Flushed => Sample::default(),
            Finish::Unflushed(s) => s,
        },
        unread: counts.unread,
        late,
    })
}

/// What the sampler counts between two samples.
struct Counts {
    procs: HashMap<u32, Profiled>,
    cgroup: Option<CgroupCount>,
    /// Counts of processes that left since the last sample.
    pending: Sample,
    /// The threads that could have run since the last sample.
    threads: u64,
    cap: CpuCap,
    /// Processes whose last counts could not be read.
    unread: Vec<Unread>,
    /// Each process's own faults since the last sample.
    who: Who,
    /// Where each sample's table goes, given before the sample.
    feed: Arc<Feed>,
    /// The fault events, when they are open.
    attributor: Option<Attributor>,
}

impl Counts {
    fn new(
        processes: Vec<Process>,
        cgroup: Option<CgroupCount>,
        attribution: SamplerAttribution,
    ) -> Counts {
        Counts {
            procs: profiled(processes),
            cgroup,
            pending: Sample::default(),
            threads: 0,
            cap: CpuCap::new(),
            unread: Vec::new(),
            who: Who::new(attribution.began),
            feed: attribution.feed,
            attributor: attribution.attributor,
        }
    }

    /// Records the last sample (whatever the processes did since the previous one): if
    /// the ring cannot take it, it stays pending in the `producer`. A fleet's target's
    /// last table waits until `until` at most for the fleet's rings drained past it.
    fn record_last(&mut self, producer: &mut Producer, until: Instant) -> Result<(), SamplerError> {
        self.stamp_last();
        let mut last = self.pending;
        self.cap.flush(&mut last);
        self.publish(last.time_ns, Ending::Last(until));
        producer.record(last)?;
        Ok(())
    }

    /// The last sample's time, now unless its last poll set it: stamped before a pool
    /// records its ending targets' last samples, so that one wait for the fleet's drain
    /// serves all (see [`wait_for_the_last_tables`]).
    fn stamp_last(&mut self) -> u64 {
        if self.pending.time_ns == 0 {
            self.pending.time_ns = abi::monotonic_ns();
        }
        self.pending.time_ns
    }

    /// Reads every process and the cgroup's members; the timestamp the counts belong to.
    fn poll(&mut self) -> Result<u64, SamplerError> {
        let time_ns = poll_all(
            &mut self.procs,
            &mut self.pending,
            &mut self.threads,
            &mut self.who,
            &mut self.unread,
        )?;
        poll_cgroup(
            &mut self.cgroup,
            &mut self.pending,
            &mut self.threads,
            &mut self.who,
        );
        Ok(time_ns)
    }

    /// Gives the consumer the table of the period ending at `end_ns`, before its sample.
    fn publish(&mut self, end_ns: u64, ending: Ending) {
        let processes = self.who.take();
        let changed = self.who.changed();
        let table = match self.attributor.as_mut() {
            Some(attributor) => {
                attributor.read_maps(&changed);
                attributor.finish(end_ns, processes, ending)
            }
            None => PeriodTable {
                end_ns,
                processes,
                ..PeriodTable::default()
            },
        };
        self.feed.push(table);
    }

    /// Writes what was counted as the sample at `time_ns`, its CPU time capped.
    fn record(&mut self, producer: &mut Producer, time_ns: u64) -> Result<(), ProtocolError> {
        self.publish(time_ns, Ending::No);
        self.pending.time_ns = time_ns;
        self.cap
            .apply(&mut self.pending, std::mem::take(&mut self.threads));
        producer.record(std::mem::take(&mut self.pending))?;
        Ok(())
    }

    /// Every selected process is gone, and the cgroup too.
    fn all_gone(&self) -> bool {
        self.procs.is_empty() && self.cgroup.is_none()
    }

    /// Processes whose pidfd said they exited: their last counts.
    fn exited(&mut self, exited: Vec<u32>) {
        for pid in exited {
            if let Some(mut p) = self.procs.remove(&pid) {
                self.threads += read_last(&mut p, &mut self.pending, &mut self.unread);
                observe(&p.process, &mut self.who);
            }
        }
    }

    /// A reaped child's final counts, and its own faults as its zombie said them: the
    /// passes read it last up to a period before it exited.
    fn reaped(&mut self, pid: u32, totals: ProcessCounters, zombie: Option<Stat>) {
        if let Some(mut p) = self.procs.remove(&pid) {
            add_counts(&mut self.pending, advance(&mut p.seen, totals));
            self.threads += p.threads;
            if let Some(zombie) = zombie.filter(|z| z.start == p.process.start) {
                self.who.observe(pid, &zombie);
            }
        }
    }
}

/// Samples every period until every process is gone or a stop; the counts since the last
/// sample are left pending for the last one.
fn sample_until_the_end(
    counts: &mut Counts,
    producer: &mut Producer,
    period: Duration,
    events: &Receiver<Event>,
    bell: &EventFd,
) -> Result<(), SamplerError> {
    let mut next = Instant::now() + period;
    // The first sample marks where the profile starts (and holds what the processes did
    // before it, a command's exec): the consumer measures every later period from a
    // timestamp, never from a nominal period. It is dated when the counting began (the
    // baselines' reads, a command's fork), which its counts run from: folded into the
    // first period (rows/row.rs), they are measured over the time they took.
    let time_ns = counts.poll()?;
    let began = (counts.procs.values())
        .map(|p| p.process.counted_from_ns)
        .min();
    counts.record(producer, began.map_or(time_ns, |b| b.min(time_ns)))?;
    loop {
        let rings = (counts.attributor.as_ref()).map_or_else(Vec::new, Attributor::poll_fds);
        let woken = sleep(&counts.procs, bell, &rings, next)?;
        drop(rings);
        let (sounded, exited) = match woken {
            Woken::Period => (false, Vec::new()),
            Woken::Early {
                bell,
                exited,
                rings,
                hung_up,
            } => {
                if let Some(attributor) = counts.attributor.as_mut().filter(|_| rings) {
                    attributor.hang_up(&hung_up);
                    attributor.drain();
                }
                (bell, exited)
            }
        };
        counts.exited(exited);
        // Every event sounds the bell after it is sent: a silent bell, no events.
        while let Some(event) = sounded.then(|| events.try_recv().ok()).flatten() {
            match event {
                Event::Exited {
                    pid,
                    totals,
                    zombie,
                } => counts.reaped(pid, totals, zombie),
                Event::Stop => {
                    counts.pending.time_ns = counts.poll()?;
                    return Ok(());
                }
            }
        }
        // Every process gone: the last sample now, with the partial period.
        if counts.all_gone() {
            return Ok(());
        }
        if Instant::now() >= next {
            let time_ns = counts.poll()?;
            if counts.all_gone() {
                return Ok(());
            }
            counts.record(producer, time_ns)?;
            // The next deadline is the first still ahead once the work is done, as the
            // module's: those the sampler was held up past, or its work outran, are
            // skipped and their time is in the next sample. Counted from before the
            // work, a poll slower than the period found its deadline passed every
            // time and polled again at once, never sleeping (a loaded debug kernel,
            // a cgroup target at 10 ms: a minute without one voluntary switch).
            let now = Instant::now();
            while next <= now {
                next += period;
            }
        }
    }
}

/// The name of a sampler pool's thread.
const POOL_THREAD: &str = "pfprof-samplers";

/// One thread that samples many cgroups (a fleet's targets), each with its own counts and
/// ring, on deadlines of its own: a thousand targets wake one thread when their passes
/// are due, not a thousand. The last handle's drop ends the sessions left and the thread.
#[derive(Clone)]
pub struct SamplerPool {
    inbox: Arc<PoolInbox>,
    thread: Arc<PoolThread>,
}

/// What the pool's thread is told.
struct PoolInbox {
    joining: Mutex<Vec<Pooled>>,
    /// Sounded when a target joins or is sent an event, and to stop the thread.
    bell: Arc<EventFd>,
    stop: AtomicBool,
    /// Where the targets' deadlines fall: every period from it.
    grid: Instant,
    /// Every target's late passes (`Pooled::late`), for the fleet to say.
    late: AtomicU64,
}

struct PoolThread {
    inbox: Arc<PoolInbox>,
    handle: Mutex<Option<JoinHandle<()>>>,
}

/// A target's session on the pool's thread.
struct Pooled {
    counts: Counts,
    producer: Producer,
    period: Duration,
    /// When its next pass is due.
    next: Instant,
    /// Its first pass is still to come: it marks where the profile starts.
    first: bool,
    /// Passes that came after the next deadline had passed too.
    late: u64,
    events: Receiver<Event>,
    on_end: Box<dyn FnOnce() + Send>,
    report: mpsc::SyncSender<Result<SamplerReport, SamplerError>>,
    /// Over, its last sample not yet recorded: how it went. The round's passes done,
    /// its last sample is recorded ([`Pooled::conclude`]).
    stopping: Option<Result<(), SamplerError>>,
    /// Over, its last sample recorded: how it went, and until when a last sample the
    /// ring could not take is tried again at each pass.
    ending: Option<(Result<(), SamplerError>, Instant)>,
}

impl std::fmt::Debug for SamplerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SamplerPool").finish_non_exhaustive()
    }
}

impl SamplerPool {
    pub fn new() -> std::io::Result<SamplerPool> {
        let inbox = Arc::new(PoolInbox {
            joining: Mutex::new(Vec::new()),
            bell: Arc::new(EventFd::from_flags(
                EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK,
            )?),
            stop: AtomicBool::new(false),
            grid: Instant::now(),
            late: AtomicU64::new(0),
        });
        Ok(SamplerPool {
            thread: Arc::new(PoolThread {
                inbox: Arc::clone(&inbox),
                handle: Mutex::new(None),
            }),
            inbox,
        })
    }

    /// Samples `pooled` from now, starting the thread with the first target, or again
    /// should it have ended: only a panic outside every target's pass (caught each) could
    /// end it, and the targets it held would be lost with it, not those after.
    fn add(&self, pooled: Pooled) -> std::io::Result<()> {
        let mut handle = (self.thread.handle.lock()).unwrap_or_else(PoisonError::into_inner);
        if handle.as_ref().is_none_or(JoinHandle::is_finished) {
            let inbox = Arc::clone(&self.inbox);
            *handle = Some(
                thread::Builder::new()
                    .name(POOL_THREAD.into())
                    .spawn(move || run_pool(&inbox))?,
            );
        }
        self.inbox.joining().push(pooled);
        // Cannot fail short of the counter overflowing, which the thread's read resets.
        let _ = self.inbox.bell.write(1);
        Ok(())
    }

    /// How many passes of all its targets so far came after their next deadline had
    /// passed too: a round of passes outlasting a period. A fleet's targets' summaries
    /// are shown nowhere, so the fleet says it.
    pub fn late_passes(&self) -> u64 {
        self.inbox.late.load(Ordering::Relaxed)
    }
}

impl PoolInbox {
    fn joining(&self) -> MutexGuard<'_, Vec<Pooled>> {
        // A target is pushed whole or not at all: a panic elsewhere leaves nothing torn.
        self.joining.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for PoolThread {
    fn drop(&mut self) {
        self.inbox.stop.store(true, Ordering::Release);
        let _ = self.inbox.bell.write(1);
        let handle = (self.handle.get_mut()).unwrap_or_else(PoisonError::into_inner);
        if let Some(handle) = handle.take() {
            let _ = handle.join();
        }
    }
}

impl Pooled {
    /// Its events, and its pass when due; true once its session is over and its report
    /// is to be sent. `sounded`: the bell rang.
    fn pass(&mut self, sounded: bool, inbox: &PoolInbox) -> bool {
        let grid = inbox.grid;
        if self.ending.is_none() {
            // Its last sample once every target's pass is done: see `pool_round`.
            self.stopping = self.step(sounded, inbox);
            return false;
        } else if Instant::now() >= self.next {
            // Its last sample, again: the consumer may have freed a slot since.
            if let Err(e) = self.producer.retry_pending() {
                self.ending = Some((Err(e.into()), Instant::now()));
            }
            // Not counted late: these tries are not the target's periods.
            self.next = next_deadline(grid, self.period, self.next, Instant::now()).0;
        }
        let Some((_, deadline)) = &self.ending else {
            return false;
        };
        self.producer.pending().is_none() || Instant::now() >= *deadline
    }

    /// Records the last sample of a session its pass ended, whatever the outcome, as a
    /// sampler of its own records it (its last table waiting until `until` at most);
    /// true once its report is to be sent.
    fn conclude(&mut self, until: Instant) -> bool {
        let Some(outcome) = self.stopping.take() else {
            return false;
        };
        let recorded = self.counts.record_last(&mut self.producer, until);
        self.ending = Some((outcome.and(recorded), Instant::now() + FINISH_TIMEOUT));
        self.producer.pending().is_none()
    }

    /// Its events and its pass when due; `Some` with how the session went once it is over.
    fn step(&mut self, sounded: bool, inbox: &PoolInbox) -> Option<Result<(), SamplerError>> {
        let grid = inbox.grid;
        let due = Instant::now() >= self.next;
        // Every event sounds the bell after it is sent: a silent bell and no pass due, no
        // events to look for. A profile gone without a stop (its handles dropped on an
        // error) ends its session as a stop does.
        if sounded || due {
            loop {
                let event = match self.events.try_recv() {
                    Ok(event) => event,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => Event::Stop,
                };
                match event {
                    Event::Exited {
                        pid,
                        totals,
                        zombie,
                    } => self.counts.reaped(pid, totals, zombie),
                    Event::Stop => {
                        let polled = self.counts.poll();
                        return Some(polled.map(|time_ns| self.counts.pending.time_ns = time_ns));
                    }
                }
            }
        }
        if !due {
            return None;
        }
        let time_ns = match self.counts.poll() {
            Ok(time_ns) => time_ns,
            Err(e) => return Some(Err(e)),
        };
        // The cgroup gone: the last sample now, with the partial period.
        if self.counts.all_gone() && !self.first {
            return Some(Ok(()));
        }
        if let Err(e) = self.counts.record(&mut self.producer, time_ns) {
            return Some(Err(e.into()));
        }
        let now = Instant::now();
        if std::mem::take(&mut self.first) {
            // From its second pass on it is on the pool's grid, so that every target due
            // is passed at one wake-up: its first period is half a period to one and a
            // half (the rows are measured from the samples' timestamps).
            self.next = on_grid(grid, self.period, now + self.period / 2);
        }
        self.schedule(inbox, now);
        None
    }

    /// As the sampler of its own: the next deadline is the first still ahead once the
    /// work is done; one more passed meanwhile makes the pass late.
    fn schedule(&mut self, inbox: &PoolInbox, now: Instant) {
        let (next, late) = next_deadline(inbox.grid, self.period, self.next, now);
        self.next = next;
        if late {
            self.late += 1;
            inbox.late.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Ends its session: what is still pending tried once more, the ring canceled, then
    /// its report.
    fn end(self) {
        let (outcome, _) = self.ending.unwrap_or((Ok(()), Instant::now()));
        let mut producer = self.producer;
        // `finish` tries nothing once its deadline is past: the try is this one.
        let tried = producer.retry_pending();
        let finished = tried.and(producer.finish(Instant::now()));
        let report = report(self.counts, outcome, finished, self.late);
        // Its report goes out whatever on_end does: its profile waits for it.
        let _ = panic::catch_unwind(AssertUnwindSafe(self.on_end));
        let _ = self.report.send(report);
    }

    /// Ends a session whose pass panicked, its counts maybe torn: the ring canceled so
    /// that its consumer ends, and the panic reported.
    fn abandon(self) {
        let _ = panic::catch_unwind(AssertUnwindSafe(|| self.producer.finish(Instant::now())));
        let _ = panic::catch_unwind(AssertUnwindSafe(self.on_end));
        let _ = self.report.send(Err(SamplerError::PoolPanicked));
    }
}

/// After a pass done at `now` whose deadline was `due`: the next deadline on `grid`, the
/// first still ahead, and whether the pass was late (it skipped one or more).
fn next_deadline(grid: Instant, period: Duration, due: Instant, now: Instant) -> (Instant, bool) {
    if due > now {
        return (due, false);
    }
    let next = on_grid(grid, period, now);
    let next = if next <= now { next + period } else { next };
    (next, next > due + period)
}

/// The first of the moments `grid` + k × `period` at or after `t`.
fn on_grid(grid: Instant, period: Duration, t: Instant) -> Instant {
    let since = t.saturating_duration_since(grid).as_nanos();
    let periods = since.div_ceil(period.as_nanos().max(1));
    let ahead = periods * period.as_nanos();
    grid + Duration::from_nanos(u64::try_from(ahead).unwrap_or(u64::MAX))
}

/// The pool's thread: asleep until the earliest target's deadline or the bell; then each
/// target's events, and the passes that are due in the order of their deadlines.
fn run_pool(inbox: &PoolInbox) {
    let mut targets: Vec<Pooled> = Vec::new();
    let mut sounded = false;
    while !inbox.stop.load(Ordering::Acquire) {
        let round = panic::catch_unwind(AssertUnwindSafe(|| {
            sounded = pool_round(inbox, &mut targets, sounded);
        }));
        if round.is_err() {
            // A panic outside every target's pass (caught each): in a session's end, or
            // the round's own work. The sessions it held are ended as a panicking pass's
            // is, and the thread goes on: targets joining later, and the shutdown, count
            // on it (a joiner left unserved would keep its profile waiting for ever).
            for target in targets.drain(..) {
                target.abandon();
            }
            sounded = true;
        }
    }
    targets.append(&mut inbox.joining());
    // Those ending already made their last table.
    let until = wait_for_the_last_tables(targets.iter_mut().filter(|t| t.ending.is_none()));
    for mut target in targets {
        let _ = panic::catch_unwind(AssertUnwindSafe(|| {
            if target.ending.is_none() {
                let recorded = target.counts.record_last(&mut target.producer, until);
                target.ending = Some((recorded, Instant::now()));
            }
            target.end();
        }));
    }
}

/// Stamps the last samples of the targets ending together and waits once, until the
/// deadline it answers at most, for a fleet's drain past the latest: their last tables
/// then wait no more (one wait a round, not one an ending target).
fn wait_for_the_last_tables<'a>(ending: impl Iterator<Item = &'a mut Pooled>) -> Instant {
    let mut latest: Option<(u64, &Pooled)> = None;
    for target in ending {
        let end_ns = target.counts.stamp_last();
        if target.counts.attributor.is_some() && latest.is_none_or(|(l, _)| end_ns > l) {
            latest = Some((end_ns, target));
        }
    }
    let until = Instant::now() + DRAIN_WAIT;
    if let Some((end_ns, target)) = latest {
        if let Some(attributor) = &target.counts.attributor {
            attributor.wait_drained_past(end_ns, until);
        }
    }
    until
}

/// One round of the pool's thread: the joiners taken in, every target's events and due
/// pass, the ended sessions ended, then the wait. Returns whether the bell rang.
fn pool_round(inbox: &PoolInbox, targets: &mut Vec<Pooled>, sounded: bool) -> bool {
    targets.append(&mut inbox.joining());
    targets.sort_by_key(|t| t.next);
    let mut ended = Vec::new();
    for (i, target) in targets.iter_mut().enumerate() {
        // One target's bug ends its session alone, not every other's with the thread.
        match panic::catch_unwind(AssertUnwindSafe(|| target.pass(sounded, inbox))) {
            Ok(false) => {}
            Ok(true) => ended.push((i, true)),
            Err(_) => ended.push((i, false)),
        }
    }
    // The sessions the passes ended record their last samples after every pass.
    let until = wait_for_the_last_tables(targets.iter_mut().filter(|t| t.stopping.is_some()));
    for (i, target) in targets.iter_mut().enumerate() {
        if target.stopping.is_none() {
            continue;
        }
        match panic::catch_unwind(AssertUnwindSafe(|| target.conclude(until))) {
            Ok(false) => {}
            Ok(true) => ended.push((i, true)),
            Err(_) => ended.push((i, false)),
        }
    }
    ended.sort_unstable_by_key(|&(i, _)| i);
    for (i, clean) in ended.into_iter().rev() {
        let target = targets.remove(i);
        match clean {
            true => target.end(),
            false => target.abandon(),
        }
    }
    let deadline = targets.iter().map(|t| t.next).min();
    let timeout = deadline.map_or(PollTimeout::NONE, |deadline| {
        let left = deadline.saturating_duration_since(Instant::now());
        // Rounded up: waking a little early would take a sample a period too soon.
        let ms = left.as_nanos().div_ceil(1_000_000);
        PollTimeout::try_from(ms.min(i32::MAX as u128) as i32).unwrap_or(PollTimeout::MAX)
    });
    let mut bell = [PollFd::new(inbox.bell.as_fd(), PollFlags::POLLIN)];
    // An error (EINTR, or a transient ENOMEM) is a wake-up like any other: the thread
    // must not end while sessions still count on it.
    let sounded = poll(&mut bell, timeout).is_ok_and(|n| n > 0);
    if sounded {
        let _ = inbox.bell.read();
    }
    sounded
}

/// A process that is not our child exited: read its final counts while it is a zombie;
/// if its parent reaped it already, say what is missing. Returns how many threads it
/// could have run since it was last read.
fn read_last(p: &mut Profiled, pending: &mut Sample, unread: &mut Vec<Unread>) -> u64 {
    match p.process.probe.read() {
        Ok(stat) if stat.start == p.process.start => {
            let now = p.process.counts(&stat, true);
            add_counts(pending, advance(&mut p.seen, now));
            p.threads.max(p.process.threads())
        }
        _ => {
            unread.push(Unread {
                pid: p.process.pid,
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
            p.cpu_now = p.process.probe.cpu_ns();
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
/// bring, saying in `unread` what is missing of one reaped before it was read as a zombie
/// (a pass may come before its pidfd's wake-up is seen); sets `pending`'s memory to what
/// the processes hold now. Returns the timestamp the counts belong to.
fn poll_all(
    procs: &mut HashMap<u32, Profiled>,
    pending: &mut Sample,
    threads: &mut u64,
    who: &mut Who,
    unread: &mut Vec<Unread>,
) -> Result<u64, StatError> {
    let time_ns = read_clocks(procs);
    let mut gone = Vec::new();
    for (&pid, p) in procs.iter_mut() {
        // As last read: it did not run (its clock stood still), or it is gone.
        *threads += p.threads;
        let cpu_now = p.cpu_now.take();
        p.ran = !matches!((&cpu_now, p.process.last), (Some(Ok(ns)), Some(last)) if *ns == last.counters.cpu_ns);
        // Faults are counted to the thread that takes them: a process whose CPU clock has
        // not moved took none (nor forked or reaped a child), and its stat (the costly
        // read) would say nothing new. Only where its exit is seen by other means (pidfd,
        // reaper): stat is how a zombie is seen otherwise.
        let unchanged = p.process.last.filter(|last| {
            matches!(&cpu_now, Some(Ok(ns)) if *ns == last.counters.cpu_ns)
                && (p.process.child || p.process.pidfd.is_some())
        });
        let (stat, fresh) = match unchanged {
            // Alone, it has nothing new; so has a tree of it alone, since only a process
            // that runs forks: its descendants, if it has any, may have.
            Some(_) if p.process.tree.as_ref().is_none_or(Tree::is_root_alone) => {
                p.read_at = Instant::now();
                observe(&p.process, who);
                continue;
            }
            Some(last) => (last, false),
            None => match p.process.probe.read_with_cpu(cpu_now) {
                Ok(stat) if stat.start == p.process.start => (stat, true),
                // Ok: another process has the pid now, ours is gone.
                Ok(_) | Err(StatError::NoSuchProcess(_)) => {
                    if p.process.child {
                        // Reaped, its final counts on their way (Event::Exited): still
                        // known to `who` as last read, or its zombie's faults would
                        // count again from its fork.
                        observe(&p.process, who);
                    } else {
                        unread.push(Unread {
                            pid,
                            since: p.read_at.elapsed(),
                        });
                        gone.push(pid);
                    }
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        let now = p.process.counts(&stat, fresh);
        add_counts(pending, advance(&mut p.seen, now));
        observe(&p.process, who);
        p.read_at = Instant::now();
        // More now than at the last read: the new ones could have run too.
        let now_threads = p.process.threads();
        *threads += now_threads.saturating_sub(p.threads);
        p.threads = now_threads;
        // A zombie's counters are final; its parent may never reap it.
        if stat.exited && !p.process.child {
            gone.push(pid);
        }
    }
    for pid in gone {
        procs.remove(&pid);
    }
    let memory = procs.values_mut().map(|p| p.process.memory(p.ran)).sum();
    set_memory(pending, memory);
    Ok(time_ns)
}

/// Tells `who` a process's own faults as last read, and its descendants'.
fn observe(process: &Process, who: &mut Who) {
    // Set only from a stat of its own start time.
    if let Some(stat) = &process.last {
        who.observe(process.pid, stat);
    }
    for (pid, stat) in process.tree.iter().flat_map(Tree::stats) {
        who.observe(pid, stat);
    }
}

/// What `now` adds to what was `seen` of a process, raising `seen` to it. A count below
/// what was seen adds nothing and lowers nothing: a tree's total may dip for a pass (a
/// child its parent's list missed; CPU time, whose reaped part is in clock ticks), and
/// what it recovers then is not new. The module's twin: `pfprof_advance` (kmod/members.c).
fn advance(seen: &mut ProcessCounters, now: ProcessCounters) -> ProcessCounters {
    let new = now.saturating_sub(*seen);
    *seen = seen.max(now);
    new
}

/// Adds a process's new counts to the sample being gathered (saturating: its memory is
/// not theirs to change, [`set_memory`] sets it).
fn add_counts(sample: &mut Sample, counts: ProcessCounters) {
    sample.minor = sample.minor.saturating_add(counts.minor);
    sample.major = sample.major.saturating_add(counts.major);
    sample.cpu_ns = sample.cpu_ns.saturating_add(counts.cpu_ns);
}

/// The sample's memory as set so far.
fn memory_of(sample: &Sample) -> Memory {
    Memory {
        rss_anon: sample.rss_anon,
        rss_file: sample.rss_file,
        rss_shmem: sample.rss_shmem,
        swap: sample.swap,
    }
}

/// Sets the sample's memory: what the processes alive at its end hold.
fn set_memory(sample: &mut Sample, memory: Memory) {
    sample.rss_anon = memory.rss_anon;
    sample.rss_file = memory.rss_file;
    sample.rss_shmem = memory.rss_shmem;
    sample.swap = memory.swap;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::cgroup::{test_cgroup_path, Cgroup};
    use shared_layout::strict::{StrictConsumer, Take};
    use shared_layout::wait::FutexWaiter;
    use shared_layout::Mode;
    use std::path::PathBuf;

    /// A sample's counts, without its memory.
    fn counts(s: &Sample) -> (u64, u64, u64) {
        (s.minor, s.major, s.cpu_ns)
    }

    #[test]
    fn a_pid_given_to_another_process_is_not_counted_as_the_one_profiled() {
        for child in [false, true] {
            let mut me = Process::attach(std::process::id(), false).unwrap();
            // Our pid with another start time: a process that had our pid before us.
            me.baseline = ProcessCounters::default();
            me.child = child;
            me.start = me.start.wrapping_sub(1);
            let mut procs = profiled(vec![me]);
            let mut pending = Sample::default();
            let mut unread = Vec::new();
            poll_all(
                &mut procs,
                &mut pending,
                &mut 0,
                &mut Who::new(0),
                &mut unread,
            )
            .unwrap();
            assert_eq!(counts(&pending), (0, 0, 0), "child: {child}");
            // A child's last counts come from wait4(): it stays until Event::Exited.
            assert_eq!(procs.is_empty(), !child);
            // Another's gone before its last counts were read: said, not dropped (under
            // load a pass came before the pidfd's wake-up and 955 faults went unsaid).
            assert_eq!(unread.len(), usize::from(!child), "child: {child}");
        }
    }

    #[test]
    fn a_pid_given_to_another_process_is_not_read_as_the_one_that_exited() {
        for reused in [true, false] {
            let mut me = Process::attach(std::process::id(), false).unwrap();
            me.baseline = ProcessCounters::default();
            if reused {
                me.start = me.start.wrapping_sub(1);
            }
            let mut procs = profiled(vec![me]);
            let p = procs.get_mut(&std::process::id()).unwrap();
            let mut pending = Sample::default();
            let mut unread = Vec::new();
            read_last(p, &mut pending, &mut unread);
            // Another process's counts are not its last ones: they are said missing.
            assert_eq!(pending.minor == 0, reused, "reused: {reused}");
            assert_eq!(unread.len(), usize::from(reused), "reused: {reused}");
        }
    }

    #[test]
    fn a_process_that_ran_has_its_memory_read_again() {
        let me = Process::attach(std::process::id(), false).unwrap();
        let mut procs = profiled(vec![me]);
        let mut pending = Sample::default();
        poll_all(
            &mut procs,
            &mut pending,
            &mut 0,
            &mut Who::new(0),
            &mut Vec::new(),
        )
        .unwrap();
        let before = pending.rss_anon;
        // 256 MiB written, far more than the other tests running beside can free.
        let grown = std::hint::black_box(vec![1u8; 256 << 20]);
        poll_all(
            &mut procs,
            &mut pending,
            &mut 0,
            &mut Who::new(0),
            &mut Vec::new(),
        )
        .unwrap();
        assert!(
            pending.rss_anon >= before + (128 << 20),
            "resident anonymous memory {} bytes, {before} before 256 MiB were written",
            pending.rss_anon
        );
        drop(grown);
    }

    #[test]
    fn the_process_that_still_holds_the_pid_is_counted() {
        let mut me = Process::attach(std::process::id(), false).unwrap();
        let baseline = me.baseline;
        me.baseline = ProcessCounters::default();
        let mut procs = profiled(vec![me]);
        let mut pending = Sample::default();
        poll_all(
            &mut procs,
            &mut pending,
            &mut 0,
            &mut Who::new(0),
            &mut Vec::new(),
        )
        .unwrap();
        assert!(pending.minor >= baseline.minor && pending.minor > 0);
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
        // Once it has mapped its binary and libc: memory to compare.
        let status = || std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        while crate::backend::procfs::memory::parse_status(&status())
            .unwrap()
            .rss_file
            == 0
        {
            thread::sleep(Duration::from_millis(5));
        }
        // Stopped, it cannot run: its CPU clock stands still.
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid as i32),
            nix::sys::signal::Signal::SIGSTOP,
        )
        .unwrap();
        // Stopped, and off its CPU's run queue: "T" is shown from before the stopping
        // task's last schedule(), and on a loaded machine it may be preempted there and
        // run (its clock move) once more. The kernel names a wait channel only for a
        // task that is neither running nor queued to run.
        let off_cpu = || {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap();
            stat.contains(") T ") && !matches!(wchan.trim(), "" | "0")
        };
        while !off_cpu() {
            thread::sleep(Duration::from_millis(5));
        }
        let mut procs = profiled(vec![Process::attach(pid, false).unwrap()]);
        // A fault count it never had: a stat read would replace it.
        let process = &mut procs.get_mut(&pid).unwrap().process;
        let invented = process.last.map(|last| Stat {
            counters: ProcessCounters {
                minor: u64::MAX,
                ..last.counters
            },
            ..last
        });
        process.last = invented;
        let mut pending = Sample::default();
        poll_all(
            &mut procs,
            &mut pending,
            &mut 0,
            &mut Who::new(0),
            &mut Vec::new(),
        )
        .unwrap();
        let status = status();
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        assert_eq!(counts(&pending), (0, 0, 0));
        assert_eq!(procs[&pid].process.last, invented, "stat was read again");
        // Its memory is read all the same: reclaim may take it while it sleeps.
        let memory = crate::backend::procfs::memory::parse_status(&status).unwrap();
        assert_eq!(
            [
                pending.rss_anon,
                pending.rss_file,
                pending.rss_shmem,
                pending.swap
            ],
            [
                memory.rss_anon,
                memory.rss_file,
                memory.rss_shmem,
                memory.swap
            ]
        );
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
        let process = Process::attach(pid, false).unwrap();
        assert!(process.pidfd.is_some(), "no pidfd on this kernel");
        let procs = profiled(vec![process]);
        let bell = EventFd::from_flags(EfdFlags::EFD_NONBLOCK).unwrap();
        // A deadline far away: only the exit can end this wait.
        let woken = sleep(
            &procs,
            &bell,
            &[],
            Instant::now() + Duration::from_secs(3600),
        )
        .unwrap();
        assert!(
            matches!(woken, Woken::Early { bell: false, ref exited, rings: false, .. } if exited == &[pid])
        );
    }

    /// The threads named as the pool's (no other test in this process starts one): their
    /// /proc/self/task directories.
    fn pool_threads() -> Vec<PathBuf> {
        crate::system::threads_named(POOL_THREAD)
    }

    /// How often a thread went to sleep.
    fn voluntary_switches(task: &std::path::Path) -> u64 {
        let status = std::fs::read_to_string(task.join("status")).unwrap();
        let line = (status.lines())
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .unwrap();
        line.trim().parse().unwrap()
    }

    /// Held by each test that makes a pool: one counts the pool threads by name.
    static POOL_TESTS: Mutex<()> = Mutex::new(());

    fn one_pool_test_at_a_time() -> MutexGuard<'static, ()> {
        POOL_TESTS.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This process's own cgroup: a real one any user may read, sampled without root.
    fn own_cgroup() -> Members {
        Members::new(own_cgroup_open())
    }

    fn own_cgroup_open() -> Arc<Cgroup> {
        Arc::new(crate::system::cgroup::own_cgroup_for_test())
    }

    /// A pooled target on this process's cgroup, into a strict ring of `slots`; its
    /// `on_end`.
    fn pooled_target(
        pool: &SamplerPool,
        slots: u64,
        period: Duration,
        on_end: impl FnOnce() + Send + 'static,
    ) -> (Arc<Area>, Sampler) {
        let area = Arc::new(Area::create_memfd_with_slots(slots, Mode::Strict, period).unwrap());
        let attribution = SamplerAttribution::off("a test");
        let sampler = Sampler::pooled(
            pool,
            Arc::clone(&area),
            own_cgroup(),
            period,
            attribution,
            on_end,
        )
        .unwrap();
        (area, sampler)
    }

    #[test]
    fn a_target_whose_end_panics_strands_no_other_target() {
        let _alone = one_pool_test_at_a_time();
        let period = Duration::from_millis(20);
        let pool = SamplerPool::new().unwrap();
        let (_, failing) = pooled_target(&pool, 64, period, || panic!("a test's on_end"));
        let (_, other) = pooled_target(&pool, 64, period, || {});
        thread::sleep(period * 3);
        failing.events().send(Event::Stop);
        joined_within_10_s(failing);
        // The thread lives on: the other target's session ends as it should, and a
        // target that joins later is sampled.
        let (later_area, later) = pooled_target(&pool, 64, period, || {});
        thread::sleep(period * 3);
        other.events().send(Event::Stop);
        joined_within_10_s(other);
        later.events().send(Event::Stop);
        joined_within_10_s(later);
        assert!(
            later_area.counters().write_seq >= 2,
            "sampled after the panic"
        );
    }

    #[test]
    fn a_pooled_target_whose_profile_is_gone_without_a_stop_is_ended() {
        let _alone = one_pool_test_at_a_time();
        let period = Duration::from_millis(20);
        let pool = SamplerPool::new().unwrap();
        let (ended_tx, ended_rx) = mpsc::channel();
        let (_, sampler) = pooled_target(&pool, 64, period, move || {
            let _ = ended_tx.send(());
        });
        thread::sleep(period * 3);
        // Its profile failed: every handle dropped, no stop sent, no bell.
        drop(sampler);
        assert!(
            ended_rx.recv_timeout(Duration::from_secs(10)).is_ok(),
            "its session ended"
        );
    }

    #[test]
    fn an_ended_pooled_target_writes_its_last_sample_once_its_full_ring_has_room() {
        let _alone = one_pool_test_at_a_time();
        let period = Duration::from_millis(20);
        let pool = SamplerPool::new().unwrap();
        // One slot: the first sample fills it, every later one waits pending.
        let (area, sampler) = pooled_target(&pool, 1, period, || {});
        thread::sleep(period * 4);
        sampler.events().send(Event::Stop);
        // Ended with its ring still full, for a few passes: its last sample waits.
        thread::sleep(period * 4);
        let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
        let mut samples = Vec::new();
        let taking = thread::spawn(move || {
            let limit = Some(Duration::from_secs(10));
            while consumer.take(&mut samples, limit).unwrap() != Take::Ended {}
            samples
        });
        let report = joined_within_10_s(sampler);
        assert_eq!(report.unflushed, Sample::default(), "nothing lost");
        let samples = taking.join().unwrap();
        assert_eq!(samples.len(), 2, "the first sample, then the rest merged");
    }

    #[test]
    fn a_pass_after_a_deadline_it_skipped_is_late() {
        let grid = Instant::now();
        let ms = Duration::from_millis;
        let period = ms(50);
        // On time (however late within its period): the next deadline, not late.
        assert_eq!(
            next_deadline(grid, period, grid + ms(50), grid + ms(99)),
            (grid + ms(100), false)
        );
        // Done after the next deadline too: that one is skipped, and the pass was late.
        assert_eq!(
            next_deadline(grid, period, grid + ms(50), grid + ms(100)),
            (grid + ms(150), true)
        );
        assert_eq!(
            next_deadline(grid, period, grid + ms(50), grid + ms(260)),
            (grid + ms(300), true)
        );
        // Not yet due: unchanged.
        assert_eq!(
            next_deadline(grid, period, grid + ms(50), grid + ms(10)),
            (grid + ms(50), false)
        );
    }

    #[test]
    fn a_deadline_on_the_grid_is_the_first_grid_point_at_or_after_the_moment() {
        let grid = Instant::now();
        let ms = Duration::from_millis;
        assert_eq!(on_grid(grid, ms(50), grid), grid);
        assert_eq!(on_grid(grid, ms(50), grid + ms(100)), grid + ms(100));
        assert_eq!(on_grid(grid, ms(50), grid + ms(101)), grid + ms(150));
    }

    /// The sampler's report, or a failure after 10 s: its session never ended.
    fn joined_within_10_s(sampler: Sampler) -> SamplerReport {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || tx.send(sampler.join()));
        let report = rx.recv_timeout(Duration::from_secs(10));
        report.expect("the session ended").expect("a clean end")
    }

    fn tables(feed: &Feed) -> usize {
        let mut tables = Vec::new();
        feed.take_until(u64::MAX, &mut tables);
        tables.len()
    }

    /// A pooled target on this process's cgroup, its faults `fleet`'s, into a strict
    /// ring; the feed its tables go to, and its `on_end`.
    fn pooled_fleet_target(
        pool: &SamplerPool,
        fleet: &crate::backend::procfs::fleet_faults::FleetFaults,
        period: Duration,
        on_end: impl FnOnce() + Send + 'static,
    ) -> (Arc<Feed>, Sampler) {
        use crate::backend::procfs::attribute::FaultSource;
        let area = Area::create_memfd(64, Mode::Strict, period).unwrap();
        let cgroup = own_cgroup_open();
        let attribution = SamplerAttribution {
            attributor: Some(Attributor::new(FaultSource::Fleet(
                fleet.target(&cgroup).unwrap(),
            ))),
            ..SamplerAttribution::off("a test")
        };
        let feed = Arc::clone(&attribution.feed);
        let members = Members::new(cgroup);
        let sampler =
            Sampler::pooled(pool, Arc::new(area), members, period, attribution, on_end).unwrap();
        (feed, sampler)
    }

    /// Waits, 10 s at most, until the drain thread was woken `told` times.
    fn woken_at_least(wakes: &AtomicU64, told: u64, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while wakes.load(Ordering::Relaxed) < told {
            assert!(Instant::now() < deadline, "{what} not told");
            thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_fleets_pooled_targets_wait_for_no_drain_in_their_passes_and_once_at_their_end() {
        use crate::backend::procfs::fleet_faults::FleetFaults;
        let _alone = one_pool_test_at_a_time();
        let (fleet, wakes) = FleetFaults::without_events(false);
        let period = Duration::from_millis(20);
        let pool = SamplerPool::new().unwrap();
        const TARGETS: u64 = 40;
        // The first target's end, alone in its round, holds the pool thread until every
        // other stop is sent: the others all end in the next round.
        let (open_gate, gate) = mpsc::channel::<()>();
        let (entered, entered_rx) = mpsc::channel::<()>();
        let mut gate = Some((gate, entered));
        let targets: Vec<(Arc<Feed>, Sampler)> = (0..TARGETS)
            .map(|_| {
                let gate = gate.take();
                let on_end = move || {
                    if let Some((gate, entered)) = gate {
                        let _ = entered.send(());
                        let _ = gate.recv();
                    }
                };
                pooled_fleet_target(&pool, &fleet, period, on_end)
            })
            .collect();
        // Each target's start wakes the drain thread once.
        woken_at_least(&wakes, TARGETS, "the targets' starts");
        let started = wakes.load(Ordering::Relaxed);
        // Three passes each, however loaded the machine.
        let mut passes = vec![0; targets.len()];
        let deadline = Instant::now() + Duration::from_secs(20);
        while passes.iter().any(|&p| p < 3) {
            assert!(Instant::now() < deadline, "passes in 20 s: {passes:?}");
            thread::sleep(period);
            for (passed, (feed, _)) in passes.iter_mut().zip(&targets) {
                *passed += tables(feed);
            }
        }
        // A pass asks the drain thread for nothing: it takes what was drained.
        assert_eq!(
            wakes.load(Ordering::Relaxed),
            started,
            "a pass woke the drain thread (to wait for it)"
        );
        // Every target ends, in two rounds: their last tables wait for a drain past
        // their ends once a round, not once each.
        targets[0].1.events().send(Event::Stop);
        (entered_rx.recv_timeout(Duration::from_secs(10))).expect("the first target's end");
        for (_, sampler) in &targets[1..] {
            sampler.events().send(Event::Stop);
        }
        drop(open_gate);
        for (_, sampler) in targets {
            joined_within_10_s(sampler);
        }
        // Each target's end wakes it once more, its events given back.
        woken_at_least(&wakes, started + TARGETS, "the targets' ends");
        let waits = wakes.load(Ordering::Relaxed) - started - TARGETS;
        // One a round at most (a drain asked by the first round's end may serve the
        // second), and one at least: the first's.
        assert!(
            (1..=2).contains(&waits),
            "{waits} waits for the drain at {TARGETS} targets' ends"
        );
        drop(pool);
    }

    #[test]
    fn a_held_up_drain_thread_costs_the_targets_ending_together_one_wait_not_one_each() {
        use crate::backend::procfs::fleet_faults::FleetFaults;
        let _alone = one_pool_test_at_a_time();
        let (fleet, wakes) = FleetFaults::without_events(true);
        let period = Duration::from_millis(50);
        let pool = SamplerPool::new().unwrap();
        // One wait each would be 12 s for these (each asking for a drain), and as long
        // again for those the pool's end ends.
        const TARGETS: usize = 60;
        let sampler = || pooled_fleet_target(&pool, &fleet, period, || {}).1;
        let stopped: Vec<Sampler> = (0..TARGETS).map(|_| sampler()).collect();
        let left: Vec<Sampler> = (0..TARGETS).map(|_| sampler()).collect();
        thread::sleep(3 * period);
        for sampler in &stopped {
            sampler.events().send(Event::Stop);
        }
        for sampler in stopped {
            joined_within_10_s(sampler);
        }
        drop(pool);
        for sampler in left {
            joined_within_10_s(sampler);
        }
        // Each target's start and end wake the drain thread once; a wait that asks for a
        // drain, once: the first, whatever the rounds and the shutdown, the drain thread
        // then known to be held up.
        let told = 4 * TARGETS as u64;
        woken_at_least(&wakes, told, "the targets' starts and ends");
        let waits = wakes.load(Ordering::Relaxed) - told;
        assert_eq!(waits, 1, "waits for a held-up drain thread");
        assert_eq!(fleet.cut_short(), 2 * TARGETS as u64);
    }

    #[test]
    fn one_pool_thread_samples_every_target_each_period_and_ends_each_alone() {
        let _alone = one_pool_test_at_a_time();
        let Some(top) = test_cgroup_path("pool") else {
            return;
        };
        std::fs::create_dir(&top).unwrap();
        let period = Duration::from_millis(50);
        let pool = SamplerPool::new().unwrap();
        let before = pool_threads().len();
        let mut targets: Vec<(PathBuf, Arc<Feed>, Sampler)> = (0..30)
            .map(|i| {
                let dir = top.join(format!("t{i}"));
                std::fs::create_dir(&dir).unwrap();
                let members = Members::new(Arc::new(Cgroup::open(&dir).unwrap()));
                let area = Area::create_memfd(8, Mode::Strict, period).unwrap();
                let attribution = SamplerAttribution::off("a test");
                let feed = Arc::clone(&attribution.feed);
                let sampler =
                    Sampler::pooled(&pool, Arc::new(area), members, period, attribution, || {})
                        .unwrap();
                (dir, feed, sampler)
            })
            .collect();
        thread::sleep(Duration::from_secs(1));
        let threads = pool_threads();
        assert_eq!(threads.len(), before + 1, "one thread for 30 targets");
        // On one grid, every target's pass is due at the same wake-up: one a period (and
        // a few more for bells and a loaded machine's late passes), not one a target a
        // period (600 in these 20).
        let slept = voluntary_switches(&threads[0]);
        thread::sleep(period * 20);
        let woken = voluntary_switches(&threads[0]) - slept;
        assert!(
            woken <= 150,
            "the pool's thread woke {woken} times in 20 periods"
        );
        // 20 periods: at least 5 passes each, however loaded the machine.
        for (i, (_, feed, _)) in targets.iter().enumerate() {
            let passes = tables(feed);
            assert!(passes >= 5, "target {i}: {passes} passes in 20 periods");
        }
        // A target whose cgroup is removed ends alone; the others go on.
        let (dir, _, removed) = targets.remove(0);
        std::fs::remove_dir(&dir).unwrap();
        joined_within_10_s(removed);
        thread::sleep(period * 4);
        for (i, (_, feed, _)) in targets.iter().enumerate() {
            assert!(tables(feed) >= 1, "target {i} sampled after another ended");
        }
        for (dir, _, sampler) in targets {
            sampler.events().send(Event::Stop);
            joined_within_10_s(sampler);
            std::fs::remove_dir(&dir).unwrap();
        }
        std::fs::remove_dir(&top).unwrap();
        drop(pool);
        let deadline = Instant::now() + Duration::from_secs(10);
        // Joined, it may still be listed for a moment.
        while pool_threads().len() != before {
            assert!(Instant::now() < deadline, "the pool's thread outlived it");
            thread::sleep(Duration::from_millis(10));
        }
    }
}
