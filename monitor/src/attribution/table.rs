//! One period's faults, where and who: what a backend hands the consumer beside each
//! sample.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

pub use super::faults::Faults;
use super::mapping::{FileId, Mapping};
use super::offsets::OffsetHistogram;

/// The most (process, mapping) entries one table holds; what the others took is summed
/// in [`PeriodTable::rest`]. A period's faults rarely spread over more.
pub const MAX_ENTRIES: usize = 256;

/// The most code locations one table holds; what the others took is summed in
/// [`PeriodTable::code_rest`]. A location is one instruction: a loop faulting through a
/// file is one.
pub const MAX_CODE: usize = 1024;

/// The most code locations a period's [`Builder`] gathers: faults at a location new past
/// them are summed in `code_rest` at once, so that a period of faults all over a JIT's
/// code holds bounded memory (about 64 bytes a location). Four times [`MAX_CODE`]: the
/// table's are, nearly always, among the first so many.
const MAX_CODE_GATHERED: usize = 4 * MAX_CODE;

/// Where the instruction that faulted was.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// In the process's memory: the mapping holding the instruction, and its file offset
    /// there in a file's mapping (named by the consumer: attribution/symbols.rs).
    User {
        mapping: Arc<Mapping>,
        offset: Option<u64>,
    },
    /// In the kernel: a fault it took on the process's behalf, copying to or from its
    /// memory in a system call.
    Kernel,
    /// Not said: a module that records no instruction pointer.
    Unknown,
}

impl Code {
    /// Where the instruction at `ip` was, `mapping` holding it for a user address, with
    /// the file offset of its page (the kernel's half of the address space is the upper
    /// one on every 64-bit Linux).
    pub fn at(ip: u64, mapping: impl FnOnce() -> (Arc<Mapping>, Option<u64>)) -> Code {
        match ip {
            0 => Code::Unknown,
            ip if ip >> 63 == 1 => Code::Kernel,
            _ => {
                let (mapping, page) = mapping();
                let within_page = ip & (crate::system::page_size() as u64 - 1);
                Code::User {
                    mapping,
                    offset: page.map(|page| page + within_page),
                }
            }
        }
    }
}

/// The faults one process took on one mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The process that took them (a file's faults, in the process that took each).
    pub pid: u32,
    pub mapping: Arc<Mapping>,
    pub faults: Faults,
}

/// One process's own faults over a period: exact, from its counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessFaults {
    pub pid: u32,
    /// Its name (`comm`) when it was read.
    pub comm: Arc<str>,
    pub minor: u64,
    pub major: u64,
}

/// One period's attribution.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeriodTable {
    /// The timestamp of the sample whose period this is (`CLOCK_MONOTONIC`, ns).
    pub end_ns: u64,
    /// The faults recorded, by process and mapping: at most [`MAX_ENTRIES`].
    pub entries: Vec<Entry>,
    /// Those recorded on entries beyond [`MAX_ENTRIES`].
    pub rest: Faults,
    /// Those the kernel could not record (its buffer was full): exact counts.
    pub lost: Faults,
    /// Each process's own faults over the period, those with any.
    pub processes: Vec<ProcessFaults>,
    /// The faults on each file by offset, for the files of [`PeriodTable::entries`]
    /// whose faults' offsets were known.
    pub offsets: Vec<(FileId, OffsetHistogram)>,
    /// The faults recorded, by where the instruction that took them was: at most
    /// [`MAX_CODE`].
    pub code: Vec<(Code, Faults)>,
    /// Those recorded at code locations beyond [`MAX_CODE`].
    pub code_rest: Faults,
}

impl PeriodTable {
    /// The faults recorded, on any mapping.
    pub fn recorded(&self) -> Faults {
        let mut total = self.rest;
        for entry in &self.entries {
            total += entry.faults;
        }
        total
    }

    /// Adds a later period's table into this one: the two periods as one.
    pub fn merge(&mut self, later: PeriodTable) {
        let mut builder = Builder::default();
        for entry in self.entries.drain(..).chain(later.entries) {
            builder.add(entry.pid, entry.mapping, entry.faults);
        }
        for (file, histogram) in self.offsets.drain(..).chain(later.offsets) {
            builder.offsets.entry(file).or_default().merge(&histogram);
        }
        for (code, faults) in self.code.drain(..).chain(later.code) {
            builder.add_code(code, faults);
        }
        builder.code_rest += self.code_rest;
        builder.code_rest += later.code_rest;
        builder.rest = self.rest;
        builder.rest += later.rest;
        let mut lost = self.lost;
        lost += later.lost;
        let mut processes: HashMap<u32, ProcessFaults> = HashMap::new();
        for p in self.processes.drain(..).chain(later.processes) {
            processes
                .entry(p.pid)
                .and_modify(|q| {
                    q.minor = q.minor.saturating_add(p.minor);
                    q.major = q.major.saturating_add(p.major);
                    q.comm = Arc::clone(&p.comm);
                })
                .or_insert(p);
        }
        *self = builder.finish(later.end_ns, lost, processes.into_values().collect());
    }
}

