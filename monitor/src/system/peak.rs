//! The peak resident set of a process attached with `--pid`: its own high-water mark,
//! `VmHWM` in `/proc/<pid>/status` (the kernel's `hiwater_rss`, the figure `ru_maxrss`
//! and so `/usr/bin/time -v` report once it exits), since it started, not only since the
//! monitor attached.
//!
//! A process that exits takes its memory with it before anyone is told (its status then
//! has no `Vm` lines), so the mark is read while it lives: at every wake-up of the
//! monitor, and at the end of the profile. A process that exited is reported as last
//! read, with how long before its exit was found that was: what it grew by in that time
//! is not seen. Its descendants are not in it (no kernel counter holds the peak of a
//! process tree: `ru_maxrss` is that of the largest single process).

use std::fs::File;
use std::time::{Duration, Instant};

use crate::system::procstat::read_whole;

/// The high-water mark of one process, read again and again.
pub struct PeakRss {
    pid: u32,
    /// Kept open: once the process is reaped a read fails, even if its pid is another's.
    status: File,
    buf: Vec<u8>,
    last: Option<(u64, Instant)>,
    /// When a read first found it gone.
    gone: Option<Instant>,
}

/// What [`PeakRss`] found.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeakReport {
    pub pid: u32,
    /// `VmHWM`, bytes.
    pub bytes: u64,
    /// `None` when it was still running at the end of the profile; else how long after
    /// the reading its exit was found: it exited within that time.
    pub exited_within: Option<Duration>,
}

impl PeakRss {
    /// `None` when its status cannot be opened (the backend says why it cannot profile it).
    pub fn open(pid: u32) -> Option<PeakRss> {
        let status = File::open(format!("/proc/{pid}/status")).ok()?;
        let mut peak = PeakRss {
            pid,
            status,
            buf: Vec::with_capacity(2048),
            last: None,
            gone: None,
        };
        peak.read();
        Some(peak)
    }

    /// Reads the mark now, unless the process was found gone before.
    pub fn read(&mut self) {
        if self.gone.is_some() {
            return;
        }
        let now = Instant::now();
        let hwm = read_whole(&self.status, &mut self.buf)
            .ok()
            .and_then(|text| parse_vm_hwm(std::str::from_utf8(text).ok()?));
        match hwm {
            // The largest read: VmHWM is the larger of the kernel's hiwater_rss and the
            // resident set, and hiwater_rss is raised only on some paths, so a resident
            // set read at its height may read lower later (seen in this crate's tests:
            // 64 MiB of other threads' memory, freed between two reads).
            Some(bytes) => {
                let most = self.last.map_or(bytes, |(seen, _)| seen.max(bytes));
                self.last = Some((most, now));
            }
            None => self.gone = Some(now),
        }
    }

    /// The largest reading, as of the last; `None` if there was none (a process without
    /// memory of its own, a kernel thread).
    pub fn report(&self) -> Option<PeakReport> {
        let (bytes, at) = self.last?;
        Some(PeakReport {
            pid: self.pid,
            bytes,
            exited_within: self.gone.map(|gone| gone.duration_since(at)),
        })
    }
}

/// `VmHWM` of a status file, bytes; `None` when it has none (a zombie, a kernel thread).
fn parse_vm_hwm(status: &str) -> Option<u64> {
    let value = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    let kib: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_is_vm_hwm_in_bytes_and_a_zombie_has_none() {
        let status =
            "Name:\tVmHWM: 1 kB\nVmPeak:\t  9000 kB\nVmHWM:\t    1234 kB\nVmRSS:\t 1000 kB\n";
        assert_eq!(parse_vm_hwm(status), Some(1234 * 1024));
        assert_eq!(parse_vm_hwm("Name:\tx\nState:\tZ (zombie)\n"), None);
    }

    #[test]
    fn our_own_mark_holds_memory_we_touched_after_we_let_it_go() {
        let mut peak = PeakRss::open(std::process::id()).unwrap();
        let touched = vec![1u8; 64 << 20];
        std::hint::black_box(&touched);
        peak.read();
        let held = peak.report().unwrap().bytes;
        assert!(held >= 64 << 20, "{held}");
        drop(touched);
        peak.read();
        let report = peak.report().unwrap();
        assert!(report.bytes >= held, "{report:?}");
        assert_eq!(report.exited_within, None);
    }
}
