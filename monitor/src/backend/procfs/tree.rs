//! Twin of `kmod/lineage.c`, by another road: the module knows each process of a tree
//! from its fork (a tracepoint) and counts it from its own counters until its release; a
//! user-space pass sees no forks, so it finds the tree by walking `/proc` and takes reaped
//! descendants from their parents' reaped counts. A process's *heir* is the nearest
//! ancestor still in the tree; what a descendant that died takes away is *departed* until
//! its heir's reaped counts pay it, and what will never reach a reaped count is *kept*
//! (the module's member keeps its kin's in `->kept` the same way). The module's exclusion
//! (a kin its opener may not read) has no counterpart here: a pass counts what `/proc`
//! shows it.
//!
//! A profiled process counted with its descendants (inherit, as `perf stat` and wait4()'s
//! RUSAGE_CHILDREN count them): its own counts and its reaped children's (stat's cminflt,
//! cmajflt, cutime + cstime), plus the same of every live child, found through
//! `/proc/<pid>/task/<tid>/children`, and so on down the tree.
//!
//! A child counts live until its parent reaps it, then in its parent's reaped counts,
//! never in both: each pass reads a parent before its children, and the kernel marks a
//! child dead (state X) before it adds the child's counts to its parent's, so a child
//! read alive after its parent is not in the parent's counts yet. A child read dead or
//! gone may be in them already or not yet: what was counted of it is *departed*, held by
//! its parent until the parent's reaped counts have grown by as much, so the total neither
//! counts it twice nor dips meanwhile. A process that leaves the tree alive (orphaned,
//! reparented outside it) keeps what was counted of it, and so does a child whose parent
//! does not wait for it (the kernel adds its counts to nobody's).
//!
//! Memory is a level, not a count: the tree holds what its live processes hold now
//! ([`Tree::memory`]); a process that died or left holds nothing of it.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::memory::{Memory, MemoryProbe};
use crate::system::procstat::{self, Probe, ProcessCounters, Stat};

/// What a pass found of a process in the tree, or of one that was in it at the last pass.
#[derive(Clone, Copy, Debug)]
pub enum Seen {
    /// In the tree: its stat, read after its parent's.
    In(Stat),
    /// Dead (state X) or gone: reaped or being reaped.
    Dead,
    /// Alive but out of the tree: orphaned and reparented outside it.
    Out,
}

/// The counting of one tree, apart from reading it.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The processes in the tree at the last pass.
    slots: HashMap<u32, Slot>,
    /// What was counted of processes that left the tree with no heir in it to hold it
    /// (the module's `->kept`).
    kept: ProcessCounters,
}

/// A process a pass found in the tree (the module's `struct pfprof_tree_slot`).
#[derive(Clone, Copy, Debug)]
struct Slot {
    /// With the pid, names the process.
    start: u64,
    parent: u32,
    /// Its own and its reaped children's counts, as last read.
    counts: ProcessCounters,
    reaped: ProcessCounters,
    /// What was counted of its descendants that died since, this one their heir (the
    /// module's `->departed`): its `reaped` grows by at least as much as it waits for them.
    departed: ProcessCounters,
}

impl Slot {
    fn new(stat: &Stat) -> Slot {
        Slot {
            start: stat.start,
            parent: stat.ppid,
            counts: stat.counters + stat.reaped,
            reaped: stat.reaped,
            departed: ProcessCounters::default(),
        }
    }

    /// What it adds to the tree's total.
    fn total(&self) -> ProcessCounters {
        self.counts + self.departed
    }
}

