//! What the exporters export: the profile's running totals as one fixed-size [`Snapshot`],
//! and the metrics' names, units and labels, the one place every exporter takes them from.
//!
//! Names follow OpenTelemetry's semantic conventions (`process.paging.faults`,
//! `process.cpu.time`) and their Prometheus translation (`process_paging_faults_total`,
//! `process_cpu_time_seconds_total`); pfprof's own are under `pfprof.`/`pfprof_`.

use crate::rows::row::Row;

/// The upper bounds of the faults-per-period histogram's buckets (the last one, +Inf, is
/// implicit): a scrape every 15 s still tells how many 50 ms periods had no fault, a few,
/// 10s, 100s, 1000s or more.
pub const BUCKETS: [f64; 7] = [0.0, 1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0];

/// The fault types, as `system.paging.fault.type` names them.
pub const FAULT_TYPES: [&str; 2] = ["minor", "major"];

/// One metric: its OpenTelemetry name and unit, its Prometheus family name (without the
/// `_seconds` of its unit, which the encoder adds, nor the `_total` a counter's sample
/// gets), its help.
pub struct Metric {
    pub otel: &'static str,
    pub otel_unit: &'static str,
    pub prometheus: &'static str,
    /// Measured in seconds: `s` in OpenTelemetry, `_seconds` in Prometheus.
    pub seconds: bool,
    pub help: &'static str,
}

pub const FAULTS: Metric = Metric {
    otel: "process.paging.faults",
    otel_unit: "{fault}",
    prometheus: "process_paging_faults",
    seconds: false,
    help: "Page faults of the profiled processes",
};
pub const CPU_TIME: Metric = Metric {
    otel: "process.cpu.time",
    otel_unit: "s",
    prometheus: "process_cpu_time",
    seconds: true,
    help: "CPU time of the profiled processes",
};
pub const PERIOD_FAULTS: Metric = Metric {
    otel: "pfprof.period.faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_period_faults",
    seconds: false,
    help: "Faults per sampling period: one observation per sample",
};
pub const SAMPLES_LOST: Metric = Metric {
    otel: "pfprof.samples.lost",
    otel_unit: "{sample}",
    prometheus: "pfprof_samples_lost",
    seconds: false,
    help: "Samples the producer overwrote before the monitor read them (relaxed mode)",
};
pub const PERIOD: Metric = Metric {
    otel: "pfprof.period",
    otel_unit: "s",
    prometheus: "pfprof_period",
    seconds: true,
    help: "The sampling period",
};

/// The labels (OpenTelemetry attributes) every series carries: one monitor, one target,
/// so a handful of series per monitor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Labels {
    /// What is profiled: the command's name (`monitor run`), `pid:N[,N...]` (`--pid`), the
    /// cgroup's path below the cgroup2 mount (`--cgroup`), or `registered` (bare, with the
    /// module).
    pub target: String,
    /// `kernel` or `procfs`.
    pub backend: String,
    /// `strict` or `relaxed`.
    pub mode: String,
}

impl Labels {
    pub fn pairs(&self) -> [(&'static str, &str); 3] {
        [
            ("target", &self.target),
            ("backend", &self.backend),
            ("mode", &self.mode),
        ]
    }
}

/// The faults-per-period histogram of one fault type: per-bucket (not cumulative) counts,
/// the last one above every bound.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Histogram {
    pub buckets: [u64; BUCKETS.len() + 1],
    /// The sum of every observation: the fault total.
    pub sum: u64,
}

impl Histogram {
    fn observe(&mut self, faults: u64) {
        let bucket = BUCKETS
            .iter()
            .position(|&bound| faults as f64 <= bound)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket] += 1;
        self.sum = self.sum.saturating_add(faults);
    }

    pub fn count(&self) -> u64 {
        self.buckets.iter().sum()
    }

    /// `(upper bound, count)` pairs, +Inf last, as both encoders take them.
    pub fn bounded(&self) -> Vec<(f64, u64)> {
        BUCKETS
            .iter()
            .copied()
            .chain(std::iter::once(f64::INFINITY))
            .zip(self.buckets)
            .collect()
    }
}

/// The profile so far: cumulative, so a reader that misses some snapshots loses nothing
/// but their timing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Minor and major faults, in [`FAULT_TYPES`] order.
    pub faults: [u64; 2],
    pub cpu_ns: u64,
    pub lost: u64,
    /// The faults-per-period histograms, in [`FAULT_TYPES`] order.
    pub per_period: [Histogram; 2],
    pub period_ns: u64,
    /// The profile has ended: these are the final values.
    pub done: bool,
}

impl Snapshot {
    /// Adds one row, saturating as [`crate::output::report::Totals`] does.
    pub fn add(&mut self, row: &Row) {
        for (i, faults) in [row.minor, row.major].into_iter().enumerate() {
            self.faults[i] = self.faults[i].saturating_add(faults);
            self.per_period[i].observe(faults);
        }
        self.cpu_ns = self.cpu_ns.saturating_add(row.cpu_ns);
    }

    pub fn rows(&self) -> u64 {
        self.per_period[0].count()
    }

    pub fn cpu_seconds(&self) -> f64 {
        self.cpu_ns as f64 / 1e9
    }

    pub fn period_seconds(&self) -> f64 {
        self.period_ns as f64 / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(minor: u64, major: u64) -> Row {
        Row {
            time_ms: 0,
            mono_ns: 0,
            minor,
            major,
            cpu_ns: 1,
            cpu_util: 0.0,
            period_ns: 50_000_000,
            ..Row::default()
        }
    }

    #[test]
    fn each_period_falls_in_the_first_bucket_whose_bound_it_does_not_exceed() {
        let mut s = Snapshot::default();
        for minor in [0, 1, 2, 10, 11, 1_000, 100_001] {
            s.add(&row(minor, 0));
        }
        assert_eq!(s.per_period[0].buckets, [1, 1, 2, 1, 1, 0, 0, 1]);
        assert_eq!(s.per_period[1].buckets, [7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(s.per_period[0].sum, s.faults[0]);
        assert_eq!((s.rows(), s.per_period[1].count()), (7, 7));
        assert_eq!(s.cpu_ns, 7);
    }

    #[test]
    fn bounded_buckets_end_with_infinity() {
        let h = Histogram::default();
        let b = h.bounded();
        assert_eq!(b.len(), BUCKETS.len() + 1);
        assert_eq!(b.last().unwrap().0, f64::INFINITY);
    }
}
