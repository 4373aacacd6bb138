//! Period tables added up (an interval's, a run's, a thrashing band's), and ranked.

use std::collections::HashMap;
use std::sync::Arc;

use super::mapping::{FileId, Mapping};
use super::offsets::OffsetHistogram;
use super::symbols::Function;
use super::table::{Faults, PeriodTable};

/// The most mappings, and processes, a tally keeps apart: past it the half with the fewest
/// faults is folded into [`Tally::folded`] (their counts kept, their names not), so a
/// long run over many short-lived mappings or processes costs bounded memory.
pub const MAX_KEPT: usize = 4096;

/// A process's own faults added up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessTotal {
    pub comm: Arc<str>,
    pub minor: u64,
    pub major: u64,
}

/// The processes that ran one program (the same `comm`), their own faults added up, as
/// process-exporter groups by name: fifteen runs of one job are one program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramTotal {
    pub comm: Arc<str>,
    /// How many processes, and the one with the most faults.
    pub processes: u64,
    pub pid: u32,
    pub minor: u64,
    pub major: u64,
}

/// Tables added up.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    mappings: HashMap<Arc<Mapping>, Faults>,
    /// Recorded faults not kept by mapping: the tables' own rest, and folded mappings.
    folded: Faults,
    lost: Faults,
    processes: HashMap<u32, ProcessTotal>,
    /// The faults the tables recorded, by the process that took them.
    by_pid: HashMap<u32, Faults>,
    /// Recorded faults not kept by process: the tables' own rest, and folded processes.
    pids_folded: Faults,
    /// Each file's faults by offset, for the files of the mappings kept (at most
    /// [`MAX_KEPT`], about 1 KiB each).
    offsets: HashMap<FileId, OffsetHistogram>,
    /// The faults recorded, by the function whose code took them.
    functions: HashMap<Function, Faults>,
    /// Recorded faults not kept by function: the tables' code beyond their bound, and
    /// folded functions.
    functions_folded: Faults,
}

impl Tally {
    pub fn add(&mut self, table: &PeriodTable) {
        for p in &table.processes {
            let total = self.processes.entry(p.pid).or_insert_with(|| ProcessTotal {
                comm: Arc::clone(&p.comm),
                minor: 0,
                major: 0,
            });
            total.comm = Arc::clone(&p.comm);
            total.minor = total.minor.saturating_add(p.minor);
            total.major = total.major.saturating_add(p.major);
        }
        for entry in &table.entries {
            *self.mappings.entry(Arc::clone(&entry.mapping)).or_default() += entry.faults;
            *self.by_pid.entry(entry.pid).or_default() += entry.faults;
        }
        for (file, histogram) in &table.offsets {
            self.offsets.entry(*file).or_default().merge(histogram);
        }
        self.folded += table.rest;
        self.pids_folded += table.rest;
        self.lost += table.lost;
        self.bound();
    }

    /// Adds faults by the function that took them (a table's code, named), and those
    /// whose code was not kept.
    pub fn add_functions(&mut self, functions: &[(Function, Faults)], folded: Faults) {
        for (function, faults) in functions {
            *self.functions.entry(function.clone()).or_default() += *faults;
        }
        self.functions_folded += folded;
        fold_smallest(&mut self.functions, &mut self.functions_folded);
    }

    /// The `k` functions with the most major faults, most first (only those with some).
    pub fn top_functions_major(&self, k: usize) -> Vec<(&Function, Faults)> {
        ranked(
            &self.functions,
            k,
            |f| (f.major, f.minor_samples),
            |f| f.major > 0,
        )
    }

    /// The `k` functions with the most minor faults recorded, most first.
    pub fn top_functions_minor(&self, k: usize) -> Vec<(&Function, Faults)> {
        ranked(
            &self.functions,
            k,
            |f| (f.minor_samples, f.major),
            |f| f.minor_samples > 0,
        )
    }