impl Ledger {
    /// Takes what one pass found (every process in the tree, and every one that was in it
    /// at the last pass and is not now) and returns the tree's total.
    pub fn settle(&mut self, pass: &[(u32, Seen)]) -> ProcessCounters {
        let mut dead = Vec::new();
        let mut grown = Vec::new();
        for &(pid, seen) in pass {
            match seen {
                Seen::In(stat) => match self.slots.entry(pid) {
                    Entry::Occupied(mut e) if e.get().start == stat.start => {
                        let m = e.get_mut();
                        grown.push((pid, stat.reaped.saturating_sub(m.reaped)));
                        m.counts = stat.counters + stat.reaped;
                        m.reaped = stat.reaped;
                        m.parent = stat.ppid;
                    }
                    // The pid was another process's, which died.
                    Entry::Occupied(mut e) => dead.push((pid, e.insert(Slot::new(&stat)))),
                    Entry::Vacant(e) => {
                        e.insert(Slot::new(&stat));
                    }
                },
                Seen::Dead => dead.extend(self.slots.remove(&pid).map(|m| (pid, m))),
                Seen::Out => {
                    if let Some(m) = self.slots.remove(&pid) {
                        self.kept += m.total();
                    }
                }
            }
        }
        // The heir, the nearest ancestor still in the tree, holds what was counted of the
        // dead as departed: its reaped counts hold them once it has waited for them, each
        // inside its parent's.
        let parents: HashMap<u32, u32> = dead.iter().map(|(pid, m)| (*pid, m.parent)).collect();
        for (_, m) in &dead {
            let mut heir = m.parent;
            for _ in 0..dead.len() {
                match parents.get(&heir) {
                    Some(&parent) => heir = parent,
                    None => break,
                }
            }
            match self.slots.get_mut(&heir) {
                Some(heir) => heir.departed += m.total(),
                None => self.kept += m.total(),
            }
        }
        // What a process reaped since the last pass pays its departed first: only the
        // rest is new.
        for (pid, growth) in grown {
            if let Some(m) = self.slots.get_mut(&pid) {
                m.departed = m.departed.saturating_sub(growth);
            }
        }
        self.slots
            .values()
            .fold(self.kept, |total, m| total + m.total())
    }
}

/// A process and its descendants, read in passes.
pub struct Tree {
    root: u32,
    /// The root's children when its stat was last read.
    root_children: Vec<u32>,
    /// The descendants in the tree at the last pass.
    procs: HashMap<u32, Proc>,
    ledger: Ledger,
    /// The threads of the last pass's processes, and of those that left the tree since
    /// the pass before (as last read): how many could have run in between.
    threads: u64,
}

/// A descendant, read again and again.
struct Proc {
    probe: Probe,
    memory: MemoryProbe,
    /// Its CPU clock moved at the last pass.
    ran: bool,
    /// Its stat (CPU time: its CPU clock) and children, as last read.
    stat: Stat,
    children: Vec<u32>,
}

impl Proc {
    /// Its stat now, `None` once it is dead; lists its children again when it has run.
    fn read(&mut self, pid: u32) -> Option<Stat> {
        let cpu = self.probe.cpu_ns();
        // A process whose CPU clock stands still took no fault, forked and reaped nobody:
        // its stat and children are as last read (children it did not wait for may be
        // gone, which reading them shows).
        self.ran = !matches!(&cpu, Some(Ok(ns)) if *ns == self.stat.counters.cpu_ns);
        if self.ran {
            self.stat = self.probe.read_with_cpu(cpu).ok().filter(|s| !s.dead)?;
            self.children = procstat::children(pid);
        }
        Some(self.stat)
    }
}

impl Tree {
    pub fn new(root: u32) -> Tree {
        Tree {
            root,
            root_children: Vec::new(),
            procs: HashMap::new(),
            ledger: Ledger::default(),
            threads: 0,
        }
    }

    /// The total of the tree now, given the root's stat: `fresh` when just read, else as
    /// read before (its CPU clock stood still).
    pub fn total(&mut self, root: &Stat, fresh: bool) -> ProcessCounters {
        if fresh {
            self.root_children = procstat::children(self.root);
        }
        self.threads = 0;
        let mut pass = vec![(self.root, Seen::In(*root))];
        let mut found = HashSet::from([self.root]);
        let mut visited = HashSet::new();
        let mut next = self.root_children.clone();
        // Depth first: every process is read before its children are.
        while let Some(pid) = next.pop() {
            // A child moving between two threads' lists may be listed twice.
            if !visited.insert(pid) {
                continue;
            }
            if let Some(stat) = self.visit(pid, &mut pass) {
                found.insert(pid);
                pass.push((pid, Seen::In(stat)));
                next.extend_from_slice(&self.procs[&pid].children);
            }
        }
        self.strays(&mut found, &mut pass);
        self.threads += pass
            .iter()
            .map(|(_, seen)| match seen {
                Seen::In(stat) => stat.threads,
                _ => 0,
            })
            .sum::<u64>();
        self.ledger.settle(&pass)
    }

