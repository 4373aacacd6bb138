//! Fault and CPU counters of a process: faults from `/proc/<pid>/stat`, CPU time from the
//! process's CPU-time clock in nanoseconds (stat's clock ticks when that clock cannot be
//! read).
//!
//! The kernel sums both over every live and exited thread of the process (`do_task_stat()`,
//! `thread_group_cputime()`), so one read of each is the whole-process total.
//! Per-thread `/proc/<pid>/task/<tid>/schedstat` also has nanoseconds, but loses the
//! threads that exited and costs a file per thread.

use std::fs::{self, File};
use std::io::{self, ErrorKind};
use std::ops::{Add, AddAssign};
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

use nix::time::{clock_getcpuclockid, clock_gettime, ClockId};
use nix::unistd::{sysconf, Pid, SysconfVar};

/// Cumulative counters of one process since it was forked, or their change over a period:
/// the module's `struct pfprof_counters` (kmod/pfprof_internal.h).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    pub minor: u64,
    pub major: u64,
    /// utime + stime.
    pub cpu_ns: u64,
}

/// What wait4()'s rusage says beside the counters: the CPU time split as `time` shows
/// it, and the peak resident set size (`ru_maxrss`: the largest of the process's and of
/// the descendants it waited for, as `/usr/bin/time -v` reports it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub user_ns: u64,
    pub system_ns: u64,
    pub max_rss_bytes: u64,
}

impl ProcessCounters {
    fn each(self, other: ProcessCounters, f: impl Fn(u64, u64) -> u64) -> ProcessCounters {
        ProcessCounters {
            minor: f(self.minor, other.minor),
            major: f(self.major, other.major),
            cpu_ns: f(self.cpu_ns, other.cpu_ns),
        }
    }

    /// Field by field, never below zero.
    pub fn saturating_sub(self, other: ProcessCounters) -> ProcessCounters {
        self.each(other, u64::saturating_sub)
    }

    /// The larger of each field.
    pub fn max(self, other: ProcessCounters) -> ProcessCounters {
        self.each(other, u64::max)
    }
}

/// Field by field, saturating.
impl Add for ProcessCounters {
    type Output = ProcessCounters;

    fn add(self, other: ProcessCounters) -> ProcessCounters {
        self.each(other, u64::saturating_add)
    }
}

impl AddAssign for ProcessCounters {
    fn add_assign(&mut self, other: ProcessCounters) {
        *self = *self + other;
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StatError {
    #[error("no such process: {0}")]
    NoSuchProcess(u32),
    #[error("permission denied reading /proc/{0}/stat")]
    PermissionDenied(u32),
    #[error("/proc/{0}/stat has an unexpected format")]
    Malformed(u32),
    #[error("reading /proc/{0}/stat")]
    Io(u32, #[source] io::Error),
}

/// A process's counters and whether it has exited (a zombie nobody reaped yet: its
/// counters are final).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub counters: ProcessCounters,
    /// What its children had done when it reaped them (cminflt, cmajflt, cutime +
    /// cstime: CPU time in clock ticks), each with its own reaped children's.
    pub reaped: ProcessCounters,
    pub exited: bool,
    /// Dead (state X): being reaped, its counts on their way to its parent's `reaped`
    /// (or to nobody's, when its parent does not wait for children).
    pub dead: bool,
    /// Its parent process.
    pub ppid: u32,
    /// When it started, in clock ticks after boot: with the pid, it names the process
    /// (a pid alone may have been given to another since).
    pub start: u64,
    /// Its threads (num_threads): how many CPUs it can keep busy at once.
    pub threads: u64,
    /// Its name (comm), as stat gives it.
    pub comm: Comm,
}

/// A process's name (`comm`): at most 15 bytes, as the kernel keeps it.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Comm {
    bytes: [u8; 16],
    len: u8,
}

impl Comm {
    pub fn new(name: &str) -> Comm {
        let mut comm = Comm::default();
        let len = name.len().min(comm.bytes.len());
        comm.bytes[..len].copy_from_slice(&name.as_bytes()[..len]);
        comm.len = len as u8;
        comm
    }

    /// As text; a name that is not UTF-8 with its bytes replaced.
    pub fn to_string_lossy(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.bytes[..usize::from(self.len)])
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.to_string_lossy())
    }
}

