//! The faults by mapping and by program as the exporters show them: a counter per mapping
//! (and per program) for a bounded set of each target's, the rest as `mapping="[other]"`
//! (`program="[other]"`), what the kernel could not record as `mapping="[lost]"`.
//!
//! Every named series holds all the faults of its mapping (or program) since the profile
//! began, and `[other]` exactly the rest: a mapping is named the first time it takes a
//! fault, with that interval's faults, while there is room (the largest of an interval's
//! newcomers first). One first seen with no room counts in `[other]` for the rest of the
//! run: naming it later would leave its first faults in `[other]`, or take them back out,
//! and `[other]` would go back. So every counter only grows, each fault is in exactly one
//! series, and a burst inside one interval is in its mapping's series.
//!
//! Room is made by the idle: once [`MAX_NAMED`] are named, a named one whose counters have
//! not grown for [`IDLE_NS`] gives its place to a newcomer (its series ends, as an ended
//! target's does, flat for longer than any staleness window), and its later faults count
//! in `[other]`. Memory a process owns (its heap, stack, anonymous memory) is named with
//! its program, not its pid: fifteen runs of one job, or a service's short-lived workers,
//! are one series, not fifteen slots held by the dead.

use std::collections::hash_map::DefaultHasher;
use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::attribution::{Faults, Function, Mapping, Tally};

/// The most mappings a target's series name at once: with `[other]` and `[lost]`, at
/// most 18 values of the `mapping` label per target and metric.
pub const MAX_NAMED: usize = 16;

/// The most programs a target's series name at once: with `[other]` and `[lost]`, at
/// most 12 values of the `program` label per target and metric.
pub const MAX_PROGRAMS: usize = 10;

/// The most functions a target's series name at once (`--export-functions`): with
/// `[other]` and `[lost]`, at most 18 values of the `function` label per target and
/// metric.
pub const MAX_FUNCTIONS: usize = 16;

/// The program a process's faults are named with when its name was never read (it was
/// gone before a pass read it).
pub const UNKNOWN_PROGRAM: &str = "[unknown]";

/// How many processes' names are remembered across intervals (a process's last faults
/// may come in an interval whose tables no longer list it): past it, the half seen
/// longest ago are forgotten.
pub const MAX_NAMES: usize = 4096;

/// How many keys (mappings, or programs) whose faults went to `[other]` are remembered,
/// so that they are never named. Past it, nothing new is named: an unknown key could be
/// one forgotten. 8 bytes each: 32 KiB per target and kind at most.
pub const MAX_IN_OTHER: usize = 4096;

/// How long a named series' counters must have stood still (on the rows' clock) before a
/// newcomer may take its place: 10 minutes, longer than Prometheus's staleness (5
/// minutes) and than a rate over any window they were flat in.
pub const IDLE_NS: u64 = 10 * 60 * 1_000_000_000;

/// The longest `mapping` label value, in bytes: a longer name keeps its end (the file's
/// name), after `…`. A path may be 4,095 bytes, more than some receivers keep of a label.
pub const MAX_NAME_BYTES: usize = 512;

/// What a mapping's series are labelled with, beside the target's labels.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MappingLabels {
    /// `mapping`: as `/proc/PID/maps` names it (a file's path, `[heap]`, `[anon:NAME]`),
    /// or `[anonymous]`, `[unmapped]`, `[unreadable]` where it names none.
    pub name: Arc<str>,
    /// `mapping_kind`: `text`, `data`, `shared`, `heap`, `stack`, `anonymous`, `shmem`,
    /// `other`, `unmapped`, `unreadable`.
    pub kind: &'static str,
    /// `program`: for memory a process owns, its program (`comm`), when the interval
    /// counted the process; the same memory of every process of one program is one.
    pub program: Option<Arc<str>>,
}

