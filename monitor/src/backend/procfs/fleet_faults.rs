//! A fleet's fault events: one set for every target, not one per target. On each CPU the
//! two fault events and the mappings' event watch every process, each fault's record
//! with the id of its cgroup (`PERF_SAMPLE_CGROUP`): 3 descriptors a CPU and one record a
//! fault however many targets there are, where a cgroup's own events are 3 a CPU per
//! target. Each record is routed to the target it belongs to and waits there until that
//! target's sampler takes it into its table ([`super::attribute`]), as a single cgroup
//! profile's own events' records: the same tables, the same series.
//!
//! One thread owns the events and the routing: it drains the rings when one is half
//! full, every [`DRAIN_EVERY`], or when a target's last table asks, and puts each record
//! in its target's queue. Each drain routes, in time order across the CPUs' rings, the
//! records stamped before it began; the later ones wait for the next. A target's period
//! takes what the last drain routed, never waiting for one (the pool's one thread passes
//! every target): its table lags the rings by up to [`DRAIN_EVERY`], the rest is the
//! next period's. Only a target's last table waits, a bounded while, for a drain begun
//! after its end; the targets ending together wait for one.
//!
//! A fault goes to the deepest target whose tree holds its cgroup (a cgroup v2 id is its
//! directory's inode number). Each target's tree is read once when it starts, from its
//! open directory, then kept current by inotify: a cgroup is made before any task can
//! fault in it, so its creation is read before that fault's record is routed. An id in
//! no tree is in no target: dropped at once, never looked for. The records of mappings,
//! forks, execs and exits say no cgroup: each goes to its process's target, known from
//! the process's faults, its parent's (a fork), or else its `/proc/PID/cgroup` (read again
//! at an exec: a service's process is moved into its cgroup between its fork and its
//! exec). Another user's processes, seen by these events, never reach a target they are
//! not in; flooding the rings, they can make records be lost (counted, said), not
//! misattributed.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::os::unix::net::UnixStream;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use shared_layout::abi::monotonic_ns;

use super::perf::{FaultEvents, Kind, PerfError, Record, Stream, Watched};
use crate::system::cgroup::{cgroup2_root_mount, Cgroup};
use crate::system::procstat;

