//! Faulting addresses resolved to mappings, in the monitor, from `/proc/<pid>/maps`: read
//! as the user running the monitor (the kernel lets only those who may trace a process
//! read its maps, so the monitor learns no mapping its user could not list), kept, read
//! ahead when a process first appears or execs, and read again when an address falls
//! outside every mapping kept (at most once a period for each process). An address
//! still outside them, or of a process gone by then, counts as unmapped; a process whose
//! maps may not be read, as unreadable.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::io::ErrorKind;
use std::sync::Arc;

use crate::attribution::{FileId, Mapping, MappingKind};

/// How many periods a process's maps are kept after the last fault resolved in them.
const KEPT_PERIODS: u64 = 200;

/// One line of `/proc/<pid>/maps`: an address range and its mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    /// The file offset mapped at `start` (maps' offset column, an mmap record's pgoff).
    pub pgoff: u64,
    pub mapping: Arc<Mapping>,
}

impl Region {
    /// The file offset of the page holding `addr` (which the region holds), for a file's
    /// mapping: as `perf trace` prints a fault's, `file@0x7cc000`.
    pub fn offset(&self, addr: u64) -> Option<u64> {
        file_offset(&self.mapping, self.start, self.pgoff, addr)
    }
}

/// The file offset of the page holding `addr` in a region of `mapping` from `start`,
/// mapping its file from `pgoff`; `None` for memory of no file.
pub fn file_offset(mapping: &Mapping, start: u64, pgoff: u64, addr: u64) -> Option<u64> {
    let page = addr & !(crate::system::page_size() as u64 - 1);
    (mapping.file).and_then(|_| page.checked_sub(start)?.checked_add(pgoff))
}

/// A process's maps as last read.
struct Cached {
    /// Its regions; none when it was gone or its maps not ours to read.
    regions: Vec<Region>,
    /// What an address outside every region counts as: unmapped, or, when its maps may
    /// not be read, unreadable.
    outside: Arc<Mapping>,
    /// The period it was read in, and the last it resolved a fault in.
    read: u64,
    used: u64,
    /// When it was read (`CLOCK_MONOTONIC`, ns).
    read_ns: u64,
}

impl Cached {
    /// The region holding `addr`, if one does.
    fn find(&self, addr: u64) -> Option<&Region> {
        let i = (self.regions)
            .partition_point(|r| r.start <= addr)
            .checked_sub(1)?;
        let region = &self.regions[i];
        (addr < region.end).then_some(region)
    }
}

/// Every profiled process's maps, as far as faults needed them.
#[derive(Default)]
pub struct MapsCache {
    procs: HashMap<u32, Cached>,
    period: u64,
}

impl MapsCache {
    /// A new period: maps are read again at most once in each; those unused for
    /// [`KEPT_PERIODS`] are dropped.
    pub fn next_period(&mut self) {
        self.period += 1;
        let period = self.period;
        self.procs
            .retain(|_, cached| period - cached.used <= KEPT_PERIODS);
    }

    /// Reads process `pid`'s maps now, replacing those kept (an exec replaced them all).
    pub fn read_now(&mut self, pid: u32) {
        self.read(pid);
    }

    /// Forgets process `pid`'s maps if they were read before `time_ns`: they are another
    /// program's (it exec'd since) or another process's (the pid was given again).
    pub fn forget_read_before(&mut self, pid: u32, time_ns: u64) {
        if self.procs.get(&pid).is_some_and(|c| c.read_ns < time_ns) {
            self.procs.remove(&pid);
        }
    }

    /// Whether process `pid`'s maps, when last read, were not the monitor's user's to
    /// read.
    pub fn unreadable(&self, pid: u32) -> bool {
        (self.procs.get(&pid)).is_some_and(|c| c.outside.kind == MappingKind::Unreadable)
    }

    /// Process `pid`'s regions as last read, read now if they never were.
    pub fn regions(&mut self, pid: u32) -> &[Region] {
        if !self.procs.contains_key(&pid) {
            self.read(pid);
        }
        self.procs.get(&pid).map_or(&[], |c| &c.regions)
    }

    fn read(&mut self, pid: u32) -> &Cached {
        let read_ns = shared_layout::abi::monotonic_ns();
        let (regions, outside) = match std::fs::read_to_string(format!("/proc/{pid}/maps")) {
            Ok(text) => (parse(pid, &text), Mapping::unmapped(pid)),
            // ESRCH: reaped after the open; an empty file (a zombie) parses to no region.
            Err(e) if e.kind() == ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => {
                (Vec::new(), Mapping::unmapped(pid))
            }
            Err(_) => (Vec::new(), Mapping::unreadable(pid)),
        };
        let cached = Cached {
            regions,
            outside: Arc::new(outside),
            read: self.period,
            used: self.period,
            read_ns,
        };
        match self.procs.entry(pid) {
            Entry::Occupied(mut e) => {
                e.insert(cached);
                e.into_mut()
            }
            Entry::Vacant(e) => e.insert(cached),
        }
    }