    /// Whether the last pass found no descendant: the root neither had a child nor
    /// left one in the tree.
    pub fn is_root_alone(&self) -> bool {
        self.root_children.is_empty() && self.procs.is_empty()
    }

    /// What the descendants in the tree at the last pass hold now (the root's own is its
    /// caller's to read).
    pub fn memory(&mut self) -> Memory {
        self.procs
            .values_mut()
            .map(|p| p.memory.read(p.ran, &p.stat.counters))
            .sum()
    }

    /// The descendants in the tree at the last pass, each with its stat as last read.
    pub fn stats(&self) -> impl Iterator<Item = (u32, &Stat)> {
        self.procs.iter().map(|(&pid, proc)| (pid, &proc.stat))
    }

    /// How many threads could have run between the last pass and the one before: those
    /// of the processes in the tree at the last pass, and of those that left it since.
    pub fn threads(&self) -> u64 {
        self.threads
    }

    /// Forgets a descendant that left the tree, counting its threads (as last read) among
    /// those that could have run since the last pass.
    fn forget(&mut self, pid: u32) {
        if let Some(proc) = self.procs.remove(&pid) {
            self.threads += proc.stat.threads;
        }
    }

    /// Reads a listed process: its stat if it is in the tree (alive or a zombie).
    fn visit(&mut self, pid: u32, pass: &mut Vec<(u32, Seen)>) -> Option<Stat> {
        let mut dead = None;
        if let Some(proc) = self.procs.get_mut(&pid) {
            if let Some(stat) = proc.read(pid) {
                return Some(stat);
            }
            dead = Some(proc.stat.start);
            self.forget(pid);
            pass.push((pid, Seen::Dead));
        }
        // Gone before it could be read: its parent's reaped counts have it, or will. Listed
        // though dead: the pid may be another process's already.
        let mut probe = Probe::open(pid).ok()?;
        let memory = MemoryProbe::open(pid).ok()?;
        let stat = (probe.read().ok()).filter(|s| !s.dead && Some(s.start) != dead)?;
        let children = procstat::children(pid);
        self.procs.insert(
            pid,
            Proc {
                probe,
                memory,
                ran: true,
                stat,
                children,
            },
        );
        Some(stat)
    }