/// The most pids remembered: past it, those in no target are forgotten first, then
/// others (found again in `/proc`). A storm of short-lived processes costs look-ups, not
/// memory.
const PIDS_REMEMBERED: usize = 16_384;
/// The most cgroups of one target's tree followed: a target with more has its faults in
/// the others dropped (said once, counted), and cannot take another target's room.
const TREE_DIRS: usize = if cfg!(test) { 64 } else { 4_096 };
/// The most bytes of records waiting for one target (a mapping's with its name): a
/// target whose sampler stalled loses the later ones (counted as its lost) rather than
/// holding the monitor's memory. 4 MiB: some 50,000 faults.
const WAITING_BYTES: usize = 4 << 20;
/// The most bytes of records waiting for all the targets: 64 MiB, a quarter of the
/// shipped DaemonSet's memory limit, however many targets stall.
/// (A test's: three targets' worth.)
const ALL_WAITING_BYTES: usize = if cfg!(test) {
    3 * WAITING_BYTES
} else {
    64 << 20
};
/// How often the rings are drained when no ring is half full and no target ends: a
/// period's table lags the rings by up to this.
const DRAIN_EVERY: Duration = Duration::from_millis(100);
/// How long the last tables of the targets ending together wait for a drain begun after
/// their end (one deadline for them all): past it, each is made of the records in hand,
/// those not drained yet are not in it (counted, said).
pub const DRAIN_WAIT: Duration = Duration::from_millis(200);
/// How much earlier than a drain began the records it routes are stamped: a record is
/// stamped before it is written, and an interrupt may come between; a record stamped
/// before but written after its drain read its ring would be applied after later ones.
/// A vCPU's steal time can pass it (tens of ms): such a record is then applied in a
/// later period of its target, or not at all when that period was the last.
const LATE_WRITE_MARGIN: u64 = 5_000_000;
/// The most time a drain spends on the targets' trees' changes (the events inotify
/// queued, and the trees read again after its queue overflowed), but one tree read
/// again: the rest waits for the next drain, so that a flood of cgroups made and removed
/// cannot keep the drain thread from the rings.
const TREES_BUDGET: Duration = Duration::from_millis(20);
/// How often the fleet's losses are said, at most.
const SAY_LOSSES_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum FleetFaultsError {
    #[error(transparent)]
    Perf(#[from] PerfError),
    #[error("starting the thread that drains the fleet's fault events")]
    Start(#[source] io::Error),
    /// A fault's record names its task's cgroup in the perf_event controller's
    /// hierarchy: a v1 one's ids are not the v2 targets'.
    #[error("the perf_event controller is on a cgroup v1 hierarchy: the faults' records name its cgroups, not the targets'")]
    PerfEventOnV1,
    #[error("reading {0}")]
    Unreadable(&'static str, #[source] io::Error),
    /// Where `/proc/PID/cgroup`'s paths are looked up.
    #[error("reading the cgroup2 mount {0}")]
    MountUnreadable(PathBuf, #[source] io::Error),
    /// Events on every process name the tasks outside the monitor's pid namespace pid 0:
    /// their records could not be told apart.
    #[error("the monitor is in a pid namespace of its own: the events' pids are not the system's")]
    PidNamespace,
    /// `/proc/PID/cgroup`'s paths are from the cgroup namespace's root.
    #[error(
        "no cgroup2 file system is mounted at its root here: /proc/PID/cgroup's paths lead nowhere"
    )]
    NoRootMount,
    #[error("watching the targets' cgroups for new ones (inotify)")]
    Inotify(#[source] Errno),
}

impl FleetFaultsError {
    /// What would allow attribution, said once for every target.
    pub fn advice(&self) -> String {
        match self {
            FleetFaultsError::Perf(e) => e.advice(),
            FleetFaultsError::Start(_) | FleetFaultsError::Inotify(_) => {
                "raise the limit of threads, descriptors or inotify instances".to_owned()
            }
            FleetFaultsError::PerfEventOnV1 => {
                "boot with the unified hierarchy alone (systemd.unified_cgroup_hierarchy=1), or \
                 leave perf_event unmounted on v1"
                    .to_owned()
            }
            FleetFaultsError::Unreadable(..) => "run the monitor with /proc mounted".to_owned(),
            FleetFaultsError::MountUnreadable(..) => {
                "let the monitor's user read the cgroup2 mount (in a container, mount the \
                 host's cgroup2 file system)"
                    .to_owned()
            }
            FleetFaultsError::PidNamespace => {
                "run the monitor in the host's pid namespace (hostPID: true)".to_owned()
            }
            FleetFaultsError::NoRootMount => {
                "run the monitor in the host's cgroup namespace, or mount cgroup2 at its root"
                    .to_owned()
            }
        }
    }
}

/// The fleet's events, shared by every target's profile.
#[derive(Clone)]
pub struct FleetFaults(Arc<Shared>);

/// What the targets' samplers and the drain thread share: no lock held across I/O.
struct Shared {
    minor_sampling: u64,
    kernel_faults: bool,
    /// Targets started and ended, for the drain thread to take before its next drain.
    changes: Mutex<Changes>,
    /// Written to wake the drain thread.
    wake: UnixStream,
    drained: Mutex<Drained>,
    drained_changed: Condvar,
    next_id: Mutex<TargetId>,
    /// The bytes waiting in every target's queue.
    all_waiting: Arc<AtomicUsize>,
    /// Last tables made without a drain past their end: [`DRAIN_WAIT`] passed.
    cut_short: AtomicU64,
    /// How many of them the drain thread said: the others are said at the monitor's end
    /// ([`FleetFaults::say_at_end`]).
    cut_short_said: AtomicU64,
}

#[derive(Default)]
struct Changes {
    started: Vec<NewTarget>,
    ended: Vec<TargetId>,
}

struct NewTarget {
    id: TargetId,
    /// Its cgroup's directory, open: its tree is read from it, not from a path a new
    /// cgroup of the same name could take.
    dir: OwnedFd,
    cgroup_id: u64,
    added_at: u64,
    queue: Arc<Queue>,
}

#[derive(Clone, Copy, Default)]
struct Drained {
    /// [`LATE_WRITE_MARGIN`] before the last drain began (`CLOCK_MONOTONIC`, ns): every
    /// record stamped up to it is in its target's queue.
    at: u64,
    /// The drain thread is gone (it panicked): no more drains.
    stopped: bool,
    /// A last table's wait for a drain past its end timed out since this drain: the
    /// drain thread is held up, later ones take what is in hand at once until it is not.
    waited_in_vain: bool,
}

type Queue = Mutex<Waiting>;

/// One target's share of the fleet's events: its records, as they are drained.
pub struct TargetFaults {
    shared: Arc<Shared>,
    id: TargetId,
    queue: Arc<Queue>,
}

type TargetId = u64;

impl fmt::Debug for FleetFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetFaults")
            .field("minor_sampling", &self.0.minor_sampling)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FleetFaults {
    /// Opens the events on every online CPU, one minor fault recorded in
    /// `minor_sampling`, and starts the thread that drains their rings; `max_targets`,
    /// the most targets at once, share the inotify watches that follow their trees.
    pub fn open(minor_sampling: u64, max_targets: usize) -> Result<FleetFaults, FleetFaultsError> {
        let own = fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| FleetFaultsError::Unreadable("/proc/self/cgroup", e))?;
        if perf_event_on_v1(&own) {
            return Err(FleetFaultsError::PerfEventOnV1);
        }
        let status = fs::read_to_string("/proc/self/status")
            .map_err(|e| FleetFaultsError::Unreadable("/proc/self/status", e))?;
        if !in_initial_pid_namespace(&status) {
            return Err(FleetFaultsError::PidNamespace);
        }
        let mount = match in_initial_cgroup_namespace() {
            true => {
                let path = cgroup2_root_mount().ok_or(FleetFaultsError::NoRootMount)?;
                let mount = CgroupMount::at(path.clone());
                Some(mount.map_err(|e| FleetFaultsError::MountUnreadable(path, e))?)
            }
            // Its processes' paths would be from its own root: another namespace's
            // processes' lead out of it ('..'), and those of one moved in are wrong.
            false => {
                say(
                    "the monitor is in a cgroup namespace of its own (or cannot tell): a \
                     process's target is known from its faults and its parent's alone, not \
                     from /proc/PID/cgroup (a process moved into a target between its fork \
                     and its exec is the target's from its first fault)",
                );
                None
            }
        };
        let trees = Trees::new(max_targets)?;
        let mut events = FaultEvents::new(minor_sampling)?;
        events.attach(Watched::EveryProcess)?;
        let (wake, woken) = UnixStream::pair().map_err(FleetFaultsError::Start)?;
        (wake.set_nonblocking(true))
            .and_then(|()| woken.set_nonblocking(true))
            .map_err(FleetFaultsError::Start)?;
        let shared = Arc::new(Shared::new(
            events.minor_sampling(),
            events.kernel_faults(),
            wake,
        ));
        let drainer = Drainer {
            events,
            woken,
            routing: Routing::new(mount, trees),
            held: Vec::new(),
        };
        let weak = Arc::downgrade(&shared);
        thread::Builder::new()
            .name("pfprof-fleet-faults".into())
            .spawn(move || drainer.run(weak))
            .map_err(FleetFaultsError::Start)?;
        Ok(FleetFaults(shared))
    }

    /// Routes the faults of `cgroup` and its descendants (but those of a deeper target)
    /// to a new target, from now until the answer is dropped; refused once the drain
    /// thread is gone (nothing would take the target in).
    pub fn target(&self, cgroup: &Cgroup) -> io::Result<TargetFaults> {
        let cgroup_id = nix::sys::stat::fstat(cgroup.fd())
            .map_err(|e| io::Error::other(format!("reading the cgroup's id: {}", e.desc())))?
            .st_ino;
        let dir = cgroup.fd().try_clone()?;
        let queue = Arc::new(Mutex::new(Waiting::new(&self.0.all_waiting)));
        let id = {
            let mut next = lock(&self.0.next_id);
            *next += 1;
            *next
        };
        // Stamped with the lock held: a drain that began later takes it before routing.
        let mut changes = lock(&self.0.changes);
        // Read with the changes held: a drain thread failing later lets go of this one.
        if lock(&self.0.drained).stopped {
            return Err(io::Error::other(
                "the fleet's fault events are no longer drained (their thread failed)",
            ));
        }
        changes.started.push(NewTarget {
            id,
            dir,
            cgroup_id,
            added_at: monotonic_ns(),
            queue: Arc::clone(&queue),
        });
        drop(changes);
        self.0.wake();
        Ok(TargetFaults {
            shared: Arc::clone(&self.0),
            id,
            queue,
        })
    }
}

impl FleetFaults {
    /// A fleet with no events, for the pool's tests: its drain thread drains nothing,
    /// at once whenever woken, as the real one stamps its drains; or, `held_up`, never
    /// (a drain thread stuck in the kernel). The answer counts the wakes.
    #[cfg(test)]
    pub(crate) fn without_events(
        held_up: bool,
    ) -> (FleetFaults, Arc<std::sync::atomic::AtomicU64>) {
        let (wake, woken) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared::new(1, true, wake));
        let wakes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (weak, counted) = (Arc::downgrade(&shared), Arc::clone(&wakes));
        thread::spawn(move || {
            let mut byte = [0; 1];
            // Ends once the fleet is dropped: its end of the socket closed.
            while matches!((&woken).read(&mut byte), Ok(1)) {
                counted.fetch_add(1, Ordering::Relaxed);
                let began = monotonic_ns();
                let Some(shared) = weak.upgrade() else {
                    return;
                };
                if !held_up {
                    shared.publish(Drained {
                        at: began.saturating_sub(LATE_WRITE_MARGIN),
                        stopped: false,
                        waited_in_vain: false,
                    });
                }
            }
        });
        (FleetFaults(shared), wakes)
    }
}

impl FleetFaults {
    /// Says, at the monitor's end once every target's last table is made, the last
    /// tables cut short that the drain thread did not say (held up, it may never).
    pub fn say_at_end(&self) {
        let cut_short = self.0.cut_short.load(Ordering::Relaxed);
        if cut_short > self.0.cut_short_said.load(Ordering::Relaxed) {
            say(&format!(
                "fleet attribution: {cut_short} last tables of targets cut short since the \
                 monitor started (no drain of the fault events past their end within {} ms: \
                 their thread held up or stopped)",
                DRAIN_WAIT.as_millis()
            ));
        }
    }
}

impl FleetFaults {
    /// Ends the drain thread's watch as its panic would.
    #[cfg(test)]
    fn fail_drain_thread(&self) {
        let said = StoppedSaid(Arc::downgrade(&self.0));
        let failed = thread::spawn(move || {
            let _said = said;
            panic!("a drain thread's failure, for a test");
        });
        assert!(failed.join().is_err());
    }

    /// Last tables made without a drain past their end, so far.
    #[cfg(test)]
    pub(crate) fn cut_short(&self) -> u64 {
        self.0.cut_short.load(Ordering::Relaxed)
    }
}

impl Shared {
    fn new(minor_sampling: u64, kernel_faults: bool, wake: UnixStream) -> Shared {
        Shared {
            minor_sampling,
            kernel_faults,
            changes: Mutex::default(),
            wake,
            drained: Mutex::default(),
            drained_changed: Condvar::new(),
            next_id: Mutex::default(),
            all_waiting: Arc::default(),
            cut_short: AtomicU64::new(0),
            cut_short_said: AtomicU64::new(0),
        }
    }

    fn wake(&self) {
        // Full: a wake is already pending.
        let _ = (&self.wake).write(&[1]);
    }

    /// What the last drain routed up to, and whether that is `end_ns` or later: waits
    /// for such a drain until `until` (a drain thread held up past an earlier wait's end
    /// is not waited for again until it drains again).
    fn drained_after(&self, end_ns: u64, until: Instant) -> (u64, bool) {
        let (at, complete) = self.wait_drained(end_ns, until);
        if !complete {
            self.cut_short.fetch_add(1, Ordering::Relaxed);
        }
        (at, complete)
    }

    /// As [`Shared::drained_after`], not counting a last table cut short.
    fn wait_drained(&self, end_ns: u64, until: Instant) -> (u64, bool) {
        // A drain that begins now has all there is (`end_ns` may be "everything").
        let end_ns = end_ns.min(monotonic_ns());
        // Each drain routes up to LATE_WRITE_MARGIN before it began: one begun earlier
        // than `end_ns` + LATE_WRITE_MARGIN would not do, and asking for one would make
        // the drain thread drain again and again until then.
        let first_enough = end_ns.saturating_add(LATE_WRITE_MARGIN);
        let mut drained = lock(&self.drained);
        let mut asked = false;
        while drained.at < end_ns && !drained.stopped && !drained.waited_in_vain {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                // Held up, if it did not answer: not if it was not asked.
                drained.waited_in_vain = asked;
                break;
            };
            let early = first_enough.saturating_sub(monotonic_ns());
            let wait = match early {
                0 => {
                    if !std::mem::replace(&mut asked, true) {
                        // Once: the drain it starts begins after this write.
                        self.wake();
                    }
                    left
                }
                early => left.min(Duration::from_nanos(early)),
            };
            drained = (self.drained_changed.wait_timeout(drained, wait))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        (drained.at, drained.at >= end_ns)
    }

    fn publish(&self, drained: Drained) {
        *lock(&self.drained) = drained;
        self.drained_changed.notify_all();
    }
}

impl TargetFaults {
    pub fn minor_sampling(&self) -> u64 {
        self.shared.minor_sampling
    }

    pub fn kernel_faults(&self) -> bool {
        self.shared.kernel_faults
    }

    /// Hands this target's records routed so far to `each`, without waiting; when the
    /// last drain began: every record stamped before it has been handed over.
    pub fn drain(&self, each: impl FnMut(Stream, Record)) -> u64 {
        // Read before the queue: what the queue holds then is all that was stamped
        // before (and maybe later ones, which wait in the attributor).
        let drained_at = lock(&self.shared.drained).at;
        self.hand_over(each);
        drained_at
    }

    /// As [`TargetFaults::drain`], for the target's last table, all of it up to
    /// `end_ns`: first waits, until `until`, for a drain that began after `end_ns` (one
    /// that began after another target's end serves this one too). Where none did, the
    /// records stamped up to `end_ns` not drained yet are not handed over (counted as
    /// cut short, said).
    pub fn drain_last(&self, end_ns: u64, until: Instant, each: impl FnMut(Stream, Record)) {
        self.shared.drained_after(end_ns, until);
        self.hand_over(each);
    }

    /// Waits, until `until` at most, for a drain past `end_ns`: the latest end of the
    /// targets ending together, waited for once before their last tables.
    pub fn wait_drained_past(&self, end_ns: u64, until: Instant) {
        self.shared.wait_drained(end_ns, until);
    }

    fn hand_over(&self, mut each: impl FnMut(Stream, Record)) {
        let records = lock(&self.queue).take();
        for (stream, record) in records {
            each(stream, record);
        }
    }
}

impl Drop for TargetFaults {
    fn drop(&mut self) {
        let mut changes = lock(&self.shared.changes);
        // No drain thread to take it (the changes' lock held, as it lets go of them).
        if lock(&self.shared.drained).stopped {
            return;
        }
        changes.ended.push(self.id);
        drop(changes);
        self.shared.wake();
    }
}

/// What only the drain thread holds: the events, the routing, and the records stamped
/// after the last drain began.
struct Drainer {
    events: FaultEvents,
    woken: UnixStream,
    routing: Routing,
    held: Vec<(Stream, Record)>,
}

impl Drainer {
    /// Drains the rings whenever one is half full, a target asks, and every
    /// [`DRAIN_EVERY`], until the fleet's events are dropped.
    fn run(mut self, shared: Weak<Shared>) {
        let _said = StoppedSaid(shared.clone());
        let timeout = PollTimeout::try_from(DRAIN_EVERY).unwrap_or(PollTimeout::MAX);
        // Rings whose descriptor poll says is broken, by position: drained, not polled (it
        // would say so at once, forever).
        let mut hung_up: Vec<usize> = Vec::new();
        let mut poll_failure_said = false;
        loop {
            let polled: Vec<(usize, BorrowedFd)> = (self.events.poll_fds().enumerate())
                .filter(|(i, _)| !hung_up.contains(i))
                .collect();
            let mut fds: Vec<PollFd> = (polled.iter().map(|&(_, fd)| fd))
                .chain([self.woken.as_fd()])
                .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                .collect();
            let broken = PollFlags::POLLERR | PollFlags::POLLHUP | PollFlags::POLLNVAL;
            match poll(&mut fds, timeout) {
                Ok(_) => hung_up.extend(
                    (polled.iter().zip(&fds))
                        .filter(|(_, fd)| fd.revents().is_some_and(|r| r.intersects(broken)))
                        .map(|(&(i, _), _)| i),
                ),
                Err(Errno::EINTR) => {}
                // Not a spin: the drains go on at their cadence.
                Err(e) => {
                    if !std::mem::replace(&mut poll_failure_said, true) {
                        say(&format!(
                            "fleet attribution: waiting on the fault rings failed ({}): they \
                             are drained every {} ms",
                            e.desc(),
                            DRAIN_EVERY.as_millis()
                        ));
                    }
                    thread::sleep(DRAIN_EVERY);
                }
            }
            drop(fds);
            let mut wakes = [0; 64];
            while matches!((&self.woken).read(&mut wakes), Ok(n) if n > 0) {}
            let Some(shared) = shared.upgrade() else {
                return;
            };
            // When the drain began, read with the targets taken: one started before is
            // among them, to take its records stamped after it started.
            let (changes, began) = {
                let mut changes = lock(&shared.changes);
                (std::mem::take(&mut *changes), monotonic_ns())
            };
            self.routing.apply(changes);
            let mut records = std::mem::take(&mut self.held);
            self.events
                .drain(|stream, record| records.push((stream, record)));
            let horizon = began.saturating_sub(LATE_WRITE_MARGIN);
            self.held = self.routing.route_until(horizon, records);
            shared.publish(Drained {
                at: horizon,
                stopped: false,
                waited_in_vain: false,
            });
            self.routing.loss.now.cut_short = shared.cut_short.load(Ordering::Relaxed);
            self.routing.loss.say_now_and_then();
            (shared.cut_short_said).store(self.routing.loss.said.cut_short, Ordering::Relaxed);
        }
    }
}

/// Said, and told to the targets, if the drain thread ends by a panic: their samplers
/// stop waiting for it, and their faults are no more attributed.
struct StoppedSaid(Weak<Shared>);

impl Drop for StoppedSaid {
    fn drop(&mut self) {
        if !thread::panicking() {
            return;
        }
        say("the fleet's fault events are no longer drained (their thread failed): faults are not attributed to mappings from now");
        if let Some(shared) = self.0.upgrade() {
            let at = lock(&shared.drained).at;
            shared.publish(Drained {
                at,
                stopped: true,
                waited_in_vain: false,
            });
            // The targets not taken in hold their cgroup's directory open; none comes
            // after this (see `FleetFaults::target`).
            *lock(&shared.changes) = Changes::default();
        }
    }
}

fn say(line: &str) {
    eprintln!("{}: {line}", crate::program_name());
}

/// A target's records, waiting for its sampler.
struct Waiting {
    records: Vec<(Stream, Record)>,
    /// What they hold, as [`bytes_of`] counts it.
    bytes: usize,
    /// What every target's hold.
    all: Arc<AtomicUsize>,
    /// Records lost, by ring: dropped here for want of room, or lost from a ring.
    lost: [u64; 3],
}

impl Waiting {
    fn new(all: &Arc<AtomicUsize>) -> Waiting {
        Waiting {
            records: Vec::new(),
            bytes: 0,
            all: Arc::clone(all),
            lost: [0; 3],
        }
    }

    /// Keeps `record`, or counts it lost where there is no room; a loss is never
    /// refused: it adds what it says.
    fn push(&mut self, stream: Stream, record: Record) {
        let lost = &mut self.lost[ring_index(stream)];
        match record {
            Record::Lost(n) => *lost += n,
            Record::Overflowed => *lost += 1,
            record => {
                let bytes = bytes_of(&record);
                // Only the drain thread adds: read then added, the bound holds.
                let all = self.all.load(Ordering::Relaxed);
                if self.bytes + bytes > WAITING_BYTES || all + bytes > ALL_WAITING_BYTES {
                    *lost += 1;
                    return;
                }
                self.all.fetch_add(bytes, Ordering::Relaxed);
                self.bytes += bytes;
                self.records.push((stream, record));
            }
        }
    }

    fn take(&mut self) -> Vec<(Stream, Record)> {
        self.all
            .fetch_sub(std::mem::take(&mut self.bytes), Ordering::Relaxed);
        let mut records = std::mem::take(&mut self.records);
        for (stream, lost) in STREAMS.into_iter().zip(std::mem::take(&mut self.lost)) {
            if lost > 0 {
                records.push((stream, Record::Lost(lost)));
            }
        }
        records
    }
}

impl Drop for Waiting {
    /// What a target ended with in its queue (routed after its last table) is given
    /// back to every target's bound.
    fn drop(&mut self) {
        self.all.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The memory a waiting record holds.
fn bytes_of(record: &Record) -> usize {
    let name = match record {
        Record::Mmap(mmap) => mmap.name.len(),
        _ => 0,
    };
    std::mem::size_of::<(Stream, Record)>() + name
}

const STREAMS: [Stream; 3] = [
    Stream::Faults(Kind::Major),
    Stream::Faults(Kind::Minor),
    Stream::Mappings,
];

fn ring_index(stream: Stream) -> usize {
    match stream {
        Stream::Faults(Kind::Major) => 0,
        Stream::Faults(Kind::Minor) => 1,
        Stream::Mappings => 2,
    }
}

/// What the fleet's attribution missed: every target's, whose it was unknown; said now
/// and then, counted once, not in each target's `[lost]`.
#[derive(Default)]
struct FleetLoss {
    now: Losses,
    said: Losses,
    said_at: Option<Instant>,
}

#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Losses {
    /// Records lost from the rings.
    faults: u64,
    mappings: u64,
    /// Cgroups of targets' trees past [`TREE_DIRS`]: their faults are dropped.
    cgroups_unfollowed: u64,
    /// Cgroups made in targets' trees and removed before a drain read their creation:
    /// their faults are dropped.
    cgroups_vanished: u64,
    /// Last tables made without a drain past their end: the records not drained by
    /// then are not in them.
    cut_short: u64,
    /// Times inotify's queue overflowed: every tree read again, a few a drain.
    overflows: u64,
    /// Drains that left some of the trees' changes for the next.
    trees_behind: u64,
    /// Cgroups followed without a watch now, and the targets they are in: cgroups made
    /// below them are not followed meanwhile.
    unwatched: (usize, usize),
}

impl FleetLoss {
    fn say_now_and_then(&mut self) {
        let due = self
            .said_at
            .is_none_or(|at| at.elapsed() >= SAY_LOSSES_EVERY);
        if !self.now.changed_from(&self.said) || !due {
            return;
        }
        say(&format!(
            "fleet attribution: {}",
            self.now.clauses().join("; ")
        ));
        self.said = self.now;
        self.said_at = Some(Instant::now());
    }
}

impl Losses {
    /// Whether there is something new to say: a count grew, or the number of targets
    /// with unwatched cgroups changed (not each cgroup made and removed in them).
    fn changed_from(&self, said: &Losses) -> bool {
        let blind = |l: &Losses| Losses {
            unwatched: (0, l.unwatched.1),
            ..*l
        };
        blind(self) != blind(said)
    }

    /// What is said of them: those there are since the monitor started, and the cgroups
    /// unwatched now.
    fn clauses(&self) -> Vec<String> {
        let mut clauses = Vec::new();
        if self.faults + self.mappings > 0 {
            clauses.push(format!(
                "{} fault records and {} mapping records lost from the rings (full: faults \
                 or mappings faster than they are drained, by any process)",
                self.faults, self.mappings
            ));
        }
        let counts = [
            (
                self.cgroups_unfollowed,
                format!(
                    "cgroups of targets not followed (more than {TREE_DIRS} in one target's tree)"
                ),
            ),
            (
                self.cgroups_vanished,
                "cgroups of targets made and removed between two drains (their faults not \
                 attributed)"
                    .to_owned(),
            ),
            (
                self.cut_short,
                format!(
                    "last tables of targets cut short (no drain past their end within {} ms: \
                     the drain thread held up or stopped)",
                    DRAIN_WAIT.as_millis()
                ),
            ),
            (
                self.overflows,
                "overflows of inotify's queue (every target's tree read again, a few a \
                 drain)"
                    .to_owned(),
            ),
            (
                self.trees_behind,
                format!(
                    "drains that left cgroups' changes for the next (more than {} ms of them: \
                     the faults in cgroups made meanwhile not attributed)",
                    TREES_BUDGET.as_millis()
                ),
            ),
        ];
        for (count, what) in counts {
            if count > 0 {
                clauses.push(format!("{count} {what}"));
            }
        }
        if !clauses.is_empty() {
            let last = clauses.len() - 1;
            clauses[last].push_str(", since the monitor started");
        }
        clauses.push(format!(
            "{} cgroups of {} targets unwatched now (those made below them not followed)",
            self.unwatched.0, self.unwatched.1
        ));
        clauses
    }
}

/// Process `pid`'s target, by pid, bounded: a pid is forgotten at its exit.
#[derive(Default)]
struct Pids {
    /// Each pid's target, and when it was remembered (a count of insertions).
    targets: HashMap<u32, (Option<TargetId>, u64)>,
    /// The pids in the order they were remembered, with when (some forgotten or
    /// remembered again since: an entry whose time is not its pid's is passed over): the
    /// oldest are forgotten first.
    order: VecDeque<(u32, u64)>,
    inserted: u64,
}

impl Pids {
    fn get(&self, pid: u32) -> Option<Option<TargetId>> {
        self.targets.get(&pid).map(|&(target, _)| target)
    }

    fn insert(&mut self, pid: u32, target: Option<TargetId>) {
        if let Some(known) = self.targets.get_mut(&pid) {
            known.0 = target;
            return;
        }
        self.inserted += 1;
        self.targets.insert(pid, (target, self.inserted));
        self.order.push_back((pid, self.inserted));
        if self.targets.len() > PIDS_REMEMBERED {
            // Those in no target first: the cheapest to find again, and the most.
            self.targets.retain(|_, (target, _)| target.is_some());
            while self.targets.len() > PIDS_REMEMBERED * 3 / 4 {
                // `pid`, the newest, is last: never reached while others are left.
                let Some((oldest, at)) = self.order.pop_front() else {
                    break;
                };
                if self
                    .targets
                    .get(&oldest)
                    .is_some_and(|&(_, known)| known == at)
                {
                    self.targets.remove(&oldest);
                }
            }
        }
        // The forgotten ones' places let go of, now and then.
        if self.order.len() > 2 * PIDS_REMEMBERED {
            let targets = &self.targets;
            self.order
                .retain(|(pid, at)| targets.get(pid).is_some_and(|&(_, known)| known == *at));
        }
    }

    fn remove(&mut self, pid: u32) -> Option<Option<TargetId>> {
        self.targets.remove(&pid).map(|(target, _)| target)
    }

    fn retain(&mut self, mut keep: impl FnMut(&u32, &mut Option<TargetId>) -> bool) {
        self.targets.retain(|pid, (target, _)| keep(pid, target));
    }

    fn clear(&mut self) {
        self.targets.clear();
        self.order.clear();
    }
}

/// The cgroup2 mount `/proc/PID/cgroup`'s paths are under, and its device: a path that
/// leads to another file system is none of its cgroups.
struct CgroupMount {
    path: PathBuf,
    dev: u64,
}

impl CgroupMount {
    fn at(path: PathBuf) -> io::Result<CgroupMount> {
        let dev = fs::metadata(&path)?.dev();
        Ok(CgroupMount { path, dev })
    }

    /// The id of the cgroup at `path` (as `/proc/PID/cgroup` names it) under the mount;
    /// none for a path out of it.
    fn id_of(&self, path: &str) -> Option<u64> {
        let relative = Path::new(path.trim_start_matches('/'));
        if !(relative.components()).all(|c| matches!(c, Component::Normal(_))) {
            return None;
        }
        let meta = fs::metadata(self.path.join(relative)).ok()?;
        (meta.is_dir() && meta.dev() == self.dev).then(|| meta.ino())
    }
}

/// The cgroups of every target's tree, by id, kept current by inotify: a cgroup made is
/// told by `IN_CREATE` on its parent, one removed by `IN_DELETE` on its parent (cgroupfs,
/// kernfs, sends no `IN_DELETE_SELF` nor `IN_IGNORED` at a rmdir, and keeps the watch of
/// a removed directory until it is removed explicitly).
struct Trees {
    inotify: Inotify,
    nodes: HashMap<u64, Node>,
    by_watch: HashMap<WatchDescriptor, u64>,
    /// Each cgroup's id by the target whose tree it was found in and its path there: a
    /// removal is told by name.
    by_path: HashMap<(TargetId, PathBuf), u64>,
    /// Cgroups removed, with when their removal was read: kept until a drain routed
    /// every record up to then (every fault in one is stamped before its removal).
    tombstones: Vec<(u64, u64)>,
    /// Up to when the records were routed, at the last drain.
    routed_to: u64,
    /// Cgroups followed without a watch, by the target whose tree they were found in
    /// (inotify refused one, or the target's share or [`Trees::watch_cap`] was reached):
    /// watched again at later drains, their new children unseen meanwhile.
    unwatched: HashMap<TargetId, HashSet<u64>>,
    /// The most watches held: below the system's limit, which the monitor's user shares
    /// with its other inotify users.
    watch_cap: usize,
    /// The watches each target's tree is sure of: the cap shared by the most targets
    /// there can be (its own cgroup first, then shallower before deeper). A tree may
    /// hold more while as many stay free for the other targets' shares (the slack lent):
    /// one target's tree cannot take another's.
    watch_share: usize,
    /// The most targets there can be.
    max_targets: usize,
    /// Watches held for each target's tree.
    held: HashMap<TargetId, usize>,
    /// The watches the targets followed miss of their shares: kept free, with the
    /// shares of the targets still to come ([`Trees::reserved`]).
    unfilled: usize,
    /// Watches refused so far.
    watches_refused: u64,
    /// The targets whose tree was said to be held to its share: each said once, and
    /// once more when none of its cgroups is unwatched.
    refusals_said: HashMap<TargetId, Blind>,
    /// A refusal for every target (the cap, or inotify's own limit) was said: once.
    refused_for_all_said: bool,
    /// Each target's cgroup, open: its tree's paths are from it.
    roots: HashMap<TargetId, OwnedFd>,
    /// How many cgroups were found under each target.
    found: HashMap<TargetId, usize>,
    /// The targets whose tree went past [`TREE_DIRS`] (said once each).
    cut: HashSet<TargetId>,
    unfollowed: u64,
    /// Cgroups whose creation was told after they were removed.
    vanished: u64,
    /// Targets whose tree is to be read again (inotify's queue overflowed: some of its
    /// changes were not told), oldest first.
    stale: VecDeque<TargetId>,
    /// Times inotify's queue overflowed.
    overflows: u64,
    /// Drains that left some of the trees' changes for the next one ([`TREES_BUDGET`]).
    behind: u64,
}

/// What a tree read again does with its cgroups removed whose last faults may still be
/// routed.
#[derive(Clone, Copy)]
enum Removed {
    Kept,
    Forgotten,
}

/// Whether a target's tree was said to be followed blind.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Blind {
    Said,
    SaidWatchedAgain,
}

/// What became of a watch asked for.
enum Watch {
    Held(WatchDescriptor),
    /// The directory was removed meanwhile.
    Gone,
    /// Refused: `all`, for every target (the cap, or inotify's limit), not only for
    /// this one's share.
    Refused {
        all: bool,
    },
}

impl Watch {
    fn held(self) -> Option<WatchDescriptor> {
        match self {
            Watch::Held(watch) => Some(watch),
            Watch::Gone | Watch::Refused { .. } => None,
        }
    }
}

struct Node {
    /// Its parent's id, where its parent is followed.
    parent: Option<u64>,
    /// The target whose cgroup it is.
    target: Option<TargetId>,
    /// The target whose tree it was found in, and its path from that target's cgroup.
    found_under: TargetId,
    path: PathBuf,
    watch: Option<WatchDescriptor>,
}

impl Trees {
    /// `max_targets`: the most targets there can be, sharing the watches.
    fn new(max_targets: usize) -> Result<Trees, FleetFaultsError> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(FleetFaultsError::Inotify)?;
        Ok(Trees {
            inotify,
            nodes: HashMap::new(),
            by_watch: HashMap::new(),
            by_path: HashMap::new(),
            tombstones: Vec::new(),
            routed_to: 0,
            unwatched: HashMap::new(),
            watch_cap: watch_cap(),
            watch_share: (watch_cap() / max_targets.max(1)).max(1),
            max_targets: max_targets.max(1),
            held: HashMap::new(),
            unfilled: 0,
            watches_refused: 0,
            refusals_said: HashMap::new(),
            refused_for_all_said: false,
            roots: HashMap::new(),
            found: HashMap::new(),
            cut: HashSet::new(),
            unfollowed: 0,
            vanished: 0,
            stale: VecDeque::new(),
            overflows: 0,
            behind: 0,
        })
    }

    /// The deepest target whose tree holds cgroup `cgroup_id`.
    fn owner(&self, cgroup_id: u64) -> Option<TargetId> {
        self.owner_where(cgroup_id, |_| true)
    }

    /// The deepest target whose tree holds cgroup `cgroup_id` and that `takes`.
    fn owner_where(&self, cgroup_id: u64, takes: impl Fn(TargetId) -> bool) -> Option<TargetId> {
        let mut node = self.nodes.get(&cgroup_id)?;
        // No deeper than every cgroup followed: parents that came round would not end.
        for _ in 0..=self.nodes.len() {
            if let Some(target) = node.target.filter(|&t| takes(t)) {
                return Some(target);
            }
            node = self.nodes.get(&node.parent?)?;
        }
        None
    }

    /// Follows target `target`'s tree, from its cgroup `dir`: one in another target's
    /// tree is that target's no longer.
    fn add(&mut self, target: TargetId, dir: OwnedFd, cgroup_id: u64) {
        if self.roots.insert(target, dir).is_none() {
            self.unfilled += self.watch_share;
        }
        self.follow(target, cgroup_id);
    }

    fn follow(&mut self, target: TargetId, cgroup_id: u64) {
        if let Some(node) = self.nodes.get_mut(&cgroup_id) {
            node.target = Some(target);
            let (outer, parent) = (node.found_under, node.parent);
            // Its own, or another target's cgroup too: left as it is.
            if outer == target || node.path.as_os_str().is_empty() {
                return;
            }
            // Read as part of an enclosing target's tree: its own from now, its cgroups
            // watched on its own share (given back to the enclosing one at its end).
            self.unlink_below(outer, cgroup_id);
            let watch = self.watch(target, Path::new("")).held();
            self.insert(cgroup_id, parent, target, PathBuf::new(), watch);
            self.nodes
                .entry(cgroup_id)
                .and_modify(|n| n.target = Some(target));
            self.read_below(target, cgroup_id);
            return;
        }
        let watch = self.watch(target, Path::new("")).held();
        let parent = self.followed_parent(target);
        self.insert(cgroup_id, parent, target, PathBuf::new(), watch);
        self.nodes
            .entry(cgroup_id)
            .and_modify(|n| n.target = Some(target));
        self.read_below(target, cgroup_id);
    }

    /// The parent of target `target`'s cgroup where it is followed (the target is nested
    /// in another's tree, read again after it): its end gives that tree back.
    fn followed_parent(&self, target: TargetId) -> Option<u64> {
        let dev = nix::sys::stat::fstat(self.roots.get(&target)?.as_fd())
            .ok()?
            .st_dev;
        let parent = fs::metadata(self.at(target, Path::new(".."))?).ok()?;
        (parent.dev() == dev && self.nodes.contains_key(&parent.ino())).then(|| parent.ino())
    }

    /// Stops following target `target`'s tree. Its cgroup, read as part of another
    /// target's tree, is that one's again; the targets nested in it, read as part of it,
    /// are read again; the tree it took from the target it is nested in is read below
    /// its parent there (that tree alone, not the enclosing one's whole).
    fn remove(&mut self, target: TargetId) {
        let root = (self.nodes.iter_mut()).find(|(_, n)| n.target == Some(target));
        let mut parent = None;
        if let Some((_, node)) = root {
            node.target = None;
            if node.found_under == target {
                parent = node.parent;
            }
        }
        let mut again = self.forget_found_under(target, Removed::Forgotten);
        if self.roots.remove(&target).is_some() {
            // Its watches all let go of: its share is unfilled.
            self.unfilled = self.unfilled.saturating_sub(self.watch_share);
        }
        self.found.remove(&target);
        self.cut.remove(&target);
        self.unwatched.remove(&target);
        self.held.remove(&target);
        self.refusals_said.remove(&target);
        self.stale.retain(|t| *t != target);
        again.retain(|t| *t != target);
        let outer = parent.and_then(|p| Some((self.nodes.get(&p)?.found_under, p)));
        if let Some((outer, parent)) = outer {
            self.read_below(outer, parent);
        }
        for other in again {
            self.read_again(other);
        }
    }

    /// Forgets what target `target`'s tree was read to hold (`removed`: but the cgroups
    /// removed whose last faults may still be routed, kept until they are buried): the
    /// targets whose cgroup was among it.
    fn forget_found_under(&mut self, target: TargetId, removed: Removed) -> Vec<TargetId> {
        let buried_later: HashSet<u64> = match removed {
            Removed::Kept => self.tombstones.iter().map(|&(id, _)| id).collect(),
            Removed::Forgotten => HashSet::new(),
        };
        let gone: Vec<u64> = (self.nodes.iter())
            .filter(|(id, n)| n.found_under == target && !buried_later.contains(id))
            .map(|(&id, _)| id)
            .collect();
        let mut nested = Vec::new();
        for id in gone {
            let Some(node) = self.unlink(id) else {
                continue;
            };
            nested.extend(node.target.filter(|t| *t != target));
        }
        let kept = (self.nodes.values())
            .filter(|n| n.found_under == target)
            .count();
        self.found.insert(target, kept);
        nested
    }

    /// Forgets cgroup `id`, its watch removed (kernfs would keep it).
    fn unlink(&mut self, id: u64) -> Option<Node> {
        let node = self.nodes.remove(&id)?;
        let key = (node.found_under, node.path.clone());
        if self.by_path.get(&key) == Some(&id) {
            self.by_path.remove(&key);
        }
        self.forget_unwatched(node.found_under, id);
        if let Some(watch) = node.watch {
            self.by_watch.remove(&watch);
            let _ = self.inotify.rm_watch(watch);
            self.let_go(node.found_under);
        }
        Some(node)
    }

    /// Forgets the removed cgroups whose every fault was routed: their removal was read
    /// before the horizon of the last drain.
    fn bury(&mut self) {
        let routed_to = self.routed_to;
        let (due, kept): (Vec<_>, Vec<_>) =
            (self.tombstones.drain(..)).partition(|&(_, read_at)| read_at <= routed_to);
        self.tombstones = kept;
        for (id, _) in due {
            if let Some(node) = self.unlink(id) {
                if let Some(count) = self.found.get_mut(&node.found_under) {
                    *count = count.saturating_sub(1);
                }
            }
        }
    }

    /// Watches again the cgroups whose watch was refused, shallower first, then reads
    /// what was made below them meanwhile; says which targets' trees are all watched
    /// again. A target that may hold no more is passed over without a try.
    fn watch_again(&mut self) {
        let targets: Vec<TargetId> = (self.unwatched.iter())
            .filter(|(_, ids)| !ids.is_empty())
            .map(|(&target, _)| target)
            .collect();
        for target in targets {
            if !self.may_watch(target) {
                continue;
            }
            let nodes = &self.nodes;
            let mut ids: Vec<(usize, u64)> = (self.unwatched.get(&target).into_iter())
                .flatten()
                .filter_map(|&id| Some((nodes.get(&id)?.path.components().count(), id)))
                .collect();
            ids.sort_unstable();
            let (watched, all_refused) = self.watch_each(target, ids);
            // Their level first, then what was made below them.
            for id in watched {
                self.read_below(target, id);
            }
            if all_refused {
                // The others would be refused too.
                break;
            }
        }
        self.say_watched_again();
    }

    /// Watches the unwatched cgroups `ids` of target `target`'s tree, in order: those
    /// watched, and whether a refusal was for every target.
    fn watch_each(&mut self, target: TargetId, ids: Vec<(usize, u64)>) -> (Vec<u64>, bool) {
        let mut watched = Vec::new();
        let mut children = None;
        for (_, id) in ids {
            // Tombstoned below a removed one meanwhile.
            if !(self.unwatched.get(&target)).is_some_and(|ids| ids.contains(&id)) {
                continue;
            }
            let Some(path) = self.nodes.get(&id).map(|n| n.path.clone()) else {
                continue;
            };
            match self.watch(target, &path) {
                Watch::Held(watch) => {
                    let now = (self.at(target, &path)).and_then(|at| fs::metadata(at).ok());
                    if now.is_none_or(|meta| meta.ino() != id) {
                        // Removed, and maybe made again at its path (told by its
                        // creation): not this one's watch.
                        let _ = self.inotify.rm_watch(watch);
                        self.let_go(target);
                        self.tombstone_below(target, id, &mut children);
                        continue;
                    }
                    self.forget_unwatched(target, id);
                    self.by_watch.insert(watch, id);
                    if let Some(node) = self.nodes.get_mut(&id) {
                        node.watch = Some(watch);
                    }
                    watched.push(id);
                }
                // Removed while unwatched, its removal not told: forgotten, with what
                // was read below it, at the next drain.
                Watch::Gone => self.tombstone_below(target, id, &mut children),
                Watch::Refused { all } => return (watched, all),
            }
        }
        (watched, false)
    }

    /// Says, once each, which targets said to be held to their share have no cgroup
    /// unwatched (watched again, or removed).
    fn say_watched_again(&mut self) {
        let again: Vec<TargetId> = (self.refusals_said.iter())
            .filter(|&(target, &blind)| {
                blind == Blind::Said
                    && (self.unwatched.get(target)).is_none_or(|ids| ids.is_empty())
            })
            .map(|(&target, _)| target)
            .collect();
        for target in again {
            self.refusals_said.insert(target, Blind::SaidWatchedAgain);
            say(&format!(
                "fleet attribution: no cgroup of {}'s tree is unwatched now: the cgroups made \
                 in it are followed",
                self.tree_name(target)
            ));
        }
    }

    /// Target `target`'s cgroup, as its open directory's path says it.
    fn tree_name(&self, target: TargetId) -> String {
        (self.at(target, Path::new("")))
            .and_then(|at| fs::read_link(at).ok())
            .map_or_else(
                || "a target's cgroup".to_owned(),
                |path| path.display().to_string(),
            )
    }

    fn forget_unwatched(&mut self, target: TargetId, id: u64) {
        if let Some(ids) = self.unwatched.get_mut(&target) {
            ids.remove(&id);
        }
    }

    /// A watch of target `target`'s tree is held.
    fn take(&mut self, target: TargetId) {
        let held = self.held.entry(target).or_default();
        if *held < self.watch_share {
            self.unfilled = self.unfilled.saturating_sub(1);
        }
        *held += 1;
    }

    /// A watch of target `target`'s tree is gone.
    fn let_go(&mut self, target: TargetId) {
        if let Some(held) = self.held.get_mut(&target).filter(|held| **held > 0) {
            *held -= 1;
            if *held < self.watch_share {
                self.unfilled += 1;
            }
        }
    }

    /// The watches kept free: those the targets followed miss of their shares, and the
    /// shares of the targets still to come.
    fn reserved(&self) -> usize {
        let to_come = self.max_targets.saturating_sub(self.roots.len());
        self.unfilled + to_come * self.watch_share
    }

    /// Whether target `target`'s tree may hold one more watch: within its share, or
    /// past it while the others' shares stay free.
    fn may_watch(&self, target: TargetId) -> bool {
        let held = self.held.get(&target).copied().unwrap_or(0);
        let room = self.watch_cap.saturating_sub(self.by_watch.len());
        match held < self.watch_share {
            true => room > 0,
            false => room > self.reserved(),
        }
    }

    /// Forgets cgroup `id` of target `outer`'s tree and those read below it, their
    /// watches let go of.
    fn unlink_below(&mut self, outer: TargetId, id: u64) {
        // Those removed below it are kept until buried: their last faults may still be
        // routed. It goes whatever: its node is the nested target's now.
        let buried_later: HashSet<u64> = self.tombstones.iter().map(|&(id, _)| id).collect();
        let below = self.subtree(outer, id, &mut None);
        for (i, id) in below.into_iter().enumerate() {
            if i > 0 && buried_later.contains(&id) {
                continue;
            }
            if self.unlink(id).is_some() {
                if let Some(count) = self.found.get_mut(&outer) {
                    *count = count.saturating_sub(1);
                }
            }
        }
    }

    /// The cgroups followed without a watch now, and the targets they are in.
    fn unwatched_now(&self) -> (usize, usize) {
        let blind = self.unwatched.values().filter(|ids| !ids.is_empty());
        (blind.clone().map(HashSet::len).sum(), blind.count())
    }

    /// Tombstones cgroup `id` of target `target`'s tree and those read below it (their
    /// removals not told: it was not watched). `children`: the tree's, by parent, built
    /// by the first call that needs it and kept by the caller for the next.
    fn tombstone_below(
        &mut self,
        target: TargetId,
        id: u64,
        children: &mut Option<HashMap<u64, Vec<u64>>>,
    ) {
        let now = monotonic_ns();
        for id in self.subtree(target, id, children) {
            self.forget_unwatched(target, id);
            self.tombstones.push((id, now));
        }
    }

    /// Cgroup `id` and those read below it in target `target`'s tree, by their parents
    /// (not by their paths: a cgroup made again at one's path is not below it).
    fn subtree(
        &self,
        target: TargetId,
        id: u64,
        children: &mut Option<HashMap<u64, Vec<u64>>>,
    ) -> Vec<u64> {
        let children = children.get_or_insert_with(|| {
            let mut children: HashMap<u64, Vec<u64>> = HashMap::new();
            for (&child, node) in &self.nodes {
                if let Some(parent) = node.parent.filter(|_| node.found_under == target) {
                    children.entry(parent).or_default().push(child);
                }
            }
            children
        });
        let mut all = vec![id];
        let mut seen = HashSet::from([id]);
        let mut next = 0;
        while let Some(&at) = all.get(next) {
            // Each once, however the parents came to be.
            let new = (children.get(&at).into_iter().flatten()).filter(|&&c| seen.insert(c));
            all.extend(new.collect::<Vec<_>>());
            next += 1;
        }
        all
    }

    fn read_again(&mut self, target: TargetId) {
        let Some(dir) = self.roots.get(&target) else {
            return;
        };
        let Ok(cgroup_id) = nix::sys::stat::fstat(dir.as_fd()).map(|s| s.st_ino) else {
            return;
        };
        let nested = self.forget_found_under(target, Removed::Kept);
        self.follow(target, cgroup_id);
        for other in nested {
            self.read_again(other);
        }
    }

    /// Where `path`, from target `target`'s cgroup, is: through its open directory.
    fn at(&self, target: TargetId, path: &Path) -> Option<PathBuf> {
        let dir = self.roots.get(&target)?;
        Some(Path::new(&format!("/proc/self/fd/{}", dir.as_raw_fd())).join(path))
    }

    /// A new watch on the directory at `path` of target `target`'s tree, unless refused
    /// (counted): past the target's share with no slack left (said once for the
    /// target), past [`Trees::watch_cap`] or by inotify (said once for all). `Gone` where
    /// the directory is gone, or is another cgroup's already watched (made again at its
    /// path).
    fn watch(&mut self, target: TargetId, path: &Path) -> Watch {
        let Some(at) = self.at(target, path) else {
            return Watch::Gone;
        };
        // A watch of its own or none: inotify would answer an inode's existing one.
        let flags = AddWatchFlags::IN_CREATE
            | AddWatchFlags::IN_DELETE
            | AddWatchFlags::IN_ONLYDIR
            | AddWatchFlags::from_bits_retain(libc::IN_MASK_CREATE);
        let held = self.held.get(&target).copied().unwrap_or(0);
        let refused = if !self.may_watch(target) && held >= self.watch_share {
            None
        } else if self.by_watch.len() >= self.watch_cap {
            Some("the monitor's cap".to_owned())
        } else {
            match self.inotify.add_watch(&at, flags) {
                Ok(watch) => {
                    self.take(target);
                    return Watch::Held(watch);
                }
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::EEXIST) => return Watch::Gone,
                Err(e) => Some(e.desc().to_owned()),
            }
        };
        self.watches_refused += 1;
        match refused {
            None => {
                if let std::collections::hash_map::Entry::Vacant(blind) =
                    self.refusals_said.entry(target)
                {
                    blind.insert(Blind::Said);
                    say(&share_message(&self.tree_name(target), self.watch_share));
                }
                Watch::Refused { all: false }
            }
            Some(refused) => {
                if !std::mem::replace(&mut self.refused_for_all_said, true) {
                    say(&refused_message(
                        &refused,
                        self.by_watch.len(),
                        self.watch_cap,
                    ));
                }
                Watch::Refused { all: true }
            }
        }
    }

    fn insert(
        &mut self,
        cgroup_id: u64,
        parent: Option<u64>,
        found_under: TargetId,
        path: PathBuf,
        watch: Option<WatchDescriptor>,
    ) {
        match watch {
            Some(watch) => {
                self.by_watch.insert(watch, cgroup_id);
            }
            None => {
                self.unwatched
                    .entry(found_under)
                    .or_default()
                    .insert(cgroup_id);
            }
        }
        self.by_path.insert((found_under, path.clone()), cgroup_id);
        *self.found.entry(found_under).or_default() += 1;
        let node = Node {
            parent,
            target: None,
            found_under,
            path,
            watch,
        };
        self.nodes.insert(cgroup_id, node);
    }

    /// Whether target `target`'s tree has room for one more cgroup; said once when not.
    fn room(&mut self, target: TargetId) -> bool {
        if self.found.get(&target).copied().unwrap_or(0) < TREE_DIRS {
            return true;
        }
        self.unfollowed += 1;
        if self.cut.insert(target) {
            say(&format!(
                "a target's tree has more than {TREE_DIRS} cgroups: faults in the later ones \
                 are not attributed"
            ));
        }
        false
    }

    /// Follows the cgroups below `cgroup_id` (of target `target`'s tree), each watched
    /// before it is read: one made meanwhile is read, told, or both.
    fn read_below(&mut self, target: TargetId, cgroup_id: u64) {
        // Shallower first: a target's share of watches goes to them before deeper ones.
        let mut to_read = VecDeque::from([cgroup_id]);
        while let Some(id) = to_read.pop_front() {
            let Some(path) = self.nodes.get(&id).map(|n| n.path.clone()) else {
                continue;
            };
            let Some(at) = self.at(target, &path) else {
                continue;
            };
            // Removed meanwhile, or made again at its path: not its children.
            if fs::metadata(&at).map(|meta| meta.ino()).ok() != Some(id) {
                continue;
            }
            let Ok(entries) = fs::read_dir(at) else {
                continue;
            };
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let child = entry.ino();
                if let Some(node) = self.nodes.get_mut(&child) {
                    // Another target's cgroup: its own tree.
                    node.parent = Some(id);
                    continue;
                }
                if !self.room(target) {
                    return;
                }
                let child_path = path.join(entry.file_name());
                let watch = self.watch(target, &child_path).held();
                self.insert(child, Some(id), target, child_path, watch);
                to_read.push_back(child);
            }
        }
    }

    /// Takes in the cgroups made and removed in the targets' trees since the last call:
    /// once a drain, before its records, stamped up to `horizon`, are routed.
    fn update(&mut self, horizon: u64) {
        let until = Instant::now() + TREES_BUDGET;
        self.bury();
        self.watch_again();
        let told = self.read_events(until);
        let read = self.read_stale(until);
        if !(told && read) {
            self.behind += 1;
        }
        self.routed_to = horizon;
    }

    /// Some changes were not told (inotify's queue overflowed): every tree is to be read
    /// again, a few a drain.
    fn overflowed(&mut self) {
        self.overflows += 1;
        let stale: HashSet<TargetId> = self.stale.iter().copied().collect();
        let targets: Vec<TargetId> = (self.roots.keys().copied())
            .filter(|t| !stale.contains(t))
            .collect();
        self.stale.extend(targets);
    }

    /// Reads again the trees whose changes inotify could not tell, oldest first, until
    /// `until` (one at least); whether none is left.
    fn read_stale(&mut self, until: Instant) -> bool {
        let mut first = true;
        while let Some(&target) = self.stale.front() {
            if !std::mem::take(&mut first) && Instant::now() >= until {
                return false;
            }
            self.stale.pop_front();
            self.read_again(target);
        }
        true
    }

    /// Takes in what inotify told, until `until`; whether all of it was.
    fn read_events(&mut self, until: Instant) -> bool {
        // Each tree's cgroups by parent, built at the first removal of an unwatched one
        // and kept until a cgroup is followed: a burst of removals builds it once.
        let mut children: HashMap<TargetId, Option<HashMap<u64, Vec<u64>>>> = HashMap::new();
        // One read whatever the time: a drain thread kept off its CPU past its budget
        // still takes in what was told.
        let mut first = true;
        loop {
            if !std::mem::take(&mut first) && Instant::now() >= until {
                return false;
            }
            let events = match self.inotify.read_events() {
                Ok(events) if !events.is_empty() => events,
                // EAGAIN: none left.
                _ => return true,
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    self.overflowed();
                    continue;
                }
                let Some(&id) = self.by_watch.get(&event.wd) else {
                    continue;
                };
                if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                    // The watch is gone (another file system's rmdir): its node stays
                    // until its parent tells its removal.
                    self.by_watch.remove(&event.wd);
                    if let Some(node) = self.nodes.get_mut(&id) {
                        node.watch = None;
                        let target = node.found_under;
                        self.let_go(target);
                    }
                    continue;
                }
                if !event.mask.contains(AddWatchFlags::IN_ISDIR) {
                    continue;
                }
                let (Some(name), Some(parent)) = (event.name, self.nodes.get(&id)) else {
                    continue;
                };
                let (target, path) = (parent.found_under, parent.path.join(name));
                if event.mask.contains(AddWatchFlags::IN_DELETE) {
                    let Some(&child) = self.by_path.get(&(target, path.clone())) else {
                        continue;
                    };
                    let now = (self.at(target, &path)).and_then(|at| fs::metadata(at).ok());
                    if now.is_some_and(|meta| meta.ino() == child) {
                        // The path still holds the cgroup known there: the one removed was
                        // made and removed at that path since (its creation found this
                        // one), its id unknown, its faults no one's.
                        self.vanished += 1;
                        continue;
                    }
                    // Its last faults may be routed by the next drains. Unwatched, the
                    // removals of those below it were not told.
                    match self.nodes.get(&child).is_some_and(|n| n.watch.is_some()) {
                        true => self.tombstones.push((child, monotonic_ns())),
                        false => {
                            let children = children.entry(target).or_default();
                            self.tombstone_below(target, child, children);
                        }
                    }
                    continue;
                }
                let Some(meta) = (self.at(target, &path)).and_then(|at| fs::metadata(at).ok())
                else {
                    // Made and removed since the last drain: its id unknown, its faults
                    // are no one's.
                    self.vanished += 1;
                    continue;
                };
                if !meta.is_dir() || self.nodes.contains_key(&meta.ino()) || !self.room(target) {
                    continue;
                }
                let watch = self.watch(target, &path).held();
                self.insert(meta.ino(), Some(id), target, path, watch);
                self.read_below(target, meta.ino());
                children.remove(&target);
            }
        }
    }
}

