//! Twin of `kmod/faults.c`, with [`super::perf`]: the same two software events on the
//! profiled processes' threads, inherited (every major fault, one minor fault in
//! `minor_sampling`), drained by the sampler once a period and whenever a ring is half
//! full, as the module's per-CPU buffers are. A fault the module's handler drops (a full
//! buffer) is one perf's full ring drops here (`PERF_RECORD_LOST`): either way the
//! period's table counts it as lost.
//!
//! Where the procfs backend's faults were: the fault events' records, drained each period
//! (and whenever a ring is half full) by the sampler thread, put in time order across
//! the CPUs' rings with the records of the processes' mappings ([`super::recorded`]),
//! their addresses resolved to mappings as they were at each fault, gathered into the
//! period's table.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Instant;

use shared_layout::abi::monotonic_ns;

use super::fleet_faults::TargetFaults;
use super::maps::MapsCache;
use super::perf::{FaultEvents, Kind, Record, Stream};
use super::recorded::Recorded;
use crate::attribution::table::Builder;
use crate::attribution::{Code, Faults, Mapping, PeriodTable, ProcessFaults};

/// The most processes whose maps are read ahead of their faults in a period: each read
/// costs tens of µs, and a storm of short-lived processes must not make a period's work
/// grow without bound (the others are read when their faults are resolved).
const MAPS_READ_AHEAD: usize = 32;

/// A record drained, waiting for those of the other CPUs' rings up to its time.
struct Timed {
    time_ns: u64,
    stream: Stream,
    record: Record,
}

/// Records drained from the CPUs' rings, waiting to be applied in time order.
#[derive(Default)]
struct InOrder(Vec<Timed>);

impl InOrder {
    fn push(&mut self, timed: Timed) {
        self.0.push(timed);
    }

    /// Those stamped up to `horizon`, in time order (a sort that keeps a ring's records
    /// of one time in their order); the later ones wait.
    fn take_until(&mut self, horizon: u64) -> Vec<Timed> {
        self.0.sort_by_key(|t| t.time_ns);
        let ready = self.0.partition_point(|t| t.time_ns <= horizon);
        self.0.drain(..ready).collect()
    }

    /// Drops the mapping records waiting: one lost among them.
    fn drop_mappings(&mut self) {
        self.0.retain(|t| t.stream != Stream::Mappings);
    }
}

/// Whether a period's table is its profile's last.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ending {
    No,
    /// The last: a fleet's target waits until `Instant` at most for a drain of the
    /// fleet's rings past its end (one deadline for the targets ending together).
    Last(Instant),
}

/// Where the records come from.
pub enum FaultSource {
    /// The profile's own events.
    Own(FaultEvents),
    /// A fleet's events, shared by its targets: this target's records.
    Fleet(TargetFaults),
}

impl FaultSource {
    pub fn minor_sampling(&self) -> u64 {
        match self {
            FaultSource::Own(events) => events.minor_sampling(),
            FaultSource::Fleet(target) => target.minor_sampling(),
        }
    }

    pub fn kernel_faults(&self) -> bool {
        match self {
            FaultSource::Own(events) => events.kernel_faults(),
            FaultSource::Fleet(target) => target.kernel_faults(),
        }
    }

    /// No event is open: every thread was gone before its events could be.
    pub fn is_empty(&self) -> bool {
        matches!(self, FaultSource::Own(events) if events.is_empty())
    }
}

/// The fault events and the table of the period under way.
pub struct Attributor {
    events: FaultSource,
    maps: MapsCache,
    recorded: Recorded,
    /// Records drained but not applied: stamped after the period's end, or after the
    /// drain began (a CPU's ring may not hold its records of that time yet).
    waiting: InOrder,
    current: Builder,
    /// The last faults' process and instruction, where it was, and how many faults it
    /// took in a row: a loop faulting through a file faults at one instruction, resolved
    /// and counted in the table once for the run (until a mapping record is applied or
    /// lost).
    last_code: Option<(u32, u64, Code, Faults)>,
    lost: Faults,
    /// The rings whose descriptor hung up (its event's task and inherited children are
    /// gone: poll says so at once, forever), by their position in
    /// [`FaultEvents::poll_fds`]: drained each period, no longer polled.
    hung_up: Vec<usize>,
}