    /// The functions among the `k` with the most major faults or the `k` with the most
    /// minor ones, ordered by major then minor faults.
    pub fn top_functions_either(&self, k: usize) -> Vec<(&Function, Faults)> {
        either(self.top_functions_major(k), self.top_functions_minor(k))
    }

    /// Every function kept, with its faults, in no order.
    pub fn functions(&self) -> impl Iterator<Item = (&Function, Faults)> {
        self.functions.iter().map(|(f, faults)| (f, *faults))
    }

    /// Recorded faults whose function was not kept.
    pub fn functions_folded(&self) -> Faults {
        self.functions_folded
    }

    /// The faults on `file` by offset, where their offsets were known.
    pub fn offsets(&self, file: &FileId) -> Option<&OffsetHistogram> {
        self.offsets.get(file)
    }

    /// Adds the faults `mapping` took (a band's history, replayed).
    pub fn add_mapping(&mut self, mapping: &Arc<Mapping>, faults: Faults) {
        *self.mappings.entry(Arc::clone(mapping)).or_default() += faults;
        self.bound();
    }

    /// Nothing recorded, lost, or counted of any process.
    pub fn is_empty(&self) -> bool {
        self.mappings.is_empty()
            && self.folded.is_empty()
            && self.lost.is_empty()
            && self.processes.is_empty()
            && self.by_pid.is_empty()
    }

    /// Every fault recorded, on any mapping.
    pub fn recorded(&self) -> Faults {
        let mut total = self.folded;
        for faults in self.mappings.values() {
            total += *faults;
        }
        total
    }

    /// What the kernel could not record.
    pub fn lost(&self) -> Faults {
        self.lost
    }

    /// Recorded faults whose mapping was not kept.
    pub fn folded(&self) -> Faults {
        self.folded
    }

    /// Every mapping kept, with its faults, in no order.
    pub fn mappings(&self) -> impl Iterator<Item = (&Arc<Mapping>, Faults)> {
        self.mappings
            .iter()
            .map(|(mapping, faults)| (mapping, *faults))
    }

    /// The `k` mappings with the most major faults, most first (only those with some).
    pub fn top_major(&self, k: usize) -> Vec<(&Arc<Mapping>, Faults)> {
        self.top(k, |f| (f.major, f.minor_samples), |f| f.major > 0)
    }

    /// The `k` mappings with the most minor faults recorded, most first (only those with
    /// some).
    pub fn top_minor(&self, k: usize) -> Vec<(&Arc<Mapping>, Faults)> {
        self.top(k, |f| (f.minor_samples, f.major), |f| f.minor_samples > 0)
    }

    /// The mappings among the `k` with the most major faults or the `k` with the most
    /// minor ones, ordered by major then minor faults.
    pub fn top_either(&self, k: usize) -> Vec<(&Arc<Mapping>, Faults)> {
        either(self.top_major(k), self.top_minor(k))
    }

