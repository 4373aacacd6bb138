//! Where the kernel backend's faults were: the module's faults region, drained when the
//! consumer takes a sample (the module wrote the period's faults before it), each
//! fault's address resolved to its mapping by the same maps cache as the procfs
//! backend's, from `/proc/<pid>/maps` with the monitor's own rights; each process's own
//! faults read from its `/proc/<pid>/stat`, as the procfs backend's are.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use shared_layout::faults::{Fault, FaultsRegion, Missed};

use crate::attribution::table::Builder;
use crate::attribution::{Faults, PeriodTable, Source};
use crate::backend::procfs::maps::MapsCache;
use crate::backend::procfs::who::Who;
use crate::system::procstat;

/// The most processes whose own faults are followed: a storm of short-lived processes
/// must not make each period's reads grow without bound (the others' faults are still
/// placed, their own counts not listed).
const MAX_FOLLOWED: usize = 256;

/// The faults region and what the periods not given yet hold.
pub struct KernelAttributor {
    region: FaultsRegion,
    maps: MapsCache,
    who: Who,
    /// Processes whose own faults are read each period: the targets, and each process
    /// a fault was recorded of.
    followed: HashSet<u32>,
    /// Faults drained that came after the last table's end.
    later: Vec<Fault>,
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
            later: Vec::new(),
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

    fn follow_faulters(&mut self) {
        for fault in &self.drained {
            if self.followed.len() >= MAX_FOLLOWED {
                break;
            }
            self.followed.insert(fault.pid);
        }
    }

    /// Reads each followed process's own counters; forgets those gone.
    fn observe(&mut self) {
        let who = &mut self.who;
        self.followed.retain(|&pid| match procstat::read(pid) {
            Ok(stat) => {
                who.observe(pid, &stat);
                true
            }
            Err(_) => false,
        });
    }
}

impl Source for KernelAttributor {
    fn tables_until(&mut self, end_ns: u64) -> Vec<PeriodTable> {
        let missed = self.region.drain(&mut self.drained);
        (self.unattributed).fetch_max(self.region.unattributed(), Ordering::Relaxed);
        self.lost += lost(missed);
        self.follow_faulters();
        self.observe();
        for pid in self.who.changed() {
            // New to the profile, or exec'd: its maps now, while it lives.
            self.maps.read_now(pid);
        }
        let mut builder = Builder::default();
        let faults = std::mem::take(&mut self.later)
            .into_iter()
            .chain(self.drained.drain(..));
        for fault in faults {
            if fault.time_ns > end_ns {
                self.later.push(fault);
                continue;
            }
            let mapping = self.maps.resolve(fault.pid, fault.address);
            builder.add(fault.pid, mapping, one(fault.major));
        }
        let table = builder.finish(end_ns, std::mem::take(&mut self.lost), self.who.take());
        self.maps.next_period();
        vec![table]
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
