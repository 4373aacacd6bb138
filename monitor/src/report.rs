//! Turning samples into rows (CSV or JSON Lines), running totals and the summary.

use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;
use std::time::Duration;

use serde::Serialize;
use shared_layout::abi::Sample;
use shared_layout::Mode;

/// Output format of the sample rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
}

#[derive(Debug, thiserror::Error)]
#[error("format must be csv or jsonl, not {0:?}")]
pub struct ParseFormatError(String);

impl FromStr for Format {
    type Err = ParseFormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "csv" => Ok(Format::Csv),
            "jsonl" => Ok(Format::Jsonl),
            _ => Err(ParseFormatError(s.to_owned())),
        }
    }
}

/// One output row: a sample's per-period deltas placed on the profile's time axis.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Milliseconds from the end of the first sample's period to the end of this one's.
    pub time_ms: u64,
    /// `CLOCK_MONOTONIC` at the end of the period, ns: the sample's own timestamp.
    pub mono_ns: u64,
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    /// CPU time over the period the sample covers: 1.0 is one CPU fully busy.
    pub cpu_util: f64,
    /// Length of that period, ns (not an output column).
    #[serde(skip)]
    pub period_ns: u64,
}

/// Places samples on a time axis: a sample covers the time since the previous one's
/// timestamp (longer than a period when samples were merged), the first one a period.
#[derive(Clone, Debug)]
pub struct Timeline {
    period_ns: u64,
    first: Option<u64>,
    previous: Option<u64>,
}

impl Timeline {
    pub fn new(period: Duration) -> Self {
        Timeline {
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1),
            first: None,
            previous: None,
        }
    }

    /// Timestamps come from the producer: one that goes backwards (a hostile producer)
    /// gets the nominal period rather than a negative or wrapped one.
    pub fn row(&mut self, s: &Sample) -> Row {
        let first = *self.first.get_or_insert(s.time_ns);
        let period_ns = match self.previous.replace(s.time_ns) {
            Some(p) if s.time_ns > p => s.time_ns - p,
            _ => self.period_ns,
        };
        Row {
            time_ms: s.time_ns.saturating_sub(first) / 1_000_000,
            mono_ns: s.time_ns,
            minor: s.minor,
            major: s.major,
            cpu_ns: s.cpu_ns,
            cpu_util: s.cpu_ns as f64 / period_ns as f64,
            period_ns,
        }
    }
}

/// Writes rows in the chosen format. Once the reader has gone away (a closed pipe, as in
/// `monitor | head`) further rows are dropped: that is not an error, and
/// [`RowWriter::is_closed`] tells the caller to end the profile.
pub struct RowWriter<W: Write> {
    out: W,
    format: Format,
    closed: bool,
}

impl<W: Write> RowWriter<W> {
    pub fn new(out: W, format: Format) -> Self {
        RowWriter {
            out,
            format,
            closed: false,
        }
    }

    /// The CSV header row (JSON Lines has none).
    pub fn header(&mut self) -> io::Result<()> {
        match self.format {
            Format::Csv => {
                self.guard(|out| writeln!(out, "time_ms,mono_ns,minor,major,cpu_ns,cpu_util"))
            }
            Format::Jsonl => Ok(()),
        }
    }

    pub fn write(&mut self, row: &Row) -> io::Result<()> {
        let format = self.format;
        self.guard(|out| match format {
            Format::Csv => writeln!(
                out,
                "{},{},{},{},{},{:.4}",
                row.time_ms, row.mono_ns, row.minor, row.major, row.cpu_ns, row.cpu_util
            ),
            Format::Jsonl => {
                serde_json::to_writer(&mut *out, row).map_err(io::Error::from)?;
                out.write_all(b"\n")
            }
        })
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.guard(|out| out.flush())
    }

    /// Whether the reader has gone away.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn guard(&mut self, f: impl FnOnce(&mut W) -> io::Result<()>) -> io::Result<()> {
        if self.closed {
            return Ok(());
        }
        match f(&mut self.out) {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other,
        }
    }
}

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

    /// The live status line (no newline): time and samples so far, and the current
    /// rates, over the `recent` samples.
    pub fn status_line(&self, recent: &Totals) -> String {
        format!(
            "{:>8.1} s  {:>6} samples  minor {:>10.0}/s  major {:>8.0}/s  cpu {:>5.1}%  lost {}",
            self.covered_ns as f64 / 1e9,
            self.samples,
            recent.mean_minor_rate(),
            recent.mean_major_rate(),
            recent.cpu_util() * 100.0,
            self.lost
        )
    }
}

/// Everything the summary reports.
pub struct Summary<'a> {
    pub backend: &'a str,
    pub mode: Mode,
    pub totals: &'a Totals,
    /// Strict mode only: the producer never waits in relaxed mode.
    pub blocked: Duration,
    pub deferred: u64,
    /// The profiled command's own accounting (`monitor run`): wait4() rusage and status.
    pub child: Option<ChildReport>,
    /// What the profile misses or how it was measured, one line each.
    pub notes: &'a [String],
}

/// What wait4() said about the command `monitor run` started.
#[derive(Clone, Copy, Debug)]
pub struct ChildReport {
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    pub status: ExitStatus,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    Exited(i32),
    Signaled(i32),
}