/// What a failed read of a process's /proc file means.
pub(crate) fn stat_error(pid: u32, e: io::Error) -> StatError {
    match e.kind() {
        // ESRCH: the process was reaped after the open.
        ErrorKind::NotFound => StatError::NoSuchProcess(pid),
        _ if e.raw_os_error() == Some(libc::ESRCH) => StatError::NoSuchProcess(pid),
        ErrorKind::PermissionDenied => StatError::PermissionDenied(pid),
        _ => StatError::Io(pid, e),
    }
}

/// Reads the counters of `pid` once, CPU time in clock ticks.
pub fn read(pid: u32) -> Result<Stat, StatError> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| stat_error(pid, e))?;
    parse(&text, ticks_to_ns()).ok_or(StatError::Malformed(pid))
}

/// The CPU-time clock of process `pid`, `None` where the kernel refuses it.
pub fn cpu_clock(pid: u32) -> Option<ClockId> {
    clock_getcpuclockid(Pid::from_raw(pid as libc::pid_t)).ok()
}

/// A reading of a process CPU-time clock, ns.
pub fn cpu_ns(clock: ClockId) -> io::Result<u64> {
    let t = clock_gettime(clock)?;
    Ok(t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
}

/// A process read again and again: its stat file stays open (each read is one pread
/// instead of open, read and close) and its CPU clock is looked up once.
pub struct Probe {
    pid: u32,
    stat: File,
    clock: Option<ClockId>,
    buf: Vec<u8>,
}

impl Probe {
    pub fn open(pid: u32) -> Result<Probe, StatError> {
        let stat = File::open(format!("/proc/{pid}/stat")).map_err(|e| stat_error(pid, e))?;
        Ok(Probe {
            pid,
            stat,
            clock: cpu_clock(pid),
            buf: Vec::with_capacity(512),
        })
    }

    /// Whether CPU time comes in nanoseconds (else in clock ticks).
    pub fn nanoseconds(&self) -> bool {
        self.clock.is_some()
    }

    /// The process's counters now. Once it has been reaped this fails with
    /// [`StatError::NoSuchProcess`], even if its pid has been given to another process.
    pub fn read(&mut self) -> Result<Stat, StatError> {
        let cpu_ns = self.cpu_ns();
        self.read_with_cpu(cpu_ns)
    }

    /// Its CPU clock now, `None` if it has none (see [`Probe::nanoseconds`]).
    pub fn cpu_ns(&self) -> Option<io::Result<u64>> {
        self.clock.map(cpu_ns)
    }

    /// Its counters now, with CPU time `cpu_ns` read just before from [`Probe::cpu_ns`].
    /// The clock comes first: a pid reaped and reused between the two reads fails the
    /// stat read (the open file names the old process), never mixing two processes.
    pub fn read_with_cpu(&mut self, cpu_ns: Option<io::Result<u64>>) -> Result<Stat, StatError> {
        let pid = self.pid;
        let text = read_whole(&self.stat, &mut self.buf).map_err(|e| stat_error(pid, e))?;
        let text = std::str::from_utf8(text).map_err(|_| StatError::Malformed(pid))?;
        let mut stat = parse(text, ticks_to_ns()).ok_or(StatError::Malformed(pid))?;
        if let Some(ns) = cpu_ns.transpose().map_err(|e| stat_error(pid, e))? {
            stat.counters.cpu_ns = ns;
        }
        Ok(stat)
    }
}

/// The whole of a /proc file kept open, read from its start (one pread where it fits in
/// `buf`, which grows to hold it and is kept for the next read).
pub(crate) fn read_whole<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    buf.resize(buf.capacity().max(512), 0);
    let mut len = 0;
    loop {
        let n = file.read_at(&mut buf[len..], len as u64)?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        buf.resize(buf.len() * 2, 0);
    }
    Ok(&buf[..len])
}

/// Reads the calling process's own counters.
pub fn read_self() -> Result<ProcessCounters, StatError> {
    Ok(read(std::process::id())?.counters)
}