/// What is said when a watch is first refused for every target, for `refused`, with
/// `held` watches held and at most `cap`.
fn refused_message(refused: &str, held: usize, cap: usize) -> String {
    format!(
        "fleet attribution: watching targets' cgroups for new ones was refused ({refused}; \
         {held} watches held, at most {cap}): cgroups made below the unwatched ones are not \
         followed until a later drain watches them (raise fs.inotify.max_user_watches; the \
         fleet's loss line says how many are unwatched)"
    )
}

/// What is said when cgroup `tree`'s tree is first held to its share of `share` watches.
fn share_message(tree: &str, share: usize) -> String {
    format!(
        "fleet attribution: {tree}'s tree holds its share of watches, {share}, and the rest \
         are kept for the other targets: cgroups made below its unwatched ones are not \
         followed until a later drain watches them (raise fs.inotify.max_user_watches, or \
         lower --max-targets: each target is sure of half of it over --max-targets)"
    )
}

/// The most inotify watches the monitor holds: half the system's limit for its user
/// (`fs.inotify.max_user_watches`, shared with the user's other inotify users), 8,192's
/// half where it cannot be read.
fn watch_cap() -> usize {
    let limit = fs::read_to_string("/proc/sys/fs/inotify/max_user_watches")
        .ok()
        .and_then(|text| text.trim().parse::<usize>().ok())
        .unwrap_or(8_192);
    limit / 2
}

