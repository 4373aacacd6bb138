//! Durations on the command line, one rule for every option: humantime's units ("250ms",
//! "1.5s", "1s 500ms", "1m", "1h30m"), and a number without a unit is refused,
//! since `100` could mean seconds or milliseconds. `0` alone needs no unit, where an
//! option takes zero.

use std::time::Duration;

/// How every duration option explains its values in `--help`.
pub const DURATION_HELP: &str = "a number with its unit: 250ms, 10s, 1m, 1h30m";

/// Parses a duration, zero included (`--linger 0`); the error says what was expected.
pub fn parse_duration_or_zero(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.parse::<f64>().is_ok_and(|n| n == 0.0) {
        return Ok(Duration::ZERO);
    }
    if text.parse::<f64>().is_ok() {
        return Err(format!(
            "{s:?} has no unit: write e.g. {text}s or {text}ms ({DURATION_HELP})"
        ));
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{s:?} is not a duration ({DURATION_HELP}): {e}"))
}

/// Parses a positive duration; the error says what was expected.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    match parse_duration_or_zero(s)? {
        zero if zero.is_zero() => Err(format!("{s:?} is not a positive duration")),
        positive => Ok(positive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_their_unit_from_milliseconds_to_hours() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn a_number_without_a_unit_is_refused_except_zero_where_zero_is_taken() {
        let err = parse_duration("100").unwrap_err();
        assert!(err.contains("write e.g. 100s or 100ms"), "{err}");
        assert_eq!(parse_duration_or_zero("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration_or_zero("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn durations_must_be_positive_where_zero_is_not_taken() {
        for bad in ["0", "0s", "-1s", "fast", ""] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