impl MappingLabels {
    /// `mapping`'s labels, its owner's program named by `program_of` (a pid's `comm`).
    pub fn of(mapping: &Mapping, program_of: impl Fn(u32) -> Option<Arc<str>>) -> MappingLabels {
        let kind = mapping.kind.describe();
        let name = if mapping.name.is_empty() {
            format!("[{kind}]")
        } else {
            bounded(&mapping.name)
        };
        MappingLabels {
            name: name.into(),
            kind,
            program: mapping.pid().and_then(program_of),
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

/// What a function's series are labelled with: `function`, its name (`[unknown]` where
/// its binary has no symbol for it), and `binary`, its file's path (or the memory's name);
/// each at most [`MAX_NAME_BYTES`].
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FunctionLabels {
    pub name: Arc<str>,
    pub binary: Arc<str>,
}

impl FunctionLabels {
    pub fn of(function: &Function) -> FunctionLabels {
        FunctionLabels {
            name: bounded(&function.name).into(),
            binary: bounded(&function.binary).into(),
        }
    }
}

/// A named series.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Named<K> {
    pub key: K,
    /// Every count of its key since the profile began.
    pub counts: Faults,
    /// When its counters last grew (or it was named), on the rows' clock.
    grew_mono_ns: u64,
}

/// Series named the first time their key is counted, at most `max` at once; see the
/// module's comment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FirstSight<K> {
    max: usize,
    pub named: Vec<Named<K>>,
    /// Counted on keys not named.
    pub other: Faults,
    /// The hashes of the keys counted in `other`: never named after.
    in_other: HashSet<u64>,
    /// `in_other` was full: no key not named is named any more.
    closed: bool,
}

impl<K: Hash + Eq + Ord> FirstSight<K> {
    pub fn new(max: usize) -> FirstSight<K> {
        FirstSight {
            max,
            named: Vec::new(),
            other: Faults::default(),
            in_other: HashSet::new(),
            closed: false,
        }
    }

    /// Adds an interval's counts by key; `mono_ns`: the interval's end on the rows'
    /// clock.
    pub fn add(&mut self, interval: HashMap<K, Faults>, mono_ns: u64) {
        let mut interval: Vec<(K, Faults)> = interval.into_iter().collect();
        // The largest newcomers take the room first; ties in the keys' order, so that
        // equal runs name alike.
        interval.sort_by(|(a, fa), (b, fb)| {
            (fb.major, fb.minor_samples, a).cmp(&(fa.major, fa.minor_samples, b))
        });
        for (key, counts) in interval {
            if let Some(named) = self.named.iter_mut().find(|n| n.key == key) {
                named.counts += counts;
                if !counts.is_empty() {
                    named.grew_mono_ns = mono_ns;
                }
                continue;
            }
            let hash = hash_of(&key);
            if !self.closed && !self.in_other.contains(&hash) && self.make_room(mono_ns) {
                self.named.push(Named {
                    key,
                    counts,
                    grew_mono_ns: mono_ns,
                });
                continue;
            }
            self.other += counts;
            self.remember_in_other(hash);
        }
    }

    /// Whether a newcomer may be named: there is a free place, or an idle series gives
    /// its place (its later counts go to `other`, so it must be remembered there).
    fn make_room(&mut self, mono_ns: u64) -> bool {
        if self.named.len() < self.max {
            return true;
        }
        if self.in_other.len() >= MAX_IN_OTHER {
            return false;
        }
        let idle = (self.named.iter().enumerate())
            .filter(|(_, n)| n.grew_mono_ns.saturating_add(IDLE_NS) <= mono_ns)
            .min_by_key(|(_, n)| n.grew_mono_ns)
            .map(|(i, _)| i);
        let Some(idle) = idle else {
            return false;
        };
        let gone = self.named.remove(idle);
        self.in_other.insert(hash_of(&gone.key));
        true
    }

    fn remember_in_other(&mut self, hash: u64) {
        if self.closed || self.in_other.contains(&hash) {
            return;
        }
        if self.in_other.len() >= MAX_IN_OTHER {
            self.closed = true;
        } else {
            self.in_other.insert(hash);
        }
    }
}

fn hash_of<K: Hash>(key: &K) -> u64 {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    hasher.finish()
}

/// A target's faults by mapping and by program, cumulative from the profile's start: the
/// same faults, each in one mapping's series and in one program's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttributedSeries {
    /// One minor fault in this many is recorded: the estimates are the recorded ones
    /// times it.
    pub minor_sampling: u64,
    pub mappings: FirstSight<MappingLabels>,
    pub programs: FirstSight<Arc<str>>,
    /// By function, where asked for (`--export-functions`).
    pub functions: Option<FirstSight<FunctionLabels>>,
    /// Not recorded: the kernel's buffer was full.
    pub lost: Faults,
    /// Each process's program as the tables last named it, and the interval that did.
    names: HashMap<u32, (Arc<str>, u64)>,
    intervals: u64,
}

