//! Each process's mappings as the fault events' records built them, as `perf report`
//! keeps them: a `PERF_RECORD_MMAP2` maps a region (replacing what it overlaps), a fork
//! gives the child a copy of its parent's table, an exec empties it (the new program's
//! mappings come as records), an exit lets it go. The records are applied in time order
//! with the faults (`super::attribute`), so a fault is resolved against its process's
//! mappings as they were when it was taken, even once the process has unmapped them or
//! is gone.
//!
//! What the records cannot say: perf has no munmap record, so an address unmapped and
//! not mapped again still resolves to its last mapping (what it was at any fault there:
//! the kernel counts no fault at an address unmapped at the time); mremap() makes none
//! either, so a region moved or grown by it is found where it was, as `perf report`
//! finds it; the stack's growth makes no record (in a table *complete* since an exec,
//! an address in the gap below a `[stack]` region is the stack grown into it); and what
//! was mapped before the process was watched, or before its parent was, is not in them:
//! the process's `/proc/PID/maps` ([`super::maps`]) fills those gaps where it can be
//! read.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use super::maps::{self, Region};
use super::perf::Mmap;
use crate::attribution::{Mapping, MappingKind};

/// The most regions one process's table holds (the kernel's `vm.max_map_count` allows
/// 65,530): past it, its table is emptied and its records ignored until an exec or a
/// fork gives the pid a new one; its faults are resolved from `/proc` as before.
pub const MAX_REGIONS: usize = 16_384;
/// The most regions of all tables together (some 100 bytes each, their names apart:
/// about 13 MiB): past it, the tables least recently used are dropped.
pub const MAX_TOTAL_REGIONS: usize = 131_072;
/// The most bytes of the names the records gave (each name kept once, however many
/// regions and processes map it; a path is up to 4,096 bytes): past it, a record of a
/// new name is not kept, and its process's faults are resolved from `/proc`.
pub const MAX_NAME_BYTES: usize = 16 << 20;
/// The most processes with a table: past it, those that exited go first, then the
/// least recently used.
pub const MAX_PROCESSES: usize = 4_096;

/// Regions by start address: their end, the file offset mapped at their start, and
/// their mapping, none overlapping.
type Regions = BTreeMap<u64, (u64, u64, Arc<Mapping>)>;

#[derive(Default)]
struct Table {
    regions: Regions,
    /// Past [`MAX_REGIONS`]: none kept, records ignored.
    overflowed: bool,
    /// Built from the records since an exec (or a fork of such a table): every region
    /// the process has is in it, but what mremap() moved and the stack's growth.
    complete: bool,
    /// The period its process's exit was applied in.
    exited: Option<u64>,
    /// The last period a record or a fault used it.
    used: u64,
}

impl Table {
    /// The mapping holding `addr`, and the file offset of its page for a file's.
    fn find(&self, addr: u64) -> Option<(&Arc<Mapping>, Option<u64>)> {
        let (start, (end, pgoff, mapping)) = self.regions.range(..=addr).next_back()?;
        (addr < *end).then(|| (mapping, maps::file_offset(mapping, *start, *pgoff, addr)))
    }

    /// Maps `start..end` (`pgoff`: the file offset at `start`), cutting what it overlaps
    /// to what lies outside it.
    fn insert(&mut self, start: u64, end: u64, pgoff: u64, mapping: Arc<Mapping>) {
        if self.overflowed || start >= end {
            return;
        }
        // Regions do not overlap, so their ends rise with their starts: walking back
        // from the last one starting before `end`, the overlapping ones come first.
        let overlapping: Vec<u64> = (self.regions.range(..end).rev())
            .take_while(|(_, (e, _, _))| *e > start)
            .map(|(s, _)| *s)
            .collect();
        for s in overlapping {
            let Some((e, old_pgoff, old)) = self.regions.remove(&s) else {
                continue;
            };
            if s < start {
                self.regions.insert(s, (start, old_pgoff, Arc::clone(&old)));
            }
            if e > end {
                // What is left above maps the file from further in.
                let pgoff = old_pgoff.wrapping_add(end - s);
                self.regions.insert(end, (e, pgoff, old));
            }
        }
        self.regions.insert(start, (end, pgoff, mapping));
        if self.regions.len() > MAX_REGIONS {
            self.give_up();
        }
    }

