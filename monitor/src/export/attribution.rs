//! The faults by mapping as the exporters show them: a counter per mapping for a bounded
//! set of each target's mappings, the rest as `mapping="[other]"`, what the kernel could
//! not record as `mapping="[lost]"`.
//!
//! Counters never go back and never vanish while they grow. A mapping is named at the end
//! of an interval in which it was among the target's top [`RANKED`] by major or by minor
//! faults; its counters start at 0 then and count its faults from then on (before, they
//! were counted in `[other]`, which keeps them: every counter only grows, and all of a
//! target's add up to every fault recorded and lost). A named mapping stays named for the
//! run, unless [`MAX_NAMED`] are named, a newcomer is in the top, and a named one's
//! counters have not grown for [`IDLE_NS`]: then the idle one gives its place (its series
//! ends, as an ended target's does, having been flat for longer than any staleness
//! window), and its faults from then on count in `[other]` until it is named again, from
//! 0, as a new series.

use std::sync::Arc;

use crate::attribution::{Faults, Mapping, Tally};

/// How many of an interval's top mappings by major faults, and by minor faults, are
/// named.
pub const RANKED: usize = 5;

/// The most mappings a target's series name at once: with `[other]` and `[lost]`, at
/// most 12 values of the `mapping` label per target and metric.
pub const MAX_NAMED: usize = 2 * RANKED;

/// How long a named mapping's counters must have stood still (on the rows' clock) before
/// a mapping newly in the top may take its place: 10 minutes, longer than Prometheus's
/// staleness (5 minutes) and than a rate over any window they were flat in.
pub const IDLE_NS: u64 = 10 * 60 * 1_000_000_000;

/// The longest `mapping` label value, in bytes: a longer name keeps its end (the file's
/// name), after `…`. A path may be 4,095 bytes, more than some receivers keep of a label.
pub const MAX_NAME_BYTES: usize = 512;

/// What a mapping's series are labelled with, beside the target's labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MappingLabels {
    /// `mapping`: as `/proc/PID/maps` names it (a file's path, `[heap]`, `[anon:NAME]`),
    /// or `[anonymous]`, `[unmapped]`, `[unreadable]` where it names none.
    pub name: Arc<str>,
    /// `mapping_kind`: `text`, `data`, `shared`, `heap`, `stack`, `anonymous`, `shmem`,
    /// `other`, `unmapped`, `unreadable`.
    pub kind: &'static str,
    /// `mapping_pid`: for memory of one process, its pid.
    pub pid: Option<u32>,
}

impl MappingLabels {
    pub fn of(mapping: &Mapping) -> MappingLabels {
        let kind = mapping.kind.describe();
        let name = if mapping.name.is_empty() {
            format!("[{kind}]")
        } else {
            bounded(&mapping.name)
        };
        MappingLabels {
            name: name.into(),
            kind,
            pid: mapping.pid(),
        }
    }
}

/// `name` in at most [`MAX_NAME_BYTES`] bytes: its end, after `…`.
fn bounded(name: &str) -> String {
    if name.len() <= MAX_NAME_BYTES {
        return name.to_owned();
    }
    let mut start = name.len() - (MAX_NAME_BYTES - '…'.len_utf8());
    while !name.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &name[start..])
}

/// A named mapping's counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedMapping {
    pub labels: MappingLabels,
    /// Its faults since it was named.
    pub faults: Faults,
    /// When it was named (ns since the epoch): where its counters start.
    pub since_unix_ns: u64,
    /// When its counters last grew (or it was named), on the rows' clock.
    grew_mono_ns: u64,
}

/// A target's faults by mapping, cumulative from the profile's start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingSeries {
    /// One minor fault in this many is recorded: the estimates are the recorded ones
    /// times it.
    pub minor_sampling: u64,
    /// At most [`MAX_NAMED`].
    pub named: Vec<NamedMapping>,
    /// Recorded on mappings while they were not named.
    pub other: Faults,
    /// Not recorded: the kernel's buffer was full.
    pub lost: Faults,
}

