//! A process's memory for the procfs backend: resident anonymous, file and shared memory
//! and swapped-out memory, as `/proc/<pid>/status` shows them (`RssAnon`, `RssFile`,
//! `RssShmem`, `VmSwap`: the kernel's `MM_ANONPAGES`, `MM_FILEPAGES`, `MM_SHMEMPAGES` and
//! `MM_SWAPENTS`, the counters the module reads).
//!
//! status is dear (~10 µs a read, measured: docs/monitor.md, "Memory in the procfs backend,
//! and what it costs") and statm cheaper (~1.2 µs in a loop, ~14 µs after a sleep, its
//! caches cold) but without the split between file and shared memory, and without swap. So
//! statm is read from a file kept open, and status only when statm's resident or shared
//! pages, or the process's faults, moved since status was last read: memory that moves at
//! all moves one of them (a page swapped out or in changes the resident anonymous pages,
//! one dropped or mapped the resident ones, a file page the shared ones; at a memory
//! cgroup's limit a page faulted in and another swapped out for it leave the resident
//! pages as they were, and the fault says so). statm is read every period in which the
//! process ran, and every [`IDLE_EVERY`]th period while it does not: then only reclaim
//! changes its memory, and a read every period for every process asleep would double what
//! the sampler costs. A process that is gone, or a zombie (it has no memory left), holds
//! nothing.

use std::fs::File;
use std::iter::Sum;
use std::ops::Add;
use std::os::unix::fs::FileExt;

use crate::system::procstat::{read_whole, stat_error, ProcessCounters, StatError};

/// How often statm is read for a process that did not run: every this many periods.
pub const IDLE_EVERY: u32 = 4;

/// A process's memory at one moment, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub rss_anon: u64,
    pub rss_file: u64,
    pub rss_shmem: u64,
    pub swap: u64,
}

impl Add for Memory {
    type Output = Memory;

    fn add(self, other: Memory) -> Memory {
        Memory {
            rss_anon: self.rss_anon.saturating_add(other.rss_anon),
            rss_file: self.rss_file.saturating_add(other.rss_file),
            rss_shmem: self.rss_shmem.saturating_add(other.rss_shmem),
            swap: self.swap.saturating_add(other.swap),
        }
    }
}

impl Sum for Memory {
    fn sum<I: Iterator<Item = Memory>>(iter: I) -> Memory {
        iter.fold(Memory::default(), Add::add)
    }
}

/// Parses `/proc/<pid>/status`: `RssAnon`, `RssFile`, `RssShmem` and `VmSwap`, in kB. A
/// line that is missing counts as nothing: a zombie's status has none of them.
pub fn parse_status(text: &str) -> Option<Memory> {
    let mut memory = Memory::default();
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let field = match key {
            "RssAnon" => &mut memory.rss_anon,
            "RssFile" => &mut memory.rss_file,
            "RssShmem" => &mut memory.rss_shmem,
            "VmSwap" => &mut memory.swap,
            _ => continue,
        };
        let kib: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
        *field = kib.checked_mul(1024)?;
    }
    Some(memory)
}

/// Parses `/proc/<pid>/statm`: its resident and shared pages (fields 2 and 3).
pub fn parse_statm(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_ascii_whitespace().skip(1);
    let resident = fields.next()?.parse().ok()?;
    let shared = fields.next()?.parse().ok()?;
    Some((resident, shared))
}

/// Whether what status said when statm showed `seen` pages after `seen`'s faults may be
/// out of date now that it shows `now`: statm's resident or shared pages moved, or the
/// process faulted (at a cgroup's limit a page faulted in and another swapped out for it
/// leave statm as it was).
fn status_stale(seen: ((u64, u64), u64), now: ((u64, u64), u64)) -> bool {
    seen != now
}

/// A process's memory, read again and again: statm kept open (it also names the process:
/// a read fails once it has been reaped, even if its pid is another's by then), status
/// opened when statm or the process's faults moved.
pub struct MemoryProbe {
    pid: u32,
    statm: File,
    /// statm's resident and shared pages and the process's faults when status was last
    /// read, and what it said.
    last: Option<((u64, u64), u64, Memory)>,
    /// Periods in a row it did not run and was not read.
    idle: u32,
    buf: Vec<u8>,
}

impl MemoryProbe {
    pub fn open(pid: u32) -> Result<MemoryProbe, StatError> {
        let statm = File::open(format!("/proc/{pid}/statm")).map_err(|e| stat_error(pid, e))?;
        Ok(MemoryProbe {
            pid,
            statm,
            last: None,
            idle: 0,
            buf: Vec::with_capacity(2048),
        })
    }

    /// Its memory now (`ran`: it ran since the last call; if not, as last read, but every
    /// [`IDLE_EVERY`]th time; `own`: its own counters as last read, whose faults say
    /// its memory moved too); nothing once it is gone or unreadable.
    pub fn read(&mut self, ran: bool, own: &ProcessCounters) -> Memory {
        let faults = own.minor + own.major;
        if let (false, Some((_, _, memory))) = (ran, self.last) {
            self.idle += 1;
            if self.idle < IDLE_EVERY {
                return memory;
            }
        }
        self.idle = 0;
        let Some(pages) = self.statm() else {
            return Memory::default();
        };
        if let Some((seen, seen_faults, memory)) = self.last {
            if !status_stale((seen, seen_faults), (pages, faults)) {
                return memory;
            }
        }
        let status = self.status();
        // statm still readable after status: the process the pid named then is ours, so
        // that status was its own, not that of a process given the pid since.
        match (status, self.statm()) {
            (Some(memory), Some(_)) => {
                // statm as it was before status was read: a change since shows next time.
                self.last = Some((pages, faults, memory));
                memory
            }
            _ => Memory::default(),
        }
    }

