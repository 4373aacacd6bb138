//! Where the kernel backend's faults were: the module's faults region, drained every
//! period (at least every [`DRAIN_EVERY`]) by a thread of its own (so that each fault is
//! resolved while its process lives, whenever the consumer takes its rows) and when the
//! consumer takes a sample (the module wrote the period's faults before it), each
//! fault's address resolved to its mapping by the same maps cache as the procfs
//! backend's, from `/proc/<pid>/maps` with the monitor's own rights; each process's own faults read from its
//! `/proc/<pid>/stat`, as the procfs backend's are. Each fault's instruction (ABI 6)
//! is resolved by the same maps, to be named by the consumer as the procfs backend's.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use shared_layout::abi;
use shared_layout::faults::{Fault, FaultsRegion, Missed};

use crate::attribution::table::Builder;
use crate::attribution::{Code, Faults, Mapping, PeriodTable, TableSource};
use crate::backend::procfs::maps::MapsCache;
use crate::backend::procfs::who::Who;
use crate::backend::ExitWatch;
use crate::system::procstat::{self, ProcessCounters};

/// The most processes whose own faults are followed: a storm of short-lived processes
/// must not make each period's reads grow without bound (the others' faults are still
/// placed, their own counts not listed).
const MAX_FOLLOWED: usize = 256;

/// The most faults resolved and waiting for the consumer's next table: beyond them, a
/// consumer that stopped taking rows costs no more memory, and the faults count as lost.
const MAX_WAITING: usize = 1 << 20;

/// How often the faults thread drains the region at least, whatever the period: as often
/// as the module drains its records to it. A fault is resolved by its process's maps,
/// read while it lives, and a command that lived 0.4 s of a 5 s period was gone before
/// the first drain (all of its faults "unmapped by then").
const DRAIN_EVERY: Duration = Duration::from_millis(abi::FAULTS_DRAIN_MS as u64);

/// A fault resolved to its mapping, waiting for its period's table.
struct Resolved {
    time_ns: u64,
    pid: u32,
    mapping: Arc<Mapping>,
    /// The file offset of the faulting page, in a file's mapping.
    offset: Option<u64>,
    /// Where the instruction that took it was (ABI 6's `ip`), resolved by the same maps.
    code: Code,
    major: bool,
}

/// The faults region and what the periods not given yet hold.
pub struct KernelAttributor {
    region: FaultsRegion,
    maps: MapsCache,
    who: Who,
    /// Processes whose own faults are read each period: the targets, and each process
    /// a fault was recorded of.
    followed: HashSet<u32>,
    waiting: Vec<Resolved>,
    lost: Faults,
    drained: Vec<Fault>,
    /// The most processes the module said it did not record at once.
    unattributed: Arc<AtomicU32>,
}

impl KernelAttributor {
    /// For a profile that began at `began` (clock ticks after boot), of `targets`.
    pub fn new(region: FaultsRegion, began: u64, targets: &[u32]) -> KernelAttributor {
        KernelAttributor {
            region,
            maps: MapsCache::default(),
            who: Who::new(began),
            followed: targets.iter().copied().collect(),
            waiting: Vec::new(),
            lost: Faults::default(),
            drained: Vec::new(),
            unattributed: Arc::new(AtomicU32::new(0)),
        }
    }

    /// The most processes of the session the module did not record at once, as it goes.
    pub fn unattributed(&self) -> Arc<AtomicU32> {
        Arc::clone(&self.unattributed)
    }

    /// Follows `pid`'s own faults too (the command, once forked).
    pub fn follow(&mut self, pid: u32) {
        self.followed.insert(pid);
    }

