//! What the exporters export: the profile's running totals as one fixed-size [`Snapshot`],
//! and the metrics' names, units and labels, the one place every exporter takes them from.
//!
//! Names follow OpenTelemetry's semantic conventions (`process.paging.faults`,
//! `process.cpu.time`) and their Prometheus translation (`process_paging_faults_total`,
//! `process_cpu_time_seconds_total`); pfprof's own are under `pfprof.`/`pfprof_`.

use std::time::{SystemTime, UNIX_EPOCH};

use super::attribution::{AttributedSeries, SeriesPoint};
use crate::pressure::verdict::judged_stall;
use crate::rows::row::Row;

/// The upper bounds of the faults-per-period histogram's buckets (the last one, +Inf, is
/// implicit): a scrape every 15 s still tells how many 50 ms periods had no fault, a few,
/// 10s, 100s, 1000s or more.
pub const BUCKETS: [f64; 7] = [0.0, 1.0, 10.0, 100.0, 1_000.0, 10_000.0, 100_000.0];

/// The fault types, as `system.paging.fault.type` names them.
pub const FAULT_TYPES: [&str; 2] = ["minor", "major"];

/// The memory types of `process.memory.usage`'s `pfprof.memory.type` attribute, in
/// [`Snapshot::memory`] order: their sum is the resident set the convention means.
pub const MEMORY_TYPES: [&str; 3] = ["anon", "file", "shmem"];

/// The memory stall types (PSI's `some` and `full`), in [`Snapshot::stall_us`] order.
pub const STALL_TYPES: [&str; 2] = ["some", "full"];

/// A unit Prometheus puts in the family name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamedUnit {
    /// `s` in OpenTelemetry, `_seconds` in Prometheus.
    Seconds,
    /// `By` in OpenTelemetry, `_bytes` in Prometheus.
    Bytes,
}

/// One metric: its OpenTelemetry name and unit, its Prometheus family name (without the
/// `_seconds` or `_bytes` of its unit, which the encoder adds, nor the `_total` a
/// counter's sample gets), its help.
pub struct Metric {
    pub otel: &'static str,
    pub otel_unit: &'static str,
    pub prometheus: &'static str,
    pub unit: Option<NamedUnit>,
    pub help: &'static str,
}

pub const FAULTS: Metric = Metric {
    otel: "process.paging.faults",
    otel_unit: "{fault}",
    prometheus: "process_paging_faults",
    unit: None,
    help: "Page faults of the profiled processes",
};
pub const CPU_TIME: Metric = Metric {
    otel: "process.cpu.time",
    otel_unit: "s",
    prometheus: "process_cpu_time",
    unit: Some(NamedUnit::Seconds),
    help: "CPU time of the profiled processes",
};
pub const PERIOD_FAULTS: Metric = Metric {
    otel: "pfprof.period.faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_period_faults",
    unit: None,
    help: "Faults per sampling period: one observation per sample",
};
pub const SAMPLES_LOST: Metric = Metric {
    otel: "pfprof.samples.lost",
    otel_unit: "{sample}",
    prometheus: "pfprof_samples_lost",
    unit: None,
    help: "Samples the producer overwrote before the monitor read them (relaxed mode)",
};
pub const PERIOD: Metric = Metric {
    otel: "pfprof.period",
    otel_unit: "s",
    prometheus: "pfprof_period",
    unit: Some(NamedUnit::Seconds),
    help: "The sampling period",
};