struct Target {
    /// When it started: a fault stamped before is not its.
    added_at: u64,
    queue: Arc<Queue>,
}

/// The targets, and where each cgroup and process goes: the drain thread's alone.
struct Routing {
    /// `None` where its paths would not be the system's (a cgroup namespace).
    mount: Option<CgroupMount>,
    trees: Trees,
    targets: HashMap<TargetId, Target>,
    pids: Pids,
    loss: FleetLoss,
}

impl Routing {
    /// Takes in the targets started and lets go of those ended since the last drain:
    /// the ended first (at --max-targets, one started in place of one ended is not one
    /// too many for the watches' shares), and one started and ended meanwhile never.
    fn apply(&mut self, changes: Changes) {
        let Changes { started, ended } = changes;
        for &id in &ended {
            self.remove(id);
        }
        for target in started {
            if !ended.contains(&target.id) {
                self.add(target);
            }
        }
    }

    fn new(mount: Option<CgroupMount>, trees: Trees) -> Routing {
        Routing {
            mount,
            trees,
            targets: HashMap::new(),
            pids: Pids::default(),
            loss: FleetLoss::default(),
        }
    }

    fn add(&mut self, new: NewTarget) {
        self.trees.add(new.id, new.dir, new.cgroup_id);
        let target = Target {
            added_at: new.added_at,
            queue: new.queue,
        };
        self.targets.insert(new.id, target);
        // A process seen in no target may be in this one.
        self.pids.retain(|_, target| target.is_some());
    }