    /// The mapping holding `addr` in process `pid`.
    pub fn resolve(&mut self, pid: u32, addr: u64) -> Arc<Mapping> {
        self.region(pid, addr)
            .map_or_else(|outside| outside, |r| r.mapping)
    }

    /// The mapping holding `addr` in process `pid`, and the file offset of its page for
    /// a file's.
    pub fn locate(&mut self, pid: u32, addr: u64) -> (Arc<Mapping>, Option<u64>) {
        match self.region(pid, addr) {
            Ok(region) => {
                let offset = region.offset(addr);
                (region.mapping, offset)
            }
            Err(outside) => (outside, None),
        }
    }

    /// The region holding `addr` in process `pid`, or what an address outside every
    /// region counts as.
    pub fn region(&mut self, pid: u32, addr: u64) -> Result<Region, Arc<Mapping>> {
        let period = self.period;
        if let Some(cached) = self.procs.get_mut(&pid) {
            cached.used = period;
            // Read this period already: it is not there.
            match cached.find(addr) {
                Some(region) => return Ok(region.clone()),
                None if cached.read == period => return Err(Arc::clone(&cached.outside)),
                None => {}
            }
        }
        let cached = self.read(pid);
        (cached.find(addr).cloned()).ok_or_else(|| Arc::clone(&cached.outside))
    }
}

/// Every region of a maps file, in address order (as the kernel lists them). The same
/// mapping in several regions (a file's, a process's anonymous memory) is one `Arc`.
pub fn parse(pid: u32, text: &str) -> Vec<Region> {
    let mut seen: HashMap<Mapping, Arc<Mapping>> = HashMap::new();
    let mut regions: Vec<Region> = text
        .lines()
        .filter_map(|line| parse_line(pid, line))
        .map(|(start, end, pgoff, mapping)| {
            let mapping = Arc::clone(
                seen.entry(mapping.clone())
                    .or_insert_with(|| Arc::new(mapping)),
            );
            Region {
                start,
                end,
                pgoff,
                mapping,
            }
        })
        .collect();
    regions.sort_by_key(|r| r.start);
    regions
}

