//! Giving each row its share of counters read at other moments than its boundaries.
//!
//! The pressure counters ([`Pressure`]) are cumulative and are read at moments of their
//! own (readings), not at the rows' period ends. Between two readings a counter is taken
//! to have grown evenly: its value at any moment is the straight line between the
//! readings around it (rounded down), and a row's share is the value at its end minus the
//! value at its start. Consecutive rows share a boundary, so their shares add up exactly
//! to the growth between the first row's start and the last row's end: nothing is
//! counted twice or lost between rows. Before the first reading nothing is known (the
//! first row gets only what grew after it); a row ending after the last reading gets
//! nothing past it. A counter a reading does not have (`None`) gives `None`.

use crate::rows::row::{Pressure, COUNTERS};

/// Every counter at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reading {
    /// `CLOCK_MONOTONIC` when it was read, ns: the samples' clock.
    pub mono_ns: u64,
    /// Cumulative values.
    pub totals: Pressure,
}

/// Every counter's value at `t`, from `readings` in time order.
fn at(readings: &[Reading], t: u64) -> [Option<u64>; COUNTERS] {
    // The first reading after t; the one before it is at or before t.
    let after = readings.partition_point(|r| r.mono_ns <= t);
    let (before, after) = match (after.checked_sub(1), readings.get(after)) {
        (None, Some(first)) => return first.totals.values(),
        (Some(last), None) => return readings[last].totals.values(),
        (None, None) => return [None; COUNTERS],
        (Some(b), Some(_)) => (&readings[b], &readings[after]),
    };
    let span = u128::from(after.mono_ns - before.mono_ns);
    let into = u128::from(t - before.mono_ns);
    let mut values = [None; COUNTERS];
    for ((value, b), a) in values
        .iter_mut()
        .zip(before.totals.values())
        .zip(after.totals.values())
    {
        *value = match (b, a) {
            // A counter that went back (a cgroup recreated) holds until it grows again.
            (Some(b), Some(a)) if a > b => {
                let grown = u128::from(a - b) * into / span;
                Some(b + grown as u64)
            }
            (Some(b), Some(_)) => Some(b),
            _ => None,
        };
    }
    values
}

/// A row's share of the counters' growth over its period, `start` to `end` (ns).
pub fn share(readings: &[Reading], start: u64, end: u64) -> Pressure {
    let (from, to) = (at(readings, start), at(readings, end.max(start)));
    let mut values = [None; COUNTERS];
    for ((value, from), to) in values.iter_mut().zip(from).zip(to) {
        *value = to.zip(from).map(|(to, from)| to.saturating_sub(from));
    }
    Pressure::from_values(values)
}

/// Drops the readings no row ending after `t` needs: all before `t` but the last one.
pub fn forget_before(readings: &mut Vec<Reading>, t: u64) {
    let keep_from = readings
        .partition_point(|r| r.mono_ns <= t)
        .saturating_sub(1);
    readings.drain(..keep_from);
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A reading at `ms` whose every counter is `value`, `pgmajfault` missing.
    fn reading(ms: u64, value: u64) -> Reading {
        let mut values = [Some(value); COUNTERS];
        values[COUNTERS - 1] = None;
        Reading {
            mono_ns: ms * MS,
            totals: Pressure::from_values(values),
        }
    }

    /// The rows' shares of `stall_some_us`, for rows of `period` ms ending at `ends`.
    fn shares(readings: &[Reading], period: u64, ends: &[u64]) -> Vec<u64> {
        ends.iter()
            .map(|&end| {
                share(readings, (end - period) * MS, end * MS)
                    .stall_some_us
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn rows_between_two_readings_share_the_growth_by_their_length() {
        let readings = [reading(1000, 0), reading(2000, 1000)];
        let ends: Vec<u64> = (1..=20).map(|i| 1000 + i * 50).collect();
        let got = shares(&readings, 50, &ends);
        assert_eq!(got, vec![50; 20]);
    }

    #[test]
    fn shares_add_up_exactly_to_the_growth_whatever_the_rounding() {
        // Readings at uneven moments and rates, rows of 7 ms: most shares are rounded.
        let readings = [reading(0, 0), reading(333, 100), reading(1000, 1000)];
        let ends: Vec<u64> = (1..=142).map(|i| i * 7).collect();
        let got = shares(&readings, 7, &ends);
        // From the first row's start (0) to the last one's end (994):
        // 100 + floor(900 * 661 / 667) = 991.
        assert_eq!(got.iter().sum::<u64>(), 991);
        // 0.3 per ms, then 1.35 per ms.
        assert!(got[..47].iter().all(|&s| s == 2 || s == 3), "{got:?}");
        assert!(got[48..].iter().all(|&s| s == 9 || s == 10), "{got:?}");
    }

    #[test]
    fn a_row_gets_the_growth_of_its_own_stretch_when_readings_fall_on_its_boundaries() {
        // A watcher reading every period: each row gets exactly its own reading's growth.
        let readings = [
            reading(0, 0),
            reading(50, 10),
            reading(100, 40),
            reading(150, 40),
        ];
        assert_eq!(shares(&readings, 50, &[50, 100, 150]), [10, 30, 0]);
    }

    #[test]
    fn nothing_before_the_first_reading_or_after_the_last_is_made_up() {
        let readings = [reading(100, 0), reading(200, 100)];
        assert_eq!(shares(&readings, 50, &[100, 150, 200, 250]), [0, 50, 50, 0]);
        assert_eq!(share(&[], 0, 50 * MS), Pressure::default());
    }

    #[test]
    fn a_counter_missing_from_a_reading_stays_missing_and_others_are_shared() {
        let readings = [reading(0, 0), reading(100, 100)];
        let row = share(&readings, 0, 50 * MS);
        assert_eq!(row.pgmajfault, None);
        assert_eq!(row.pswpin, Some(50));
    }

    #[test]
    fn a_counter_that_goes_back_gives_no_negative_share() {
        let readings = [reading(0, 100), reading(100, 50), reading(200, 150)];
        // The row over the drop gets nothing; the growth after it counts.
        assert_eq!(shares(&readings, 50, &[50, 100, 150, 200]), [0, 0, 50, 50]);
    }

    #[test]
    fn readings_no_later_row_needs_are_forgotten_but_the_last_one_before() {
        let mut readings = vec![
            reading(0, 0),
            reading(50, 1),
            reading(100, 2),
            reading(150, 3),
        ];
        forget_before(&mut readings, 120 * MS);
        assert_eq!(readings, [reading(100, 2), reading(150, 3)]);
        // A row ending later still gets its share: 3 - 2.4, rounded down at 120 ms.
        assert_eq!(shares(&readings, 30, &[150]), [1]);
        forget_before(&mut readings, 150 * MS);
        assert_eq!(readings, [reading(150, 3)]);
    }
}