    /// The faults the tables recorded, by the process that took them, in no order.
    pub fn recorded_by_pid(&self) -> impl Iterator<Item = (u32, Faults)> + '_ {
        self.by_pid.iter().map(|(&pid, faults)| (pid, *faults))
    }

    /// Recorded faults whose process was not kept.
    pub fn pids_folded(&self) -> Faults {
        self.pids_folded
    }

    /// Every process the tables counted, with its program (`comm`), in no order.
    pub fn process_names(&self) -> impl Iterator<Item = (u32, &Arc<str>)> {
        self.processes.iter().map(|(&pid, p)| (pid, &p.comm))
    }

    /// The `k` processes with the most faults (major first, then minor), most first.
    pub fn top_processes(&self, k: usize) -> Vec<(u32, &ProcessTotal)> {
        let mut all: Vec<(u32, &ProcessTotal)> = (self.processes.iter())
            .filter(|(_, p)| p.minor > 0 || p.major > 0)
            .map(|(&pid, p)| (pid, p))
            .collect();
        all.sort_by(|(a, pa), (b, pb)| (pb.major, pb.minor, a).cmp(&(pa.major, pa.minor, b)));
        all.truncate(k);
        all
    }

    /// The `k` programs with the most faults (major first, then minor), most first:
    /// [`Tally::top_processes`] grouped by name.
    pub fn top_programs(&self, k: usize) -> Vec<ProgramTotal> {
        let mut programs: HashMap<&Arc<str>, ProgramTotal> = HashMap::new();
        for (pid, p) in self.top_processes(usize::MAX) {
            let program = programs.entry(&p.comm).or_insert_with(|| ProgramTotal {
                comm: Arc::clone(&p.comm),
                processes: 0,
                pid,
                minor: 0,
                major: 0,
            });
            // top_processes ranks them: the first of a name has the most faults.
            program.processes += 1;
            program.minor = program.minor.saturating_add(p.minor);
            program.major = program.major.saturating_add(p.major);
        }
        let mut all: Vec<ProgramTotal> = programs.into_values().collect();
        all.sort_by(|a, b| (b.major, b.minor, &a.comm).cmp(&(a.major, a.minor, &b.comm)));
        all.truncate(k);
        all
    }

    fn top(
        &self,
        k: usize,
        key: impl Fn(&Faults) -> (u64, u64),
        keep: impl Fn(&Faults) -> bool,
    ) -> Vec<(&Arc<Mapping>, Faults)> {
        ranked(&self.mappings, k, key, keep)
    }

    /// Folds the half with the fewest faults once more than [`MAX_KEPT`] are kept.
    fn bound(&mut self) {
        if fold_smallest(&mut self.mappings, &mut self.folded) {
            let kept: std::collections::HashSet<FileId> =
                self.mappings.keys().filter_map(|m| m.file).collect();
            self.offsets.retain(|file, _| kept.contains(file));
        }
        fold_smallest(&mut self.by_pid, &mut self.pids_folded);
        if self.processes.len() > MAX_KEPT {
            let mut all: Vec<(u32, ProcessTotal)> = self.processes.drain().collect();
            all.sort_by_key(|(_, p)| std::cmp::Reverse((p.major, p.minor)));
            all.truncate(MAX_KEPT / 2);
            self.processes.extend(all);
        }
    }
}