    /// Keeps none of its regions from now on: its faults are resolved from `/proc`.
    fn give_up(&mut self) {
        self.regions.clear();
        self.overflowed = true;
    }

    /// The gap holding `addr` (which no region holds): from the end of the region below
    /// to the start of the one above.
    fn gap(&self, addr: u64) -> (u64, u64) {
        let below = self.regions.range(..=addr).next_back();
        let above = self.regions.range(addr..).next();
        (
            below.map_or(0, |(_, (end, _, _))| *end),
            above.map_or(u64::MAX, |(start, _)| *start),
        )
    }
}

/// A record's name as `/proc/PID/maps` shows it: perf's `//anon` is empty there, and a
/// newline in a path escaped (`\012`, as the kernel's `seq_file_path()` writes it).
fn maps_name(name: &str) -> Cow<'_, str> {
    match name {
        "//anon" => Cow::Borrowed(""),
        _ if name.contains('\n') => Cow::Owned(name.replace('\n', "\\012")),
        _ => Cow::Borrowed(name),
    }
}

/// Every watched process's table.
#[derive(Default)]
pub struct Recorded {
    tables: HashMap<u32, Table>,
    /// Regions in all tables.
    total: usize,
    /// The mappings the records named, each kept once (a region holds one of these),
    /// and the bytes of their names.
    named: HashSet<Arc<Mapping>>,
    name_bytes: usize,
    period: u64,
}

impl Recorded {
    /// A new period: the tables of processes whose exit was applied in an earlier one
    /// are dropped (every record before the exit has been applied: they are in time
    /// order).
    pub fn next_period(&mut self) {
        let period = self.period;
        let total = &mut self.total;
        self.tables.retain(|&pid, t| {
            // The exit of a process's first thread while others live on (it called
            // pthread_exit()) is no end of the process: /proc says.
            let keep = t.exited.is_none_or(|exited| {
                exited == period || std::path::Path::new(&format!("/proc/{pid}")).exists()
            });
            if !keep {
                *total -= t.regions.len();
            }
            keep
        });
        // Names no region holds any more.
        let name_bytes = &mut self.name_bytes;
        self.named.retain(|mapping| {
            let held = Arc::strong_count(mapping) > 1;
            if !held {
                *name_bytes -= mapping.name.len();
            }
            held
        });
        self.period += 1;
    }

    /// Forgets every table: a record was lost, and what they hold may be stale.
    pub fn forget_all(&mut self) {
        self.tables.clear();
        self.total = 0;
        self.named.clear();
        self.name_bytes = 0;
    }

    /// Applies an mmap record.
    pub fn mmap(&mut self, record: &Mmap) {
        let name = maps_name(&record.name);
        let mapping = maps::mapping(record.pid, &name, record.shared, record.exec, record.file);
        let Some(mapping) = self.intern(mapping) else {
            // Past the names' bound: its faults go to /proc rather than a stale region.
            self.change(record.pid, Table::give_up);
            return;
        };
        self.change(record.pid, |table| {
            table.insert(record.start, record.end, record.pgoff, mapping);
        });
    }

    /// The one kept copy of `mapping`, or `None` when a new name would pass
    /// [`MAX_NAME_BYTES`].
    fn intern(&mut self, mapping: Mapping) -> Option<Arc<Mapping>> {
        if let Some(kept) = self.named.get(&mapping) {
            return Some(Arc::clone(kept));
        }
        if self.name_bytes + mapping.name.len() > MAX_NAME_BYTES {
            return None;
        }
        self.name_bytes += mapping.name.len();
        let kept = Arc::new(mapping);
        self.named.insert(Arc::clone(&kept));
        Some(kept)
    }

    /// Process `pid` was forked by `ppid`: its table is its parent's, on top of `base`
    /// (the parent's regions as `/proc` last showed them: what the parent's records
    /// cannot say), its own memory its own.
    pub fn fork(&mut self, pid: u32, ppid: u32, base: &[Region]) {
        let mut owned: HashMap<*const Mapping, Arc<Mapping>> = HashMap::new();
        let mut own = |mapping: &Arc<Mapping>| -> Arc<Mapping> {
            if mapping.owner.is_none() {
                return Arc::clone(mapping);
            }
            let key = Arc::as_ptr(mapping);
            let made = owned.entry(key).or_insert_with(|| {
                Arc::new(Mapping {
                    owner: Some(pid),
                    ..Mapping::clone(mapping)
                })
            });
            Arc::clone(made)
        };
        let parent = self.tables.get(&ppid);
        let mut table = Table {
            complete: parent.is_some_and(|p| p.complete),
            ..Table::default()
        };
        if parent.is_some_and(|p| p.overflowed) {
            // Its parent's records were not kept: neither are its own.
            table.overflowed = true;
        } else {
            for region in base {
                table.insert(region.start, region.end, region.pgoff, own(&region.mapping));
            }
            for (&start, (end, pgoff, mapping)) in parent.map(|p| &p.regions).into_iter().flatten()
            {
                table.insert(start, *end, *pgoff, own(mapping));
            }
        }
        self.change(pid, |t| *t = table);
    }

