//! Who took the faults: each profiled process's own faults, period by period, exact, from
//! the stat every pass reads anyway (a selected process, its descendants, a cgroup's
//! members). A process that started after the profile counts from its fork; one that was
//! there before, from the first pass that reads it.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use crate::attribution::ProcessFaults;
use crate::system::procstat::{Comm, Stat};

struct Faulter {
    /// With the pid, names the process.
    start: u64,
    comm: Comm,
    name: Arc<str>,
    /// Its own faults as last read.
    minor: u64,
    major: u64,
    /// What it took since the last period's table.
    new_minor: u64,
    new_major: u64,
    /// The period it was last read in.
    seen: u64,
}

/// Every profiled process's own faults since the last period's table.
pub struct Who {
    procs: HashMap<u32, Faulter>,
    /// When the profile began, in clock ticks after boot (as start times are).
    began: u64,
    period: u64,
    /// Processes first read, or renamed (an exec), since [`Who::changed`] was last asked:
    /// their mappings are new.
    changed: Vec<u32>,
}

impl Who {
    /// For a profile that began at `began`, in clock ticks after boot
    /// ([`crate::system::procstat::boot_ticks`]).
    pub fn new(began: u64) -> Who {
        Who {
            procs: HashMap::new(),
            began,
            period: 0,
            changed: Vec::new(),
        }
    }

    /// A process as a pass read it (or, when it did not run, as it was last read).
    pub fn observe(&mut self, pid: u32, stat: &Stat) {
        let own = stat.counters;
        // Started during the profile: everything it did counts.
        let fresh = stat.start >= self.began;
        let first = Faulter {
            start: stat.start,
            comm: stat.comm,
            name: stat.comm.to_string_lossy().into(),
            minor: if fresh { 0 } else { own.minor },
            major: if fresh { 0 } else { own.major },
            new_minor: 0,
            new_major: 0,
            seen: self.period,
        };
        let faulter = match self.procs.entry(pid) {
            Entry::Occupied(e) if e.get().start == stat.start => e.into_mut(),
            Entry::Occupied(mut e) => {
                e.insert(first);
                self.changed.push(pid);
                e.into_mut()
            }
            Entry::Vacant(e) => {
                self.changed.push(pid);
                e.insert(first)
            }
        };
        faulter.new_minor += own.minor.saturating_sub(faulter.minor);
        faulter.new_major += own.major.saturating_sub(faulter.major);
        faulter.minor = faulter.minor.max(own.minor);
        faulter.major = faulter.major.max(own.major);
        faulter.seen = self.period;
        if faulter.comm != stat.comm {
            // It exec'd: its name from now on.
            faulter.comm = stat.comm;
            faulter.name = stat.comm.to_string_lossy().into();
            self.changed.push(pid);
        }
    }

    /// The processes first read, or renamed, since the last call.
    pub fn changed(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.changed)
    }

    /// The faults each process took since the last call (those with any); forgets the
    /// processes this period did not read (gone).
    pub fn take(&mut self) -> Vec<ProcessFaults> {
        let period = self.period;
        let mut faulted = Vec::new();
        self.procs.retain(|&pid, f| {
            if f.new_minor > 0 || f.new_major > 0 {
                faulted.push(ProcessFaults {
                    pid,
                    comm: Arc::clone(&f.name),
                    minor: std::mem::take(&mut f.new_minor),
                    major: std::mem::take(&mut f.new_major),
                });
            }
            f.seen == period
        });
        self.period += 1;
        faulted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::system::procstat::ProcessCounters;

    fn stat(start: u64, minor: u64, major: u64, comm: &str) -> Stat {
        Stat {
            counters: ProcessCounters {
                minor,
                major,
                cpu_ns: 0,
            },
            reaped: ProcessCounters::default(),
            exited: false,
            dead: false,
            ppid: 1,
            start,
            threads: 1,
            comm: Comm::new(comm),
        }
    }

    #[test]
    fn a_process_from_before_counts_from_its_first_read_and_a_new_one_from_its_fork() {
        let mut who = Who::new(1000);
        let old = who.began.saturating_sub(1);
        who.observe(1, &stat(old, 100, 5, "old"));
        who.observe(2, &stat(who.began + 1, 30, 1, "new"));
        let mut first = who.take();
        first.sort_by_key(|p| p.pid);
        assert_eq!(
            first
                .iter()
                .map(|p| (p.pid, p.minor, p.major))
                .collect::<Vec<_>>(),
            [(2, 30, 1)]
        );
        who.observe(1, &stat(old, 150, 5, "old"));
        let second = who.take();
        assert_eq!(second.len(), 1);
        assert_eq!(
            (second[0].pid, second[0].minor, &*second[0].comm),
            (1, 50, "old")
        );
        // Both new the first time they were read, neither since.
        assert_eq!(who.changed(), [1, 2]);
        // Not read this period: gone, forgotten; a new process with its pid counts anew.
        assert!(who.take().is_empty());
        assert!(who.procs.is_empty());
    }

    #[test]
    fn a_pid_given_to_another_process_counts_that_one_apart() {
        let mut who = Who::new(1000);
        who.observe(1, &stat(who.began + 1, 10, 0, "a"));
        who.take();
        who.observe(1, &stat(who.began + 2, 4, 0, "b"));
        let taken = who.take();
        assert_eq!((taken[0].minor, &*taken[0].comm), (4, "b"));
        assert_eq!(who.changed(), [1, 1]);
        // Renamed by an exec: its mappings are new.
        who.observe(1, &stat(who.began + 2, 5, 0, "c"));
        assert_eq!(who.changed(), [1]);
    }
}