impl Attributor {
    pub fn new(events: FaultSource) -> Attributor {
        Attributor {
            events,
            maps: MapsCache::default(),
            recorded: Recorded::default(),
            waiting: InOrder::default(),
            current: Builder::default(),
            last_code: None,
            lost: Faults::default(),
            hung_up: Vec::new(),
        }
    }

    /// Whether it has rings of its own for the sampler to poll: not a fleet's target's.
    pub fn polls_rings(&self) -> bool {
        matches!(self.events, FaultSource::Own(_))
    }

    /// The descriptors that wake the sampler when a ring is half full (none for a
    /// fleet's target: the fleet's own thread drains its rings).
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        let FaultSource::Own(events) = &self.events else {
            return Vec::new();
        };
        (events.poll_fds().enumerate())
            .filter(|(i, _)| !self.hung_up.contains(i))
            .map(|(_, fd)| fd)
            .collect()
    }

    /// The descriptors at these positions of [`Attributor::poll_fds`]'s answer hung up:
    /// they are not polled again.
    pub fn hang_up(&mut self, positions: &[usize]) {
        let FaultSource::Own(events) = &self.events else {
            return;
        };
        let polled: Vec<usize> = (0..events.poll_fds().count())
            .filter(|i| !self.hung_up.contains(i))
            .collect();
        self.hung_up
            .extend(positions.iter().filter_map(|&p| polled.get(p).copied()));
    }

    /// A fleet's target: waits, until `until` at most, for the fleet's rings drained
    /// past `end_ns`, the latest end of the targets ending together (their last tables
    /// then wait no more).
    pub fn wait_drained_past(&self, end_ns: u64, until: Instant) {
        if let FaultSource::Fleet(target) = &self.events {
            target.wait_drained_past(end_ns, until);
        }
    }

    /// Takes what the rings hold now, all of it the period under way's.
    pub fn drain(&mut self) {
        self.drain_until(u64::MAX, Ending::No);
    }

    /// The table of the period ending at `end_ns` (its sample's timestamp), with each
    /// process's own faults. `ending`: the profile's last, for which a fleet's target
    /// waits (bounded) for the fleet's rings to be drained past `end_ns`.
    pub fn finish(
        &mut self,
        end_ns: u64,
        processes: Vec<ProcessFaults>,
        ending: Ending,
    ) -> PeriodTable {
        self.drain_until(end_ns, ending);
        self.count_code();
        let table = std::mem::take(&mut self.current).finish(
            end_ns,
            std::mem::take(&mut self.lost),
            processes,
        );
        self.maps.next_period();
        self.recorded.next_period();
        table
    }

    /// Reads the maps of processes new to the profile, or that exec'd, now, while they
    /// live: the faults the rings hold of a process gone by the time they are resolved
    /// can still be placed (at most [`MAPS_READ_AHEAD`] a period).
    pub fn read_maps(&mut self, pids: &[u32]) {
        for &pid in pids.iter().take(MAPS_READ_AHEAD) {
            self.maps.read_now(pid);
        }
    }

    /// Applies the records stamped up to `end_ns` and before the drain began, in time
    /// order across the CPUs' rings. Each ring holds its CPU's records in order, but a
    /// record of another CPU's may be stamped before one already drained here: the
    /// later ones wait for the next drain. One stamped before the drain began, the
    /// clock read before any ring, is in its ring by then (a record is written in one
    /// go, preemption off, once stamped); and whatever a record's consequence (a fault
    /// in a region just mapped), it is stamped after the record's end, hence after the
    /// drain began if the record was not in its ring yet.
    /// A fleet's target takes its records from the fleet's rings as [`TargetFaults`]
    /// drains them, up to when that drain began.
    fn drain_until(&mut self, end_ns: u64, ending: Ending) {
        let Attributor {
            events,
            waiting,
            lost,
            ..
        } = self;
        let mut mappings_lost = false;
        let each = |stream, record: Record| match (stream, record.time_ns(), record) {
            (Stream::Mappings, _, Record::Lost(_) | Record::Overflowed) => mappings_lost = true,
            (stream, Some(time_ns), record) => waiting.push(Timed {
                time_ns,
                stream,
                record,
            }),
            (Stream::Faults(kind), None, Record::Lost(n)) => *lost += one(kind, n),
            _ => {}
        };
        let drain_began = match events {
            FaultSource::Own(events) => {
                let began = monotonic_ns();
                events.drain(each);
                began
            }
            FaultSource::Fleet(target) => match ending {
                Ending::No => target.drain(each),
                // Whether or not a drain went past its end, the last table takes all it
                // has up to it: what is left of the profile after is nobody's.
                Ending::Last(until) => {
                    target.drain_last(end_ns, until, each);
                    end_ns
                }
            },
        };
        let horizon = drain_began.min(end_ns);
        if mappings_lost {
            self.forget_mappings();
        }
        for timed in self.waiting.take_until(horizon) {
            self.apply(timed);
        }
    }

    /// A mapping record was lost: a region kept may be one it replaced. The tables start
    /// again from the records after it, /proc read meanwhile, as before any record; the
    /// run's code, resolved by the old tables, is counted and not reused.
    fn forget_mappings(&mut self) {
        self.count_code();
        self.waiting.drop_mappings();
        self.recorded.forget_all();
    }

    fn apply(&mut self, timed: Timed) {
        let time_ns = timed.time_ns;
        if !matches!(timed.record, Record::Sample { .. }) {
            // The mappings may change: the next instruction is resolved anew.
            self.count_code();
        }
        match timed.record {
            // Only the faults' events sample.
            Record::Sample { pid, addr, ip, .. } => {
                if let Stream::Faults(kind) = timed.stream {
                    let (mapping, offset) = self.resolve(pid, addr);
                    self.current.add_at(pid, mapping, offset, one(kind, 1));
                    // The code's mapping as the address's was found, as it was then;
                    // its function named by the consumer, off this drain.
                    let same = matches!(&self.last_code, Some((p, i, ..)) if (*p, *i) == (pid, ip));
                    if !same {
                        self.count_code();
                        let code = Code::at(ip, || self.resolve(pid, ip));
                        self.last_code = Some((pid, ip, code, Faults::default()));
                    }
                    if let Some((.., faults)) = self.last_code.as_mut() {
                        *faults += one(kind, 1);
                    }
                }
            }
            Record::Mmap(mmap) => self.recorded.mmap(&mmap),
            Record::Fork { pid, ppid, .. } if pid != ppid => {
                // What /proc showed of the pid before is another process's.
                self.maps.forget_read_before(pid, time_ns);
                let base = self.maps.regions(ppid);
                self.recorded.fork(pid, ppid, base);
            }
            Record::Exec { pid, .. } => {
                self.maps.forget_read_before(pid, time_ns);
                self.recorded.exec(pid);
            }
            Record::Exit { pid, tid, .. } if pid == tid => self.recorded.exit(pid),
            Record::Fork { .. } | Record::Exit { .. } | Record::Lost(_) | Record::Overflowed => {}
        }
    }

    /// Counts the last faults' code location in the table.
    fn count_code(&mut self) {
        if let Some((_, _, code, faults)) = self.last_code.take() {
            self.current.add_code(code, faults);
        }
    }

    /// The mapping holding `addr` in process `pid` at the time of the record being
    /// applied. The records first: a region they hold is the mapping as it was then,
    /// where `/proc`, read later, may show what replaced it. Where they hold none (the
    /// stack grown, what was mapped before the process was watched), the stack below a
    /// gap, then `/proc` as read (at most once a period), kept in the process's table
    /// for its later faults and its children. A process whose maps its user may not read (a setuid program the command ran)
    /// stays unreadable, as without the records. With it, the file offset of the page
    /// `addr` is in, for a file's mapping.
    fn resolve(&mut self, pid: u32, addr: u64) -> (Arc<Mapping>, Option<u64>) {
        if self.maps.unreadable(pid) {
            return (self.maps.resolve(pid, addr), None);
        }
        if let Some(found) = self.recorded.locate(pid, addr) {
            return found;
        }
        if let Some(stack) = self.recorded.stack_grown(pid, addr) {
            return (stack, None);
        }
        match self.maps.region(pid, addr) {
            Ok(region) => {
                self.recorded.fill(pid, addr, &region);
                let offset = region.offset(addr);
                (region.mapping, offset)
            }
            Err(outside) => (outside, None),
        }
    }
}

