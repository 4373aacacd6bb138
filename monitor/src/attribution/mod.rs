//! Where the faults were, and who took them: the types a backend fills each period and
//! the consumer reads, whichever backend produces them.
//!
//! A backend hands the consumer one [`PeriodTable`] per sample, through a [`Feed`]: the
//! faults of the period attributed to the mappings that took them ([`Mapping`], named as
//! `/proc/PID/maps` names them), each with the process that took it, every major fault
//! and a sample of the minor ones, with the records the kernel could not deliver counted
//! apart; and each process's own faults over the period, exact. The procfs backend fills
//! them from perf events and `/proc` (`backend/procfs/attribute.rs`), the kernel backend
//! from the module's faults region (`backend/kernel/attribute.rs`), both resolving
//! addresses with the same maps cache. [`Tally`] adds tables up and ranks what they hold.

pub mod faults;
pub mod feed;
pub mod mapping;
pub mod offsets;
pub mod symbols;
pub mod table;
pub mod tally;

pub use feed::{Attribution, Feed, TableSource};

/// One minor fault in this many is recorded by default (`--minor-sampling`): estimates
/// within 5% for mappings of 10,000 faults and more; what attribution costs hardly
/// depends on it (docs/benchmarks.md, "Where the faults were: what attribution costs");
/// prime, so that a workload whose faults take turns between mappings in a cycle of any
/// shorter length is not seen in step with it.
pub const DEFAULT_MINOR_SAMPLING: u64 = 61;
pub use mapping::{FileId, Mapping, MappingKind};
pub use offsets::OffsetHistogram;
pub use symbols::Function;
pub use table::{Code, Entry, Faults, PeriodTable, ProcessFaults};
pub use tally::Tally;