    /// Drains the region and resolves what it held, now: new processes' maps are read
    /// while they live, and a process's again (at most once each call) when a fault
    /// falls outside what was read (a file it mapped since).
    fn advance(&mut self) {
        self.maps.next_period();
        let missed = self.region.drain(&mut self.drained);
        self.lost += lost(missed);
        (self.unattributed).fetch_max(self.region.unattributed(), Ordering::Relaxed);
        for fault in &self.drained {
            if self.followed.len() >= MAX_FOLLOWED {
                break;
            }
            self.followed.insert(fault.pid);
        }
        let who = &mut self.who;
        self.followed.retain(|&pid| match procstat::read(pid) {
            Ok(stat) => {
                who.observe(pid, &stat);
                true
            }
            Err(_) => false,
        });
        for pid in self.who.changed() {
            // New to the profile, or exec'd: its maps now, while it lives.
            self.maps.read_now(pid);
        }
        for fault in self.drained.drain(..) {
            if self.waiting.len() >= MAX_WAITING {
                self.lost += one(fault.major);
                continue;
            }
            let (mapping, offset) = self.maps.locate(fault.pid, fault.address);
            let maps = &mut self.maps;
            let code = Code::at(fault.ip, || maps.locate(fault.pid, fault.ip));
            self.waiting.push(Resolved {
                time_ns: fault.time_ns,
                pid: fault.pid,
                mapping,
                offset,
                code,
                major: fault.major,
            });
        }
    }

    /// The table of the period ending at `end_ns`: the faults resolved up to then.
    fn table(&mut self, end_ns: u64) -> PeriodTable {
        self.advance();
        let mut builder = Builder::default();
        let mut later = Vec::new();
        for fault in self.waiting.drain(..) {
            if fault.time_ns > end_ns {
                later.push(fault);
            } else {
                builder.add_at(fault.pid, fault.mapping, fault.offset, one(fault.major));
                builder.add_code(fault.code, one(fault.major));
            }
        }
        self.waiting = later;
        builder.finish(end_ns, std::mem::take(&mut self.lost), self.who.take())
    }
}

/// A [`KernelAttributor`] both the consumer (through the feed) and its period thread
/// hold.
pub struct Shared(Arc<Mutex<KernelAttributor>>);

/// The command's own last faults, read from its zombie before the reap: the faults
/// thread reads the processes it follows once a period, and a reaped one no more.
struct LastFaults(Arc<Mutex<KernelAttributor>>);

impl ExitWatch for LastFaults {
    fn exited(&mut self, pid: u32) {
        if let Ok(stat) = procstat::read(pid) {
            let mut attributor = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            attributor.who.observe(pid, &stat);
        }
    }

    fn reaped(self: Box<Self>, _pid: u32, _totals: ProcessCounters) {}
}

impl Shared {
    /// Shares `attributor`, and starts the thread that advances it every `period` (or
    /// [`DRAIN_EVERY`], if sooner) for as long as the feed holds it.
    pub fn start(attributor: KernelAttributor, period: Duration) -> std::io::Result<Shared> {
        let every = period.min(DRAIN_EVERY);
        let shared = Arc::new(Mutex::new(attributor));
        let weak: Weak<Mutex<KernelAttributor>> = Arc::downgrade(&shared);
        std::thread::Builder::new()
            .name("faults".into())
            .spawn(move || loop {
                std::thread::sleep(every);
                let Some(attributor) = weak.upgrade() else {
                    return;
                };
                (attributor.lock().unwrap_or_else(PoisonError::into_inner)).advance();
            })?;
        Ok(Shared(shared))
    }

    /// What takes the command's last faults at its exit.
    pub fn exit_watch(&self) -> Box<dyn ExitWatch> {
        Box::new(LastFaults(Arc::clone(&self.0)))
    }
}

impl TableSource for Shared {
    fn tables_until(&mut self, end_ns: u64) -> Vec<PeriodTable> {
        let mut attributor = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        vec![attributor.table(end_ns)]
    }
}

/// One fault recorded, of its kind.
fn one(major: bool) -> Faults {
    Faults {
        major: u64::from(major),
        minor_samples: u64::from(!major),
    }
}

/// The records the module could not deliver, as the table counts them.
fn lost(missed: Missed) -> Faults {
    Faults {
        major: missed.major,
        minor_samples: missed.minor,
    }
}
