//! A fleet's fault events: one set for every target, not one per target. On each CPU the
//! two fault events and the mappings' event watch every process, each fault's record
//! with the id of its cgroup (`PERF_SAMPLE_CGROUP`): 3 descriptors a CPU and one record a
//! fault however many targets there are, where a cgroup's own events are 3 a CPU per
//! target. Each record is routed to the target it belongs to and waits there until that
//! target's sampler takes it into its table ([`super::attribute`]), as a single cgroup
//! profile's own events' records: the same tables, the same series.
//!
//! A fault goes to the target whose directory is its cgroup or an ancestor of it (a
//! cgroup v2 id is its directory's inode number): found by a look through the targets'
//! directories the first time an id is seen, remembered. The records of mappings, forks,
//! execs and exits say no cgroup: each goes to its process's target, known from the
//! process's faults, its parent's (a fork), or else its `/proc/PID/cgroup` (read again
//! at an exec: a service's process is moved into its cgroup between its fork and its
//! exec). A fault in no
//! target is dropped, and so are the records of a process in none: another user's
//! processes, seen by these events, never reach a target they are not in.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use shared_layout::abi::monotonic_ns;

use super::perf::{FaultEvents, Kind, PerfError, Record, Stream, Watched};
use crate::system::cgroup::Cgroup;

/// The most cgroup ids and pids remembered: past it, all are forgotten and found again.
/// A storm of short-lived processes or cgroups outside the targets costs look-ups, not
/// memory.
const REMEMBERED: usize = 16_384;
/// The most directories one look through the targets' trees reads.
const WALKED: usize = 4_096;
/// The most bytes of records waiting for one target (a mapping's with its name): a
/// target whose sampler stalled loses the later ones (counted as lost) rather than
/// holding the monitor's memory. 4 MiB: some 50,000 faults.
const WAITING_BYTES: usize = 4 << 20;
/// How often the rings are drained when no ring is half full.
const DRAIN_EVERY: Duration = Duration::from_secs(1);

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
}

impl FleetFaultsError {
    /// What would allow attribution, said once for every target.
    pub fn advice(&self) -> String {
        match self {
            FleetFaultsError::Perf(e) => e.advice(),
            FleetFaultsError::Start(_) => "raise the limit of threads or descriptors".to_owned(),
            FleetFaultsError::PerfEventOnV1 => {
                "boot with the unified hierarchy alone (systemd.unified_cgroup_hierarchy=1), or \
                 leave perf_event unmounted on v1"
                    .to_owned()
            }
        }
    }
}

/// The fleet's events, shared by every target's profile.
#[derive(Clone)]
pub struct FleetFaults(Arc<Shared>);

struct Shared {
    routing: Mutex<Routing>,
    minor_sampling: u64,
    kernel_faults: bool,
}

/// One target's share of the fleet's events: its records, as they are drained.
pub struct TargetFaults {
    shared: Arc<Shared>,
    id: TargetId,
}

type TargetId = u64;

impl fmt::Debug for FleetFaults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetFaults")
            .field("minor_sampling", &self.0.minor_sampling)
            .finish_non_exhaustive()
    }
}

impl FleetFaults {
    /// Opens the events on every online CPU, one minor fault recorded in
    /// `minor_sampling`, and starts the thread that drains their rings when one is half
    /// full; `mount`: the cgroup v2 mount, where `/proc/PID/cgroup`'s paths are.
    pub fn open(minor_sampling: u64, mount: &Path) -> Result<FleetFaults, FleetFaultsError> {
        let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if perf_event_on_v1(&own) {
            return Err(FleetFaultsError::PerfEventOnV1);
        }
        let mut events = FaultEvents::new(minor_sampling)?;
        events.attach(Watched::EveryProcess)?;
        let polled = (events.poll_fds())
            .map(|fd| fd.try_clone_to_owned())
            .collect::<io::Result<Vec<OwnedFd>>>()
            .map_err(FleetFaultsError::Start)?;
        let shared = Arc::new(Shared {
            minor_sampling: events.minor_sampling(),
            kernel_faults: events.kernel_faults(),
            routing: Mutex::new(Routing::new(events, mount.to_owned())),
        });
        let weak = Arc::downgrade(&shared);
        thread::Builder::new()
            .name("pfprof-fleet-faults".into())
            .spawn(move || drain_when_half_full(&weak, &polled))
            .map_err(FleetFaultsError::Start)?;
        Ok(FleetFaults(shared))
    }

