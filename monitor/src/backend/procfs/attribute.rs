//! Twin of `kmod/faults.c`, with [`super::perf`]: the same two software events on the
//! profiled processes' threads, inherited (every major fault, one minor fault in
//! `minor_sampling`), drained by the sampler once a period and whenever a ring is half
//! full, as the module's per-CPU buffers are. A fault the module's handler drops (a full
//! buffer) is one perf's full ring drops here (`PERF_RECORD_LOST`): either way the
//! period's table counts it as lost.
//!
//! Where the procfs backend's faults were: the fault events' records, drained each period
//! (and whenever a ring is half full) by the sampler thread, their addresses resolved to
//! mappings ([`super::maps`]), gathered into the period's table.

use std::os::fd::BorrowedFd;

use super::maps::MapsCache;
use super::perf::{FaultEvents, Kind, Record};
use crate::attribution::table::Builder;
use crate::attribution::{Faults, PeriodTable, ProcessFaults};

/// The most processes whose maps are read ahead of their faults in a period: each read
/// costs tens of µs, and a storm of short-lived processes must not make a period's work
/// grow without bound (the others are read when their faults are resolved).
const MAPS_READ_AHEAD: usize = 32;

/// The fault events and the table of the period under way.
pub struct Attributor {
    events: FaultEvents,
    maps: MapsCache,
    /// The period under way, and the next: records drained at a period's end that came
    /// after its timestamp belong to the next.
    current: Builder,
    next: Builder,
    lost: Faults,
    /// The rings whose descriptor hung up (its event's task and inherited children are
    /// gone: poll says so at once, forever), by their position in
    /// [`FaultEvents::poll_fds`]: drained each period, no longer polled.
    hung_up: Vec<usize>,
}

impl Attributor {
    pub fn new(events: FaultEvents) -> Attributor {
        Attributor {
            events,
            maps: MapsCache::default(),
            current: Builder::default(),
            next: Builder::default(),
            lost: Faults::default(),
            hung_up: Vec::new(),
        }
    }

    /// The descriptors that wake the sampler when a ring is half full.
    pub fn poll_fds(&self) -> Vec<BorrowedFd<'_>> {
        (self.events.poll_fds().enumerate())
            .filter(|(i, _)| !self.hung_up.contains(i))
            .map(|(_, fd)| fd)
            .collect()
    }

    /// The descriptors at these positions of [`Attributor::poll_fds`]'s answer hung up:
    /// they are not polled again.
    pub fn hang_up(&mut self, positions: &[usize]) {
        let polled: Vec<usize> = (0..self.events.poll_fds().count())
            .filter(|i| !self.hung_up.contains(i))
            .collect();
        self.hung_up
            .extend(positions.iter().filter_map(|&p| polled.get(p).copied()));
    }

    /// Takes what the rings hold now, all of it the period under way's.
    pub fn drain(&mut self) {
        self.drain_until(u64::MAX);
    }

    /// The table of the period ending at `end_ns` (its sample's timestamp), with each
    /// process's own faults.
    pub fn finish(&mut self, end_ns: u64, processes: Vec<ProcessFaults>) -> PeriodTable {
        self.drain_until(end_ns);
        let next = std::mem::take(&mut self.next);
        let table = std::mem::replace(&mut self.current, next).finish(
            end_ns,
            std::mem::take(&mut self.lost),
            processes,
        );
        self.maps.next_period();
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

    fn drain_until(&mut self, end_ns: u64) {
        let Attributor {
            events,
            maps,
            current,
            next,
            lost,
            ..
        } = self;
        events.drain(|kind, record| match record {
            Record::Sample {
                pid, time_ns, addr, ..
            } => {
                let mapping = maps.resolve(pid, addr);
                let builder = if time_ns <= end_ns {
                    &mut *current
                } else {
                    &mut *next
                };
                builder.add(pid, mapping, one(kind, 1));
            }
            Record::Lost(n) => *lost += one(kind, n),
        });
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