    /// Process `pid` exec'd: its mappings are gone.
    pub fn exec(&mut self, pid: u32) {
        self.change(pid, |t| {
            *t = Table {
                complete: true,
                ..Table::default()
            }
        });
    }

    /// Process `pid` ended: its table goes once the period's records are applied.
    pub fn exit(&mut self, pid: u32) {
        let period = self.period;
        if let Some(table) = self.tables.get_mut(&pid) {
            table.exited = Some(period);
        }
    }

    /// The mapping the records say holds `addr` in process `pid`, if they say.
    #[cfg(test)]
    pub fn find(&mut self, pid: u32, addr: u64) -> Option<Arc<Mapping>> {
        self.locate(pid, addr).map(|(mapping, _)| mapping)
    }

    /// The mapping the records say holds `addr` in process `pid`, if they say, and the
    /// file offset of its page for a file's.
    pub fn locate(&mut self, pid: u32, addr: u64) -> Option<(Arc<Mapping>, Option<u64>)> {
        let table = self.tables.get_mut(&pid)?;
        table.used = self.period;
        (table.find(addr)).map(|(mapping, offset)| (Arc::clone(mapping), offset))
    }

    /// The stack, if `addr` (which no region of process `pid` holds) lies in the gap
    /// below its `[stack]` in a complete table: the stack grew there, which makes no
    /// record. In another, the gap may hold what was mapped before the records began.
    pub fn stack_grown(&self, pid: u32, addr: u64) -> Option<Arc<Mapping>> {
        let table = self.tables.get(&pid).filter(|t| t.complete)?;
        let (_, (_, _, above)) = table.regions.range(addr..).next()?;
        (above.kind == MappingKind::Stack).then(|| Arc::clone(above))
    }

    /// Fills the gap holding `addr` in process `pid`'s table with what `/proc` showed
    /// there (`region`, which holds `addr`): a region the records could not say, kept
    /// for the faults after and for the children it forks.
    pub fn fill(&mut self, pid: u32, addr: u64, region: &Region) {
        if !self.tables.contains_key(&pid) {
            return;
        }
        self.change(pid, |table| {
            let (low, high) = table.gap(addr);
            let mapping = Arc::clone(&region.mapping);
            let start = region.start.max(low);
            let pgoff = region.pgoff.wrapping_add(start - region.start);
            table.insert(start, region.end.min(high), pgoff, mapping);
        });
    }

    /// Changes process `pid`'s table (made empty if it has none), keeping the bounds.
    fn change(&mut self, pid: u32, how: impl FnOnce(&mut Table)) {
        let table = self.tables.entry(pid).or_default();
        let before = table.regions.len();
        how(table);
        table.used = self.period;
        self.total = self.total - before + table.regions.len();
        if self.tables.len() > MAX_PROCESSES || self.total > MAX_TOTAL_REGIONS {
            self.make_room(pid);
        }
    }

    /// Drops tables, those that exited first, then the least recently used, down to 7/8
    /// of the bounds (not `keep`'s: it was just changed).
    fn make_room(&mut self, keep: u32) {
        let mut candidates: Vec<(bool, u64, u32)> = (self.tables.iter())
            .filter(|(&pid, _)| pid != keep)
            .map(|(&pid, t)| (t.exited.is_none(), t.used, pid))
            .collect();
        candidates.sort_unstable();
        for (_, _, pid) in candidates {
            if self.tables.len() <= MAX_PROCESSES / 8 * 7 && self.total <= MAX_TOTAL_REGIONS / 8 * 7
            {
                break;
            }
            if let Some(table) = self.tables.remove(&pid) {
                self.total -= table.regions.len();
            }
        }
    }

