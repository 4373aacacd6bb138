//! What both protocols share: what a push did, the errors of a protocol step, and the
//! checks each side makes on the area before it trusts it.

use crate::area::{Area, SemKind};
use crate::mode::Mode;
use crate::wait::WaitError;

/// What a producer's push did with its sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Push {
    Written,
    /// Timed out waiting for a free slot; the sample was not written.
    Full,
    /// The bounded lock try failed; the sample was not written.
    LockBusy,
    /// The ring is canceled (it ended); the sample was not written.
    Canceled,
}

pub(crate) fn check_mode(area: &Area, expected: Mode) -> Result<(), ProtocolError> {
    match area.mode() {
        actual if actual == expected => Ok(()),
        actual => Err(ProtocolError::WrongMode { expected, actual }),
    }
}

/// The sequence number after `write_seq`, which a producer read from the area once:
/// a hostile value must not wrap (or panic).
pub(crate) fn next_seq(write_seq: u64) -> Result<u64, ProtocolError> {
    write_seq
        .checked_add(1)
        .ok_or(ProtocolError::SequenceOverflow { write_seq })
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
    #[error("write_seq {write_seq} is behind the consumer's position {read_seq}: the area is corrupt or its ring was started again")]
    CursorOutOfRange { write_seq: u64, read_seq: u64 },
    #[error("write_seq {write_seq} cannot advance: the area is corrupt")]
    SequenceOverflow { write_seq: u64 },
    #[error(transparent)]
    Wait(#[from] WaitError),
}