impl AttributedSeries {
    pub fn new(minor_sampling: u64) -> AttributedSeries {
        AttributedSeries {
            minor_sampling,
            mappings: FirstSight::new(MAX_NAMED),
            programs: FirstSight::new(MAX_PROGRAMS),
            functions: None,
            lost: Faults::default(),
            names: HashMap::new(),
            intervals: 0,
        }
    }

    /// The faults by function too, at most [`MAX_FUNCTIONS`] named.
    pub fn with_functions(self) -> AttributedSeries {
        AttributedSeries {
            functions: Some(FirstSight::new(MAX_FUNCTIONS)),
            ..self
        }
    }

    /// Remembers the names of the interval's processes, within [`MAX_NAMES`].
    fn learn_names(&mut self, interval: &Tally) {
        self.intervals += 1;
        for (pid, comm) in interval.process_names() {
            self.names.insert(pid, (Arc::clone(comm), self.intervals));
        }
        if self.names.len() > MAX_NAMES {
            let mut seen: Vec<u64> = self.names.values().map(|(_, at)| *at).collect();
            seen.sort_unstable();
            let oldest_kept = seen[seen.len() - MAX_NAMES / 2];
            self.names.retain(|_, (_, at)| *at >= oldest_kept);
        }
    }

    /// The program of process `pid`, as last named.
    fn program_of(&self, pid: u32) -> Option<Arc<str>> {
        self.names.get(&pid).map(|(comm, _)| Arc::clone(comm))
    }

    /// Adds an interval's faults. `mono_ns`: the interval's end on the rows' clock.
    pub fn add_interval(&mut self, interval: &Tally, mono_ns: u64) {
        self.learn_names(interval);
        let mut mappings: HashMap<MappingLabels, Faults> = HashMap::new();
        for (mapping, faults) in interval.mappings() {
            let labels = MappingLabels::of(mapping, |pid| self.program_of(pid));
            *mappings.entry(labels).or_default() += faults;
        }
        self.mappings.add(mappings, mono_ns);
        self.mappings.other += interval.folded();
        let mut programs: HashMap<Arc<str>, Faults> = HashMap::new();
        for (pid, faults) in interval.recorded_by_pid() {
            let program = self
                .program_of(pid)
                .unwrap_or_else(|| UNKNOWN_PROGRAM.into());
            *programs.entry(program).or_default() += faults;
        }
        self.programs.add(programs, mono_ns);
        self.programs.other += interval.pids_folded();
        if let Some(series) = self.functions.as_mut() {
            let mut functions: HashMap<FunctionLabels, Faults> = HashMap::new();
            for (function, faults) in interval.functions() {
                *functions.entry(FunctionLabels::of(function)).or_default() += faults;
            }
            series.add(functions, mono_ns);
            series.other += interval.functions_folded();
        }
        self.lost += interval.lost();
    }

    /// Each family's series: by mapping, by program, and by function where asked for.
    pub fn families(&self) -> Vec<Vec<SeriesPoint>> {
        let mut families = vec![self.mapping_points(), self.program_points()];
        if let Some(functions) = &self.functions {
            let named = (functions.named.iter()).map(|named| {
                let labels = vec![
                    ("function", named.key.name.to_string()),
                    ("binary", named.key.binary.to_string()),
                ];
                (labels, named.counts)
            });
            families.push(self.points("function", named, functions.other));
        }
        families
    }

    /// The minor faults `samples` recorded stand for.
    pub fn estimate(&self, samples: u64) -> u64 {
        samples.saturating_mul(self.minor_sampling)
    }

    /// Every mapping series' labels and counts: each named mapping's, then `[other]`'s
    /// and `[lost]`'s.
    pub fn mapping_points(&self) -> Vec<SeriesPoint> {
        let named = self.mappings.named.iter().map(|named| {
            let mut labels = vec![
                ("mapping", named.key.name.to_string()),
                ("mapping_kind", named.key.kind.to_owned()),
            ];
            labels.extend(
                named
                    .key
                    .program
                    .as_ref()
                    .map(|p| ("program", p.to_string())),
            );
            (labels, named.counts)
        });
        self.points("mapping", named, self.mappings.other)
    }

    /// Every program series' labels and counts: each named program's, then `[other]`'s
    /// and `[lost]`'s.
    pub fn program_points(&self) -> Vec<SeriesPoint> {
        let named = (self.programs.named.iter())
            .map(|named| (vec![("program", named.key.to_string())], named.counts));
        self.points("program", named, self.programs.other)
    }

