//! Durations on the command line: "1s", "250ms", "1.5s", or plain seconds.

use std::time::Duration;

/// Parses a positive duration; the error says what was expected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (s.strip_suffix('s').unwrap_or(s), 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 1s or 250ms"))?;
    Duration::try_from_secs_f64(value * unit)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?} is not a positive duration"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_seconds_or_milliseconds() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn durations_must_be_positive_numbers() {
        for bad in ["0s", "-1s", "fast", "", "1h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