/// `n` faults of `kind`, as recorded.
fn one(kind: Kind, n: u64) -> Faults {
    match kind {
        Kind::Major => Faults {
            major: n,
            minor_samples: 0,
        },
        Kind::Minor => Faults {
            major: 0,
            minor_samples: n,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::FileId;
    use crate::backend::procfs::perf::Mmap;

    fn timed(time_ns: u64, record: Record) -> Timed {
        let stream = match record {
            Record::Sample { .. } => Stream::Faults(Kind::Major),
            _ => Stream::Mappings,
        };
        Timed {
            time_ns,
            stream,
            record,
        }
    }

    fn mmap(time_ns: u64, name: &str) -> Record {
        mmap_in(7, time_ns, name)
    }

    fn mmap_in(pid: u32, time_ns: u64, name: &str) -> Record {
        Record::Mmap(Mmap {
            pid,
            time_ns,
            start: 0x1000,
            end: 0x2000,
            pgoff: 0,
            file: FileId {
                major: 254,
                minor: 0,
                inode: time_ns,
            },
            exec: false,
            shared: true,
            name: name.into(),
        })
    }

    fn fault(time_ns: u64) -> Record {
        fault_in(7, time_ns)
    }

    fn fault_in(pid: u32, time_ns: u64) -> Record {
        Record::Sample {
            ip: 0x1000,
            pid,
            tid: pid,
            time_ns,
            addr: 0x1800,
            cgroup: 0,
        }
    }

    #[test]
    fn a_fault_is_resolved_against_the_mappings_of_its_time_whichever_ring_said_what() {
        let mut waiting = InOrder::default();
        // One CPU's ring: a file mapped, then another mapped over it.
        waiting.push(timed(10, mmap(10, "/early")));
        waiting.push(timed(30, mmap(30, "/late")));
        // Another CPU's, drained after: a fault between the two, and one after both.
        waiting.push(timed(20, fault(20)));
        waiting.push(timed(40, fault(40)));
        let mut recorded = Recorded::default();
        let mut resolve = |ready: Vec<Timed>| -> Vec<String> {
            let mut names = Vec::new();
            for t in ready {
                match t.record {
                    Record::Mmap(m) => recorded.mmap(&m),
                    Record::Sample { pid, addr, .. } => {
                        names.push(recorded.find(pid, addr).unwrap().name.clone());
                    }
                    _ => {}
                }
            }
            names
        };
        // The drain began at 35: the fault at 40 waits for the next.
        assert_eq!(resolve(waiting.take_until(35)), ["/early"]);
        assert_eq!(resolve(waiting.take_until(u64::MAX)), ["/late"]);
    }

    #[test]
    fn a_lost_mapping_record_leaves_no_table_and_no_mapping_record_waiting_to_rebuild_one() {
        let mut waiting = InOrder::default();
        let mut recorded = Recorded::default();
        if let Record::Mmap(m) = mmap(10, "/kept") {
            recorded.mmap(&m);
        }
        waiting.push(timed(20, mmap(20, "/replaced")));
        waiting.push(timed(30, fault(30)));
        // What Attributor::drain_until does when a mappings ring lost one.
        waiting.drop_mappings();
        recorded.forget_all();
        let ready = waiting.take_until(u64::MAX);
        assert!(
            matches!(
                ready[..],
                [Timed {
                    time_ns: 30,
                    stream: Stream::Faults(Kind::Major),
                    ..
                }]
            ),
            "the fault alone waits"
        );
        assert!(recorded.find(7, 0x1800).is_none(), "a stale region kept");
    }

    #[test]
    fn a_run_at_one_instruction_is_resolved_anew_once_a_mapping_record_was_lost() {
        let mut attributor = Attributor::new(FaultSource::Own(FaultEvents::new(1).unwrap()));
        // This process: its /proc maps are readable, and hold nothing at 0x1000.
        let pid = std::process::id();
        attributor.apply(timed(10, mmap_in(pid, 10, "/kept")));
        attributor.apply(timed(20, fault_in(pid, 20)));
        attributor.forget_mappings();
        attributor.apply(timed(30, fault_in(pid, 30)));
        let table = attributor.finish(u64::MAX, Vec::new(), Ending::No);
        let kept =
            |code: &Code| matches!(code, Code::User { mapping, .. } if mapping.name == "/kept");
        let counts: Vec<(bool, u64)> = (table.code.iter())
            .map(|(code, faults)| (kept(code), faults.major))
            .collect();
        assert_eq!(counts.len(), 2, "{:?}", table.code);
        assert!(counts.contains(&(true, 1)), "{:?}", table.code);
        assert!(counts.contains(&(false, 1)), "{:?}", table.code);
    }
}