/// The keys of `major` and those of `minor` not among them, by major then minor faults.
fn either<'a, K: Ord>(
    major: Vec<(&'a K, Faults)>,
    minor: Vec<(&'a K, Faults)>,
) -> Vec<(&'a K, Faults)> {
    let mut top = major;
    for (key, faults) in minor {
        if !top.iter().any(|(k, _)| *k == key) {
            top.push((key, faults));
        }
    }
    top.sort_by(|(a, fa), (b, fb)| {
        (fb.major, fb.minor_samples, a).cmp(&(fa.major, fa.minor_samples, b))
    });
    top
}

/// The `k` of `kept` with the greatest `key`, greatest first, of those to `keep`.
fn ranked<K: Ord>(
    kept: &HashMap<K, Faults>,
    k: usize,
    key: impl Fn(&Faults) -> (u64, u64),
    keep: impl Fn(&Faults) -> bool,
) -> Vec<(&K, Faults)> {
    let mut all: Vec<(&K, Faults)> = (kept.iter())
        .filter(|(_, f)| keep(f))
        .map(|(m, f)| (m, *f))
        .collect();
    // Ties in the keys' order, so that equal runs rank alike.
    all.sort_by(|(a, fa), (b, fb)| (key(fb), a).cmp(&(key(fa), b)));
    all.truncate(k);
    all
}

/// Past [`MAX_KEPT`] keys, folds the faults of the half with the fewest into `folded`;
/// whether it did.
fn fold_smallest<K: Eq + std::hash::Hash>(
    kept: &mut HashMap<K, Faults>,
    folded: &mut Faults,
) -> bool {
    if kept.len() <= MAX_KEPT {
        return false;
    }
    let mut all: Vec<(K, Faults)> = kept.drain().collect();
    all.sort_by_key(|(_, f)| std::cmp::Reverse((f.major, f.minor_samples)));
    for (_, faults) in all.drain(MAX_KEPT / 2..) {
        *folded += faults;
    }
    kept.extend(all);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::mapping::shared_file as file;
    use crate::attribution::table::{Builder, ProcessFaults};

    fn faults(major: u64, minor_samples: u64) -> Faults {
        Faults {
            major,
            minor_samples,
        }
    }

    #[test]
    fn a_tally_ranks_mappings_by_major_and_by_minor_faults_over_its_tables() {
        let mut tally = Tally::default();
        for (a, b) in [(faults(5, 1), faults(0, 9)), (faults(5, 0), faults(1, 9))] {
            let mut builder = Builder::default();
            builder.add(1, file("/a"), a);
            builder.add(2, file("/b"), b);
            builder.add(3, file("/b"), b);
            tally.add(&builder.finish(0, faults(1, 0), Vec::new()));
        }
        let major = tally.top_major(5);
        assert_eq!(major.len(), 2);
        assert_eq!(
            (major[0].0.name.as_str(), major[0].1),
            ("/a", faults(10, 1))
        );
        assert_eq!(
            (major[1].0.name.as_str(), major[1].1),
            ("/b", faults(2, 36))
        );
        let minor = tally.top_minor(1);
        assert_eq!(minor[0].0.name, "/b");
        assert_eq!(tally.recorded(), faults(12, 37));
        assert_eq!(tally.lost(), faults(2, 0));
    }

    #[test]
    fn a_tally_ranks_processes_by_their_exact_counts() {
        let mut tally = Tally::default();
        let process = |pid, minor, major| ProcessFaults {
            pid,
            comm: format!("p{pid}").into(),
            minor,
            major,
        };
        for _ in 0..2 {
            let table = PeriodTable {
                processes: vec![process(1, 100, 0), process(2, 5, 1), process(3, 0, 0)],
                ..PeriodTable::default()
            };
            tally.add(&table);
        }
        let top = tally.top_processes(5);
        assert_eq!(
            top.iter()
                .map(|(pid, p)| (*pid, p.minor, p.major))
                .collect::<Vec<_>>(),
            [(2, 10, 2), (1, 200, 0)]
        );
    }

    #[test]
    fn processes_of_one_program_are_one_line_and_programs_rank_by_their_sums() {
        let mut tally = Tally::default();
        let process = |pid, comm: &str, minor| ProcessFaults {
            pid,
            comm: comm.into(),
            minor,
            major: 0,
        };
        // Fifteen runs of one job, each smaller than the one other program.
        let mut processes: Vec<ProcessFaults> =
            (10..25).map(|pid| process(pid, "work", 100)).collect();
        processes.push(process(12, "work", 0));
        processes.push(process(2, "make", 1000));
        tally.add(&PeriodTable {
            processes,
            ..PeriodTable::default()
        });
        let top = tally.top_programs(5);
        let seen: Vec<(&str, u64, u64)> = top
            .iter()
            .map(|p| (&*p.comm, p.processes, p.minor))
            .collect();
        assert_eq!(seen, [("work", 15, 1500), ("make", 1, 1000)]);
        assert_eq!(top[1].pid, 2);
    }

    #[test]
    fn a_tally_of_too_many_mappings_folds_the_smallest_and_keeps_every_count() {
        let mut tally = Tally::default();
        let n = MAX_KEPT as u64 + 1;
        for i in 0..n {
            tally.add_mapping(&file(&format!("/{i}")), faults(i, 1));
        }
        assert_eq!(tally.mappings.len(), MAX_KEPT / 2);
        assert_eq!(tally.recorded(), faults(n * (n - 1) / 2, n));
        assert_eq!(tally.top_major(1)[0].1.major, n - 1);
    }
}