    fn remove(&mut self, id: TargetId) {
        self.targets.remove(&id);
        self.trees.remove(id);
        self.pids.retain(|_, target| *target != Some(id));
    }

    /// Routes, in time order, the records stamped up to `horizon` (a little before the
    /// drain began: [`LATE_WRITE_MARGIN`]) and the losses; answers the rest, for the next
    /// drain. The trees are updated first: a cgroup made before a fault in it is told
    /// before.
    fn route_until(
        &mut self,
        horizon: u64,
        records: Vec<(Stream, Record)>,
    ) -> Vec<(Stream, Record)> {
        self.trees.update(horizon);
        self.loss.now.cgroups_unfollowed = self.trees.unfollowed;
        self.loss.now.cgroups_vanished = self.trees.vanished;
        self.loss.now.unwatched = self.trees.unwatched_now();
        self.loss.now.overflows = self.trees.overflows;
        self.loss.now.trees_behind = self.trees.behind;
        let (mut timed, losses): (Vec<_>, Vec<_>) =
            (records.into_iter()).partition(|(_, record)| record.time_ns().is_some());
        for (stream, record) in losses {
            self.route(stream, record);
        }
        // Stable: each ring's records stay in their order.
        timed.sort_by_key(|(_, record)| record.time_ns());
        // One rule with the attributor's: up to the horizon, inclusive.
        let later = timed.partition_point(|(_, record)| record.time_ns() <= Some(horizon));
        let held = timed.split_off(later);
        for (stream, record) in timed {
            self.route(stream, record);
        }
        held
    }

    fn route(&mut self, stream: Stream, record: Record) {
        let target = match record {
            // Not the system's pid: a task outside a pid namespace the events saw.
            Record::Sample { pid: 0, .. } => None,
            Record::Mmap(ref mmap) if mmap.pid == 0 => None,
            Record::Exec { pid: 0, .. }
            | Record::Fork { pid: 0, .. }
            | Record::Exit { pid: 0, .. } => None,
            Record::Sample {
                pid,
                cgroup,
                time_ns,
                ..
            } => {
                // Wherever it was, it is where its fault was taken: in the deepest target
                // started by then (one nested in it that started later leaves it the
                // enclosing one's).
                let targets = &self.targets;
                let started =
                    |id: TargetId| targets.get(&id).is_some_and(|t| time_ns >= t.added_at);
                let target = self.trees.owner_where(cgroup, started);
                self.pids.insert(pid, self.trees.owner(cgroup));
                target
            }
            Record::Mmap(ref mmap) => self.pid_target(mmap.pid, mmap.time_ns),
            Record::Exec { pid, time_ns } => {
                // Where a service starts: forked outside its cgroup, moved in, exec'd. One
                // gone already (its /proc unreadable, or its pid another's) stays where it
                // was known to be.
                let target = match self.proc_target(pid, time_ns) {
                    Some(found) => found,
                    None => self.pids.get(pid).flatten(),
                };
                self.pids.insert(pid, target);
                target
            }
            Record::Fork {
                pid, ppid, time_ns, ..
            } if pid != ppid => {
                let target = self.pid_target(ppid, time_ns);
                self.pids.insert(pid, target);
                target
            }
            // Gone: no /proc to look in.
            Record::Exit { pid, tid, .. } if pid == tid => self.pids.remove(pid).flatten(),
            Record::Lost(_) | Record::Overflowed if stream == Stream::Mappings => {
                self.loss.now.mappings += match record {
                    Record::Lost(n) => n,
                    _ => 1,
                };
                // A fork or exit may be among those lost: a pid's target is found anew.
                self.pids.clear();
                // Whose mappings were lost is unknown: every target's tables start again.
                for target in self.targets.values() {
                    lock(&target.queue).push(stream, Record::Overflowed);
                }
                return;
            }
            // Whose faults is unknown: the fleet's loss, not each target's.
            Record::Lost(n) => {
                self.loss.now.faults += n;
                return;
            }
            Record::Overflowed => return,
            // A thread's start or end changes no mapping.
            Record::Fork { .. } | Record::Exit { .. } => None,
        };
        if let Some(target) = target.and_then(|id| self.targets.get(&id)) {
            lock(&target.queue).push(stream, record);
        }
    }

    /// The target of process `pid`: remembered, or its cgroup's as `/proc/PID/cgroup`
    /// names it.
    fn pid_target(&mut self, pid: u32, time_ns: u64) -> Option<TargetId> {
        if let Some(known) = self.pids.get(pid) {
            return known;
        }
        let target = self.proc_target(pid, time_ns).flatten();
        self.pids.insert(pid, target);
        target
    }

    /// The target of process `pid` of a record stamped `time_ns`, as `/proc/PID/cgroup`
    /// says it now: `None` where it cannot be read (the process is gone), or where the
    /// process at that pid now started after the record (its pid was reused: another
    /// user's process's mappings must not reach a target's tables by it).
    fn proc_target(&self, pid: u32, time_ns: u64) -> Option<Option<TargetId>> {
        let mount = self.mount.as_ref()?;
        if started_after(pid, time_ns) {
            return None;
        }
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        let path = cgroup_of(&text)?;
        Some(mount.id_of(path).and_then(|id| self.trees.owner(id)))
    }
}

/// Whether the process at `pid` now, if any, started after `time_ns` (`CLOCK_MONOTONIC`),
/// a tick's rounding aside: a record of that time was another process's.
fn started_after(pid: u32, time_ns: u64) -> bool {
    let Ok(stat) = procstat::read(pid) else {
        return false;
    };
    let tick = procstat::ticks_to_ns();
    // Start times are ticks of CLOCK_BOOTTIME, which goes on through a suspend (read
    // here to a tick, within the tick allowed).
    let boot = procstat::boot_ticks().saturating_mul(tick);
    let suspended = boot.saturating_sub(monotonic_ns());
    stat.start.saturating_mul(tick) > time_ns.saturating_add(suspended).saturating_add(tick)
}

/// Whether `/proc/PID/cgroup` (its text) puts the perf_event controller on a v1
/// hierarchy (`N:...,perf_event,...:/path`, N not 0).
fn perf_event_on_v1(text: &str) -> bool {
    text.lines().any(|line| {
        let mut fields = line.splitn(3, ':');
        let (Some(hierarchy), Some(controllers)) = (fields.next(), fields.next()) else {
            return false;
        };
        hierarchy != "0" && controllers.split(',').any(|c| c == "perf_event")
    })
}

/// Whether the monitor is in the initial cgroup namespace (pid 1's, the host's where it
/// sees the host's pids): not where either is unreadable.
fn in_initial_cgroup_namespace() -> bool {
    match (
        fs::read_link("/proc/self/ns/cgroup"),
        fs::read_link("/proc/1/ns/cgroup"),
    ) {
        (Ok(own), Ok(init)) => own == init,
        _ => false,
    }
}

/// Whether `/proc/self/status` (its text) puts the process in the initial pid namespace:
/// its `NSpid` has one pid.
fn in_initial_pid_namespace(status: &str) -> bool {
    (status.lines())
        .find_map(|line| line.strip_prefix("NSpid:"))
        .is_some_and(|pids| pids.split_whitespace().count() == 1)
}