impl ExitStatus {
    /// The exit code a shell would report for this status.
    pub fn code(self) -> u8 {
        match self {
            ExitStatus::Exited(c) => (c & 0xff) as u8,
            ExitStatus::Signaled(s) => (128 + s).clamp(0, 255) as u8,
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExitStatus::Exited(c) => write!(f, "exited with status {c}"),
            ExitStatus::Signaled(s) => write!(f, "killed by signal {s}"),
        }
    }
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.totals;
        writeln!(
            f,
            "pfprof summary ({} backend, {} mode)",
            self.backend, self.mode
        )?;
        writeln!(f, "  samples            {:>14}", t.samples)?;
        writeln!(
            f,
            "  duration           {:>14.3} s",
            t.covered_ns as f64 / 1e9
        )?;
        writeln!(f, "  minor faults       {:>14}", t.minor)?;
        writeln!(f, "  major faults       {:>14}", t.major)?;
        writeln!(
            f,
            "  minor fault rate   {:>14.1} /s mean {:>14.1} /s peak",
            t.mean_minor_rate(),
            t.peak_minor_rate
        )?;
        writeln!(
            f,
            "  major fault rate   {:>14.1} /s mean {:>14.1} /s peak",
            t.mean_major_rate(),
            t.peak_major_rate
        )?;
        writeln!(
            f,
            "  CPU time           {:>14.3} s ({:.1}% of one CPU)",
            t.cpu_ns as f64 / 1e9,
            t.cpu_util() * 100.0
        )?;
        writeln!(f, "  samples lost       {:>14}", t.lost)?;
        if self.mode == Mode::Strict {
            writeln!(
                f,
                "  producer blocked   {:>14.3} s",
                self.blocked.as_secs_f64()
            )?;
        }
        write!(f, "  samples deferred   {:>14}", self.deferred)?;
        if let Some(c) = &self.child {
            write!(
                f,
                "\n  command rusage     {:>14} minor, {} major, {:.3} s CPU; {}",
                c.minor,
                c.major,
                c.cpu_ns as f64 / 1e9,
                c.status
            )?;
        }
        for note in self.notes {
            write!(f, "\n  note: {note}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(time_ms: u64, minor: u64, cpu_ns: u64) -> Sample {
        Sample {
            time_ns: time_ms * 1_000_000,
            minor,
            major: 0,
            cpu_ns,
        }
    }

    #[test]
    fn timeline_starts_at_zero_and_measures_each_period_from_the_previous_sample() {
        let mut t = Timeline::new(Duration::from_millis(50));
        let a = t.row(&sample(5000, 1, 25_000_000));
        let b = t.row(&sample(5150, 1, 75_000_000));
        assert_eq!((a.time_ms, a.period_ns), (0, 50_000_000));
        assert_eq!((b.time_ms, b.period_ns), (150, 150_000_000));
        assert!((a.cpu_util - 0.5).abs() < 1e-9);
        assert!((b.cpu_util - 0.5).abs() < 1e-9);
    }

    #[test]
    fn csv_rows_follow_the_header_columns() {
        let mut buf = Vec::new();
        let mut w = RowWriter::new(&mut buf, Format::Csv);
        w.header().unwrap();
        let row = Timeline::new(Duration::from_millis(50)).row(&sample(100, 7, 1));
        w.write(&row).unwrap();
        let text = String::from_utf8(buf).unwrap();
        assert_eq!(
            text,
            "time_ms,mono_ns,minor,major,cpu_ns,cpu_util\n0,100000000,7,0,1,0.0000\n"
        );
    }

    #[test]
    fn jsonl_rows_use_the_csv_column_names() {
        let mut buf = Vec::new();
        let mut w = RowWriter::new(&mut buf, Format::Jsonl);
        w.header().unwrap();
        w.write(&Timeline::new(Duration::from_millis(50)).row(&sample(1, 2, 3)))
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut expected = ["time_ms", "mono_ns", "minor", "major", "cpu_ns", "cpu_util"];
        expected.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, expected);
    }

    /// Fails every call with EPIPE, counting them.
    #[derive(Default)]
    struct ClosedPipe {
        calls: usize,
    }
    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            Err(io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.calls += 1;
            Err(io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn a_closed_pipe_silences_the_writer_instead_of_failing() {
        let mut w = RowWriter::new(ClosedPipe::default(), Format::Csv);
        w.header().unwrap();
        w.write(&Timeline::new(Duration::from_millis(50)).row(&sample(1, 2, 3)))
            .unwrap();
        w.flush().unwrap();
        assert_eq!(w.out.calls, 1, "nothing is written after the reader left");
    }

    #[test]
    fn totals_saturate_instead_of_overflowing_on_huge_counts() {
        let mut t = Timeline::new(Duration::from_millis(50));
        let mut totals = Totals::default();
        totals.add(&t.row(&sample(100, u64::MAX, u64::MAX)));
        totals.add(&t.row(&sample(200, 1, 1)));
        assert_eq!((totals.minor, totals.cpu_ns), (u64::MAX, u64::MAX));
    }

    #[test]
    fn timeline_takes_a_timestamp_going_backwards_as_one_nominal_period() {
        let mut t = Timeline::new(Duration::from_millis(50));
        t.row(&sample(1000, 0, 0));
        let row = t.row(&sample(10, 0, 0));
        assert_eq!(row.period_ns, 50_000_000);
        assert_eq!(row.time_ms, 0);
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

    fn summary(mode: Mode) -> String {
        Summary {
            backend: "procfs",
            mode,
            totals: &Totals::default(),
            blocked: Duration::ZERO,
            deferred: 0,
            child: None,
            notes: &["one thing".into()],
        }
        .to_string()
    }

    #[test]
    fn only_the_strict_summary_says_how_long_the_producer_was_blocked() {
        assert!(summary(Mode::Strict).contains("producer blocked"));
        assert!(!summary(Mode::Relaxed).contains("producer blocked"));
        assert!(summary(Mode::Relaxed).ends_with("\n  note: one thing"));
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
        let line = totals.status_line(&recent);
        assert!(line.contains("minor        100/s"), "{line}");
    }
}