impl MappingSeries {
    pub fn new(minor_sampling: u64) -> MappingSeries {
        MappingSeries {
            minor_sampling,
            named: Vec::new(),
            other: Faults::default(),
            lost: Faults::default(),
        }
    }

    /// Adds an interval's faults, then names the mappings at its top that are not named
    /// yet, where there is room. `mono_ns`: the interval's end on the rows' clock;
    /// `unix_ns`: now.
    pub fn add_interval(&mut self, interval: &Tally, mono_ns: u64, unix_ns: u64) {
        for (mapping, faults) in interval.mappings() {
            let labels = MappingLabels::of(mapping);
            match self.named.iter_mut().find(|n| n.labels == labels) {
                Some(named) => {
                    named.faults += faults;
                    named.grew_mono_ns = mono_ns;
                }
                None => self.other += faults,
            }
        }
        self.other += interval.folded();
        self.lost += interval.lost();
        for (mapping, _) in interval.top_either(RANKED) {
            let labels = MappingLabels::of(mapping);
            if self.named.iter().any(|n| n.labels == labels) {
                continue;
            }
            let named = NamedMapping {
                labels,
                faults: Faults::default(),
                since_unix_ns: unix_ns,
                grew_mono_ns: mono_ns,
            };
            if self.named.len() < MAX_NAMED {
                self.named.push(named);
            } else if let Some(idle) = (self.named.iter_mut())
                .filter(|n| n.grew_mono_ns.saturating_add(IDLE_NS) <= mono_ns)
                .min_by_key(|n| n.grew_mono_ns)
            {
                *idle = named;
            }
        }
    }

    /// The minor faults `samples` recorded stand for.
    pub fn estimate(&self, samples: u64) -> u64 {
        samples.saturating_mul(self.minor_sampling)
    }

    /// Every series' labels and counts: each named mapping's, then `[other]`'s and
    /// `[lost]`'s.
    pub fn points(&self) -> Vec<MappingPoint> {
        let mut points: Vec<MappingPoint> = (self.named.iter())
            .map(|named| {
                let mut labels = vec![
                    ("mapping", named.labels.name.to_string()),
                    ("mapping_kind", named.labels.kind.to_owned()),
                ];
                labels.extend(named.labels.pid.map(|pid| ("mapping_pid", pid.to_string())));
                MappingPoint {
                    labels,
                    major: named.faults.major,
                    minor_estimated: self.estimate(named.faults.minor_samples),
                    since_unix_ns: Some(named.since_unix_ns),
                }
            })
            .collect();
        for (name, faults) in [("[other]", self.other), ("[lost]", self.lost)] {
            points.push(MappingPoint {
                labels: vec![("mapping", name.to_owned())],
                major: faults.major,
                minor_estimated: self.estimate(faults.minor_samples),
                since_unix_ns: None,
            });
        }
        points
    }
}