/// Gathers a period's faults, then makes its table.
#[derive(Debug, Default)]
pub struct Builder {
    entries: HashMap<(u32, Arc<Mapping>), Faults>,
    rest: Faults,
    offsets: HashMap<FileId, OffsetHistogram>,
    code: HashMap<Code, Faults>,
    code_rest: Faults,
}

impl Builder {
    pub fn add(&mut self, pid: u32, mapping: Arc<Mapping>, faults: Faults) {
        *self.entries.entry((pid, mapping)).or_default() += faults;
    }

    /// Adds faults at a known place: with `offset`, the file offset of the page they
    /// took in `mapping`'s file, counted in the file's histogram too.
    pub fn add_at(&mut self, pid: u32, mapping: Arc<Mapping>, offset: Option<u64>, faults: Faults) {
        if let (Some(file), Some(offset)) = (mapping.file, offset) {
            self.offsets.entry(file).or_default().add(offset, faults);
        }
        self.add(pid, mapping, faults);
    }

    /// Adds faults taken by the instruction at `code` (in `code_rest`, a location new
    /// past [`MAX_CODE_GATHERED`]).
    pub fn add_code(&mut self, code: Code, faults: Faults) {
        if let Some(counted) = self.code.get_mut(&code) {
            *counted += faults;
        } else if self.code.len() < MAX_CODE_GATHERED {
            self.code.insert(code, faults);
        } else {
            self.code_rest += faults;
        }
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && self.rest.is_empty()
    }

