use crate::wait::{SemKind, WaitError};
use crate::Mode;

/// Why an area cannot be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("the mapping is {len} bytes, too small for the control page and one slot")]
    TooSmall { len: usize },
    #[error("the mapping is not 8-byte aligned")]
    Misaligned,
    #[error("bad magic {found:#010x}: this is not a pfprof area")]
    BadMagic { found: u32 },
    #[error("the area speaks ABI version {found}, this build speaks {expected}: rebuild the monitor or the module")]
    VersionMismatch { found: u32, expected: u32 },
    #[error("the area's mode is {found}: no session selected strict or relaxed")]
    NoSession { found: u32 },
    #[error("the area's {field} is {found}, expected {expected}")]
    Geometry {
        field: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("a ring of {found} slots is impossible here: it must hold 1 to {max}")]
    SlotCount { found: u64, max: u64 },
    #[error("creating the shared memory area failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A protocol step failed: the area does not hold what the protocol allows,
/// or sleeping failed.
#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("the area runs the {actual} protocol, this side speaks {expected}")]
    WrongMode { expected: Mode, actual: Mode },
    #[error("the {sem:?} semaphore holds {count} units, more than the ring's {slots} slots: the area is corrupt")]
    CountOutOfRange {
        sem: SemKind,
        count: u32,
        slots: u64,
    },
    #[error("write_seq {write_seq} is behind the consumer's position {read_seq}: the area is corrupt or a new session started")]
    CursorOutOfRange { write_seq: u64, read_seq: u64 },
    #[error("write_seq {write_seq} cannot advance: the area is corrupt")]
    SequenceOverflow { write_seq: u64 },
    #[error(transparent)]
    Wait(#[from] WaitError),
}