    pub fn minor_sampling(&self) -> u64 {
        self.0.minor_sampling
    }

    pub fn kernel_faults(&self) -> bool {
        self.0.kernel_faults
    }

    /// Routes the faults of `cgroup` and its descendants to a new target, until the
    /// answer is dropped.
    pub fn target(&self, cgroup: &Cgroup) -> io::Result<TargetFaults> {
        let cgroup_id = nix::sys::stat::fstat(cgroup.fd())
            .map_err(io::Error::from)?
            .st_ino;
        let id = self.0.lock().add(cgroup.path().to_owned(), cgroup_id);
        Ok(TargetFaults {
            shared: Arc::clone(&self.0),
            id,
        })
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Routing> {
        self.routing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl TargetFaults {
    pub fn minor_sampling(&self) -> u64 {
        self.shared.minor_sampling
    }

    pub fn kernel_faults(&self) -> bool {
        self.shared.kernel_faults
    }

    /// Hands this target's records to `each`, the rings drained first unless their last
    /// drain began after `end_ns`; when that drain began: every record stamped before it
    /// has been handed over.
    pub fn drain(&self, end_ns: u64, mut each: impl FnMut(Stream, Record)) -> u64 {
        let mut routing = self.shared.lock();
        if routing.drained_at < end_ns {
            routing.drain();
        }
        if let Some(target) = routing.targets.get_mut(&self.id) {
            for (stream, record) in target.waiting.take() {
                each(stream, record);
            }
        }
        routing.drained_at
    }
}

impl Drop for TargetFaults {
    fn drop(&mut self) {
        self.shared.lock().remove(self.id);
    }
}

/// Drains the rings whenever one is half full, and every [`DRAIN_EVERY`], until the
/// fleet's events are dropped.
fn drain_when_half_full(shared: &Weak<Shared>, polled: &[OwnedFd]) {
    let timeout = PollTimeout::try_from(DRAIN_EVERY).unwrap_or(PollTimeout::MAX);
    loop {
        let mut fds: Vec<PollFd> = (polled.iter())
            .map(|fd| PollFd::new(fd.as_fd(), PollFlags::POLLIN))
            .collect();
        // An error (EINTR) is one more drain.
        let _ = poll(&mut fds, timeout);
        let Some(shared) = shared.upgrade() else {
            return;
        };
        shared.lock().drain();
    }
}

/// A target's records, waiting for its sampler.
#[derive(Default)]
struct Waiting {
    records: Vec<(Stream, Record)>,
    /// What they hold, as [`bytes_of`] counts it.
    bytes: usize,
    /// Records dropped for want of room, by ring: said as lost.
    dropped: [u64; 3],
}

impl Waiting {
    fn push(&mut self, stream: Stream, record: Record) {
        let bytes = bytes_of(&record);
        if self.bytes + bytes <= WAITING_BYTES {
            self.bytes += bytes;
            self.records.push((stream, record));
            return;
        }
        self.dropped[ring_index(stream)] += 1;
    }

    fn take(&mut self) -> Vec<(Stream, Record)> {
        self.bytes = 0;
        let mut records = std::mem::take(&mut self.records);
        for (stream, dropped) in STREAMS.into_iter().zip(std::mem::take(&mut self.dropped)) {
            if dropped > 0 {
                records.push((stream, Record::Lost(dropped)));
            }
        }
        records
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

struct Target {
    dir: PathBuf,
    /// Its directory's cgroup id.
    cgroup_id: u64,
    waiting: Waiting,
}

/// A map that forgets everything once full: bounded, and right again after a look-up.
struct Remembered<K, V>(HashMap<K, V>);

impl<K: std::hash::Hash + Eq, V: Copy> Remembered<K, V> {
    fn new() -> Self {
        Remembered(HashMap::new())
    }

    fn get(&self, key: &K) -> Option<V> {
        self.0.get(key).copied()
    }

    fn insert(&mut self, key: K, value: V) {
        if self.0.len() >= REMEMBERED && !self.0.contains_key(&key) {
            self.0.clear();
        }
        self.0.insert(key, value);
    }
}

/// The events, the targets, and where each cgroup and process goes.
struct Routing {
    /// `None` in tests: records routed by hand.
    events: Option<FaultEvents>,
    mount: PathBuf,
    targets: HashMap<TargetId, Target>,
    next_id: TargetId,
    /// By cgroup id: the target that holds it, or none.
    cgroups: Remembered<u64, Option<TargetId>>,
    /// By pid: its process's target, or none.
    pids: Remembered<u32, Option<TargetId>>,
    /// When the last drain began (`CLOCK_MONOTONIC`, ns).
    drained_at: u64,
}

impl Routing {
    fn new(events: FaultEvents, mount: PathBuf) -> Routing {
        Routing {
            events: Some(events),
            ..Routing::without_events(mount)
        }
    }

    fn without_events(mount: PathBuf) -> Routing {
        Routing {
            events: None,
            mount,
            targets: HashMap::new(),
            next_id: 0,
            cgroups: Remembered::new(),
            pids: Remembered::new(),
            drained_at: 0,
        }
    }

    fn add(&mut self, dir: PathBuf, cgroup_id: u64) -> TargetId {
        let id = self.next_id;
        self.next_id += 1;
        self.targets.insert(
            id,
            Target {
                dir,
                cgroup_id,
                waiting: Waiting::default(),
            },
        );
        // What was in no target may be in this one now.
        self.cgroups.0.retain(|_, target| target.is_some());
        self.pids.0.retain(|_, target| target.is_some());
        id
    }

    fn remove(&mut self, id: TargetId) {
        self.targets.remove(&id);
        self.cgroups.0.retain(|_, target| *target != Some(id));
        self.pids.0.retain(|_, target| *target != Some(id));
    }

    /// Takes what the rings hold, each record to its target.
    fn drain(&mut self) {
        let Some(mut events) = self.events.take() else {
            return;
        };
        self.drained_at = monotonic_ns();
        events.drain(|stream, record| self.route(stream, record));
        self.events = Some(events);
    }

    fn route(&mut self, stream: Stream, record: Record) {
        let target = match record {
            Record::Sample { pid, cgroup, .. } => {
                let target = self.cgroup_target(cgroup);
                if target.is_some() {
                    self.pids.insert(pid, target);
                }
                target
            }
            Record::Mmap(ref mmap) => self.pid_target(mmap.pid),
            Record::Exec { pid, .. } => {
                // Where a service starts: forked outside its cgroup, moved in, exec'd.
                self.pids.0.remove(&pid);
                self.pid_target(pid)
            }
            Record::Fork { pid, ppid, .. } if pid != ppid => {
                let target = self.pid_target(ppid);
                self.pids.insert(pid, target);
                target
            }
            // Gone: no /proc to look in.
            Record::Exit { pid, tid, .. } if pid == tid => self.pids.0.remove(&pid).flatten(),
            Record::Lost(_) | Record::Overflowed => {
                if stream == Stream::Mappings {
                    // A fork or exit may be among those lost: a pid's target is found anew.
                    self.pids.0.clear();
                }
                // Whose it was is unknown: every target is told.
                for target in self.targets.values_mut() {
                    target.waiting.push(stream, record.clone());
                }
                return;
            }
            // A thread's start or end changes no mapping.
            Record::Fork { .. } | Record::Exit { .. } => None,
        };
        if let Some(target) = target.and_then(|id| self.targets.get_mut(&id)) {
            target.waiting.push(stream, record);
        }
    }

    /// The target holding cgroup `cgroup_id`: a target's own, or one of their
    /// descendants, found by reading the targets' trees once.
    fn cgroup_target(&mut self, cgroup_id: u64) -> Option<TargetId> {
        if let Some(known) = self.cgroups.get(&cgroup_id) {
            return known;
        }
        if let Some((&id, _)) = (self.targets.iter()).find(|(_, t)| t.cgroup_id == cgroup_id) {
            self.cgroups.insert(cgroup_id, Some(id));
            return Some(id);
        }
        self.walk_targets();
        let found = self.cgroups.get(&cgroup_id).flatten();
        self.cgroups.insert(cgroup_id, found);
        found
    }

    /// Remembers every cgroup under each target as that target's (a target's own cgroup
    /// under another's is its own), at most [`WALKED`] directories.
    fn walk_targets(&mut self) {
        let roots: HashMap<u64, TargetId> = (self.targets.iter())
            .map(|(&id, t)| (t.cgroup_id, id))
            .collect();
        let mut to_read: Vec<(PathBuf, TargetId)> = (self.targets.iter())
            .map(|(&id, t)| (t.dir.clone(), id))
            .collect();
        let mut read = 0;
        while let Some((dir, target)) = to_read.pop() {
            if read >= WALKED {
                return;
            }
            read += 1;
            let Ok(entries) = fs::read_dir(&dir) else {
                // Removed meanwhile.
                continue;
            };
            for entry in entries.flatten() {
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                let cgroup_id = entry.ino();
                let owner = roots.get(&cgroup_id).copied().unwrap_or(target);
                self.cgroups.insert(cgroup_id, Some(owner));
                to_read.push((entry.path(), owner));
            }
        }
    }

    /// The target of process `pid`: remembered, or its cgroup's as `/proc/PID/cgroup`
    /// names it.
    fn pid_target(&mut self, pid: u32) -> Option<TargetId> {
        if let Some(known) = self.pids.get(&pid) {
            return known;
        }
        let target = cgroup_of(pid)
            .and_then(|path| fs::metadata(self.mount.join(path)).ok())
            .and_then(|meta| self.cgroup_target(meta.ino()));
        self.pids.insert(pid, target);
        target
    }
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

/// Process `pid`'s cgroup v2 path, relative to the mount: the `0::` line of
/// `/proc/PID/cgroup`.
fn cgroup_of(pid: u32) -> Option<PathBuf> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let path = text.lines().find_map(|line| line.strip_prefix("0::"))?;
    Some(PathBuf::from(path.trim_start_matches('/')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::FileId;
    use crate::backend::procfs::perf::Mmap;

    fn fault(pid: u32, cgroup: u64) -> Record {
        Record::Sample {
            ip: 0x1000,
            pid,
            tid: pid,
            time_ns: 1,
            addr: 0x1800,
            cgroup,
        }
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
            for dir in dirs {
                fs::create_dir_all(root.join(dir)).unwrap();
            }
            Tree(root)
        }

        fn id(&self, dir: &str) -> u64 {
            fs::metadata(self.0.join(dir)).unwrap().ino()
        }

        fn add(&self, routing: &mut Routing, dir: &str) -> TargetId {
            routing.add(self.0.join(dir), self.id(dir))
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn taken(routing: &mut Routing, target: TargetId) -> Vec<(Stream, Record)> {
        routing.targets.get_mut(&target).unwrap().waiting.take()
    }

    #[test]
    fn a_fault_goes_to_the_target_of_its_cgroup_or_of_an_ancestor_and_nowhere_else() {
        let tree = Tree::new("route", &["a/worker/inner", "b", "outside"]);
        let mut routing = Routing::without_events(tree.0.clone());
        let a = tree.add(&mut routing, "a");
        let b = tree.add(&mut routing, "b");
        routing.route(MAJOR, fault(10, tree.id("a")));
        routing.route(MAJOR, fault(11, tree.id("a/worker/inner")));
        routing.route(MAJOR, fault(12, tree.id("b")));
        // Another user's process, in no target: dropped, and remembered as in none.
        routing.route(MAJOR, fault(13, tree.id("outside")));
        routing.route(MAJOR, fault(14, 0));
        let pids = |records: Vec<(Stream, Record)>| -> Vec<u32> {
            (records.into_iter())
                .filter_map(|(_, r)| match r {
                    Record::Sample { pid, .. } => Some(pid),
                    _ => None,
                })
                .collect()
        };
        assert_eq!(pids(taken(&mut routing, a)), [10, 11]);
        assert_eq!(pids(taken(&mut routing, b)), [12]);
        assert_eq!(routing.cgroups.get(&tree.id("outside")), Some(None));
        // A faulting process's mappings follow it to its target; one in none is dropped.
        routing.route(Stream::Mappings, mmap(11));
        routing.route(Stream::Mappings, mmap(13));
        assert_eq!(taken(&mut routing, a).len(), 1);
        assert!(taken(&mut routing, b).is_empty());
    }

    #[test]
    fn a_cgroup_made_later_under_a_target_is_found_and_one_outside_becomes_a_new_targets() {
        let tree = Tree::new("later", &["a", "outside"]);
        let mut routing = Routing::without_events(tree.0.clone());
        let a = tree.add(&mut routing, "a");
        routing.route(MAJOR, fault(20, tree.id("outside")));
        fs::create_dir(tree.0.join("a/new")).unwrap();
        routing.route(MAJOR, fault(21, tree.id("a/new")));
        assert_eq!(taken(&mut routing, a).len(), 1);
        // The cgroup in none becomes a target: what was remembered of it is forgotten.
        let outside = tree.add(&mut routing, "outside");
        routing.route(MAJOR, fault(20, tree.id("outside")));
        assert_eq!(taken(&mut routing, outside).len(), 1);
        // A target that ended takes nothing more, and its cgroups are in none again.
        routing.remove(a);
        routing.route(MAJOR, fault(21, tree.id("a/new")));
        assert!(!routing.targets.contains_key(&a));
        assert!(taken(&mut routing, outside).is_empty());
    }

    #[test]
    fn a_forked_child_goes_with_its_parent_an_exited_pid_is_forgotten_a_loss_told_to_all() {
        let tree = Tree::new("fork", &["a", "b"]);
        let mut routing = Routing::without_events(tree.0.clone());
        let a = tree.add(&mut routing, "a");
        let b = tree.add(&mut routing, "b");
        routing.route(MAJOR, fault(30, tree.id("a")));
        let fork = Record::Fork {
            pid: 31,
            ppid: 30,
            time_ns: 2,
        };
        routing.route(Stream::Mappings, fork);
        routing.route(Stream::Mappings, mmap(31));
        let exit = Record::Exit {
            pid: 31,
            tid: 31,
            time_ns: 3,
        };
        routing.route(Stream::Mappings, exit);
        assert_eq!(taken(&mut routing, a).len(), 4);
        assert_eq!(routing.pids.get(&31), None);
        routing.route(Stream::Mappings, Record::Lost(2));
        for target in [a, b] {
            assert!(matches!(
                taken(&mut routing, target)[..],
                [(Stream::Mappings, Record::Lost(2))]
            ));
        }
        assert_eq!(
            routing.pids.get(&30),
            None,
            "a lost fork leaves no pid's target trusted"
        );
    }

    #[test]
    fn a_process_moved_into_a_target_before_its_exec_is_found_there_at_its_exec() {
        // This process's cgroup as /proc/self/cgroup names it, made under a tree that
        // stands for the mount.
        let own = cgroup_of(std::process::id()).unwrap();
        let own = own.to_str().unwrap();
        let tree = Tree::new("exec", &[own]);
        let mut routing = Routing::without_events(tree.0.clone());
        let pid = std::process::id();
        // Seen outside every target first (the fork of a service manager).
        routing.pids.insert(pid, None);
        routing.route(Stream::Mappings, mmap(pid));
        let target = tree.add(&mut routing, own);
        routing.pids.insert(pid, None);
        let exec = Record::Exec { pid, time_ns: 2 };
        routing.route(Stream::Mappings, exec);
        routing.route(Stream::Mappings, mmap(pid));
        assert_eq!(taken(&mut routing, target).len(), 2);
    }

    #[test]
    fn a_perf_event_controller_on_v1_is_told_from_one_on_v2() {
        assert!(!perf_event_on_v1("0::/system.slice/db.service\n"));
        assert!(!perf_event_on_v1("4:memory:/x\n0::/x\n"));
        assert!(perf_event_on_v1("7:cpu,perf_event:/x\n0::/x\n"));
    }

    #[test]
    fn what_is_remembered_and_what_waits_is_bounded() {
        let mut remembered = Remembered::new();
        for pid in 0..(REMEMBERED as u32 + 10) {
            remembered.insert(pid, Some(1u64));
        }
        assert_eq!(remembered.0.len(), 10);
        let mut waiting = Waiting::default();
        let room = WAITING_BYTES / bytes_of(&fault(1, 1));
        for _ in 0..room + 3 {
            waiting.push(MAJOR, fault(1, 1));
        }
        let records = waiting.take();
        assert_eq!(records.len(), room + 1);
        assert!(matches!(records.last(), Some((MAJOR, Record::Lost(3)))));
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
    }
}
