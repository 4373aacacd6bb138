//! Twin of `kmod/members.c` for a `--cgroup` target: the processes a profile counts, each
//! with what was last read of it, its change added at every pass (the module's
//! collection). The module counts a cgroup as one member whose tree is every process
//! inside (its kin, `kmod/lineage.c`); here each such process is a member, and they share the tree's
//! [`Ledger`] and its words: *departed* (a dead member's counts, held by its heir),
//! *kept*. What a process did before it entered is set aside (`entered`: what the module's
//! kin `->last` holds when a walk finds it).
//!
//! The members of a cgroup selected with `--cgroup`: every process in the cgroup or one of
//! its descendant cgroups, counted while it is inside.
//!
//! Each pass lists the subtree's `cgroup.procs` and reads every member's stat, parents
//! before children, into a [`Ledger`] (the same bookkeeping as a process tree's): a
//! member's own counts and its reaped children's, so a child forked inside and reaped
//! between two passes still counts, through its parent; a dead member's counts are
//! departed, held by its heir (its nearest member ancestor) until that one has reaped
//! them. A process that enters
//! brings its history, which is set aside (`entered`): only what it does from the pass
//! that first sees it counts, and from its fork when a member forked it during the profile.
//! One that leaves alive keeps what was counted of it. Exiting processes and zombies are no
//! longer listed in `cgroup.procs`: a member that is one is read once more for its final
//! counts.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::memory::{Memory, MemoryProbe};
use super::tree::{Ledger, Seen};
use crate::system::cgroup::Cgroup;
use crate::system::procstat::{self, Probe, ProcessCounters, Stat};

/// A member, read again and again.
struct Member {
    probe: Probe,
    stat: Stat,
    memory: MemoryProbe,
}

/// The cgroup's members, counted pass after pass.
pub struct Members {
    cgroup: Arc<Cgroup>,
    members: HashMap<u32, Member>,
    ledger: Ledger,
    /// What members had done before they entered: set aside from the ledger's total.
    entered: ProcessCounters,
    /// When the last pass began, in clock ticks after boot (as start times are): a
    /// newcomer a member started since was forked inside.
    last_pass: Option<u64>,
    threads: u64,
}

impl Members {
    pub fn new(cgroup: Arc<Cgroup>) -> Members {
        Members {
            cgroup,
            members: HashMap::new(),
            ledger: Ledger::default(),
            entered: ProcessCounters::default(),
            last_pass: None,
            threads: 0,
        }
    }

    pub fn cgroup(&self) -> &Cgroup {
        &self.cgroup
    }

    /// The threads of the last pass's members: how many could have run since.
    pub fn threads(&self) -> u64 {
        self.threads
    }

    /// The members of the last pass, each with its stat as last read.
    pub fn stats(&self) -> impl Iterator<Item = (u32, &Stat)> {
        self.members.iter().map(|(&pid, m)| (pid, &m.stat))
    }

    /// What the members of the last pass hold now: a member that left or died, nothing.
    pub fn memory(&mut self) -> Memory {
        self.members
            .values_mut()
            .map(|m| m.memory.read(true, &m.stat.counters))
            .sum()
    }

    /// What the members did inside since the first pass; `None` once the cgroup is gone.
    pub fn pass(&mut self) -> Option<ProcessCounters> {
        let began = procstat::boot_ticks();
        // Parents before children, by what the last pass knew of them; newcomers last.
        // The members are read before the cgroup is listed: one still listed was inside
        // when it was read, while one read after the listing may have left and faulted
        // outside in between.
        let read: Vec<(u32, Option<Stat>)> = self
            .known_order()
            .into_iter()
            .map(|pid| (pid, self.read_member(pid)))
            .collect();
        let listed: HashSet<u32> = self.cgroup.processes()?.into_iter().collect();
        let mut pass = Vec::with_capacity(listed.len());
        let mut found = HashSet::new();
        for (pid, stat) in read {
            let seen = self.seen(pid, stat, &listed);
            if matches!(seen, Seen::In(_)) {
                found.insert(pid);
            } else {
                self.members.remove(&pid);
            }
            pass.push((pid, seen));
        }
        let mut newcomers: Vec<u32> = listed.difference(&found).copied().collect();
        newcomers.sort_unstable();
        for pid in newcomers {
            if let Some(stat) = self.admit(pid, &found) {
                pass.push((pid, Seen::In(stat)));
            }
        }
        self.last_pass = Some(began);
        self.threads = self.members.values().map(|m| m.stat.threads).sum();
        Some(self.ledger.settle(&pass).saturating_sub(self.entered))
    }

    /// Where a member read before the listing (its `stat`, `None` once gone) stands.
    fn seen(&mut self, pid: u32, stat: Option<Stat>, listed: &HashSet<u32>) -> Seen {
        let stat = match stat {
            // Not listed: it left, or it died since it was read (zombies are not listed
            // either), which a second read tells.
            Some(s) if !listed.contains(&pid) && !s.exited => self.read_member(pid),
            stat => stat,
        };
        match stat {
            // Listed, or a zombie: its counts now.
            Some(stat) if listed.contains(&pid) || stat.exited => Seen::In(stat),
            // Alive and not listed: it left, or it is exiting, which the listing skips
            // from cgroup_exit() until the process is a zombie. Taken for one that left,
            // its counts would be kept and then counted again in its parent's reaped ones.
            Some(stat) => match self.cgroup.holds(pid) {
                Some(true) => Seen::In(stat),
                Some(false) => Seen::Out,
                None => Seen::Dead,
            },
            None => Seen::Dead,
        }
    }

    /// A process newly listed: a member from now on, its stat; `None` when it cannot be
    /// read. What it did before it entered is not counted, unless it was forked inside
    /// by a member (`found`) since the last pass.
    fn admit(&mut self, pid: u32, found: &HashSet<u32>) -> Option<Stat> {
        let mut probe = Probe::open(pid).ok()?;
        let stat = probe.read().ok()?;
        let memory = MemoryProbe::open(pid).ok()?;
        let forked_inside = self
            .last_pass
            .is_some_and(|last| stat.start >= last && found.contains(&stat.ppid));
        if !forked_inside {
            self.entered += stat.counters + stat.reaped;
        }
        self.members.insert(
            pid,
            Member {
                probe,
                stat,
                memory,
            },
        );
        Some(stat)
    }

    /// A member's stat now, kept as its latest; `None` once it is gone.
    fn read_member(&mut self, pid: u32) -> Option<Stat> {
        let member = self.members.get_mut(&pid)?;
        let stat = member.probe.read().ok().filter(|s| !s.dead)?;
        member.stat = stat;
        Some(stat)
    }

    /// The members of the last pass, each after its parent when that is a member too.
    fn known_order(&self) -> Vec<u32> {
        let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut roots = Vec::new();
        for (&pid, m) in &self.members {
            if self.members.contains_key(&m.stat.ppid) && m.stat.ppid != pid {
                children.entry(m.stat.ppid).or_default().push(pid);
            } else {
                roots.push(pid);
            }
        }
        let mut order = Vec::with_capacity(self.members.len());
        let mut next = roots;
        while let Some(pid) = next.pop() {
            order.push(pid);
            next.extend(children.remove(&pid).unwrap_or_default());
        }
        // Parents that name each other (stale stats around a reused pid) still get read.
        order.extend(children.into_values().flatten());
        order
    }
}
