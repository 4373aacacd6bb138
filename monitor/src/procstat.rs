//! Fault and CPU counters of a process from `/proc/<pid>/stat`.
//!
//! The kernel's `do_task_stat()` sums these over every live and exited thread of the
//! process, so one read per process is the whole-process total.

use std::fs;
use std::io::{self, ErrorKind};
use std::sync::OnceLock;

/// Cumulative counters of one process since it was forked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessCounters {
    pub minor: u64,
    pub major: u64,
    /// utime + stime.
    pub cpu_ns: u64,
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
    pub exited: bool,
    /// When it started, in clock ticks after boot: with the pid, it names the process
    /// (a pid alone may have been given to another since).
    pub start: u64,
}

/// Reads the counters of `pid`.
pub fn read(pid: u32) -> Result<Stat, StatError> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| match e.kind() {
        // ESRCH: the process exited between open and read.
        ErrorKind::NotFound => StatError::NoSuchProcess(pid),
        _ if e.raw_os_error() == Some(libc::ESRCH) => StatError::NoSuchProcess(pid),
        ErrorKind::PermissionDenied => StatError::PermissionDenied(pid),
        _ => StatError::Io(pid, e),
    })?;
    parse(&text, ticks_to_ns()).ok_or(StatError::Malformed(pid))
}

/// Reads the calling process's own counters.
pub fn read_self() -> Result<ProcessCounters, StatError> {
    Ok(read(std::process::id())?.counters)
}

/// Parses a stat line; `ns_per_tick` converts utime and stime from clock ticks.
pub fn parse(text: &str, ns_per_tick: u64) -> Option<Stat> {
    // comm (field 2) may contain spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_ascii_whitespace().collect();
    // fields[0] is field 3 (state); minflt is field 10, majflt 12, utime 14, stime 15,
    // starttime 22.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        counters: ProcessCounters {
            minor: field(10)?,
            major: field(12)?,
            cpu_ns: (field(14)? + field(15)?) * ns_per_tick,
        },
        // Z: zombie, X: dead.
        exited: matches!(*fields.first()?, "Z" | "X"),
        start: field(22)?,
    })
}

/// Nanoseconds per clock tick (`sysconf(_SC_CLK_TCK)`), the unit of utime and stime.
pub fn ticks_to_ns() -> u64 {
    static NS_PER_TICK: OnceLock<u64> = OnceLock::new();
    *NS_PER_TICK.get_or_init(|| {
        // SAFETY: sysconf only reads a configuration value.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        // USER_HZ is 100 on every architecture Linux runs this on; fall back to it.
        let hz = u64::try_from(hz).ok().filter(|&hz| hz > 0).unwrap_or(100);
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
        assert_eq!(s.start, 100);
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
    fn reading_our_own_stat_sees_faults_we_take() {
        let before = read_self().unwrap();
        let pages = vec![1u8; 64 << 12];
        std::hint::black_box(&pages);
        let after = read_self().unwrap();
        assert!(after.minor >= before.minor + 64);
    }
}