    /// How many processes have a table, and how many regions all of them hold.
    #[cfg(test)]
    fn size(&self) -> (usize, usize) {
        (self.tables.len(), self.total)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::FileId;

    fn file(name: &str, inode: u64) -> Mmap {
        Mmap {
            pid: 0,
            time_ns: 0,
            start: 0,
            end: 0,
            pgoff: 0,
            file: FileId {
                major: 254,
                minor: 0,
                inode,
            },
            exec: false,
            shared: true,
            name: name.into(),
        }
    }

    fn at(pid: u32, start: u64, end: u64, what: &Mmap) -> Mmap {
        Mmap {
            pid,
            start,
            end,
            ..what.clone()
        }
    }

    fn name(recorded: &mut Recorded, pid: u32, addr: u64) -> Option<String> {
        recorded.find(pid, addr).map(|m| m.to_string())
    }

    #[test]
    fn an_mmap_replaces_what_it_overlaps_and_leaves_the_rest() {
        let mut r = Recorded::default();
        r.mmap(&at(7, 0x1000, 0x9000, &file("/a", 1)));
        r.mmap(&at(7, 0x3000, 0x5000, &file("/b", 2)));
        assert_eq!(name(&mut r, 7, 0x2fff).as_deref(), Some("/a (shared)"));
        assert_eq!(name(&mut r, 7, 0x3000).as_deref(), Some("/b (shared)"));
        assert_eq!(name(&mut r, 7, 0x5000).as_deref(), Some("/a (shared)"));
        assert_eq!(name(&mut r, 7, 0x9000), None);
        // One mapping over several: all of them replaced.
        r.mmap(&at(7, 0x0, 0x10000, &file("/c", 3)));
        assert_eq!(name(&mut r, 7, 0x4000).as_deref(), Some("/c (shared)"));
        assert_eq!(r.size(), (1, 1));
    }

    #[test]
    fn records_are_named_as_proc_maps_names_them_one_file_one_mapping() {
        let mut r = Recorded::default();
        let anon = Mmap {
            file: FileId {
                major: 0,
                minor: 0,
                inode: 0,
            },
            shared: false,
            ..file("//anon", 0)
        };
        r.mmap(&at(7, 0x1000, 0x2000, &anon));
        r.mmap(&at(
            7,
            0x2000,
            0x3000,
            &Mmap {
                name: "[heap]".into(),
                ..anon.clone()
            },
        ));
        let text = Mmap {
            exec: true,
            shared: false,
            ..file("/usr/bin/work", 42)
        };
        r.mmap(&at(7, 0x3000, 0x4000, &text));
        let anonymous = r.find(7, 0x1000).unwrap();
        assert_eq!(
            (anonymous.kind, anonymous.name.as_str()),
            (MappingKind::Anonymous, "")
        );
        assert_eq!(r.find(7, 0x2000).unwrap().kind, MappingKind::Heap);
        // The same file in /proc/7/maps: the same mapping.
        let line = "3000-4000 r-xp 00000000 fe:00 42 /usr/bin/work";
        let from_proc = &maps::parse(7, line)[0].mapping;
        assert_eq!(*r.find(7, 0x3000).unwrap(), **from_proc);
        // A newline in a path, as maps escapes it.
        r.mmap(&at(7, 0x4000, 0x5000, &file("/db\nz", 43)));
        let line = "4000-5000 rw-s 00000000 fe:00 43 /db\\012z";
        let from_proc = &maps::parse(7, line)[0].mapping;
        assert_eq!(*r.find(7, 0x4000).unwrap(), **from_proc);
    }

    #[test]
    fn a_faults_file_offset_is_its_pages_in_the_region_and_in_what_is_left_of_it() {
        let mut r = Recorded::default();
        let offset = |r: &mut Recorded, addr| r.locate(7, addr).and_then(|(_, o)| o);
        // 0x10000.. of /a mapped at 0x100000, its middle page mapped over.
        let a = Mmap {
            pgoff: 0x10000,
            ..file("/a", 1)
        };
        r.mmap(&at(7, 0x100000, 0x108000, &a));
        assert_eq!(offset(&mut r, 0x100fff), Some(0x10000));
        r.mmap(&at(7, 0x103000, 0x104000, &file("/b", 2)));
        assert_eq!(offset(&mut r, 0x102000), Some(0x12000));
        assert_eq!(offset(&mut r, 0x103000), Some(0));
        assert_eq!(offset(&mut r, 0x105123), Some(0x15000));
        // /proc's region over a gap: its offsets where it begins in the gap.
        let shown = &maps::parse(7, "200000-204000 r--s 00004000 fe:00 9 /c")[0];
        r.mmap(&at(7, 0x200000, 0x202000, &file("/d", 3)));
        r.fill(7, 0x203000, shown);
        assert_eq!(offset(&mut r, 0x203000), Some(0x7000));
        // Memory of no file has none.
        let anon = Mmap {
            shared: false,
            ..file("//anon", 0)
        };
        r.mmap(&at(7, 0x300000, 0x301000, &anon));
        assert_eq!(offset(&mut r, 0x300000), None);
    }

    #[test]
    fn a_later_mapping_at_an_address_is_not_what_an_earlier_fault_there_took() {
        // What the table says at each record's time: the attributor resolves each fault
        // between the records before and after it.
        let mut r = Recorded::default();
        r.mmap(&at(7, 0x1000, 0x2000, &file("/early", 1)));
        let earlier = r.find(7, 0x1800);
        r.mmap(&at(7, 0x1000, 0x2000, &file("/late", 2)));
        assert_eq!(earlier.unwrap().name, "/early");
        assert_eq!(r.find(7, 0x1800).unwrap().name, "/late");
    }

    #[test]
    fn a_child_starts_with_its_parents_mappings_its_own_memory_its_own_and_an_exec_empties_it() {
        let mut r = Recorded::default();
        let anon = Mmap {
            shared: false,
            ..file("//anon", 0)
        };
        r.mmap(&at(7, 0x1000, 0x2000, &anon));
        r.mmap(&at(7, 0x2000, 0x3000, &file("/a", 1)));
        // What /proc showed of the parent where its records say nothing.
        let base = maps::parse(7, "7000-8000 rw-p 00000000 00:00 0 [stack]");
        r.fork(8, 7, &base);
        assert_eq!(r.find(8, 0x1000).unwrap().owner, Some(8));
        assert_eq!(r.find(8, 0x2000).unwrap().name, "/a");
        assert_eq!(r.find(8, 0x7000).unwrap().to_string(), "[stack] of pid 8");
        assert_eq!(r.find(7, 0x1000).unwrap().owner, Some(7));
        r.exec(8);
        assert_eq!(r.find(8, 0x2000), None);
    }

    #[test]
    fn the_stack_grows_into_the_gap_below_it_and_proc_fills_the_others() {
        let mut r = Recorded::default();
        let stack = Mmap {
            shared: false,
            ..file("[stack]", 0)
        };
        // A process watched from its exec: its table is complete.
        r.exec(7);
        r.mmap(&at(7, 0x1000, 0x2000, &file("/a", 1)));
        r.mmap(&at(7, 0x8000, 0x9000, &stack));
        assert_eq!(
            r.stack_grown(7, 0x7000).map(|m| m.kind),
            Some(MappingKind::Stack)
        );
        assert!(r.stack_grown(7, 0x9000).is_none());
        // One watched from the middle of its life (`--pid`): the gap below its stack may
        // hold a file it mapped before (the review's 4,096 majors of a file named
        // [stack]), and its child's too.
        r.mmap(&at(9, 0x8000, 0x9000, &stack));
        assert!(r.stack_grown(9, 0x7000).is_none());
        r.fork(10, 9, &[]);
        assert!(r.stack_grown(10, 0x7000).is_none());
        r.fork(11, 7, &[]);
        assert!(r.stack_grown(11, 0x7000).is_some());
        // A region /proc shows over the gap and a recorded region: the gap's part only.
        let shown = &maps::parse(7, "0-5000 r--p 00000000 fe:00 9 /b")[0];
        r.fill(7, 0x3000, shown);
        assert_eq!(r.find(7, 0x3000).unwrap().name, "/b");
        assert_eq!(r.find(7, 0x1000).unwrap().name, "/a");
        assert_eq!(r.find(7, 0x0).map(|m| m.name.clone()), None);
    }

    #[test]
    fn an_exited_processs_table_goes_after_the_period_of_its_exit() {
        // No process has this pid (above the kernel's PID_MAX_LIMIT).
        const GONE: u32 = 1 << 30;
        let mut r = Recorded::default();
        r.mmap(&at(GONE, 0x1000, 0x2000, &file("/a", 1)));
        r.exit(GONE);
        // Records of the same period still resolve.
        assert!(r.find(GONE, 0x1000).is_some());
        r.next_period();
        assert!(r.find(GONE, 0x1000).is_some());
        r.next_period();
        assert!(r.find(GONE, 0x1000).is_none());
        assert_eq!(r.size(), (0, 0));
        // A first thread's exit while the process lives on (pthread_exit()): kept.
        let alive = std::process::id();
        r.mmap(&at(alive, 0x1000, 0x2000, &file("/a", 1)));
        r.exit(alive);
        r.next_period();
        r.next_period();
        assert!(r.find(alive, 0x1000).is_some());
    }

    #[test]
    fn a_child_of_a_process_past_the_bound_keeps_none_of_its_regions() {
        let mut r = Recorded::default();
        r.exec(7);
        for i in 0..=MAX_REGIONS as u64 {
            r.mmap(&at(
                7,
                0x10_0000 + i * 0x2000,
                0x10_1000 + i * 0x2000,
                &file("/x", 9),
            ));
        }
        assert!(r.find(7, 0x10_0000).is_none(), "past the bound, none kept");
        // What /proc showed of the parent, and the child's own record after the fork.
        let base = maps::parse(7, "1000-2000 r--p 00000000 fe:00 1 /A");
        r.fork(8, 7, &base);
        r.mmap(&at(8, 0x1000, 0x2000, &file("/B", 2)));
        assert_eq!(r.find(8, 0x1800).map(|m| m.name.clone()), None);
    }

    #[test]
    fn a_name_mapped_many_times_is_kept_once_and_the_names_are_bounded_in_bytes() {
        let mut r = Recorded::default();
        let long = format!("/{}", "n".repeat(3_900));
        for pid in 1..=8 {
            for i in 0..1_000 {
                r.mmap(&at(pid, i * 0x2000, i * 0x2000 + 0x1000, &file(&long, 5)));
            }
        }
        assert_eq!((r.named.len(), r.name_bytes), (1, long.len()));
        // New names past the bound: the process's regions go, its faults to /proc.
        let mut inode = 100;
        while r.name_bytes + long.len() <= MAX_NAME_BYTES {
            inode += 1;
            r.mmap(&at(
                9,
                0x1000,
                0x2000,
                &file(&format!("{long}{inode}"), inode),
            ));
        }
        assert!(r.find(9, 0x1000).is_some());
        r.mmap(&at(9, 0x3000, 0x4000, &file(&format!("{long}-past"), 1)));
        assert!(r.find(9, 0x1000).is_none() && r.find(9, 0x3000).is_none());
        assert!(r.name_bytes <= MAX_NAME_BYTES);
        // Names no region holds any more (pid 9's) are let go at the next period.
        r.next_period();
        assert_eq!((r.named.len(), r.name_bytes), (1, long.len()));
    }

    #[test]
    fn tables_are_bounded_in_regions_and_in_processes() {
        let mut r = Recorded::default();
        let a = file("/a", 1);
        // One process past its bound: emptied, and its records ignored after.
        for i in 0..=MAX_REGIONS as u64 {
            r.mmap(&at(7, i * 0x2000, i * 0x2000 + 0x1000, &a));
        }
        assert_eq!(r.size(), (1, 0));
        r.mmap(&at(7, 0x1000, 0x2000, &a));
        assert_eq!(r.find(7, 0x1000), None);
        // Processes past their bound: the least recently used go, those that exited
        // first.
        r.exit(7);
        for pid in 100..100 + MAX_PROCESSES as u32 {
            r.mmap(&at(pid, 0x1000, 0x2000, &a));
        }
        let (processes, _) = r.size();
        assert!(processes <= MAX_PROCESSES, "{processes}");
        assert!(!r.tables.contains_key(&7));
        // Regions past the total bound.
        for pid in 0..64 {
            for i in 0..(MAX_REGIONS as u64 / 2) {
                r.mmap(&at(10_000 + pid, i * 0x2000, i * 0x2000 + 0x1000, &a));
            }
        }
        let (_, regions) = r.size();
        assert!(regions <= MAX_TOTAL_REGIONS, "{regions}");
        let counted: usize = r.tables.values().map(|t| t.regions.len()).sum();
        assert_eq!(counted, regions);
    }
}
