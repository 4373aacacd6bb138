//! A process the user selected (`--pid`, or the command `monitor run` started), read
//! period after period: its stat and CPU clock ([`Probe`]), its memory ([`MemoryProbe`]),
//! and its descendants when they count with it ([`Tree`]).

use std::os::fd::{FromRawFd, OwnedFd};

use nix::errno::Errno;

use super::memory::{Memory, MemoryProbe};
use super::tree::Tree;
use crate::system::procstat::{Probe, ProcessCounters, Stat, StatError};

/// A selected process and what to count from.
pub struct Process {
    pub pid: u32,
    /// Counts already accounted for: zero for a child we forked (it is profiled from
    /// its first instruction), the counters at attach time for `--pid` (with its
    /// descendants' when it inherits).
    pub baseline: ProcessCounters,
    /// When the counting began (`CLOCK_MONOTONIC`, ns): the baseline's read, or our
    /// child's fork (as near as we see it). The sampler's start mark is dated so, so the
    /// first period measures what the baseline left out from there.
    pub counted_from_ns: u64,
    /// Our own child: its exit is reported with [`Event::Exited`] and its last counts
    /// come from wait4(), so /proc vanishing is not the end of it.
    pub child: bool,
    /// Its start time ([`crate::system::procstat::Stat::start`]): a stat of another start time
    /// is another process that got the pid after ours was gone.
    pub start: u64,
    pub(super) probe: Probe,
    pub(super) memory: MemoryProbe,
    /// Readable once a process that is not our child has exited.
    pub(super) pidfd: Option<OwnedFd>,
    /// Its descendants, when they count with it (inherit).
    pub(super) tree: Option<Tree>,
    /// Its own stat as last counted: while its CPU clock stands still, it is unchanged.
    pub(super) last: Option<Stat>,
}

impl Process {
    /// A running process, counted from its counters now; with `inherit`, with its
    /// descendants.
    pub fn attach(pid: u32, inherit: bool) -> Result<Process, StatError> {
        let mut probe = Probe::open(pid)?;
        // Opened before the stat read that checks the pid is still the process's.
        let memory = MemoryProbe::open(pid)?;
        let stat = probe.read()?;
        let mut process = Process {
            pid,
            baseline: stat.counters,
            counted_from_ns: shared_layout::abi::monotonic_ns(),
            child: false,
            start: stat.start,
            // Without pidfds (Linux < 5.3) the exit is seen at the next period.
            pidfd: pidfd_open(pid).ok(),
            probe,
            memory,
            tree: inherit.then(|| Tree::new(pid)),
            last: None,
        };
        process.baseline = process.counts(&stat, true);
        Ok(process)
    }

    /// Our child, not reaped yet (its pid is still its own), counted from zero since
    /// `forked_ns` (`CLOCK_MONOTONIC`): the kernel zeroes a process's counters at fork.
    /// With `inherit`, with its descendants.
    pub fn child(pid: u32, inherit: bool, forked_ns: u64) -> Result<Process, StatError> {
        let mut probe = Probe::open(pid)?;
        let memory = MemoryProbe::open(pid)?;
        Ok(Process {
            pid,
            baseline: ProcessCounters::default(),
            counted_from_ns: forked_ns,
            child: true,
            start: probe.read()?.start,
            pidfd: None,
            probe,
            memory,
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
    pub(super) fn threads(&self) -> u64 {
        match &self.tree {
            Some(tree) => tree.threads(),
            None => self.last.map_or(1, |stat| stat.threads),
        }
    }

    /// What it holds now (`ran`: its CPU clock moved since the last pass), with its
    /// descendants in the tree at the last pass.
    pub(super) fn memory(&mut self, ran: bool) -> Memory {
        let counters = self.last.map(|stat| stat.counters).unwrap_or_default();
        let own = self.memory.read(ran, &counters);
        own + self.tree.as_mut().map_or(Memory::default(), Tree::memory)
    }

    /// What counts of it given its own stat (`fresh`: just read, else as last counted):
    /// its own counters, or its tree's total.
    pub(super) fn counts(&mut self, stat: &Stat, fresh: bool) -> ProcessCounters {
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