    fn points(
        &self,
        label: &'static str,
        named: impl Iterator<Item = (Vec<(&'static str, String)>, Faults)>,
        other: Faults,
    ) -> Vec<SeriesPoint> {
        let rest = [("[other]", other), ("[lost]", self.lost)]
            .into_iter()
            .map(|(name, faults)| (vec![(label, name.to_owned())], faults));
        named
            .chain(rest)
            .map(|(labels, faults)| SeriesPoint {
                labels,
                major: faults.major,
                minor_estimated: self.estimate(faults.minor_samples),
            })
            .collect()
    }
}

/// One series of a target's faults by mapping or by program, beside the target's labels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesPoint {
    /// `mapping`, and for a named mapping `mapping_kind` and, for memory a process owns,
    /// `program`; or `program`.
    pub labels: Vec<(&'static str, String)>,
    pub major: u64,
    pub minor_estimated: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::mapping::shared_file as file;
    use crate::attribution::table::{Builder, ProcessFaults};
    use crate::attribution::MappingKind;

    fn major(n: u64) -> Faults {
        Faults {
            major: n,
            minor_samples: 0,
        }
    }

    /// An interval in which each of `faults`' files took so many major faults, and one
    /// was lost.
    fn interval(faults: &[(&str, u64)]) -> Tally {
        let mut builder = Builder::default();
        for (name, n) in faults {
            builder.add(1, file(name), major(*n));
        }
        let mut tally = Tally::default();
        tally.add(&builder.finish(0, major(1), Vec::new()));
        tally
    }

    fn counts(series: &AttributedSeries) -> Vec<(&str, u64)> {
        (series.mappings.named.iter())
            .map(|n| (&*n.key.name, n.counts.major))
            .collect()
    }

    /// Every fault recorded or lost is in one series or another.
    fn all(series: &AttributedSeries) -> u64 {
        (series.mapping_points().iter()).map(|p| p.major).sum()
    }

    #[test]
    fn functions_are_a_family_of_their_own_only_where_asked_for_every_fault_in_it() {
        use crate::attribution::Function;
        let mut tally = interval(&[("/a", 10), ("/b", 3)]);
        let function = |name: &str| Function {
            binary: "/usr/bin/db".into(),
            name: name.into(),
        };
        let folded = major(2);
        tally.add_functions(
            &[
                (function("read_index"), major(9)),
                (function("scan"), major(2)),
            ],
            folded,
        );
        let mut plain = AttributedSeries::new(61);
        plain.add_interval(&tally, 1);
        assert_eq!(plain.families().len(), 2);
        let mut series = AttributedSeries::new(61).with_functions();
        series.add_interval(&tally, 1);
        let families = series.families();
        assert_eq!(families.len(), 3);
        let points: Vec<(Vec<(&str, String)>, u64)> = (families[2].iter())
            .map(|p| (p.labels.clone(), p.major))
            .collect();
        let labels = |name: &str| {
            vec![
                ("function", name.to_owned()),
                ("binary", "/usr/bin/db".into()),
            ]
        };
        assert_eq!(
            points,
            [
                (labels("read_index"), 9),
                (labels("scan"), 2),
                (vec![("function", "[other]".into())], 2),
                (vec![("function", "[lost]".into())], 1),
            ]
        );
    }

    #[test]
    fn a_mapping_is_named_with_its_first_faults_so_a_burst_inside_one_interval_is_its_own() {
        let mut series = AttributedSeries::new(61);
        series.add_interval(&interval(&[("/a", 10), ("/b", 3)]), 1);
        assert_eq!(counts(&series), [("/a", 10), ("/b", 3)]);
        assert_eq!((series.mappings.other.major, series.lost.major), (0, 1));
        series.add_interval(&interval(&[("/a", 5), ("/c", 2)]), 2);
        assert_eq!(counts(&series), [("/a", 15), ("/b", 3), ("/c", 2)]);
        assert_eq!(all(&series), 10 + 3 + 1 + 5 + 2 + 1);
    }

    #[test]
    fn past_the_bound_a_newcomer_counts_in_other_for_the_run_and_an_idle_one_gives_its_place() {
        let mut series = AttributedSeries::new(61);
        let names: Vec<String> = (0..=MAX_NAMED).map(|i| format!("/f{i}")).collect();
        // One interval of MAX_NAMED + 1 newcomers: the largest are named, the smallest
        // (/f0, with 1 fault) is not.
        let first: Vec<(&str, u64)> = (names.iter().enumerate())
            .map(|(i, n)| (n.as_str(), i as u64 + 1))
            .collect();
        series.add_interval(&interval(&first), 0);
        assert_eq!(series.mappings.named.len(), MAX_NAMED);
        assert!(series.mappings.named.iter().all(|n| &*n.key.name != "/f0"));
        assert_eq!(series.mappings.other.major, 1);
        // All but /f1 keep growing; once /f1 has stood still for IDLE_NS, a newcomer
        // takes its place with every fault it took, and /f1's later faults are the
        // others'. /f0, counted in [other] before, is never named: its series would lack
        // that fault.
        let busy: Vec<(&str, u64)> = names[2..].iter().map(|n| (n.as_str(), 1)).collect();
        series.add_interval(&interval(&busy), IDLE_NS / 2);
        let mut with_new = busy.clone();
        with_new.extend([("/new", 100), ("/f0", 7)]);
        series.add_interval(&interval(&with_new), IDLE_NS / 2 + 1);
        assert!(series.mappings.named.iter().all(|n| &*n.key.name != "/new"));
        let other_before = series.mappings.other.major;
        assert_eq!(other_before, 1 + 100 + 7);
        let before: Vec<(String, u64)> = (series.mappings.named.iter())
            .map(|n| (n.key.name.to_string(), n.counts.major))
            .collect();
        let mut later = busy.clone();
        later.extend([("/newer", 40), ("/f1", 3), ("/f0", 2), ("/new", 1)]);
        series.add_interval(&interval(&later), IDLE_NS + 1);
        let newer = (series.mappings.named.iter())
            .find(|n| &*n.key.name == "/newer")
            .expect("named");
        assert_eq!(newer.counts.major, 40);
        for gone in ["/f0", "/f1", "/new"] {
            assert!(
                series.mappings.named.iter().all(|n| &*n.key.name != gone),
                "{gone}"
            );
        }
        assert_eq!(series.mappings.named.len(), MAX_NAMED);
        for named in &series.mappings.named {
            if let Some((_, n)) = before.iter().find(|(name, _)| **name == *named.key.name) {
                assert!(named.counts.major >= *n, "{named:?} went back from {n}");
            }
        }
        assert_eq!(series.mappings.other.major, other_before + 3 + 2 + 1);
    }

    #[test]
    fn past_the_keys_it_can_remember_in_other_nothing_new_is_named() {
        let mut series: FirstSight<u64> = FirstSight::new(1);
        let one = Faults {
            major: 0,
            minor_samples: 1,
        };
        let mut keys: HashMap<u64, Faults> = HashMap::new();
        for key in 0..=MAX_IN_OTHER as u64 + 1 {
            keys.insert(key, one);
        }
        series.add(keys, 0);
        assert!(series.closed);
        let before = series.named.clone();
        // Long idle, but the key it would give its place to cannot be remembered.
        series.add(HashMap::from([(u64::MAX, one)]), 2 * IDLE_NS);
        assert_eq!(series.named, before);
        assert_eq!(series.other.minor_samples, MAX_IN_OTHER as u64 + 2);
    }

    #[test]
    fn memory_a_process_owns_is_named_with_its_program_so_the_dead_take_no_place() {
        let mut series = AttributedSeries::new(1);
        // Fifteen runs of one job, each in an interval of its own, and one of another.
        for pid in 10..25 {
            let heap = Arc::new(Mapping {
                kind: MappingKind::Heap,
                name: "[heap]".into(),
                file: None,
                owner: Some(pid),
            });
            let mut builder = Builder::default();
            builder.add(pid, heap, major(2));
            let processes = vec![ProcessFaults {
                pid,
                comm: if pid == 24 { "make" } else { "work" }.into(),
                minor: 5,
                major: 2,
            }];
            let mut tally = Tally::default();
            tally.add(&builder.finish(0, Faults::default(), processes));
            series.add_interval(&tally, pid.into());
        }
        let heaps: Vec<(Option<&str>, u64)> = (series.mappings.named.iter())
            .map(|n| (n.key.program.as_deref(), n.counts.major))
            .collect();
        assert_eq!(heaps, [(Some("work"), 28), (Some("make"), 2)]);
        let points = series.mapping_points();
        assert_eq!(
            points[0].labels,
            [
                ("mapping", "[heap]".to_owned()),
                ("mapping_kind", "heap".to_owned()),
                ("program", "work".to_owned())
            ]
        );
        // By program: the same faults, recorded (minor ones times the sampling).
        let points = series.program_points();
        let programs: Vec<(&str, u64)> = (points.iter())
            .map(|p| (p.labels[0].1.as_str(), p.major))
            .collect();
        assert_eq!(
            programs,
            [("work", 28), ("make", 2), ("[other]", 0), ("[lost]", 0)]
        );
    }

    #[test]
    fn a_process_named_in_one_interval_keeps_its_name_for_its_faults_in_a_later_one() {
        let mut series = AttributedSeries::new(1);
        let named = |faults| {
            let mut builder = Builder::default();
            builder.add(7, file("/lib"), major(faults));
            let work = ProcessFaults {
                pid: 7,
                comm: "work".into(),
                minor: 0,
                major: faults,
            };
            let mut tally = Tally::default();
            tally.add(&builder.finish(0, Faults::default(), vec![work]));
            tally
        };
        series.add_interval(&named(3), 1);
        // Its last faults, recorded after the last read of its counters (it exited).
        let mut builder = Builder::default();
        builder.add(7, file("/lib"), major(2));
        let mut last = Tally::default();
        last.add(&builder.finish(0, Faults::default(), Vec::new()));
        series.add_interval(&last, 2);
        let points = series.program_points();
        assert_eq!(
            (points[0].labels[0].1.as_str(), points[0].major),
            ("work", 5)
        );
    }

    #[test]
    fn programs_past_their_bound_are_the_others_and_a_process_never_read_is_unknown() {
        let mut series = AttributedSeries::new(1);
        let n = MAX_PROGRAMS as u32 + 3;
        let mut builder = Builder::default();
        let mut processes = Vec::new();
        for pid in 0..n {
            builder.add(pid, file("/lib"), major(u64::from(pid) + 1));
            processes.push(ProcessFaults {
                pid,
                comm: format!("p{pid}").into(),
                minor: 0,
                major: u64::from(pid) + 1,
            });
        }
        // A process that took a fault and was gone before its name was read.
        builder.add(n, file("/lib"), major(100));
        let mut tally = Tally::default();
        tally.add(&builder.finish(0, major(1), processes));
        series.add_interval(&tally, 0);
        let points = series.program_points();
        let names: Vec<&str> = points.iter().map(|p| p.labels[0].1.as_str()).collect();
        assert_eq!(names.len(), MAX_PROGRAMS + 2);
        assert_eq!(names[0], UNKNOWN_PROGRAM);
        // With the unknown one named, the four smallest, p0 to p3, are the others'.
        assert!(!names.contains(&"p3") && names.contains(&"p4"), "{names:?}");
        let (other, lost) = (&points[MAX_PROGRAMS], &points[MAX_PROGRAMS + 1]);
        assert_eq!((other.major, lost.major), (1 + 2 + 3 + 4, 1));
        // The same faults as by mapping.
        let all = |points: Vec<SeriesPoint>| points.iter().map(|p| p.major).sum::<u64>();
        assert_eq!(all(series.program_points()), all(series.mapping_points()));
        let n = u64::from(n);
        assert_eq!(all(series.program_points()), n * (n + 1) / 2 + 100 + 1);
    }

    #[test]
    fn a_mapping_without_a_name_is_labelled_by_its_kind_and_a_long_name_keeps_its_end() {
        let anon = Mapping {
            kind: MappingKind::Anonymous,
            name: String::new(),
            file: None,
            owner: Some(42),
        };
        let labels = MappingLabels::of(&anon, |pid| (pid == 42).then(|| "work".into()));
        assert_eq!(
            (&*labels.name, labels.kind, labels.program.as_deref()),
            ("[anonymous]", "anonymous", Some("work"))
        );
        assert_eq!(
            &*MappingLabels::of(&Mapping::unmapped(3), |_| None).name,
            "[unmapped]"
        );
        let long = format!("/{}é/index.dat", "d".repeat(2 * MAX_NAME_BYTES));
        let name = MappingLabels::of(&file(&long), |_| None).name;
        assert!(name.len() <= MAX_NAME_BYTES, "{}", name.len());
        assert!(
            name.starts_with('…') && name.ends_with("é/index.dat"),
            "{name}"
        );
    }
}
