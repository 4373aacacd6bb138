//! pfprof's kernel/user ABI, mirrored from `include/pfprof.h`, and both ring
//! protocols over any mapping of the area (a memfd here, `/dev/pfprof` with
//! the module).

pub mod abi;
mod area;
#[cfg(not(loom))]
pub mod device;
#[cfg(not(loom))]
pub mod faults;
mod lock;
mod mode;
#[cfg(not(loom))]
pub mod producer;
mod protocol;
pub mod relaxed;
mod sem;
pub mod strict;
mod sync;
pub mod wait;

pub use abi::Sample;
pub use area::{Area, Counters, LayoutError};
pub use mode::{Mode, ParseModeError};
pub use protocol::{ProtocolError, Push};
