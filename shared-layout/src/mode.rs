use std::fmt;
use std::str::FromStr;

use crate::abi;

/// The protocol a session runs over the area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Counting semaphores and a lock; no sample is ever lost.
    Strict,
    /// Monotonic cursors; the producer never blocks and overwrites the oldest.
    Relaxed,
}

impl Mode {
    /// The `PFPROF_MODE_*` value.
    pub const fn as_raw(self) -> u32 {
        match self {
            Mode::Strict => abi::MODE_STRICT,
            Mode::Relaxed => abi::MODE_RELAXED,
        }
    }

    /// `None` for `PFPROF_MODE_NONE` and every unknown value.
    pub const fn from_raw(raw: u32) -> Option<Mode> {
        match raw {
            abi::MODE_STRICT => Some(Mode::Strict),
            abi::MODE_RELAXED => Some(Mode::Relaxed),
            _ => None,
        }
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Strict => "strict",
            Mode::Relaxed => "relaxed",
        })
    }
}

/// A mode name that is neither "strict" nor "relaxed".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown mode {0:?}: expected \"strict\" or \"relaxed\"")]
pub struct ParseModeError(String);

impl FromStr for Mode {
    type Err = ParseModeError;

    fn from_str(s: &str) -> Result<Mode, ParseModeError> {
        match s {
            "strict" => Ok(Mode::Strict),
            "relaxed" => Ok(Mode::Relaxed),
            _ => Err(ParseModeError(s.to_owned())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_names_and_raw_values_round_trip() {
        for mode in [Mode::Strict, Mode::Relaxed] {
            assert_eq!(mode.to_string().parse::<Mode>(), Ok(mode));
            assert_eq!(Mode::from_raw(mode.as_raw()), Some(mode));
        }
        assert_eq!(Mode::from_raw(abi::MODE_NONE), None);
        assert!("Strict".parse::<Mode>().is_err());
    }
}
