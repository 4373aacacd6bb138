//! The rows as a person reads them at a terminal, as `pidstat` and `perf stat -I` print
//! theirs: one aligned line an interval (`--interval`, a second by default), rates a
//! second and levels in MiB, under labelled columns repeated every [`HEADER_EVERY`]
//! lines. The rows of the interval are summed, so its rates are over its own length: the
//! periods the rows cover, not a nominal interval. The time is seconds since the start,
//! as `perf stat -I` prints it; the first line names what is counted and when it began.

use std::io::{self, Write};
use std::time::Duration;

use super::metadata::{shortened, Metadata};
use super::totals::compact;
use crate::rows::row::Row;

/// The column labels are printed again after this many lines, as sar does.
pub const HEADER_EVERY: u64 = 20;

/// The column labels, aligned with [`Table::line`]'s fields.
pub const HEADER: &str = "   time s   minflt/s   majflt/s     %CPU    RSS MiB   swap MiB  stall %";

/// What the rows of one interval add up to.
#[derive(Default)]
struct Span {
    rows: u64,
    ns: u64,
    end_ms: u64,
    minor: u64,
    major: u64,
    cpu_ns: u64,
    /// The last row's levels.
    rss: u64,
    swap: u64,
    /// Time some task stalled on memory, µs; `None` where the kernel has no PSI.
    stall_us: Option<u64>,
}

/// Sums rows into lines of `interval`.
pub struct Table {
    interval_ns: u64,
    span: Span,
    /// Lines until the labels are printed again (0: before the next line).
    lines_to_header: u64,
}

impl Table {
    pub fn new(interval: Duration) -> Table {
        Table {
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            span: Span::default(),
            lines_to_header: 0,
        }
    }

    /// The first line: what is counted, from when, and how; what is counted cut in its
    /// middle when the line would not fit 79 columns.
    pub fn title(out: &mut impl Write, metadata: &Metadata) -> io::Result<()> {
        let rest = format!(
            ", from {}, {} backend",
            metadata.start_to_the_second(),
            metadata.backend
        );
        let room = 79usize.saturating_sub(2 + rest.chars().count());
        writeln!(out, "# {}{rest}", shortened(&metadata.counted(), room))
    }

    /// Takes `row`; writes a line once the rows taken cover the interval, or nearly (a
    /// period is not cut in two).
    pub fn row(&mut self, out: &mut impl Write, row: &Row) -> io::Result<()> {
        let span = &mut self.span;
        span.rows += 1;
        span.ns = span.ns.saturating_add(row.period_ns);
        span.end_ms = row.time_ms;
        span.minor = span.minor.saturating_add(row.minor);
        span.major = span.major.saturating_add(row.major);
        span.cpu_ns = span.cpu_ns.saturating_add(row.cpu_ns);
        span.rss = row
            .rss_anon
            .saturating_add(row.rss_file)
            .saturating_add(row.rss_shmem);
        span.swap = row.swap;
        span.stall_us = match (span.rows, span.stall_us, row.pressure.stall_some_us) {
            (1, _, now) => now,
            (_, Some(before), Some(now)) => Some(before.saturating_add(now)),
            _ => None,
        };
        if span.ns.saturating_add(row.period_ns / 2) >= self.interval_ns {
            self.line(out)?;
        }
        Ok(())
    }