/// One mapping's series of a target, beside the target's labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MappingPoint {
    /// `mapping`, and for a named mapping `mapping_kind` and, for memory of one
    /// process, `mapping_pid`.
    pub labels: Vec<(&'static str, String)>,
    pub major: u64,
    pub minor_estimated: u64,
    /// When its counters started (ns since the epoch); `None`: with the profile.
    pub since_unix_ns: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::mapping::shared_file as file;
    use crate::attribution::table::Builder;
    use crate::attribution::MappingKind;

    fn major(n: u64) -> Faults {
        Faults {
            major: n,
            minor_samples: 0,
        }
    }

    /// An interval in which each of `faults`' files took so many major faults.
    fn interval(faults: &[(&str, u64)]) -> Tally {
        let mut builder = Builder::default();
        for (name, n) in faults {
            builder.add(1, file(name), major(*n));
        }
        let mut tally = Tally::default();
        tally.add(&builder.finish(0, major(1), Vec::new()));
        tally
    }

    fn counts(series: &MappingSeries) -> Vec<(&str, u64)> {
        (series.named.iter())
            .map(|n| (&*n.labels.name, n.faults.major))
            .collect()
    }

    #[test]
    fn a_mapping_is_named_from_zero_after_an_interval_at_the_top_and_every_fault_stays_counted() {
        let mut series = MappingSeries::new(61);
        series.add_interval(&interval(&[("/a", 10), ("/b", 3)]), 1, 100);
        // Named, from 0: their first faults are the other mappings'.
        assert_eq!(counts(&series), [("/a", 0), ("/b", 0)]);
        assert_eq!((series.other.major, series.lost.major), (13, 1));
        assert_eq!(series.named[0].since_unix_ns, 100);
        series.add_interval(&interval(&[("/a", 5), ("/c", 2)]), 2, 200);
        assert_eq!(counts(&series), [("/a", 5), ("/b", 0), ("/c", 0)]);
        assert_eq!((series.other.major, series.lost.major), (15, 2));
        let all: u64 = series.named.iter().map(|n| n.faults.major).sum::<u64>()
            + series.other.major
            + series.lost.major;
        assert_eq!(all, 10 + 3 + 1 + 5 + 2 + 1);
    }

    #[test]
    fn past_the_bound_a_newcomer_takes_only_an_idle_mappings_place_and_counters_never_go_back() {
        let mut series = MappingSeries::new(61);
        let names: Vec<String> = (0..MAX_NAMED).map(|i| format!("/f{i}")).collect();
        // Two intervals of RANKED each: every one named.
        for (i, chunk) in names.chunks(RANKED).enumerate() {
            let faults: Vec<(&str, u64)> = chunk.iter().map(|n| (n.as_str(), 1)).collect();
            series.add_interval(&interval(&faults), i as u64, 0);
        }
        assert_eq!(series.named.len(), MAX_NAMED);
        // All but /f0 keep growing; a newcomer at the top waits for an idle place.
        let busy: Vec<(&str, u64)> = names[1..].iter().map(|n| (n.as_str(), 1)).collect();
        series.add_interval(&interval(&busy), IDLE_NS / 2, 0);
        let mut with_new = busy.clone();
        with_new.push(("/new", 100));
        series.add_interval(&interval(&with_new), IDLE_NS / 2 + 1, 0);
        assert!(series.named.iter().all(|n| &*n.labels.name != "/new"));
        let before: Vec<(String, u64)> = (series.named.iter())
            .map(|n| (n.labels.name.to_string(), n.faults.major))
            .collect();
        let other_before = series.other.major;
        // /f0 has stood still for IDLE_NS: /new takes its place, from 0.
        series.add_interval(&interval(&with_new), IDLE_NS + 1, 7);
        let new = (series.named.iter())
            .find(|n| &*n.labels.name == "/new")
            .expect("named");
        assert_eq!((new.faults.major, new.since_unix_ns), (0, 7));
        assert!(series.named.iter().all(|n| &*n.labels.name != "/f0"));
        assert_eq!(series.named.len(), MAX_NAMED);
        for named in &series.named {
            if let Some((_, n)) = before.iter().find(|(name, _)| **name == *named.labels.name) {
                assert!(named.faults.major >= *n, "{named:?} went back from {n}");
            }
        }
        assert_eq!(series.other.major, other_before + 100);
    }

    #[test]
    fn a_mapping_without_a_name_is_labelled_by_its_kind_and_a_long_name_keeps_its_end() {
        let anon = Mapping {
            kind: MappingKind::Anonymous,
            name: String::new(),
            file: None,
            owner: Some(42),
        };
        let labels = MappingLabels::of(&anon);
        assert_eq!(
            (&*labels.name, labels.kind, labels.pid),
            ("[anonymous]", "anonymous", Some(42))
        );
        assert_eq!(
            &*MappingLabels::of(&Mapping::unmapped(3)).name,
            "[unmapped]"
        );
        let long = format!("/{}é/index.dat", "d".repeat(2 * MAX_NAME_BYTES));
        let name = MappingLabels::of(&file(&long)).name;
        assert!(name.len() <= MAX_NAME_BYTES, "{}", name.len());
        assert!(
            name.starts_with('…') && name.ends_with("é/index.dat"),
            "{name}"
        );
    }
}