    /// The descendants of the last pass that this one did not reach: dead, out of the
    /// tree, or still in it though their parent's list missed them.
    fn strays(&mut self, found: &mut HashSet<u32>, pass: &mut Vec<(u32, Seen)>) {
        let unreached: Vec<u32> = (self.procs.keys())
            .filter(|pid| !found.contains(pid))
            .copied()
            .collect();
        let mut alive = Vec::new();
        for pid in unreached {
            let proc = self.procs.get_mut(&pid);
            match proc.and_then(|p| p.probe.read().ok()).filter(|s| !s.dead) {
                Some(stat) => alive.push((pid, stat)),
                None => {
                    self.forget(pid);
                    pass.push((pid, Seen::Dead));
                }
            }
        }
        // Still in the tree when its parent is, whose stat this pass read before its own.
        while let Some(i) = alive.iter().position(|(_, s)| found.contains(&s.ppid)) {
            let (pid, stat) = alive.swap_remove(i);
            if let Some(proc) = self.procs.get_mut(&pid) {
                proc.stat = stat;
                proc.children = procstat::children(pid);
            }
            found.insert(pid);
            pass.push((pid, Seen::In(stat)));
        }
        for (pid, _) in alive {
            self.forget(pid);
            pass.push((pid, Seen::Out));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::process::{Command, Stdio};
    use std::thread;
    use std::time::Duration;

    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;

    use super::*;

    const ROOT: u32 = 1000;

    /// In the tree, with `own` and `reaped` minor faults.
    fn stat(ppid: u32, own: u64, reaped: u64) -> Seen {
        started(ppid, own, reaped, 1)
    }

    /// The same, started at `start` (`stat`: 1).
    fn started(ppid: u32, own: u64, reaped: u64, start: u64) -> Seen {
        let minor = |minor| ProcessCounters {
            minor,
            ..ProcessCounters::default()
        };
        Seen::In(Stat {
            counters: minor(own),
            reaped: minor(reaped),
            exited: false,
            dead: false,
            ppid,
            start,
            threads: 1,
            comm: Default::default(),
        })
    }

    fn minor(ledger: &mut Ledger, pass: &[(u32, Seen)]) -> u64 {
        ledger.settle(pass).minor
    }

    /// The root with 10 faults and its child with 100.
    fn parent_and_child() -> [(u32, Seen); 2] {
        [(ROOT, stat(1, 10, 0)), (1001, stat(ROOT, 100, 0))]
    }

    /// The same with a grandchild of 1000.
    fn three_generations() -> [(u32, Seen); 3] {
        [
            (ROOT, stat(1, 10, 0)),
            (1001, stat(ROOT, 100, 0)),
            (1002, stat(1001, 1000, 0)),
        ]
    }

    #[test]
    fn a_tree_counts_each_process_with_what_it_reaped_and_its_live_descendants() {
        let mut ledger = Ledger::default();
        let pass = [
            (ROOT, stat(1, 10, 5)),
            (1001, stat(ROOT, 100, 7)),
            (1002, stat(1001, 1000, 0)),
        ];
        assert_eq!(minor(&mut ledger, &pass), 1122);
    }

    #[test]
    fn a_child_reaped_between_the_reads_of_its_parent_and_its_own_is_counted_once() {
        let mut ledger = Ledger::default();
        assert_eq!(minor(&mut ledger, &parent_and_child()), 110);
        // Its parent read before the reap, the child after: dead, in nobody's counts
        // as read. What was counted of it stays.
        assert_eq!(
            minor(&mut ledger, &[(ROOT, stat(1, 10, 0)), (1001, Seen::Dead)]),
            110
        );
        // Then in its parent's reaped counts, with the 20 faults it took since its last
        // read: only those are new.
        assert_eq!(minor(&mut ledger, &[(ROOT, stat(1, 10, 120))]), 130);
        assert_eq!(minor(&mut ledger, &[(ROOT, stat(1, 11, 120))]), 131);
    }

    #[test]
    fn a_child_read_dead_after_its_parent_reaped_it_is_counted_once() {
        let mut ledger = Ledger::default();
        minor(&mut ledger, &parent_and_child());
        let pass = [(ROOT, stat(1, 10, 120)), (1001, Seen::Dead)];
        assert_eq!(minor(&mut ledger, &pass), 130);
        assert_eq!(minor(&mut ledger, &[(ROOT, stat(1, 10, 120))]), 130);
    }

    #[test]
    fn descendants_dead_together_depart_to_their_heir_the_nearest_ancestor_in_the_tree() {
        let mut ledger = Ledger::default();
        assert_eq!(minor(&mut ledger, &three_generations()), 1110);
        let pass = [
            (ROOT, stat(1, 10, 0)),
            (1002, Seen::Dead),
            (1001, Seen::Dead),
        ];
        assert_eq!(minor(&mut ledger, &pass), 1110);
        // The child had reaped the grandchild: the root's reaped counts hold both.
        assert_eq!(minor(&mut ledger, &[(ROOT, stat(1, 10, 1100))]), 1110);
    }

    #[test]
    fn departed_below_a_parent_that_does_not_wait_stays_counted_and_its_faults_count_in_full() {
        let mut ledger = Ledger::default();
        minor(&mut ledger, &parent_and_child());
        // Reaped by nobody (SIGCHLD ignored): the parent's reaped counts never grow.
        assert_eq!(
            minor(&mut ledger, &[(ROOT, stat(1, 10, 0)), (1001, Seen::Dead)]),
            110
        );
        assert_eq!(minor(&mut ledger, &[(ROOT, stat(1, 50, 0))]), 150);
    }

    #[test]
    fn a_descendant_orphaned_out_of_the_tree_keeps_what_was_counted_of_it_and_no_more() {
        let mut ledger = Ledger::default();
        minor(&mut ledger, &three_generations());
        // The child exits and is reaped; its child, reparented to init, is out.
        let pass = [
            (ROOT, stat(1, 10, 100)),
            (1001, Seen::Dead),
            (1002, Seen::Out),
        ];
        assert_eq!(minor(&mut ledger, &pass), 1110);
        assert_eq!(minor(&mut ledger, &[(ROOT, stat(1, 10, 100))]), 1110);
    }

    #[test]
    fn a_pid_given_to_another_process_counts_the_new_one_from_zero_and_the_old_one_once() {
        let mut ledger = Ledger::default();
        minor(&mut ledger, &parent_and_child());
        // Its parent reaped it and forked another that got the same pid.
        let pass = [(ROOT, stat(1, 10, 0)), (1001, started(ROOT, 5, 0, 2))];
        assert_eq!(minor(&mut ledger, &pass), 115);
        let pass = [(ROOT, stat(1, 10, 100)), (1001, started(ROOT, 6, 0, 2))];
        assert_eq!(minor(&mut ledger, &pass), 116);
    }

    /// Waits until process `pid` has stopped (state T).
    fn stopped(pid: u32) {
        while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap()
            .contains(") T ")
        {
            thread::sleep(Duration::from_millis(5));
        }
    }

    fn resume(pid: u32) {
        kill(Pid::from_raw(pid as i32), Signal::SIGCONT).unwrap();
    }

    /// Kills the processes when dropped: a failed test leaves none stopped behind.
    struct KillOnDrop(Vec<u32>);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            for &pid in &self.0 {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
        }
    }

    #[test]
    fn a_tree_holds_the_memory_of_its_live_descendants_and_none_of_a_reaped_one() {
        if !procstat::children_listed() {
            eprintln!("skipped: this kernel does not list children in /proc");
            return;
        }
        let mut parent = Command::new("sh")
            .args(["-c", "sleep 30 & wait"])
            .spawn()
            .unwrap();
        let pid = parent.id();
        let mut guard = KillOnDrop(vec![pid]);
        let status = |pid: u32| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            crate::backend::procfs::memory::parse_status(&text).unwrap()
        };
        // The child once it has mapped its binary, and stopped: its memory stands still.
        let child = loop {
            match procstat::children(pid)[..] {
                [child] if status(child).rss_file > 0 => break child,
                _ => thread::sleep(Duration::from_millis(5)),
            }
        };
        guard.0.push(child);
        kill(Pid::from_raw(child as i32), Signal::SIGSTOP).unwrap();
        stopped(child);
        let mut tree = Tree::new(pid);
        tree.total(&procstat::read(pid).unwrap(), true);
        assert_eq!(tree.memory(), status(child));
        // Killed and reaped by the shell: gone from the tree, its memory with it.
        kill(Pid::from_raw(child as i32), Signal::SIGKILL).unwrap();
        parent.wait().unwrap();
        assert_eq!(
            tree.memory(),
            crate::backend::procfs::memory::Memory::default()
        );
    }

