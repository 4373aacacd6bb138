//! The running totals of the rows, for the summary, the table and the live status line,
//! and the live line itself.

use crate::rows::row::Row;

const MIB: f64 = (1u64 << 20) as f64;

/// Running totals over every row, for the summary and the status line.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub samples: u64,
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    /// Time covered by the samples, ns.
    pub covered_ns: u64,
    pub peak_minor_rate: f64,
    pub peak_major_rate: f64,
    pub lost: u64,
    /// The most resident (anonymous, file and shared) and swapped-out memory of a row.
    pub peak_resident: u64,
    pub peak_swap: u64,
    /// Memory stall over the rows that have it (system-wide PSI), µs.
    pub stall_some_us: Option<u64>,
    pub stall_full_us: Option<u64>,
}

impl Totals {
    /// Saturates: the counts come from the producer, and hostile ones must not wrap.
    pub fn add(&mut self, row: &Row) {
        self.samples += 1;
        self.minor = self.minor.saturating_add(row.minor);
        self.major = self.major.saturating_add(row.major);
        self.cpu_ns = self.cpu_ns.saturating_add(row.cpu_ns);
        self.covered_ns = self.covered_ns.saturating_add(row.period_ns);
        let secs = row.period_ns as f64 / 1e9;
        self.peak_minor_rate = self.peak_minor_rate.max(row.minor as f64 / secs);
        self.peak_major_rate = self.peak_major_rate.max(row.major as f64 / secs);
        let resident = row
            .rss_anon
            .saturating_add(row.rss_file)
            .saturating_add(row.rss_shmem);
        self.peak_resident = self.peak_resident.max(resident);
        self.peak_swap = self.peak_swap.max(row.swap);
        let add = |total: Option<u64>, row: Option<u64>| match (total, row) {
            (total, None) => total,
            (total, Some(r)) => Some(total.unwrap_or(0).saturating_add(r)),
        };
        self.stall_some_us = add(self.stall_some_us, row.pressure.stall_some_us);
        self.stall_full_us = add(self.stall_full_us, row.pressure.stall_full_us);
    }

    fn rate(&self, count: u64) -> f64 {
        if self.covered_ns == 0 {
            0.0
        } else {
            count as f64 * 1e9 / self.covered_ns as f64
        }
    }

    pub fn mean_minor_rate(&self) -> f64 {
        self.rate(self.minor)
    }

    pub fn mean_major_rate(&self) -> f64 {
        self.rate(self.major)
    }

    /// Mean CPU utilization over the covered time: 1.0 is one CPU fully busy.
    pub fn cpu_util(&self) -> f64 {
        self.rate(self.cpu_ns) / 1e9
    }

    /// The live status line (no newline): the time so far, the samples lost once some
    /// were, the running totals beside the current rates (over the `recent` samples),
    /// the CPU use and the memory now (`resident` bytes). Never wider than `width` (a
    /// line as wide as the terminal wraps, and each redraw then leaves a row behind): what
    /// does not fit is cut from the end.
    pub fn status_line(&self, recent: &Totals, resident: u64, width: usize) -> String {
        let mut line = format!("{:>6.1}s  ", self.covered_ns as f64 / 1e9);
        if self.lost > 0 {
            line += &format!("lost {}  ", compact(self.lost as f64));
        }
        line += &format!(
            "minor {:>6} {:>6}/s  major {:>6} {:>6}/s  cpu {:>3}%  rss {} MiB",
            compact(self.minor as f64),
            compact(recent.mean_minor_rate()),
            compact(self.major as f64),
            compact(recent.mean_major_rate()),
            compact(recent.cpu_util() * 100.0),
            compact(resident as f64 / MIB),
        );
        line.truncate(width);
        line
    }
}

/// `value` in at most six characters below a thousand tera: whole below 100,000, else
/// in k, M, G or T with one decimal.
pub(crate) fn compact(value: f64) -> String {
    if value < 1e5 {
        return format!("{value:.0}");
    }
    for (scale, unit) in [(1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T")] {
        if value / scale < 999.95 {
            return format!("{:.1}{unit}", value / scale);
        }
    }
    format!("{:.0}T", value / 1e12)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::rows::row::{test_sample as sample, Timeline};

    #[test]
    fn totals_saturate_instead_of_overflowing_on_huge_counts() {
        let mut t = Timeline::new(Duration::from_millis(50));
        let mut totals = Totals::default();
        totals.add(&t.row(&sample(100, u64::MAX, u64::MAX)));
        totals.add(&t.row(&sample(200, 1, 1)));
        assert_eq!((totals.minor, totals.cpu_ns), (u64::MAX, u64::MAX));
    }

    #[test]
    fn totals_report_mean_and_peak_rates_over_the_covered_time() {
        let mut t = Timeline::new(Duration::from_millis(100));
        let mut totals = Totals::default();
        totals.add(&t.row(&sample(100, 10, 0)));
        totals.add(&t.row(&sample(200, 30, 100_000_000)));
        assert_eq!(totals.minor, 40);
        assert!((totals.mean_minor_rate() - 200.0).abs() < 1e-9);
        assert!((totals.peak_minor_rate - 300.0).abs() < 1e-9);
        assert!((totals.cpu_util() - 0.5).abs() < 1e-9);
    }

    #[test]
    fn the_status_line_shows_the_recent_rate_not_the_mean_since_the_start() {
        let mut t = Timeline::new(Duration::from_millis(100));
        let mut totals = Totals::default();
        let mut recent = Totals::default();
        totals.add(&t.row(&sample(100, 1000, 0)));
        let row = t.row(&sample(200, 10, 0));
        totals.add(&row);
        recent.add(&row);
        let line = totals.status_line(&recent, 66 << 20, 79);
        // The total beside the recent rate, and the memory now.
        assert!(line.contains("minor   1010    100/s"), "{line}");
        assert!(line.ends_with("  rss 66 MiB"), "{line}");
        assert!(!line.contains("lost"), "{line}");
    }

    #[test]
    fn the_status_line_fits_an_80_column_terminal_whatever_its_numbers() {
        let mut t = Timeline::new(Duration::from_millis(50));
        let mut totals = Totals::default();
        for _ in 0..3 {
            totals.add(&t.row(&sample(50, u64::MAX / 8, u64::MAX / 8)));
        }
        totals.covered_ns = 40_000 * 1_000_000_000;
        totals.samples = 123_456_789;
        totals.lost = 98_765_432;
        let line = totals.status_line(&totals, u64::MAX, 79);
        assert!(line.len() <= 79, "{} columns: {line}", line.len());
        assert!(line.contains("s  lost 98.8M  minor "), "{line}");
        // A narrower terminal: cut to its width.
        assert_eq!(totals.status_line(&totals, 0, 39).len(), 39);
        let quiet = Totals::default().status_line(&Totals::default(), u64::MAX, 79);
        assert!(quiet.len() <= 79, "{} columns: {quiet}", quiet.len());
    }

    #[test]
    fn compact_numbers_take_six_characters_at_most() {
        assert_eq!(compact(99_999.0), "99999");
        assert_eq!(compact(123_456.0), "123.5k");
        assert_eq!(compact(99_900_000.0), "99.9M");
        assert_eq!(compact(2.5e9), "2.5G");
        for v in [0.0, 1.0, 99_999.0, 1e5, 9.99e7, 1e8, 5e10, 9.9e11] {
            assert!(compact(v).len() <= 6, "{v}: {}", compact(v));
        }
    }
}