/// The children of process `pid`, sorted: what every thread's
/// `/proc/<pid>/task/<tid>/children` lists, since a child's parent is the thread that
/// forked it. None once the process is gone (or where the kernel has no such file, see
/// [`children_listed`]); a thread that exits meanwhile hands its children to another
/// thread, which a list read before may miss.
pub fn children(pid: u32) -> Vec<u32> {
    let mut children = Vec::new();
    // Unreadable means gone: the caller finds out from the process's stat.
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return children;
    };
    for task in tasks.flatten() {
        if let Ok(list) = fs::read_to_string(task.path().join("children")) {
            children.extend(
                list.split_ascii_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    children.sort_unstable();
    children.dedup();
    children
}

/// Whether the kernel lists children in /proc (CONFIG_PROC_CHILDREN).
pub fn children_listed() -> bool {
    std::path::Path::new("/proc/thread-self/children").exists()
}

/// Parses a stat line; `ns_per_tick` converts utime and stime from clock ticks.
pub fn parse(text: &str, ns_per_tick: u64) -> Option<Stat> {
    // comm (field 2) may contain spaces and parentheses: fields resume after the last ')'.
    let close = text.rfind(')')?;
    let comm = Comm::new(&text[text.find('(')? + 1..close]);
    let rest = &text[close + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // fields[0] is field 3 (state); ppid is field 4, minflt 10, cminflt 11, majflt 12,
    // cmajflt 13, utime 14, stime 15, cutime 16, cstime 17, num_threads 20, starttime 22.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let state = *fields.first()?;
    Some(Stat {
        counters: ProcessCounters {
            minor: field(10)?,
            major: field(12)?,
            cpu_ns: (field(14)? + field(15)?) * ns_per_tick,
        },
        reaped: ProcessCounters {
            minor: field(11)?,
            major: field(13)?,
            cpu_ns: (field(16)? + field(17)?) * ns_per_tick,
        },
        // Z: zombie, X: dead.
        exited: matches!(state, "Z" | "X"),
        dead: state == "X",
        ppid: u32::try_from(field(4)?).ok()?,
        start: field(22)?,
        threads: field(20)?,
        comm,
    })
}

/// Now, in the clock ticks after boot that start times ([`Stat::start`]) are given in.
pub fn boot_ticks() -> u64 {
    clock_gettime(ClockId::CLOCK_BOOTTIME).map_or(0, |t| {
        (t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64) / ticks_to_ns()
    })
}

/// Nanoseconds per clock tick (`sysconf(_SC_CLK_TCK)`), the unit of utime and stime.
pub fn ticks_to_ns() -> u64 {
    static NS_PER_TICK: OnceLock<u64> = OnceLock::new();
    *NS_PER_TICK.get_or_init(|| {
        let hz = sysconf(SysconfVar::CLK_TCK).ok().flatten();
        // USER_HZ is 100 on every architecture Linux runs this on; fall back to it.
        let hz = hz
            .and_then(|hz| u64::try_from(hz).ok())
            .filter(|&hz| hz > 0)
            .unwrap_or(100);
        1_000_000_000 / hz
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_takes_faults_and_cpu_time_after_a_comm_with_spaces_and_parens() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 1000 5 7 0 30 20 0 0 20 0 1 0 \
                    100 1000000 200 18446744073709551615";
        let s = parse(line, 10_000_000).unwrap();
        assert_eq!(
            s.counters,
            ProcessCounters {
                minor: 1000,
                major: 7,
                cpu_ns: 50 * 10_000_000
            }
        );
        assert!(!s.exited);
        assert_eq!(s.comm.to_string_lossy(), "a (b) c");
        assert_eq!(s.start, 100);
        assert_eq!(s.threads, 1);
    }

    #[test]
    fn parse_sees_that_a_zombie_has_exited() {
        let line = "42 (x) Z 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 100 0 0 0";
        assert!(parse(line, 1).unwrap().exited);
    }

    #[test]
    fn parse_rejects_a_truncated_line() {
        assert_eq!(parse("42 (x) S 1 42", 1), None);
    }

    #[test]
    fn a_probe_reads_again_and_again_with_cpu_time_in_nanoseconds() {
        let mut probe = Probe::open(std::process::id()).unwrap();
        assert!(probe.nanoseconds(), "no CPU clock for our own process");
        let before = probe.read().unwrap();
        let _big = crate::big_allocations();
        let pages = crate::fresh_pages();
        std::hint::black_box(&pages);
        let after = probe.read().unwrap();
        assert!(after.counters.minor >= before.counters.minor + 64);
        assert!(after.counters.cpu_ns > before.counters.cpu_ns);
        // Not a multiple of a clock tick: nanoseconds, not ticks (one in 10^7 would be).
        assert_ne!(after.counters.cpu_ns % ticks_to_ns(), 0);
    }

    #[test]
    fn reading_our_own_stat_sees_faults_we_take() {
        let before = read_self().unwrap();
        let _big = crate::big_allocations();
        let pages = crate::fresh_pages();
        std::hint::black_box(&pages);
        let after = read_self().unwrap();
        assert!(after.minor >= before.minor + 64);
    }
}
