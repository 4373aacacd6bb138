//! One row of the output: a sample placed on the profile's time axis ([`Timeline`]), its
//! memory, and its share of the memory pressure ([`Pressure`]); its columns, in order.

use std::time::Duration;

use serde::Serialize;
use shared_layout::abi::Sample;

/// One output row: a sample's per-period deltas placed on the profile's time axis, its
/// memory levels at the period's end, and the period's share of the memory pressure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Row {
    /// Milliseconds from the start of the profile (of its first period) to the end of
    /// this row's period.
    pub time_ms: u64,
    /// `CLOCK_MONOTONIC` at the end of the period, ns: the sample's own timestamp.
    pub mono_ns: u64,
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    /// CPU time over the period the sample covers: 1.0 is one CPU fully busy.
    pub cpu_util: f64,
    /// The profiled processes' resident and swapped-out memory at the period's end, bytes.
    pub rss_anon: u64,
    pub rss_file: u64,
    pub rss_shmem: u64,
    pub swap: u64,
    /// The system's (and the selected cgroup's) memory pressure over the period
    /// ([`crate::pressure::watch`], apportioned by [`crate::pressure::apportion`]).
    #[serde(flatten)]
    pub pressure: Pressure,
    /// Length of that period, ns (not an output column).
    #[serde(skip)]
    pub period_ns: u64,
}

/// The columns of a row before its pressure's, in their order.
pub const ROW_COLUMNS: [&str; 10] = [
    "time_ms",
    "mono_ns",
    "minor",
    "major",
    "cpu_ns",
    "cpu_util",
    "rss_anon",
    "rss_file",
    "rss_shmem",
    "swap",
];

