//! What every stage reads of the host or shares: a process's counters ([`procstat`]) and
//! peak resident set ([`peak`]), a cgroup ([`cgroup`]), exit codes ([`exit`]), a failed
//! system call ([`error`]), durations on the command line ([`duration`]).

pub mod cgroup;
pub mod duration;
pub mod error;
pub mod exit;
pub mod peak;
pub mod procstat;