pub const MEMORY_USAGE: Metric = Metric {
    otel: "process.memory.usage",
    otel_unit: "By",
    prometheus: "process_memory_usage",
    unit: Some(NamedUnit::Bytes),
    help: "Resident memory of the profiled processes at the last sample, by pfprof_memory_type",
};
pub const SWAP: Metric = Metric {
    otel: "pfprof.memory.swap",
    otel_unit: "By",
    prometheus: "pfprof_memory_swap",
    unit: Some(NamedUnit::Bytes),
    help: "Swapped-out memory of the profiled processes at the last sample",
};
pub const STALL: Metric = Metric {
    otel: "pfprof.memory.stall",
    otel_unit: "s",
    prometheus: "pfprof_memory_stall",
    unit: Some(NamedUnit::Seconds),
    help: "Memory stall (PSI some, full) the thrashing verdict judges by: the cgroup's, else the system's",
};
pub const THRASHING: Metric = Metric {
    otel: "pfprof.thrashing",
    // No unit: a receiver translating `1` would name it `_ratio`.
    otel_unit: "",
    prometheus: "pfprof_thrashing",
    unit: None,
    help: "1 while the thrashing verdict says the profiled processes thrash, else 0",
};
pub const THRASHING_EPISODES: Metric = Metric {
    otel: "pfprof.thrashing.episodes",
    otel_unit: "{episode}",
    prometheus: "pfprof_thrashing_episodes",
    unit: None,
    help: "Thrashing episodes (the verdict's bands) begun so far",
};
pub const MAPPING_FAULTS: Metric = Metric {
    otel: "pfprof.mapping.faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_mapping_faults",
    unit: None,
    help: "Major faults by mapping, every one recorded: each of the target's named mappings \
           since the profile began, the others' as mapping=\"[other]\", those the kernel \
           could not record as mapping=\"[lost]\"",
};
pub const MAPPING_ESTIMATED_FAULTS: Metric = Metric {
    otel: "pfprof.mapping.estimated_faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_mapping_estimated_faults",
    unit: None,
    help: "Minor faults by mapping, estimated: one in --minor-sampling recorded, times it; \
           named as pfprof_mapping_faults names them",
};

pub const PROGRAM_FAULTS: Metric = Metric {
    otel: "pfprof.program.faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_program_faults",
    unit: None,
    help: "Major faults by program (comm), every one recorded: the same faults as \
           pfprof_mapping_faults, each of the target's named programs since the profile \
           began, the others' as program=\"[other]\", those the kernel could not record as \
           program=\"[lost]\"",
};
pub const PROGRAM_ESTIMATED_FAULTS: Metric = Metric {
    otel: "pfprof.program.estimated_faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_program_estimated_faults",
    unit: None,
    help: "Minor faults by program, estimated: one in --minor-sampling recorded, times it; \
           named as pfprof_program_faults names them",
};

pub const FUNCTION_FAULTS: Metric = Metric {
    otel: "pfprof.function.faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_function_faults",
    unit: None,
    help: "Major faults by the function whose code took them (--export-functions), every \
           one recorded: the same faults as pfprof_mapping_faults, each of the target's \
           named functions since the profile began (at most 16), the others' as \
           function=\"[other]\", those the kernel could not record as function=\"[lost]\"",
};
pub const FUNCTION_ESTIMATED_FAULTS: Metric = Metric {
    otel: "pfprof.function.estimated_faults",
    otel_unit: "{fault}",
    prometheus: "pfprof_function_estimated_faults",
    unit: None,
    help: "Minor faults by function, estimated: one in --minor-sampling recorded, times it; \
           named as pfprof_function_faults names them",
};

/// A metric of the attributed faults: the fault type it counts, and its count of a
/// series.
pub type AttributedMetric = (&'static Metric, &'static str, fn(&SeriesPoint) -> u64);

/// The metrics of the faults by mapping.
pub const MAPPING_METRICS: [AttributedMetric; 2] = [
    (&MAPPING_FAULTS, "major", |p| p.major),
    (&MAPPING_ESTIMATED_FAULTS, "minor", |p| p.minor_estimated),
];

/// The metrics of the faults by program.
pub const PROGRAM_METRICS: [AttributedMetric; 2] = [
    (&PROGRAM_FAULTS, "major", |p| p.major),
    (&PROGRAM_ESTIMATED_FAULTS, "minor", |p| p.minor_estimated),
];

/// The metrics of the faults by function.
pub const FUNCTION_METRICS: [AttributedMetric; 2] = [
    (&FUNCTION_FAULTS, "major", |p| p.major),
    (&FUNCTION_ESTIMATED_FAULTS, "minor", |p| p.minor_estimated),
];

/// The metrics of each family of attributed series, in [`AttributedSeries::families`]'
/// order: by mapping, by program, by function.
pub const ATTRIBUTED_METRICS: [&[AttributedMetric; 2]; 3] =
    [&MAPPING_METRICS, &PROGRAM_METRICS, &FUNCTION_METRICS];
pub const BUILD_INFO: Metric = Metric {
    otel: "pfprof.build.info",
    otel_unit: "",
    prometheus: "pfprof_build_info",
    unit: None,
    help: "Always 1: the monitor's version, backend and mode",
};