    /// At the end: the last, partial interval's line, if rows are left.
    pub fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.span.rows > 0 {
            self.line(out)?;
        }
        Ok(())
    }

    fn line(&mut self, out: &mut impl Write) -> io::Result<()> {
        let span = std::mem::take(&mut self.span);
        if self.lines_to_header == 0 {
            writeln!(out, "{HEADER}")?;
            self.lines_to_header = HEADER_EVERY;
        }
        self.lines_to_header -= 1;
        let seconds = span.ns.max(1) as f64 / 1e9;
        let mib = |bytes: u64| number(bytes as f64 / f64::from(1 << 20));
        let stall = span
            .stall_us
            .map_or_else(|| "-".to_owned(), |us| number(us as f64 / 1e4 / seconds));
        writeln!(
            out,
            "{:>9} {:>10} {:>10} {:>8} {:>10} {:>10} {:>8}",
            number(span.end_ms as f64 / 1e3),
            number(span.minor as f64 / seconds),
            number(span.major as f64 / seconds),
            number(span.cpu_ns as f64 / 1e7 / seconds),
            mib(span.rss),
            mib(span.swap),
            stall
        )
    }
}

/// One decimal, as pidstat prints; in k, M, G or T from a million on, so that a column
/// keeps its width.
fn number(value: f64) -> String {
    if value < 1e6 {
        format!("{value:.1}")
    } else {
        compact(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::metadata::test_metadata;
    use crate::rows::row::{test_sample as sample, Timeline};

    fn table_of(interval_ms: u64, rows: &[Row]) -> String {
        let mut out = Vec::new();
        let mut table = Table::new(Duration::from_millis(interval_ms));
        for row in rows {
            table.row(&mut out, row).unwrap();
        }
        table.finish(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn twenty_periods_of_50_ms_make_one_line_a_second_of_rates_over_their_length() {
        let mut t = Timeline::new(Duration::from_millis(50));
        // 45 rows: two whole seconds (10 faults, 25 ms of CPU a row), then 250 ms.
        let rows: Vec<Row> = (1..=45)
            .map(|i| t.row(&sample(i * 50, 10, 25_000_000)))
            .collect();
        let text = table_of(1000, &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], HEADER);
        let fields: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(fields, ["1.0", "200.0", "0.0", "50.0", "0.0", "0.0", "-"]);
        // The last line covers its own 250 ms: the same rates, not a quarter of them.
        let fields: Vec<&str> = lines[3].split_whitespace().collect();
        assert_eq!(&fields[..4], ["2.2", "200.0", "0.0", "50.0"]);
        assert_eq!(
            (lines[1].len(), lines[1].find("200.0").map(|at| at + 5)),
            (HEADER.len(), HEADER.find("minflt/s").map(|at| at + 8)),
            "the numbers end under their labels"
        );
    }

    #[test]
    fn the_labels_come_again_every_twenty_lines_and_every_line_fits_80_columns() {
        let mut t = Timeline::new(Duration::from_secs(1));
        let rows: Vec<Row> = (1..=41)
            .map(|i| {
                let mut row = t.row(&sample(i * 1000, u64::MAX / 64, u64::MAX / 64));
                row.pressure.stall_some_us = Some(250_000);
                row
            })
            .collect();
        let text = table_of(1000, &rows);
        let headers = text.lines().filter(|l| *l == HEADER).count();
        assert_eq!((text.lines().count(), headers), (44, 3));
        assert!(text.lines().all(|l| l.len() < 80), "{text}");
        assert!(text.lines().nth(1).unwrap().ends_with(" 25.0"), "{text}");
    }

    #[test]
    fn the_title_says_who_is_counted_and_fits_80_columns() {
        let mut metadata = test_metadata();
        let mut out = Vec::new();
        Table::title(&mut out, &metadata).unwrap();
        let title = String::from_utf8(out).unwrap();
        assert!(
            title.starts_with("# pid 42 and its descendants, from "),
            "{title}"
        );
        metadata.inherit = false;
        metadata.pids = (1..40).collect();
        let mut out = Vec::new();
        Table::title(&mut out, &metadata).unwrap();
        let title = String::from_utf8(out).unwrap();
        assert_eq!(title.trim_end().chars().count(), 79, "{title}");
        assert!(
            title.starts_with("# pid 1, 2, ") && title.contains('…'),
            "{title}"
        );
        assert!(title.trim_end().ends_with(", procfs backend"), "{title}");
    }
}
