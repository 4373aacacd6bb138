//! How `monitor` ends: the exit code of a failure, by whose move it is, and that of a
//! command that ran, as a shell reports it.

use std::fmt;

/// Who has to act, which decides the exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The invocation or the system (a pid, a path, the module): exit code 2.
    Usage,
    /// The command does not exist: 127, as shells, `env` and `timeout` say it.
    CommandNotFound,
    /// The command exists and cannot be executed: 126.
    CommandNotExecutable,
    /// A failure of ours: 1.
    Internal,
}

impl Blame {
    pub fn exit_code(self) -> u8 {
        match self {
            Blame::Usage => 2,
            Blame::CommandNotFound => 127,
            Blame::CommandNotExecutable => 126,
            Blame::Internal => 1,
        }
    }
}

/// The profile was complete, but `--otlp`'s collector received none of its pushes (a
/// command's own failure keeps its status).
pub const NOTHING_PUSHED: u8 = 3;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatus {
    /// The exit code a shell would report for this status.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Exited(c) => (c & 0xff) as u8,
            ExitStatus::Signaled(s) => (128 + s).clamp(0, 255) as u8,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Exited(c) => write!(f, "exited with status {c}"),
            ExitStatus::Signaled(s) => write!(f, "killed by signal {s}"),
        }
    }
}