/// The cgroup v2 path of `/proc/PID/cgroup` (its text): its `0::` line, where there is
/// one (a cgroup named with a newline and `0::` could make a second: then none).
fn cgroup_of(text: &str) -> Option<&str> {
    let mut paths = text.lines().filter_map(|line| line.strip_prefix("0::"));
    let path = paths.next()?;
    paths.next().is_none().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::{FileId, PeriodTable};
    use crate::backend::procfs::perf::Mmap;
    use nix::fcntl::{open, OFlag};
    use nix::sys::stat::Mode;

    fn fault_at(pid: u32, cgroup: u64, time_ns: u64) -> Record {
        Record::Sample {
            ip: 0x1000,
            pid,
            tid: pid,
            time_ns,
            addr: 0x1800,
            cgroup,
        }
    }

    fn fault(pid: u32, cgroup: u64) -> Record {
        fault_at(pid, cgroup, 1)
    }

    fn mmap(pid: u32) -> Record {
        Record::Mmap(Mmap {
            pid,
            time_ns: 1,
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            file: FileId {
                major: 0,
                minor: 0,
                inode: 0,
            },
            exec: false,
            shared: false,
            name: "//anon".into(),
        })
    }

    const MAJOR: Stream = Stream::Faults(Kind::Major);

    /// A directory tree standing for cgroups: its directories' inode numbers are their ids.
    struct Tree(PathBuf);

    impl Tree {
        fn new(name: &str, dirs: &[&str]) -> Tree {
            let root = std::env::temp_dir().join(format!("pfprof-{name}-{}", std::process::id()));
            let _ = fs::remove_dir_all(&root);
            fs::create_dir_all(&root).unwrap();
            for dir in dirs {
                fs::create_dir_all(root.join(dir)).unwrap();
            }
            Tree(root)
        }

        fn id(&self, dir: &str) -> u64 {
            fs::metadata(self.0.join(dir)).unwrap().ino()
        }

        fn routing(&self) -> Routing {
            Routing::new(
                Some(CgroupMount::at(self.0.clone()).unwrap()),
                Trees::new(1).unwrap(),
            )
        }

        /// Target `dir`, started at `added_at`: its id is its cgroup's.
        fn add_at(
            &self,
            routing: &mut Routing,
            dir: &str,
            added_at: u64,
        ) -> (TargetId, Arc<Queue>) {
            let path = self.0.join(dir);
            let fd = open(
                &path,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .unwrap();
            let queue = Arc::new(Mutex::new(Waiting::new(&Arc::default())));
            let id = self.id(dir);
            routing.add(NewTarget {
                id,
                dir: fd,
                cgroup_id: id,
                added_at,
                queue: Arc::clone(&queue),
            });
            (id, queue)
        }

        fn add(&self, routing: &mut Routing, dir: &str) -> (TargetId, Arc<Queue>) {
            self.add_at(routing, dir, 0)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn taken(queue: &Queue) -> Vec<(Stream, Record)> {
        lock(queue).take()
    }

    fn pids(records: Vec<(Stream, Record)>) -> Vec<u32> {
        (records.into_iter())
            .filter_map(|(_, r)| match r {
                Record::Sample { pid, .. } => Some(pid),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_fault_goes_to_the_target_of_its_cgroup_or_of_an_ancestor_and_nowhere_else() {
        let tree = Tree::new("route", &["a/worker/inner", "b", "outside"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        let (_, b) = tree.add(&mut routing, "b");
        routing.route(MAJOR, fault(10, tree.id("a")));
        routing.route(MAJOR, fault(11, tree.id("a/worker/inner")));
        routing.route(MAJOR, fault(12, tree.id("b")));
        // Another user's process, in no target: dropped.
        routing.route(MAJOR, fault(13, tree.id("outside")));
        routing.route(MAJOR, fault(14, 1));
        // A task the events saw outside the monitor's pid namespace: no pid to go by.
        routing.route(MAJOR, fault(0, tree.id("a")));
        assert_eq!(pids(taken(&a)), [10, 11]);
        assert_eq!(pids(taken(&b)), [12]);
        // A faulting process's mappings follow it to its target; one in none is dropped.
        routing.route(Stream::Mappings, mmap(11));
        routing.route(Stream::Mappings, mmap(13));
        routing.route(Stream::Mappings, mmap(0));
        assert_eq!(taken(&a).len(), 1);
        assert!(taken(&b).is_empty());
    }

    #[test]
    fn an_unknown_cgroup_is_in_none_at_once_and_one_made_in_a_tree_is_told() {
        let tree = Tree::new("later", &["a", "outside"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        fs::create_dir(tree.0.join("a/new")).unwrap();
        fs::create_dir_all(tree.0.join("outside/many")).unwrap();
        // Not told yet: in none, and nothing read to find it.
        let followed = routing.trees.nodes.len();
        routing.route(MAJOR, fault(20, tree.id("outside/many")));
        assert_eq!(routing.trees.nodes.len(), followed);
        // Told before the drain's records are routed.
        let records = vec![(MAJOR, fault(21, tree.id("a/new")))];
        assert!(routing.route_until(u64::MAX, records).is_empty());
        assert_eq!(pids(taken(&a)), [21]);
        // Made, with a child, before its parent's creation is read: both followed.
        fs::create_dir_all(tree.0.join("a/deep/er")).unwrap();
        let records = vec![(MAJOR, fault(22, tree.id("a/deep/er")))];
        routing.route_until(u64::MAX, records);
        assert_eq!(pids(taken(&a)), [22]);
        // Made and removed between two drains: counted.
        fs::create_dir(tree.0.join("a/brief")).unwrap();
        fs::remove_dir(tree.0.join("a/brief")).unwrap();
        routing.route_until(u64::MAX, Vec::new());
        assert_eq!(routing.trees.vanished, 1);
        // Removed: its faults stamped before routed by the drain that reads its removal,
        // then forgotten.
        let removed = tree.id("a/new");
        fs::remove_dir(tree.0.join("a/new")).unwrap();
        routing.route_until(u64::MAX, vec![(MAJOR, fault(23, removed))]);
        assert_eq!(pids(taken(&a)), [23]);
        routing.route_until(u64::MAX, Vec::new());
        assert_eq!(routing.trees.nodes.len(), followed + 2);
    }

    /// The inotify watches the kernel holds for `inotify`: its fdinfo's lines.
    fn watches_held(inotify: &Inotify) -> usize {
        let info = fs::read_to_string(format!("/proc/self/fdinfo/{}", inotify.as_fd().as_raw_fd()));
        info.unwrap()
            .lines()
            .filter(|l| l.starts_with("inotify wd:"))
            .count()
    }

    #[test]
    fn a_targets_children_made_and_removed_thousands_of_times_on_cgroupfs_are_all_followed() {
        let Some(top) = crate::system::cgroup::test_cgroup_path("fleet-churn") else {
            return;
        };
        fs::create_dir(&top).unwrap();
        let mount = crate::system::cgroup::cgroup2_mounts()
            .into_iter()
            .next()
            .unwrap();
        let mut routing = Routing::new(
            Some(CgroupMount::at(mount).unwrap()),
            Trees::new(1).unwrap(),
        );
        let fd = open(
            &top,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let queue = Arc::new(Mutex::new(Waiting::new(&Arc::default())));
        let id = fs::metadata(&top).unwrap().ino();
        routing.add(NewTarget {
            id,
            dir: fd,
            cgroup_id: id,
            added_at: 0,
            queue: Arc::clone(&queue),
        });
        // cgroupfs tells a rmdir to the parent's watch alone: each child is forgotten, its
        // watch removed, and the tree's room is back.
        let child = top.join("child");
        for i in 0..5_000 {
            fs::create_dir(&child).unwrap();
            let records = vec![(MAJOR, fault(90, fs::metadata(&child).unwrap().ino()))];
            routing.route_until(u64::MAX, records);
            fs::remove_dir(&child).unwrap();
            routing.route_until(u64::MAX, Vec::new());
            assert_eq!(pids(taken(&queue)), [90], "child {i}");
        }
        for _ in 0..2 {
            routing.route_until(u64::MAX, Vec::new());
        }
        let trees = &routing.trees;
        assert_eq!(trees.found[&id], 1, "the target's cgroup alone");
        assert_eq!(
            (trees.nodes.len(), trees.by_watch.len(), trees.by_path.len()),
            (1, 1, 1)
        );
        assert_eq!(watches_held(&trees.inotify), 1);
        assert_eq!(trees.unfollowed, 0);
        routing.remove(id);
        fs::remove_dir(&top).unwrap();
    }

    #[test]
    fn a_watch_refused_is_counted_and_tried_again_and_what_was_made_meanwhile_is_read() {
        let tree = Tree::new("refused", &["a/b", "a/c"]);
        let mut routing = tree.routing();
        // Room for a's watch alone: b's and c's are refused.
        routing.trees.watch_cap = 1;
        let (_, a) = tree.add(&mut routing, "a");
        assert_eq!(routing.trees.watches_refused, 2);
        assert_eq!(routing.trees.unwatched_now().0, 2);
        fs::create_dir(tree.0.join("a/b/new")).unwrap();
        // Still no room: the cgroup made below an unwatched one is not followed yet, and
        // no watch is asked for (none could be held).
        routing.route_until(u64::MAX, vec![(MAJOR, fault(95, tree.id("a/b/new")))]);
        assert!(taken(&a).is_empty());
        assert_eq!(routing.trees.watches_refused, 2);
        // Room again: watched at the next drain, and what was made meanwhile read.
        routing.trees.watch_cap = 10;
        routing.route_until(u64::MAX, vec![(MAJOR, fault(96, tree.id("a/b/new")))]);
        assert_eq!(pids(taken(&a)), [96]);
        assert!((routing.trees.unwatched_now().0 == 0));
        fs::create_dir(tree.0.join("a/c/later")).unwrap();
        routing.route_until(u64::MAX, vec![(MAJOR, fault(97, tree.id("a/c/later")))]);
        assert_eq!(pids(taken(&a)), [97]);
    }

    #[test]
    fn a_cgroup_removed_while_unwatched_is_forgotten_and_keeps_no_other_from_being_watched() {
        let stale: Vec<String> = (0..16).map(|i| format!("a/p/d{i}")).collect();
        let mut dirs: Vec<&str> = stale.iter().map(String::as_str).collect();
        dirs.push("a/s");
        let tree = Tree::new("stale", &dirs);
        let mut routing = tree.routing();
        // Room for a's watch alone: the others are refused.
        routing.trees.watch_cap = 1;
        let (_, a) = tree.add(&mut routing, "a");
        assert_eq!(routing.trees.unwatched_now().0, 18);
        // Removed below an unwatched cgroup: not told.
        for dir in &stale {
            fs::remove_dir(tree.0.join(dir)).unwrap();
        }
        // Room again: the removed ones are let go and every other one is watched.
        routing.trees.watch_cap = 100;
        routing.route_until(u64::MAX, Vec::new());
        assert!((routing.trees.unwatched_now().0 == 0));
        assert!(routing.trees.nodes[&tree.id("a/s")].watch.is_some());
        assert!(routing.trees.nodes[&tree.id("a/p")].watch.is_some());
        fs::create_dir(tree.0.join("a/s/new")).unwrap();
        routing.route_until(u64::MAX, vec![(MAJOR, fault(40, tree.id("a/s/new")))]);
        assert_eq!(pids(taken(&a)), [40]);
        // Forgotten: a, p, s and new are what the tree holds.
        assert_eq!(routing.trees.nodes.len(), 4);
        assert_eq!(routing.trees.found[&tree.id("a")], 4);
    }

    #[test]
    fn a_cgroup_removed_and_made_again_under_one_name_between_two_drains_stays_followed() {
        let tree = Tree::new("reused", &["a/x"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        let first = tree.id("a/x");
        // Restarted twice before the drain reads the events: the last one stays. Each
        // removed one held open, so that its inode number is not the next one's, as a
        // cgroup's id never is.
        let mut held = Vec::new();
        for _ in 0..2 {
            held.push(fs::File::open(tree.0.join("a/x")).unwrap());
            fs::remove_dir(tree.0.join("a/x")).unwrap();
            fs::create_dir(tree.0.join("a/x")).unwrap();
        }
        let last = tree.id("a/x");
        assert_ne!(first, last);
        routing.route_until(u64::MAX, vec![(MAJOR, fault(30, first))]);
        assert_eq!(pids(taken(&a)), [30]);
        // The first is forgotten at the next drain; the last is still the target's.
        routing.route_until(u64::MAX, vec![(MAJOR, fault(31, last))]);
        routing.route_until(u64::MAX, vec![(MAJOR, fault(32, last))]);
        assert_eq!(pids(taken(&a)), [31, 32]);
        assert!(!routing.trees.nodes.contains_key(&first));
        assert!(routing.trees.nodes[&last].watch.is_some());
        // The middle one, never known, is counted.
        assert_eq!(routing.trees.vanished, 1);
    }

    #[test]
    fn a_targets_tree_takes_its_share_of_watches_shallower_first_and_leaves_the_others_theirs() {
        let tree = Tree::new(
            "shares",
            &["big/a/deep", "big/b", "big/c", "big/d", "small/x"],
        );
        let mut routing = tree.routing();
        // Six watches for the monitor, three for each of two targets: without shares the
        // first target's tree would take all but one.
        routing.trees.watch_cap = 6;
        routing.trees.watch_share = 3;
        routing.trees.max_targets = 2;
        let (_, big) = tree.add(&mut routing, "big");
        let watched =
            |routing: &Routing, dir: &str| routing.trees.nodes[&tree.id(dir)].watch.is_some();
        assert!(watched(&routing, "big"));
        assert!(
            !watched(&routing, "big/a/deep"),
            "a deeper one before a shallower one"
        );
        let first_level = ["big/a", "big/b", "big/c", "big/d"];
        let held: Vec<&str> = (first_level.iter().copied())
            .filter(|dir| watched(&routing, dir))
            .collect();
        assert_eq!(held.len(), 2);
        assert_eq!(routing.trees.unwatched_now(), (3, 1));
        // A target started later has its share: a cgroup made in its tree is followed.
        let (_, small) = tree.add(&mut routing, "small");
        assert!(watched(&routing, "small") && watched(&routing, "small/x"));
        fs::create_dir(tree.0.join("small/x/new")).unwrap();
        routing.route_until(u64::MAX, vec![(MAJOR, fault(50, tree.id("small/x/new")))]);
        assert_eq!(pids(taken(&small)), [50]);
        // One of the first's watched ones removed (not the one with a child): its watch
        // goes to another of its first level, not to the deeper one.
        let removed = held.iter().copied().find(|dir| *dir != "big/a").unwrap();
        fs::remove_dir(tree.0.join(removed)).unwrap();
        routing.route_until(u64::MAX, Vec::new());
        routing.route_until(u64::MAX, Vec::new());
        assert_eq!(routing.trees.unwatched_now(), (2, 1));
        assert!(!watched(&routing, "big/a/deep"));
        assert_eq!(
            (first_level.iter().copied())
                .filter(|dir| *dir != removed && watched(&routing, dir))
                .count(),
            2
        );
        routing.route_until(u64::MAX, vec![(MAJOR, fault(51, tree.id("big")))]);
        assert_eq!(pids(taken(&big)), [51]);
    }

    #[test]
    fn a_targets_share_of_watches_goes_to_each_level_before_the_next() {
        let tree = Tree::new("levels", &["t/a/x/y", "t/b/z/w"]);
        let mut routing = tree.routing();
        routing.trees.watch_cap = 10;
        routing.trees.watch_share = 5;
        routing.trees.max_targets = 2;
        tree.add(&mut routing, "t");
        let watched = |dir: &str| routing.trees.nodes[&tree.id(dir)].watch.is_some();
        assert!(["t", "t/a", "t/b", "t/a/x", "t/b/z"]
            .iter()
            .all(|dir| watched(dir)));
        assert!(!watched("t/a/x/y") && !watched("t/b/z/w"));
    }

    #[test]
    fn after_an_overflow_every_tree_is_read_again_a_few_a_drain_one_at_least() {
        let tree = Tree::new("overflow", &["a/x", "b/y", "c/z"]);
        let mut routing = tree.routing();
        for dir in ["a", "b", "c"] {
            tree.add(&mut routing, dir);
        }
        let trees = &mut routing.trees;
        trees.overflowed();
        trees.overflowed();
        assert_eq!((trees.stale.len(), trees.overflows), (3, 2));
        // Out of time: one all the same, the others left for the next drains.
        assert!(!trees.read_stale(Instant::now()));
        assert_eq!(trees.stale.len(), 2);
        assert!(trees.read_stale(Instant::now() + Duration::from_secs(60)));
        assert!(trees.stale.is_empty());
        // Each read again as it was: its cgroups still followed.
        assert_eq!(trees.nodes.len(), 6);
        assert!(trees.owner(tree.id("b/y")).is_some());
    }

    #[test]
    fn the_fleets_loss_line_says_what_was_missed_in_single_spaces() {
        let nothing = Losses::default().clauses().join("; ");
        assert_eq!(
            nothing,
            "0 cgroups of 0 targets unwatched now (those made below them not followed)"
        );
        let some = Losses {
            faults: 3,
            cut_short: 2,
            trees_behind: 1,
            unwatched: (7, 1),
            ..Losses::default()
        };
        let line = some.clauses().join("; ");
        assert!(!line.contains("  ") && !line.contains('\n'), "{line}");
        assert!(line.starts_with("3 fault records and 0 mapping records lost"));
        assert!(line.contains("; 2 last tables of targets cut short (no drain past their end within 200 ms: the drain \
             thread held up or stopped); 1 drains"));
        assert!(line.contains("not attributed), since the monitor started; 7 cgroups of 1 targets"));
        assert!(!line.contains("overflows") && !line.contains("made and removed"));
        // Said again only for something new: not a cgroup more or less unwatched in a
        // target already counted.
        let one_more = Losses {
            unwatched: (8, 1),
            ..some
        };
        assert!(!one_more.changed_from(&some));
        let another_target = Losses {
            unwatched: (8, 2),
            ..some
        };
        assert!(another_target.changed_from(&some));
        assert!(Losses { faults: 4, ..some }.changed_from(&some));
    }

    #[test]
    fn a_target_alone_borrows_the_watches_no_other_is_sure_of_and_the_next_has_its_share() {
        let tree = Tree::new("lent", &["big/a", "big/b", "big/c", "big/d", "small/x/y"]);
        let mut routing = tree.routing();
        routing.trees.watch_cap = 8;
        routing.trees.watch_share = 3;
        routing.trees.max_targets = 2;
        let (big, _) = tree.add(&mut routing, "big");
        // Its share and two lent: three kept for the other target there can be.
        assert_eq!(routing.trees.held[&big], 5);
        let (small, _) = tree.add(&mut routing, "small");
        assert_eq!(routing.trees.held[&small], 3);
        assert_eq!(routing.trees.unwatched_now(), (0, 0));
        assert_eq!(routing.trees.unfilled, 0);
        // Both gone: every watch let go of, nothing kept but the shares to come.
        routing.remove(small);
        routing.remove(big);
        assert!(routing.trees.by_watch.is_empty());
        assert_eq!(routing.trees.unfilled, 0);
        assert_eq!(routing.trees.reserved(), 6);
    }

    #[test]
    fn a_nested_target_started_later_watches_its_tree_on_its_own_share() {
        let tree = Tree::new("nested-share", &["outer/a", "outer/pod/c1", "outer/pod/c2"]);
        let mut routing = tree.routing();
        // No slack to lend: 90 watches, 3 for each of 30 targets.
        routing.trees.watch_cap = 90;
        routing.trees.watch_share = 3;
        routing.trees.max_targets = 30;
        let (outer, _) = tree.add(&mut routing, "outer");
        // outer, a and pod: its share.
        assert_eq!(routing.trees.held[&outer], 3);
        let (pod, pod_queue) = tree.add(&mut routing, "outer/pod");
        // The pod's tree is its own: pod, c1 and c2 on its share; outer's given back.
        assert_eq!(routing.trees.held[&pod], 3);
        assert_eq!(routing.trees.held[&outer], 2);
        assert_eq!(routing.trees.unwatched_now(), (0, 0));
        fs::create_dir(tree.0.join("outer/pod/c1/new")).unwrap();
        let new = tree.id("outer/pod/c1/new");
        routing.route_until(u64::MAX, vec![(MAJOR, fault(60, new))]);
        assert_eq!(pids(taken(&pod_queue)), [60]);
        // At its end its tree is the enclosing target's again.
        routing.remove(pod);
        assert_eq!(routing.trees.owner(new), Some(outer));
    }

    #[test]
    fn an_unwatched_cgroup_made_again_at_its_path_is_followed_as_the_new_one() {
        let tree = Tree::new("remade", &["a/x"]);
        let mut routing = tree.routing();
        routing.trees.watch_cap = 1;
        routing.trees.watch_share = 1;
        let (a_id, a) = tree.add(&mut routing, "a");
        let old = tree.id("a/x");
        assert!(routing.trees.nodes[&old].watch.is_none());
        // Removed and made again (the old one held open: its inode number is not the
        // new one's, as a cgroup's id never is), then watches to spare.
        let _held = fs::File::open(tree.0.join("a/x")).unwrap();
        fs::remove_dir(tree.0.join("a/x")).unwrap();
        fs::create_dir(tree.0.join("a/x")).unwrap();
        let new = tree.id("a/x");
        routing.trees.watch_cap = 10;
        routing.trees.watch_share = 10;
        routing.route_until(u64::MAX, Vec::new());
        routing.route_until(u64::MAX, Vec::new());
        assert!(!routing.trees.nodes.contains_key(&old));
        assert!(routing.trees.nodes[&new].watch.is_some());
        assert_eq!(routing.trees.held[&a_id], 2);
        // A cgroup made in the new one is told.
        fs::create_dir(tree.0.join("a/x/y")).unwrap();
        routing.route_until(u64::MAX, vec![(MAJOR, fault(61, tree.id("a/x/y")))]);
        assert_eq!(pids(taken(&a)), [61]);
    }

    #[test]
    fn a_cgroup_made_again_at_an_unwatched_ones_path_is_followed_whatever_the_drains_order() {
        let tree = Tree::new("remade-later", &["a/x"]);
        let mut routing = tree.routing();
        // a's watch alone: x unwatched.
        routing.trees.watch_cap = 1;
        routing.trees.watch_share = 1;
        let (_, a) = tree.add(&mut routing, "a");
        let _held = fs::File::open(tree.0.join("a/x")).unwrap();
        fs::remove_dir(tree.0.join("a/x")).unwrap();
        fs::create_dir(tree.0.join("a/x")).unwrap();
        let new = tree.id("a/x");
        // Drains as the drain thread makes them: each routes up to a little before it
        // began, so a removal read in one is buried two later.
        let drain = |routing: &mut Routing, records| {
            routing.route_until(monotonic_ns() - LATE_WRITE_MARGIN, records)
        };
        drain(&mut routing, Vec::new());
        // Room again only now, the old one not buried yet.
        routing.trees.watch_cap = 10;
        routing.trees.watch_share = 10;
        for _ in 0..3 {
            drain(&mut routing, Vec::new());
        }
        assert!(routing.trees.nodes[&new].watch.is_some());
        fs::create_dir(tree.0.join("a/x/y")).unwrap();
        drain(&mut routing, Vec::new());
        drain(
            &mut routing,
            vec![(MAJOR, fault_at(62, tree.id("a/x/y"), 1))],
        );
        assert_eq!(pids(taken(&a)), [62]);
    }

    #[test]
    fn a_tree_read_again_keeps_its_removed_cgroups_until_their_last_faults_are_routed() {
        let tree = Tree::new("kept", &["a/x"]);
        let mut routing = tree.routing();
        let (a_id, a) = tree.add(&mut routing, "a");
        let x = tree.id("a/x");
        let _held = fs::File::open(tree.0.join("a/x")).unwrap();
        fs::remove_dir(tree.0.join("a/x")).unwrap();
        let horizon = monotonic_ns() - LATE_WRITE_MARGIN;
        // Its removal read; its last fault, stamped before, not routed yet.
        routing.route_until(horizon, Vec::new());
        routing.trees.read_again(a_id);
        routing.route_until(u64::MAX, vec![(MAJOR, fault_at(63, x, 1))]);
        assert_eq!(pids(taken(&a)), [63]);
        // Buried once routed past its removal.
        routing.route_until(u64::MAX, Vec::new());
        assert!(!routing.trees.nodes.contains_key(&x));
        assert_eq!(routing.trees.found[&a_id], 1);
    }

    #[test]
    fn a_target_started_and_ended_between_two_drains_is_never_taken_in() {
        let tree = Tree::new("brief", &["a", "b"]);
        let mut routing = tree.routing();
        let (b, _) = tree.add(&mut routing, "b");
        let new = |dir: &str| NewTarget {
            id: tree.id(dir),
            dir: open(
                &tree.0.join(dir),
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .unwrap(),
            cgroup_id: tree.id(dir),
            added_at: 0,
            queue: Arc::new(Mutex::new(Waiting::new(&Arc::default()))),
        };
        let reserved = routing.trees.reserved();
        routing.apply(Changes {
            started: vec![new("a")],
            ended: vec![tree.id("a"), b],
        });
        assert!(routing.targets.is_empty());
        assert!(routing.trees.roots.is_empty() && routing.trees.nodes.is_empty());
        assert!(routing.trees.by_watch.is_empty());
        // Both shares back among those to come.
        assert!(routing.trees.reserved() > reserved);
    }

    #[test]
    fn a_cgroup_made_again_at_a_known_ones_path_is_not_read_as_its_children() {
        let tree = Tree::new("not-its", &["a/x/c"]);
        let mut routing = tree.routing();
        let (a_id, _) = tree.add(&mut routing, "a");
        let old = tree.id("a/x");
        let _held = fs::File::open(tree.0.join("a/x")).unwrap();
        fs::remove_dir(tree.0.join("a/x/c")).unwrap();
        fs::remove_dir(tree.0.join("a/x")).unwrap();
        fs::create_dir_all(tree.0.join("a/x/d")).unwrap();
        routing.trees.read_below(a_id, old);
        let found = |path: &str| {
            routing
                .trees
                .by_path
                .contains_key(&(a_id, PathBuf::from(path)))
        };
        assert!(found("x/c"), "the old one was read with the tree");
        assert!(!found("x/d"), "read below the old one");
    }

    #[test]
    fn a_nested_target_started_on_a_removed_cgroup_leaves_no_watch_of_the_enclosing_ones() {
        let tree = Tree::new("nested-removed", &["o/n/k"]);
        let mut routing = tree.routing();
        let (o, _) = tree.add(&mut routing, "o");
        let n = tree.id("o/n");
        let fd = open(
            &tree.0.join("o/n"),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .unwrap();
        let _kept = fs::File::open(tree.0.join("o/n/k")).unwrap();
        fs::remove_dir(tree.0.join("o/n/k")).unwrap();
        fs::remove_dir(tree.0.join("o/n")).unwrap();
        // Their removals read, not buried yet, when a target on n starts and ends.
        routing.route_until(monotonic_ns() - LATE_WRITE_MARGIN, Vec::new());
        routing.add(NewTarget {
            id: 99,
            dir: fd,
            cgroup_id: n,
            added_at: 0,
            queue: Arc::new(Mutex::new(Waiting::new(&Arc::default()))),
        });
        routing.remove(99);
        for _ in 0..3 {
            routing.route_until(u64::MAX, Vec::new());
        }
        // Every watch of the removed ones let go of: o's own alone.
        assert_eq!(routing.trees.nodes.len(), 1);
        assert_eq!(routing.trees.by_watch.len(), 1);
        assert_eq!(routing.trees.held[&o], 1);
    }

    #[test]
    fn the_watch_refused_message_is_one_line_of_single_spaces() {
        let message = refused_message("the monitor's cap", 4_096, 4_096);
        assert!(!message.contains("  ") && !message.contains('\n'));
        assert!(message.contains("refused (the monitor's cap; 4096 watches held, at most 4096)"));
        let message = share_message("/sys/fs/cgroup/a", 16);
        assert!(!message.contains("  ") && !message.contains('\n'));
        assert!(message.contains("/sys/fs/cgroup/a's tree holds its share of watches, 16,"));
    }

    #[test]
    fn a_cgroup_made_again_at_a_targets_path_is_not_the_targets() {
        let tree = Tree::new("again", &["a"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        fs::remove_dir(tree.0.join("a")).unwrap();
        fs::create_dir_all(tree.0.join("a/child")).unwrap();
        routing.route_until(u64::MAX, vec![(MAJOR, fault(23, tree.id("a/child")))]);
        assert!(taken(&a).is_empty());
    }

    #[test]
    fn a_tree_past_its_bound_is_cut_and_takes_no_other_targets_room() {
        let mut dirs: Vec<String> = (0..TREE_DIRS + 5).map(|i| format!("big/c{i}")).collect();
        dirs.push("small/child".into());
        let dirs: Vec<&str> = dirs.iter().map(String::as_str).collect();
        let tree = Tree::new("bound", &dirs);
        let mut routing = tree.routing();
        let (big, _) = tree.add(&mut routing, "big");
        let (_, small) = tree.add(&mut routing, "small");
        assert_eq!(routing.trees.found[&big], TREE_DIRS);
        assert!(routing.trees.unfollowed > 0);
        assert!(routing.trees.cut.contains(&big));
        routing.route(MAJOR, fault(24, tree.id("small/child")));
        assert_eq!(pids(taken(&small)), [24]);
    }

    #[test]
    fn a_fault_in_nested_targets_is_the_deepests_alone_whichever_started_first() {
        let tree = Tree::new("nested", &["outer/inner/child", "outer/other"]);
        for inner_first in [false, true] {
            let mut routing = tree.routing();
            let ((_, outer), (inner_id, inner)) = if inner_first {
                let inner = tree.add(&mut routing, "outer/inner");
                (tree.add(&mut routing, "outer"), inner)
            } else {
                let outer = tree.add(&mut routing, "outer");
                (outer, tree.add(&mut routing, "outer/inner"))
            };
            routing.route(MAJOR, fault(30, tree.id("outer/inner/child")));
            routing.route(MAJOR, fault(31, tree.id("outer/other")));
            assert_eq!(pids(taken(&inner)), [30], "inner first: {inner_first}");
            assert_eq!(pids(taken(&outer)), [31], "inner first: {inner_first}");
            // The inner one ended: its tree is the outer's again.
            routing.remove(inner_id);
            routing.route(MAJOR, fault(32, tree.id("outer/inner/child")));
            assert_eq!(pids(taken(&outer)), [32], "inner first: {inner_first}");
        }
        // The outer one ended: the inner keeps its own.
        let mut routing = tree.routing();
        let (outer_id, _) = tree.add(&mut routing, "outer");
        let (_, inner) = tree.add(&mut routing, "outer/inner");
        routing.remove(outer_id);
        routing.route(MAJOR, fault(33, tree.id("outer/inner/child")));
        routing.route(MAJOR, fault(34, tree.id("outer/other")));
        assert_eq!(pids(taken(&inner)), [33]);
    }

    #[test]
    fn a_nested_targets_tree_read_again_is_given_back_to_the_enclosing_one_at_its_end() {
        let tree = Tree::new("nested-again", &["outer/inner/child"]);
        let mut routing = tree.routing();
        // The inner one first: its cgroup is of its own tree, not found in the outer's.
        let (inner_id, _) = tree.add(&mut routing, "outer/inner");
        let (_, outer) = tree.add(&mut routing, "outer");
        // As after an inotify queue overflow.
        routing.trees.read_again(inner_id);
        routing.remove(inner_id);
        routing.route(MAJOR, fault(35, tree.id("outer/inner/child")));
        assert_eq!(pids(taken(&outer)), [35]);
    }

    #[test]
    fn a_fault_from_before_a_nested_target_started_is_the_enclosing_targets() {
        let tree = Tree::new("nested-later", &["outer/inner"]);
        let mut routing = tree.routing();
        let (_, outer) = tree.add_at(&mut routing, "outer", 10);
        let (_, inner) = tree.add_at(&mut routing, "outer/inner", 100);
        routing.route(MAJOR, fault_at(41, tree.id("outer/inner"), 5));
        routing.route(MAJOR, fault_at(42, tree.id("outer/inner"), 50));
        routing.route(MAJOR, fault_at(43, tree.id("outer/inner"), 100));
        assert_eq!(pids(taken(&outer)), [42], "before either: no one's");
        assert_eq!(pids(taken(&inner)), [43]);
    }

    #[test]
    fn a_fault_from_before_a_target_started_is_not_its_but_a_mapping_is() {
        let tree = Tree::new("added", &["a"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add_at(&mut routing, "a", 100);
        routing.route(MAJOR, fault_at(40, tree.id("a"), 99));
        routing.route(Stream::Mappings, mmap(40));
        routing.route(MAJOR, fault_at(40, tree.id("a"), 100));
        let records = taken(&a);
        assert!(matches!(
            records[..],
            [
                (Stream::Mappings, Record::Mmap(_)),
                (MAJOR, Record::Sample { time_ns: 100, .. })
            ]
        ));
    }

    #[test]
    fn records_are_routed_in_time_order_across_rings_and_those_after_the_drain_began_wait() {
        let tree = Tree::new("order", &["a"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        let exit = Record::Exit {
            pid: 50,
            tid: 50,
            time_ns: 5,
        };
        // CPU 0's ring first: the exit; then CPU 1's: a fault before it, one after the
        // drain began.
        let records = vec![
            (Stream::Mappings, exit),
            (MAJOR, fault_at(50, tree.id("a"), 3)),
            (MAJOR, fault_at(51, tree.id("a"), 20)),
        ];
        let held = routing.route_until(10, records);
        assert_eq!(pids(taken(&a)), [50]);
        assert_eq!(
            routing.pids.get(50),
            None,
            "an exited pid's target is forgotten"
        );
        assert_eq!(pids(held.clone()), [51]);
        routing.route_until(30, held);
        assert_eq!(pids(taken(&a)), [51]);
    }

    #[test]
    fn a_forked_child_goes_with_its_parent_and_an_exited_pid_is_forgotten() {
        let tree = Tree::new("fork", &["a", "b"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        let (_, b) = tree.add(&mut routing, "b");
        routing.route(MAJOR, fault(60, tree.id("a")));
        let fork = Record::Fork {
            pid: 61,
            ppid: 60,
            time_ns: 2,
        };
        routing.route(Stream::Mappings, fork);
        routing.route(Stream::Mappings, mmap(61));
        let exit = Record::Exit {
            pid: 61,
            tid: 61,
            time_ns: 3,
        };
        routing.route(Stream::Mappings, exit);
        assert_eq!(taken(&a).len(), 4);
        assert!(taken(&b).is_empty());
        assert_eq!(routing.pids.get(61), None);
    }

    #[test]
    fn a_fault_rings_loss_is_the_fleets_a_mapping_rings_makes_every_target_forget() {
        let tree = Tree::new("loss", &["a", "b"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        let (_, b) = tree.add(&mut routing, "b");
        routing.route(MAJOR, fault(70, tree.id("a")));
        taken(&a);
        routing.route(MAJOR, Record::Lost(5));
        assert_eq!(routing.loss.now.faults, 5);
        assert!(
            taken(&a).is_empty() && taken(&b).is_empty(),
            "not each target's lost"
        );
        routing.route(Stream::Mappings, Record::Lost(2));
        assert_eq!(routing.loss.now.mappings, 2);
        for queue in [&a, &b] {
            assert!(matches!(
                taken(queue)[..],
                [(Stream::Mappings, Record::Lost(1))]
            ));
        }
        assert_eq!(
            routing.pids.get(70),
            None,
            "a lost fork leaves no pid's target trusted"
        );
    }

    #[test]
    fn a_process_moved_into_a_target_before_its_exec_is_found_there_at_its_exec() {
        // This process's cgroup as /proc/self/cgroup names it, made under a tree that
        // stands for the mount.
        let text = fs::read_to_string("/proc/self/cgroup").unwrap();
        let own = cgroup_of(&text).unwrap().trim_start_matches('/').to_owned();
        let tree = Tree::new("exec", &[&own]);
        let mut routing = tree.routing();
        let pid = std::process::id();
        let (_, target) = tree.add(&mut routing, &own);
        // Seen outside every target first (the fork of a service manager).
        routing.pids.insert(pid, None);
        routing.route(Stream::Mappings, mmap(pid));
        // An exec before this process started was another's, whose pid this one took
        // since: it is not found where this one is.
        routing.route(Stream::Mappings, Record::Exec { pid, time_ns: 2 });
        routing.route(Stream::Mappings, mmap(pid));
        assert!(taken(&target).is_empty());
        let exec = Record::Exec {
            pid,
            time_ns: monotonic_ns(),
        };
        routing.route(Stream::Mappings, exec);
        routing.route(Stream::Mappings, mmap(pid));
        assert_eq!(taken(&target).len(), 2);
        // In a cgroup namespace of its own, the monitor does not go by /proc's paths.
        routing.mount = None;
        routing.pids.insert(pid, None);
        let exec = Record::Exec {
            pid,
            time_ns: monotonic_ns(),
        };
        routing.route(Stream::Mappings, exec);
        routing.route(Stream::Mappings, mmap(pid));
        assert!(taken(&target).is_empty());
    }

    #[test]
    fn a_process_gone_before_its_exec_is_routed_stays_in_its_target() {
        let tree = Tree::new("gone", &["a"]);
        let mut routing = tree.routing();
        let (a_id, a) = tree.add(&mut routing, "a");
        // Above pid_max: no /proc to read.
        let pid = 1 << 23;
        routing.pids.insert(pid, Some(a_id));
        routing.route(Stream::Mappings, Record::Exec { pid, time_ns: 2 });
        routing.route(Stream::Mappings, mmap(pid));
        assert_eq!(taken(&a).len(), 2);
    }

    #[test]
    fn a_process_moved_out_of_a_target_is_no_more_its() {
        let tree = Tree::new("moved", &["a", "outside"]);
        let mut routing = tree.routing();
        let (_, a) = tree.add(&mut routing, "a");
        routing.route(MAJOR, fault(80, tree.id("a")));
        routing.route(MAJOR, fault(80, tree.id("outside")));
        routing.route(Stream::Mappings, mmap(80));
        assert_eq!(taken(&a).len(), 1);
    }

    #[test]
    fn a_proc_cgroup_path_out_of_the_mount_is_none() {
        let tree = Tree::new("mount", &["a"]);
        std::os::unix::fs::symlink("/proc/self", tree.0.join("a/proc")).unwrap();
        let mount = CgroupMount::at(tree.0.clone()).unwrap();
        assert_eq!(mount.id_of("/a"), Some(tree.id("a")));
        assert_eq!(mount.id_of("/../a"), None);
        assert_eq!(mount.id_of("/a/../a"), None);
        // Another file system's directory: not a cgroup of the mount's.
        assert_eq!(mount.id_of("/a/proc"), None);
        assert_eq!(cgroup_of("0::/a\n"), Some("/a"));
        assert_eq!(cgroup_of("0::/a\n0::/b\n"), None, "a name with a newline");
        assert_eq!(cgroup_of("1:name=systemd:/x\n"), None);
    }

    #[test]
    fn the_system_and_the_monitors_namespaces_are_told_apart() {
        assert!(!perf_event_on_v1("0::/system.slice/db.service\n"));
        assert!(!perf_event_on_v1("4:memory:/x\n0::/x\n"));
        assert!(perf_event_on_v1("7:cpu,perf_event:/x\n0::/x\n"));
        assert!(in_initial_pid_namespace("Pid:\t7\nNSpid:\t7\n"));
        assert!(!in_initial_pid_namespace("Pid:\t7\nNSpid:\t7\t1\n"));
        assert!(!in_initial_pid_namespace("Pid:\t7\n"));
    }

    #[test]
    fn a_sampler_waits_for_the_drain_it_asks_for_until_its_deadline_and_not_again_in_vain() {
        let (wake, woken) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared::new(1, true, wake));
        let drained = |at, stopped| Drained {
            at,
            stopped,
            waited_in_vain: false,
        };
        // No drain comes: the last one's time, after the deadline, cut short.
        let asked = Instant::now();
        assert_eq!(shared.drained_after(10, asked + DRAIN_WAIT), (0, false));
        assert!(asked.elapsed() >= DRAIN_WAIT);
        assert!(
            (&woken).read(&mut [0; 8]).unwrap() > 0,
            "the drain thread is woken"
        );
        // The drain thread is held up: the next last tables do not wait for it again,
        // whatever their deadline.
        let asked = Instant::now();
        assert_eq!(
            shared.drained_after(10, asked + 25 * DRAIN_WAIT),
            (0, false)
        );
        assert!(asked.elapsed() < 10 * DRAIN_WAIT, "waited again in vain");
        assert_eq!(shared.cut_short.load(Ordering::Relaxed), 2);
        // It drains again (not far enough): then one comes, on being asked.
        shared.publish(drained(5, false));
        let drainer = Arc::clone(&shared);
        let drain = thread::spawn(move || {
            (&woken).read_exact(&mut [0; 1]).unwrap();
            drainer.publish(drained(20, false));
        });
        assert_eq!(
            shared.drained_after(10, Instant::now() + 10 * DRAIN_WAIT),
            (20, true)
        );
        drain.join().unwrap();
        // Already past: no wait, no wake.
        assert_eq!(shared.drained_after(15, Instant::now()), (20, true));
        shared.publish(drained(20, true));
        let asked = Instant::now();
        assert_eq!(
            shared.drained_after(30, asked + 25 * DRAIN_WAIT),
            (20, false)
        );
        assert!(
            asked.elapsed() < 10 * DRAIN_WAIT,
            "a stopped drain is not waited for"
        );
    }

    /// A fleet's target's attributor over a queue the test fills, the state the test
    /// publishes its drains in, and the drain thread's end of the wake socket.
    fn attributed_target() -> (
        Arc<Shared>,
        Arc<Queue>,
        super::super::attribute::Attributor,
        UnixStream,
    ) {
        use super::super::attribute::{Attributor, FaultSource};
        let (wake, woken) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared::new(1, true, wake));
        let queue = Arc::new(Mutex::new(Waiting::new(&shared.all_waiting)));
        let target = TargetFaults {
            shared: Arc::clone(&shared),
            id: 1,
            queue: Arc::clone(&queue),
        };
        (
            shared,
            queue,
            Attributor::new(FaultSource::Fleet(target)),
            woken,
        )
    }

    #[test]
    fn a_targets_periods_take_what_was_drained_without_waiting_and_its_last_all_to_its_end() {
        use super::super::attribute::Ending;
        let (shared, queue, mut attributor, woken) = attributed_target();
        let pid = std::process::id();
        let route = |times: &[u64]| {
            for &t in times {
                lock(&queue).push(MAJOR, fault_at(pid, 1, t));
            }
        };
        let majors = |table: PeriodTable| table.recorded().major;
        // Drained up to 20: the fault at 25 is the next period's, though before its end.
        route(&[5, 15, 25]);
        shared.publish(Drained {
            at: 20,
            stopped: false,
            waited_in_vain: false,
        });
        assert_eq!(majors(attributor.finish(30, Vec::new(), Ending::No)), 2);
        // Drained up to 40, the period ends at 32: 35 waits.
        route(&[35]);
        shared.publish(Drained {
            at: 40,
            stopped: false,
            waited_in_vain: false,
        });
        assert_eq!(majors(attributor.finish(32, Vec::new(), Ending::No)), 1);
        woken.set_nonblocking(true).unwrap();
        assert!(
            (&woken).read(&mut [0; 8]).is_err(),
            "a period asked to drain"
        );
        woken.set_nonblocking(false).unwrap();
        // The last table waits for a drain past its end, which routes 45 (and 70, after
        // the end: none of its).
        let drainer = Arc::clone(&shared);
        let queue_of_drain = Arc::clone(&queue);
        let drain = thread::spawn(move || {
            (&woken).read_exact(&mut [0; 1]).unwrap();
            for t in [45, 70] {
                lock(&queue_of_drain).push(MAJOR, fault_at(pid, 1, t));
            }
            drainer.publish(Drained {
                at: 80,
                stopped: false,
                waited_in_vain: false,
            });
        });
        let until = Instant::now() + 10 * DRAIN_WAIT;
        assert_eq!(
            majors(attributor.finish(50, Vec::new(), Ending::Last(until))),
            2
        );
        drain.join().unwrap();
    }

    #[test]
    fn a_fleet_whose_drain_thread_failed_lets_go_of_its_targets_and_takes_no_more() {
        let (fleet, _) = FleetFaults::without_events(true);
        let cgroup = crate::system::cgroup::own_cgroup_for_test();
        let before = fleet.target(&cgroup).unwrap();
        fleet.fail_drain_thread();
        // The target it never took in lets go of its cgroup's directory.
        assert!(lock(&fleet.0.changes).started.is_empty());
        let refused = fleet.target(&cgroup).map(|_| ()).unwrap_err();
        assert!(refused.to_string().contains("no longer drained"));
        drop(before);
        assert!(lock(&fleet.0.changes).ended.is_empty());
    }

    #[test]
    fn a_last_table_cut_short_takes_all_it_has_up_to_its_end_and_is_counted() {
        use super::super::attribute::Ending;
        let (shared, queue, mut attributor, _woken) = attributed_target();
        let pid = std::process::id();
        // Drained up to 20, then held up: the faults at 25 and 45 are in hand, 70 is
        // after the end.
        for t in [5, 25, 45, 70] {
            lock(&queue).push(MAJOR, fault_at(pid, 1, t));
        }
        shared.publish(Drained {
            at: 20,
            stopped: false,
            waited_in_vain: false,
        });
        let table = attributor.finish(50, Vec::new(), Ending::Last(Instant::now()));
        assert_eq!(table.recorded().major, 3);
        assert_eq!(shared.cut_short.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn a_last_table_asks_once_for_a_drain_when_one_begun_then_routes_past_its_end() {
        let (wake, woken) = UnixStream::pair().unwrap();
        wake.set_nonblocking(true).unwrap();
        let shared = Arc::new(Shared::new(1, true, wake));
        let drainer = Arc::clone(&shared);
        // As the drain thread stamps its drains: when it began, less the margin.
        let drain = thread::spawn(move || {
            (&woken).read_exact(&mut [0; 1]).unwrap();
            let began = monotonic_ns();
            drainer.publish(Drained {
                at: began - LATE_WRITE_MARGIN,
                stopped: false,
                waited_in_vain: false,
            });
            woken.set_nonblocking(true).unwrap();
            let asked_again = (&woken).read(&mut [0; 8]).is_ok();
            (began, asked_again)
        });
        let end = monotonic_ns();
        let (at, complete) = shared.drained_after(end, Instant::now() + 10 * DRAIN_WAIT);
        let (began, asked_again) = drain.join().unwrap();
        assert!(complete && at >= end);
        // Not asked before a drain begun then could route past its end: one asked
        // earlier would not, and the drain thread would drain again and again.
        assert!(began >= end + LATE_WRITE_MARGIN);
        assert!(!asked_again, "asked for more than one drain");
    }

    #[test]
    fn what_is_remembered_and_what_waits_is_bounded_and_a_loss_is_never_refused() {
        // Tens of MiB, let go: not while another test measures its own growth.
        let _big = crate::big_allocations();
        let mut remembered = Pids::default();
        for pid in 0..(PIDS_REMEMBERED as u32 + 10) {
            remembered.insert(pid, Some(1));
        }
        assert!(remembered.targets.len() <= PIDS_REMEMBERED);
        assert_eq!(remembered.get(PIDS_REMEMBERED as u32 + 9), Some(Some(1)));
        // The oldest forgotten first, a target's or not.
        assert_eq!(remembered.get(0), None);
        assert_eq!(remembered.get(PIDS_REMEMBERED as u32), Some(Some(1)));
        // Pids come and go: what orders them stays bounded.
        for pid in 100_000..100_000 + 3 * PIDS_REMEMBERED as u32 {
            remembered.insert(pid, Some(1));
            remembered.remove(pid);
        }
        assert!(remembered.order.len() <= 2 * PIDS_REMEMBERED + 1);
        // A pid forgotten at its exit and reused is as new as its second coming: not
        // forgotten first for its first.
        let mut remembered = Pids::default();
        remembered.insert(0, Some(1));
        remembered.remove(0);
        for pid in 1..PIDS_REMEMBERED as u32 {
            remembered.insert(pid, Some(1));
        }
        remembered.insert(0, Some(2));
        remembered.insert(PIDS_REMEMBERED as u32, Some(1));
        assert_eq!(remembered.get(0), Some(Some(2)));
        assert_eq!(remembered.get(1), None);
        let all = Arc::default();
        let mut waiting = Waiting::new(&all);
        let room = WAITING_BYTES / bytes_of(&fault(1, 1));
        for _ in 0..room + 3 {
            waiting.push(MAJOR, fault(1, 1));
        }
        // Full, a loss of 7 is 7 more.
        waiting.push(MAJOR, Record::Lost(7));
        let records = waiting.take();
        assert_eq!(records.len(), room + 1);
        assert!(matches!(records.last(), Some((MAJOR, Record::Lost(10)))));
        // A mapping's name counts: fewer fit.
        let long = Record::Mmap(Mmap {
            name: "/".repeat(4096),
            ..match mmap(1) {
                Record::Mmap(m) => m,
                _ => unreachable!(),
            }
        });
        let room = WAITING_BYTES / bytes_of(&long);
        for _ in 0..room + 1 {
            waiting.push(Stream::Mappings, long.clone());
        }
        assert_eq!(waiting.take().len(), room + 1);
        // Taken, the room is back.
        waiting.push(MAJOR, fault(1, 1));
        assert_eq!(waiting.take().len(), 1);
        assert_eq!(all.load(Ordering::Relaxed), 0);
        // However many targets, all of theirs is bounded too.
        let others: Vec<Waiting> = (0..=ALL_WAITING_BYTES / WAITING_BYTES)
            .map(|_| {
                let mut other = Waiting::new(&all);
                for _ in 0..WAITING_BYTES / bytes_of(&fault(1, 1)) {
                    other.push(MAJOR, fault(1, 1));
                }
                other
            })
            .collect();
        waiting.push(MAJOR, fault(1, 1));
        assert!(matches!(waiting.take()[..], [(MAJOR, Record::Lost(1))]));
        // Their targets ended with their queues full: all of theirs given back.
        drop(others);
        assert_eq!(all.load(Ordering::Relaxed), 0);
        waiting.push(MAJOR, fault(1, 1));
        assert!(matches!(
            waiting.take()[..],
            [(MAJOR, Record::Sample { .. })]
        ));
    }
}