    fn statm(&mut self) -> Option<(u64, u64)> {
        let mut buf = [0u8; 128];
        let n = self.statm.read_at(&mut buf, 0).ok()?;
        parse_statm(std::str::from_utf8(&buf[..n]).ok()?)
    }

    fn status(&mut self) -> Option<Memory> {
        let file = File::open(format!("/proc/{}/status", self.pid)).ok()?;
        let text = read_whole(&file, &mut self.buf).ok()?;
        parse_status(std::str::from_utf8(text).ok()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tcat\nState:\tR (running)\nVmRSS:\t    1700 kB\n\
                          RssAnon:\t     112 kB\nRssFile:\t    1588 kB\nRssShmem:\t       4 kB\n\
                          VmData:\t     360 kB\nVmSwap:\t      12 kB\nThreads:\t1\n";

    /// Counters that never move: these tests say whether the process ran themselves.
    const NO_FAULTS: ProcessCounters = ProcessCounters {
        minor: 0,
        major: 0,
        cpu_ns: 0,
    };

    #[test]
    fn status_gives_resident_and_swapped_memory_in_bytes() {
        assert_eq!(
            parse_status(STATUS),
            Some(Memory {
                rss_anon: 112 << 10,
                rss_file: 1588 << 10,
                rss_shmem: 4 << 10,
                swap: 12 << 10,
            })
        );
    }

    #[test]
    fn a_zombies_status_without_memory_lines_holds_nothing() {
        let zombie = "Name:\tx\nState:\tZ (zombie)\nThreads:\t1\n";
        assert_eq!(parse_status(zombie), Some(Memory::default()));
    }

    #[test]
    fn a_malformed_memory_line_is_refused_not_read_as_zero() {
        assert_eq!(parse_status("RssAnon:\t12 MB\n"), None);
        assert_eq!(parse_status("VmSwap:\tlots kB\n"), None);
    }

    #[test]
    fn statm_gives_resident_and_shared_pages() {
        assert_eq!(parse_statm("765 410 381 5 0 123 0\n"), Some((410, 381)));
        assert_eq!(parse_statm("765"), None);
    }

    #[test]
    fn status_is_read_again_when_statm_or_the_faults_moved() {
        let seen = ((1000, 200), 5000);
        assert!(!status_stale(seen, seen));
        assert!(status_stale(seen, ((1001, 200), 5000)));
        assert!(status_stale(seen, ((1000, 201), 5000)));
        // Resident pages pinned at a cgroup's limit: the faults alone say memory moved.
        assert!(status_stale(seen, ((1000, 200), 5001)));
    }

    #[test]
    fn our_own_memory_agrees_with_status_and_grows_with_pages_we_touch() {
        let mut probe = MemoryProbe::open(std::process::id()).unwrap();
        let _big = crate::big_allocations();
        let before = probe.read(true, &NO_FAULTS);
        let pages = crate::fresh_pages();
        std::hint::black_box(&pages);
        let after = probe.read(true, &NO_FAULTS);
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let direct = parse_status(&status).unwrap();
        // Other test threads may touch a few pages in between (none takes tens of MiB
        // meanwhile): within 1 MiB.
        assert!(after.rss_anon.abs_diff(direct.rss_anon) < 1 << 20);
        assert!(
            after.rss_anon >= before.rss_anon + (60 << 20),
            "{before:?} {after:?}"
        );
    }

    #[test]
    fn a_process_that_did_not_run_is_read_every_fourth_time_and_one_that_ran_every_time() {
        let mut probe = MemoryProbe::open(std::process::id()).unwrap();
        let _big = crate::big_allocations();
        let before = probe.read(true, &NO_FAULTS);
        let pages = crate::fresh_pages();
        std::hint::black_box(&pages);
        // Told it did not run: as last read, until the fourth time.
        for _ in 1..IDLE_EVERY {
            assert_eq!(probe.read(false, &NO_FAULTS), before);
        }
        let fourth = probe.read(false, &NO_FAULTS);
        assert!(
            fourth.rss_anon >= before.rss_anon + (60 << 20),
            "{before:?} {fourth:?}"
        );
        drop(pages);
        assert!(probe.read(true, &NO_FAULTS).rss_anon < before.rss_anon + (60 << 20));
    }

    #[test]
    fn a_reaped_process_holds_no_memory() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut probe = MemoryProbe::open(child.id()).unwrap();
        // Once it has run: right after exec it holds a page or two.
        let start = std::time::Instant::now();
        while probe.read(true, &NO_FAULTS).rss_file == 0 {
            assert!(
                start.elapsed().as_secs() < 10,
                "sleep never mapped its binary"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(probe.read(true, &NO_FAULTS), Memory::default());
    }
}