/// Declares [`Pressure`]: one field per counter, named as its column.
macro_rules! pressure {
    ($($(#[doc = $doc:literal])* $name:ident,)*) => {
        /// The pressure counters: cumulative in a [`crate::pressure::apportion::Reading`], a row's
        /// share of their growth in a [`Row`]. `None`: the kernel does not have it (or no
        /// cgroup was given).
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct Pressure {
            $($(#[doc = $doc])* pub $name: Option<u64>,)*
        }

        impl Pressure {
            /// The columns, in the order of [`Pressure::values`].
            pub const NAMES: [&'static str; COUNTERS] = [$(stringify!($name)),*];

            pub fn values(&self) -> [Option<u64>; COUNTERS] {
                [$(self.$name),*]
            }

            pub fn from_values(values: [Option<u64>; COUNTERS]) -> Pressure {
                let [$($name),*] = values;
                Pressure { $($name),* }
            }
        }
    };
}

/// How many counters [`Pressure`] has.
pub const COUNTERS: usize = 11;

pressure! {
    /// Time some task was stalled on memory, µs (system-wide PSI `some`).
    stall_some_us,
    /// Time every non-idle task was stalled on memory at once, µs (PSI `full`).
    stall_full_us,
    /// The same in the selected cgroup (its `memory.pressure`).
    cgroup_stall_some_us,
    cgroup_stall_full_us,
    /// Pages swapped in and out (`/proc/vmstat`, system-wide, as every field below).
    pswpin,
    pswpout,
    /// Refaults of recently evicted anonymous and file pages.
    workingset_refault_anon,
    workingset_refault_file,
    /// Pages scanned by kswapd and by direct reclaim (reclaim a cgroup's limit drives is
    /// counted here only on kernels that count it globally).
    pgscan_kswapd,
    pgscan_direct,
    /// Major faults of the whole system.
    pgmajfault,
}

/// Places samples on a time axis: a sample covers the time since the previous one's
/// timestamp (longer than a period when samples were merged), the first one a period.
///
/// A backend whose first sample marks the start (the procfs backend: taken as the
/// profile starts, with what the processes did before it, a command's exec) has that
/// sample held and folded into the next one: every row then covers a whole period
/// measured from a timestamp, as pidstat's intervals do (`--count 5` is 5 of them), and
/// the first row's rates are not those of a stub of a few milliseconds divided by a
/// period. What the mark counted is in the first row, so the rows' sums are unchanged.
#[derive(Clone, Debug)]
pub struct Timeline {
    period_ns: u64,
    first: Option<u64>,
    previous: Option<u64>,
    /// Until the first sample: the latest a start mark can be dated (the profile's start
    /// plus half a period); `None`: no mark to fold.
    mark_by: Option<u64>,
    /// The start mark, held until the next sample.
    mark: Option<Sample>,
}

impl Timeline {
    pub fn new(period: Duration) -> Self {
        Timeline {
            period_ns: u64::try_from(period.as_nanos()).unwrap_or(u64::MAX).max(1),
            first: None,
            previous: None,
            mark_by: None,
            mark: None,
        }
    }

    /// A timeline whose first sample marks the start (see [`Timeline`]) if it is dated
    /// at the profile's start (`start_ns`, `CLOCK_MONOTONIC`), not a period or more after
    /// it: a mark the relaxed ring overwrote, or the strict one merged into the next
    /// sample, leaves a first sample that ends a period, and that is a row of its own.
    pub fn with_start_mark(period: Duration, start_ns: u64) -> Self {
        let timeline = Timeline::new(period);
        Timeline {
            mark_by: Some(start_ns.saturating_add(timeline.period_ns / 2)),
            ..timeline
        }
    }

    /// The row of sample `s`, or `None` for a start mark, held for the next sample.
    pub fn place(&mut self, s: &Sample) -> Option<Row> {
        if std::mem::take(&mut self.mark_by).is_some_and(|by| s.time_ns <= by) {
            self.first = Some(s.time_ns);
            self.previous = Some(s.time_ns);
            self.mark = Some(*s);
            return None;
        }
        let mut s = *s;
        if let Some(mark) = self.mark.take() {
            s.minor = s.minor.saturating_add(mark.minor);
            s.major = s.major.saturating_add(mark.major);
            s.cpu_ns = s.cpu_ns.saturating_add(mark.cpu_ns);
        }
        Some(self.row(&s))
    }

    /// The row of sample `s`. Timestamps come from the producer: one that goes
    /// backwards (a hostile producer) gets the nominal period rather than a negative or
    /// wrapped one.
    pub fn row(&mut self, s: &Sample) -> Row {
        // Without a start mark, the first sample ends the first period.
        let first = *self
            .first
            .get_or_insert(s.time_ns.saturating_sub(self.period_ns));
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
            rss_anon: s.rss_anon,
            rss_file: s.rss_file,
            rss_shmem: s.rss_shmem,
            swap: s.swap,
            pressure: Pressure::default(),
            period_ns,
        }
    }

    /// At the end: the start mark as a row of its own when no sample came after it (a
    /// profile ended at once), so that nothing it counted is dropped.
    pub fn finish(&mut self) -> Option<Row> {
        let mark = self.mark.take()?;
        self.first = None;
        self.previous = None;
        Some(self.row(&mark))
    }
}

/// A sample ending `time_ms` after boot with these minor faults and CPU time, and 4 KiB of
/// anonymous memory: for the tests of what reads rows.
#[cfg(test)]
pub(crate) fn test_sample(time_ms: u64, minor: u64, cpu_ns: u64) -> Sample {
    Sample {
        time_ns: time_ms * 1_000_000,
        minor,
        cpu_ns,
        rss_anon: 4096,
        ..Sample::default()
    }
}

#[cfg(test)]
mod tests {
    use super::test_sample as sample;
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn timeline_starts_a_period_before_the_first_sample_and_measures_each_from_the_previous() {
        let mut t = Timeline::new(Duration::from_millis(50));
        let a = t.row(&sample(5000, 1, 25_000_000));
        let b = t.row(&sample(5150, 1, 75_000_000));
        assert_eq!((a.time_ms, a.period_ns), (50, 50_000_000));
        assert_eq!((b.time_ms, b.period_ns), (200, 150_000_000));
        assert!((a.cpu_util - 0.5).abs() < 1e-9);
        assert!((b.cpu_util - 0.5).abs() < 1e-9);
    }

    #[test]
    fn timeline_takes_a_timestamp_going_backwards_as_one_nominal_period() {
        let mut t = Timeline::new(Duration::from_millis(50));
        t.row(&sample(1000, 0, 0));
        let row = t.row(&sample(10, 0, 0));
        assert_eq!(row.period_ns, 50_000_000);
        assert_eq!(row.time_ms, 0, "before the start: at the start");
        // Nor does a repeated one cover no time (and make its CPU use infinite).
        let row = t.row(&sample(10, 0, 5_000_000));
        assert_eq!(row.period_ns, 50_000_000);
        assert!((row.cpu_util - 0.1).abs() < 1e-9);
    }

    #[test]
    fn a_start_mark_is_folded_into_the_first_whole_period() {
        let mut t = Timeline::with_start_mark(Duration::from_millis(1000), 5_001 * MS);
        // Attached at 5000 ms: 3 ms of CPU and 2 faults before the mark.
        assert_eq!(t.place(&sample(5000, 2, 3_000_000)), None);
        let first = t.place(&sample(6000, 10, 400_000_000)).unwrap();
        assert_eq!(
            (first.time_ms, first.period_ns, first.minor, first.cpu_ns),
            (1000, 1_000_000_000, 12, 403_000_000)
        );
        assert!((first.cpu_util - 0.403).abs() < 1e-9);
        let second = t.place(&sample(7000, 1, 0)).unwrap();
        assert_eq!((second.time_ms, second.minor), (2000, 1));
        assert_eq!(t.finish(), None);
    }

    #[test]
    fn a_first_sample_a_period_after_the_start_is_no_mark_but_a_row() {
        // The mark was overwritten (relaxed) or merged into this one (strict).
        let mut t = Timeline::with_start_mark(Duration::from_millis(50), 5_000 * MS);
        let row = t.place(&sample(5050, 7, 1_000_000)).unwrap();
        assert_eq!((row.time_ms, row.minor, row.period_ns), (50, 7, 50_000_000));
        assert_eq!(t.finish(), None);
    }

    #[test]
    fn a_start_mark_with_nothing_after_it_is_a_row_at_the_end() {
        let mut t = Timeline::with_start_mark(Duration::from_millis(50), 5_000 * MS);
        assert_eq!(t.place(&sample(5000, 7, 1_000_000)), None);
        let row = t.finish().unwrap();
        assert_eq!((row.time_ms, row.minor, row.period_ns), (50, 7, 50_000_000));
        assert_eq!(t.finish(), None);
    }
}