    /// The table, its entries the [`MAX_ENTRIES`] with the most faults (major first),
    /// the others summed in its `rest`.
    pub fn finish(self, end_ns: u64, lost: Faults, processes: Vec<ProcessFaults>) -> PeriodTable {
        let mut entries: Vec<Entry> = (self.entries.into_iter())
            .map(|((pid, mapping), faults)| Entry {
                pid,
                mapping,
                faults,
            })
            .collect();
        let mut rest = self.rest;
        if entries.len() > MAX_ENTRIES {
            entries.sort_by(|a, b| {
                (b.faults.major, b.faults.minor_samples)
                    .cmp(&(a.faults.major, a.faults.minor_samples))
            });
            for entry in entries.drain(MAX_ENTRIES..) {
                rest += entry.faults;
            }
        }
        // The files of the entries kept: at most MAX_ENTRIES histograms.
        let kept: HashSet<FileId> = entries.iter().filter_map(|e| e.mapping.file).collect();
        let mut offsets: Vec<(FileId, OffsetHistogram)> = (self.offsets.into_iter())
            .filter(|(file, _)| kept.contains(file))
            .collect();
        offsets.sort_by_key(|(file, _)| *file);
        let mut code: Vec<(Code, Faults)> = self.code.into_iter().collect();
        let mut code_rest = self.code_rest;
        if code.len() > MAX_CODE {
            code.sort_by_key(|(_, f)| std::cmp::Reverse((f.major, f.minor_samples)));
            for (_, faults) in code.drain(MAX_CODE..) {
                code_rest += faults;
            }
        }
        PeriodTable {
            end_ns,
            entries,
            rest,
            lost,
            processes,
            offsets,
            code,
            code_rest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anon(pid: u32, name: u64) -> Arc<Mapping> {
        Arc::new(Mapping {
            kind: super::super::MappingKind::Anonymous,
            name: format!("[anon:{name}]"),
            file: None,
            owner: Some(pid),
        })
    }

    #[test]
    fn code_is_placed_at_its_bytes_offset_in_its_page_and_kernel_or_unsaid_code_apart() {
        let page = crate::system::page_size() as u64;
        let text = anon(1, 0);
        let at = |ip| Code::at(ip, || (Arc::clone(&text), Some(3 * page)));
        assert_eq!(
            at(5 * page + 0x123),
            Code::User {
                mapping: Arc::clone(&text),
                offset: Some(3 * page + 0x123)
            }
        );
        assert_eq!(at(0xffff_ffff_8100_0000), Code::Kernel);
        assert_eq!(at(0), Code::Unknown);
    }

    #[test]
    fn a_period_gathers_a_bounded_number_of_code_locations_and_sums_the_rest_exactly() {
        let mut builder = Builder::default();
        let text = anon(1, 0);
        let at = |offset| Code::User {
            mapping: Arc::clone(&text),
            offset: Some(offset),
        };
        let n = MAX_CODE_GATHERED as u64 + 10;
        for i in 0..n {
            builder.add_code(at(i), Faults::major(1));
        }
        // A location gathered still counts its faults past the bound.
        builder.add_code(at(0), Faults::major(5));
        assert_eq!(builder.code.len(), MAX_CODE_GATHERED);
        assert_eq!(builder.code_rest, Faults::major(10));
        let table = builder.finish(5, Faults::default(), Vec::new());
        assert_eq!(table.code.len(), MAX_CODE);
        assert!(table.code.contains(&(at(0), Faults::major(6))));
        let mut total = table.code_rest;
        for (_, faults) in &table.code {
            total += *faults;
        }
        assert_eq!(total, Faults::major(n + 5));
    }

    #[test]
    fn a_table_keeps_the_entries_with_the_most_faults_and_sums_the_rest_exactly() {
        let mut builder = Builder::default();
        for i in 0..(MAX_ENTRIES as u64 + 10) {
            let faults = Faults {
                major: i,
                minor_samples: 1,
            };
            builder.add(1, anon(1, i << 12), faults);
        }
        let table = builder.finish(5, Faults::default(), Vec::new());
        assert_eq!(table.entries.len(), MAX_ENTRIES);
        // The ten smallest (majors 0..10) went to the rest.
        assert_eq!(table.rest.major, (0..10).sum::<u64>());
        assert!(table.entries.iter().all(|e| e.faults.major >= 10));
        let n = MAX_ENTRIES as u64 + 10;
        assert_eq!(
            table.recorded(),
            Faults {
                major: n * (n - 1) / 2,
                minor_samples: n
            }
        );
    }

    #[test]
    fn a_tables_offsets_are_those_of_its_kept_files_and_merge_by_file() {
        use crate::attribution::{FileId, MappingKind};
        let file = |inode| {
            Arc::new(Mapping {
                kind: MappingKind::Shared,
                name: format!("/{inode}"),
                file: Some(FileId {
                    major: 8,
                    minor: 1,
                    inode,
                }),
                owner: None,
            })
        };
        let table = |end_ns, offset| {
            let mut builder = Builder::default();
            builder.add_at(1, file(1), Some(offset), Faults::major(2));
            // Past the table's entries, with the fewest faults: its offsets are not kept.
            let more = Faults {
                major: 1,
                minor_samples: 1,
            };
            for i in 0..MAX_ENTRIES as u32 {
                builder.add(1, anon(1, u64::from(i)), more);
            }
            builder.add_at(1, file(2), Some(0), Faults::major(1));
            // No offset known: counted, not in the histogram.
            builder.add_at(1, file(1), None, Faults::major(5));
            builder.finish(end_ns, Faults::default(), Vec::new())
        };
        let mut first = table(10, 0);
        assert_eq!(first.offsets.len(), 1, "{:?}", first.offsets);
        first.merge(table(20, 1 << 30));
        let (id, histogram) = &first.offsets[0];
        assert_eq!(id.inode, 1);
        assert_eq!(histogram.total().major, 4);
        assert_eq!(histogram.width(), 1 << 25);
    }

    #[test]
    fn merged_tables_add_up_and_end_with_the_later() {
        let one = |end_ns, major, lost| {
            let mut builder = Builder::default();
            builder.add(
                1,
                anon(1, 0x1000),
                Faults {
                    major,
                    minor_samples: 0,
                },
            );
            builder.finish(
                end_ns,
                Faults {
                    major: lost,
                    minor_samples: 0,
                },
                vec![ProcessFaults {
                    pid: 1,
                    comm: "a".into(),
                    minor: 3,
                    major,
                }],
            )
        };
        let mut table = one(10, 4, 1);
        table.merge(one(20, 6, 2));
        assert_eq!(table.end_ns, 20);
        assert_eq!(table.entries.len(), 1);
        assert_eq!(table.entries[0].faults.major, 10);
        assert_eq!(table.lost.major, 3);
        assert_eq!(table.processes.len(), 1);
        assert_eq!(
            (table.processes[0].minor, table.processes[0].major),
            (6, 10)
        );
    }
}