/// When the values were last updated: what tells a frozen textfile (its monitor killed)
/// from a target that is quiet, its counters flat but still posted every interval.
pub const LAST_UPDATE: Metric = Metric {
    otel: "pfprof.last_update.timestamp",
    otel_unit: "s",
    prometheus: "pfprof_last_update_timestamp",
    unit: Some(NamedUnit::Seconds),
    help: "When the monitor last updated the target's values, Unix time: every --interval \
           while it runs, the end's while the final values linger",
};

pub const TARGETS_LEFT_OUT: Metric = Metric {
    otel: "pfprof.targets.left_out",
    otel_unit: "{target}",
    prometheus: "pfprof_targets_left_out",
    unit: None,
    help: "Cgroups a fleet monitor found but does not profile: --max-targets were exported",
};

/// The monitor's version, the `version` label of [`BUILD_INFO`].
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

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
    /// The monitor's own process id: two monitors of one target never export the same
    /// series (one value per running monitor; a restart starts new series).
    pub monitor_pid: String,
    /// What the target's cgroup path says of it (a Kubernetes container's `pod_uid`,
    /// `container_id`, `qos_class`), then what the node's files say (its `namespace`,
    /// `pod`, `container`): empty but for the targets of a fleet monitor.
    pub derived: Vec<(&'static str, String)>,
}

impl Labels {
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut pairs = vec![
            ("target", self.target.as_str()),
            ("backend", &self.backend),
            ("mode", &self.mode),
            ("monitor_pid", &self.monitor_pid),
        ];
        pairs.extend(
            self.derived
                .iter()
                .map(|(key, value)| (*key, value.as_str())),
        );
        pairs
    }
}

/// What the thrashing verdict says so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThrashingState {
    /// The rows had memory stall to judge by: without it nothing is exported.
    pub judged: bool,
    pub now: bool,
    /// Episodes begun so far, the current one included.
    pub episodes: u64,
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
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Minor and major faults, in [`FAULT_TYPES`] order.
    pub faults: [u64; 2],
    pub cpu_ns: u64,
    pub lost: u64,
    /// The faults-per-period histograms, in [`FAULT_TYPES`] order.
    pub per_period: [Histogram; 2],
    pub period_ns: u64,
    /// The last row's resident memory, in [`MEMORY_TYPES`] order, and swap, bytes.
    pub memory: [u64; 3],
    pub swap: u64,
    /// Memory stall so far, in [`STALL_TYPES`] order, µs; `None` without PSI.
    pub stall_us: Option<[u64; 2]>,
    pub thrashing: ThrashingState,
    /// Faults by mapping and by program; `None`: not attributed (nothing is exported).
    pub attributed: Option<AttributedSeries>,
    /// The profile has ended: these are the final values.
    pub done: bool,
    /// When these values were posted, Unix time in milliseconds ([`LAST_UPDATE`]).
    pub updated_unix_ms: u64,
    /// When the target's counts began (its first profile's start, in a fleet), Unix
    /// time in nanoseconds: an OTLP cumulative point's start time.
    pub started_unix_ns: u64,
}

impl Snapshot {
    /// Adds one row, saturating as [`crate::output::totals::Totals`] does.
    pub fn add(&mut self, row: &Row) {
        for (i, faults) in [row.minor, row.major].into_iter().enumerate() {
            self.faults[i] = self.faults[i].saturating_add(faults);
            self.per_period[i].observe(faults);
        }
        self.cpu_ns = self.cpu_ns.saturating_add(row.cpu_ns);
        self.memory = [row.rss_anon, row.rss_file, row.rss_shmem];
        self.swap = row.swap;
        if let Some((some, full)) = judged_stall(row) {
            let [total_some, total_full] = self.stall_us.unwrap_or_default();
            self.stall_us = Some([
                total_some.saturating_add(some),
                total_full.saturating_add(full),
            ]);
        }
    }

    /// The stall so far in seconds, in [`STALL_TYPES`] order.
    pub fn stall_seconds(&self) -> Option<[f64; 2]> {
        self.stall_us.map(|us| us.map(|u| u as f64 / 1e6))
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

    /// Says that these are the values as of `now`.
    pub fn stamp(&mut self, now: SystemTime) {
        self.updated_unix_ms = now
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    }

    /// When these values were posted, Unix time in seconds.
    pub fn updated_seconds(&self) -> f64 {
        self.updated_unix_ms as f64 / 1e3
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