    #[test]
    fn a_childs_faults_count_while_it_lives_and_once_its_parent_reaped_it_exactly_once() {
        assert!(
            procstat::children_listed(),
            "this kernel does not list children in /proc (CONFIG_PROC_CHILDREN): live \
             descendants cannot be counted here, which is what this test is about"
        );
        // The parent waits for its child, then stops itself. The child faults in dd's
        // 64 MiB buffer (16,384 pages, or far fewer huge ones) through a grandchild it
        // reaps, then stops itself before exiting.
        let mut parent = Command::new("sh")
            .args([
                "-c",
                "sh -c 'dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; \
                 kill -STOP $$' & wait; kill -STOP $$",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid = parent.id();
        let mut guard = KillOnDrop(vec![pid]);
        let child = loop {
            if let [child] = procstat::children(pid)[..] {
                break child;
            }
            thread::sleep(Duration::from_millis(5));
        };
        guard.0.push(child);
        stopped(child);
        let mut root = Probe::open(pid).unwrap();
        let mut tree = Tree::new(pid);
        let alive = tree.total(&root.read().unwrap(), true).minor;
        let (p, c) = (procstat::read(pid).unwrap(), procstat::read(child).unwrap());
        assert!(c.reaped.minor > 1000, "dd took {} faults", c.reaped.minor);
        let own = |s: &Stat| s.counters.minor + s.reaped.minor;
        assert_eq!(alive, own(&p) + own(&c), "before the reap");
        assert_eq!(tree.threads(), p.threads + c.threads);

        // Resumed, it exits and is reaped: its pid may become another process's.
        guard.0.truncate(1);
        resume(child);
        stopped(pid);
        let reaped = tree.total(&root.read().unwrap(), true).minor;
        let p = procstat::read(pid).unwrap();
        drop(guard);
        parent.wait().unwrap();
        // Its own and RUSAGE_CHILDREN: the child once, in its parent's reaped counts.
        assert_eq!(reaped, own(&p), "after the reap");
        assert!(reaped >= alive);
    }
}
