//! A count of faults, major and minor: what a table, a tally or a histogram's bucket
//! holds.

use std::ops::AddAssign;

/// Faults counted on one mapping, or lost.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Faults {
    /// Major faults: every one is recorded.
    pub major: u64,
    /// Minor faults recorded: one in every [`super::Attribution::On`]'s `minor_sampling`.
    pub minor_samples: u64,
}

impl Faults {
    /// `n` major faults, no minor one.
    pub fn major(n: u64) -> Faults {
        Faults {
            major: n,
            minor_samples: 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.major == 0 && self.minor_samples == 0
    }
}

impl AddAssign for Faults {
    fn add_assign(&mut self, other: Faults) {
        self.major = self.major.saturating_add(other.major);
        self.minor_samples = self.minor_samples.saturating_add(other.minor_samples);
    }
}