/// `start-end perms offset major:minor inode   name`, named as [`Mapping`] says.
fn parse_line(pid: u32, line: &str) -> Option<(u64, u64, u64, Mapping)> {
    let mut rest = line;
    let mut fields = [""; 5];
    for field in &mut fields {
        rest = rest.trim_start_matches(' ');
        let end = rest.find(' ').unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let [range, perms, offset, dev, inode] = fields;
    let name = rest.trim_start_matches(' ');
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    let end = u64::from_str_radix(end, 16).ok()?;
    let pgoff = u64::from_str_radix(offset, 16).ok()?;
    let (major, minor) = dev.split_once(':')?;
    let file = FileId {
        major: u32::from_str_radix(major, 16).ok()?,
        minor: u32::from_str_radix(minor, 16).ok()?,
        inode: inode.parse().ok()?,
    };
    let shared = perms.as_bytes().get(3) == Some(&b's');
    let exec = perms.as_bytes().get(2) == Some(&b'x');
    Some((start, end, pgoff, mapping(pid, name, shared, exec, file)))
}

/// A region of process `pid` named `name` as `/proc/PID/maps` names it (an mmap record
/// names it so too), mapped `shared` or not, `exec` or not, of `file` (zeros when none),
/// as [`Mapping`] says.
pub fn mapping(pid: u32, name: &str, shared: bool, exec: bool, file: FileId) -> Mapping {
    let (kind, private) = if name.is_empty() || name.starts_with("[anon:") {
        (MappingKind::Anonymous, true)
    } else if name == "[heap]" {
        (MappingKind::Heap, true)
    } else if name == "[stack]" || name.starts_with("[stack:") {
        (MappingKind::Stack, true)
    } else if name.starts_with("[anon_shmem:")
        || name.starts_with("/memfd:")
        || name.starts_with("/SYSV")
        || (shared && name.starts_with("/dev/zero"))
    {
        (MappingKind::Shmem, false)
    } else if !name.starts_with('/') {
        (MappingKind::Other, true)
    } else if shared {
        (MappingKind::Shared, false)
    } else if exec {
        (MappingKind::Text, false)
    } else {
        (MappingKind::Data, false)
    };
    Mapping {
        kind,
        name: name.to_owned(),
        file: (file.inode != 0 && !private).then_some(file),
        owner: private.then_some(pid),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c0a00000-55d0c0a2e000 r--p 00000000 08:01 1835135                    /usr/bin/work
55d0c0a2e000-55d0c0b2e000 r-xp 0002e000 08:01 1835135                    /usr/bin/work
55d0c1e7f000-55d0c1ea0000 rw-p 00000000 00:00 0                          [heap]
7f1c20000000-7f1c24000000 rw-p 00000000 00:00 0 
7f1c24000000-7f1c28000000 rw-s 00000000 08:01 42                         /tmp/a file (deleted)
7f1c28000000-7f1c28001000 rw-s 00000000 00:01 7                          /memfd:ring (deleted)
7f1c28001000-7f1c28002000 rw-p 00000000 00:00 0                          [anon:arena]
7f1c28002000-7f1c28003000 rw-p 00000000 00:00 0 
7ffd5a3c1000-7ffd5a3e2000 rw-p 00000000 00:00 0                          [stack]
7ffd5a3f0000-7ffd5a3f2000 r-xp 00000000 00:00 0                          [vdso]
";

    #[test]
    fn maps_lines_are_named_as_the_kernel_names_them() {
        let regions = parse(9, MAPS);
        let kinds: Vec<(MappingKind, &str)> = (regions.iter())
            .map(|r| (r.mapping.kind, r.mapping.name.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (MappingKind::Data, "/usr/bin/work"),
                (MappingKind::Text, "/usr/bin/work"),
                (MappingKind::Heap, "[heap]"),
                (MappingKind::Anonymous, ""),
                (MappingKind::Shared, "/tmp/a file (deleted)"),
                (MappingKind::Shmem, "/memfd:ring (deleted)"),
                (MappingKind::Anonymous, "[anon:arena]"),
                (MappingKind::Anonymous, ""),
                (MappingKind::Stack, "[stack]"),
                (MappingKind::Other, "[vdso]"),
            ]
        );
        assert_eq!(regions[4].mapping.file.map(|f| f.inode), Some(42));
        assert_eq!(regions[4].mapping.owner, None);
        assert_eq!(regions[3].mapping.owner, Some(9));
        // A process's anonymous memory is one mapping, however many regions.
        assert!(Arc::ptr_eq(&regions[3].mapping, &regions[7].mapping));
        assert_eq!(regions[4].start, 0x7f1c_2400_0000);
        // A file's offset at a fault is its page's: the address less the region's start,
        // plus the offset mapped there; memory of no file has none.
        assert_eq!(regions[1].offset(0x55d0_c0a2_f123), Some(0x2f000));
        assert_eq!(regions[4].offset(0x7f1c_2400_0fff), Some(0));
        assert_eq!(regions[2].offset(0x55d0_c1e7_f000), None);
    }

    #[test]
    fn an_address_resolves_to_its_region_and_outside_every_region_to_unmapped() {
        let cached = Cached {
            regions: parse(9, MAPS),
            outside: Arc::new(Mapping::unmapped(9)),
            read: 0,
            used: 0,
            read_ns: 0,
        };
        let at = |addr| cached.find(addr).map(|r| r.mapping.name.clone());
        assert_eq!(
            at(0x7f1c_2400_0000).as_deref(),
            Some("/tmp/a file (deleted)")
        );
        assert_eq!(
            at(0x7f1c_27ff_ffff).as_deref(),
            Some("/tmp/a file (deleted)")
        );
        assert_eq!(at(0x55d0_c1e7_f123).as_deref(), Some("[heap]"));
        assert_eq!(at(0x1000), None);
        assert_eq!(at(0x7ffd_5a3e_2000), None);
    }

    #[test]
    fn our_own_heap_resolves_and_a_process_that_is_gone_counts_as_unmapped() {
        let mut cache = MapsCache::default();
        let on_heap = Box::new(7u64);
        let at = &*on_heap as *const u64 as u64;
        let mapping = cache.resolve(std::process::id(), at);
        assert!(
            matches!(mapping.kind, MappingKind::Heap | MappingKind::Anonymous),
            "{mapping:?}"
        );
        // Read once, kept: the same address resolves to the same mapping without reading
        // again.
        cache.next_period();
        let again = cache.resolve(std::process::id(), at);
        assert!(Arc::ptr_eq(&again, &mapping));
        // A pid beyond pid_max's largest: no such process.
        let gone = cache.resolve(u32::MAX >> 1, 0x1000);
        assert_eq!(gone.kind, MappingKind::Unmapped);
    }
}
