//! One mapped area: the control page and the ring of slots.
//!
//! Every access to the area goes through an atomic word (`word32`/`word64`),
//! never through a reference to a plain field, because the other side writes
//! the same memory concurrently.

use core::mem::{offset_of, size_of};
#[cfg(not(loom))]
use std::fs::File;
#[cfg(not(loom))]
use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

#[cfg(not(loom))]
use memmap2::{MmapOptions, MmapRaw};

use crate::abi::{self, AreaHeader, Sample, Sem};
use crate::mode::Mode;
use crate::sync::{AtomicU32, AtomicU64, Ordering};

const SAMPLE_SIZE: u64 = size_of::<Sample>() as u64;
/// One slot seen as the atomic words it is read and written through.
type SlotWords = [AtomicU64; SLOT_WORDS];
const SLOT_WORDS: usize = size_of::<Sample>() / size_of::<u64>();
const _: () = assert!(size_of::<SlotWords>() == size_of::<Sample>());

/// A sample's fields as the 64-bit words of its slot, in the layout's order.
const fn slot_words(sample: &Sample) -> [u64; SLOT_WORDS] {
    [
        sample.time_ns,
        sample.minor,
        sample.major,
        sample.cpu_ns,
        sample.rss_anon,
        sample.rss_file,
        sample.rss_shmem,
        sample.swap,
    ]
}

/// The sample a slot's words hold.
const fn sample_of(words: [u64; SLOT_WORDS]) -> Sample {
    let [time_ns, minor, major, cpu_ns, rss_anon, rss_file, rss_shmem, swap] = words;
    Sample {
        time_ns,
        minor,
        major,
        cpu_ns,
        rss_anon,
        rss_file,
        rss_shmem,
        swap,
    }
}
/// Semaphore counts are 32-bit, and `empty` starts at the slot count.
#[cfg(not(loom))]
const MAX_SLOTS: u64 = u32::MAX as u64;

/// Which semaphore of the area.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SemKind {
    /// Samples ready; the consumer downs it, the producer posts it.
    Full,
    /// Free slots; the producer downs it, the consumer posts it.
    Empty,
}

/// Why an area cannot be created or attached.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    #[error("the mapping is {len} bytes, too small for the control page and one slot")]
    TooSmall { len: usize },
    #[error("the mapping is not 8-byte aligned")]
    Misaligned,
    #[error("bad magic {found:#010x}: this is not a pfprof area")]
    BadMagic { found: u32 },
    #[error("the area speaks ABI version {found}, this build speaks {expected}: rebuild the monitor or the module")]
    VersionMismatch { found: u32, expected: u32 },
    #[error("the area's mode is {found}: its ring was not started (no consumer selected strict or relaxed)")]
    NotStarted { found: u32 },
    #[error("the area's {field} is {found}, expected {expected}")]
    Geometry {
        field: &'static str,
        found: u64,
        expected: u64,
    },
    #[error("a ring of {found} slots is impossible here: it must hold 1 to {max}")]
    SlotCount { found: u64, max: u64 },
    #[error("creating the shared memory area failed: {0}")]
    Io(#[from] std::io::Error),
}

/// A field of a header the other side wrote is `expected`, or the layout is refused.
pub(crate) fn expect_geometry(
    field: &'static str,
    found: u64,
    expected: u64,
) -> Result<(), LayoutError> {
    if found == expected {
        Ok(())
    } else {
        Err(LayoutError::Geometry {
            field,
            found,
            expected,
        })
    }
}

/// The area's progress counters, as the producer and consumer published them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub write_seq: u64,
    pub read_seq: u64,
    pub overwritten: u64,
    pub blocked_ns: u64,
    pub deferred: u64,
    pub canceled: bool,
    /// Processes the producer stopped counting (pfprof.h, "Sessions").
    pub withdrawn: u32,
}

/// A mapped area (a memfd, or `/dev/pfprof`). Its geometry is read and
/// validated once, when it is created or attached, and never re-read: the
/// other side can scribble over the header but cannot move the slots.
pub struct Area {
    mem: Mem,
    mode: Mode,
    slot_count: u64,
    period: Duration,
}

#[cfg(not(loom))]
struct Mem {
    map: MmapRaw,
    memfd: Option<File>,
}

/// Under loom the area is a set of model-checked atomics, one per word the
/// protocols touch, indexed by the word's byte offset in the real layout.
#[cfg(loom)]
struct Mem {
    words32: Box<[AtomicU32]>,
    words64: Box<[AtomicU64]>,
    slots: Box<[SlotWords]>,
}

// Shared between the threads of a side through `Arc<Area>`.
const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<Area>();
};

impl Area {
    /// Consumer side: take over a mapping whose header a producer initialized,
    /// after checking magic, version, mode and geometry against its length.
    #[cfg(not(loom))]
    pub fn attach(map: MmapRaw) -> Result<Area, LayoutError> {
        Area::from_mem(Mem { map, memfd: None })
    }

    /// User-space producer side: a memfd of `pages` pages (the control page
    /// included) whose every slot is used, initialized as the module would.
    #[cfg(not(loom))]
    pub fn create_memfd(pages: u64, mode: Mode, period: Duration) -> Result<Area, LayoutError> {
        let slots = if pages > 1 { abi::slots_in(pages) } else { 0 };
        Area::create_memfd_with_slots(slots, mode, period)
    }

    /// Like [`Area::create_memfd`], with exactly `slots` slots in as few pages
    /// as hold them: tests use rings far smaller than one page of slots.
    #[cfg(not(loom))]
    pub fn create_memfd_with_slots(
        slots: u64,
        mode: Mode,
        period: Duration,
    ) -> Result<Area, LayoutError> {
        if slots == 0 || slots > MAX_SLOTS {
            return Err(LayoutError::SlotCount {
                found: slots,
                max: MAX_SLOTS,
            });
        }
        let data_pages = (slots * SAMPLE_SIZE).div_ceil(abi::PAGE_SIZE);
        let size = abi::area_size(1 + data_pages);
        let len = usize::try_from(size).map_err(|_| LayoutError::SlotCount {
            found: slots,
            max: MAX_SLOTS,
        })?;

        // SAFETY: the name is a NUL-terminated C string literal.
        let fd = unsafe { libc::memfd_create(c"pfprof".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        // SAFETY: memfd_create just returned this descriptor, nothing else owns it.
        let memfd = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
        memfd.set_len(size)?;
        let map = MmapOptions::new().len(len).map_raw(&memfd)?;
        let area = Area {
            mem: Mem {
                map,
                memfd: Some(memfd),
            },
            mode,
            slot_count: slots,
            period,
        };
        area.init_header(size);
        Ok(area)
    }

    /// A model-checked area of `slots` slots, initialized for `mode`.
    #[cfg(loom)]
    pub fn model(slots: u64, mode: Mode) -> Area {
        let size = abi::DATA_OFFSET + slots * SAMPLE_SIZE;
        let header32 = size_of::<AreaHeader>() / 4;
        let header64 = size_of::<AreaHeader>() / 8;
        let area = Area {
            mem: Mem {
                words32: (0..header32).map(|_| AtomicU32::new(0)).collect(),
                words64: (0..header64).map(|_| AtomicU64::new(0)).collect(),
                slots: (0..slots)
                    .map(|_| [0; SLOT_WORDS].map(AtomicU64::new))
                    .collect(),
            },
            mode,
            slot_count: slots,
            period: Duration::from_millis(50),
        };
        area.init_header(size);
        area
    }

    #[cfg(not(loom))]
    fn from_mem(mem: Mem) -> Result<Area, LayoutError> {
        let len = mem.map.len();
        if (len as u64) < abi::DATA_OFFSET + SAMPLE_SIZE {
            return Err(LayoutError::TooSmall { len });
        }
        if mem.map.as_ptr().align_offset(8) != 0 {
            return Err(LayoutError::Misaligned);
        }
        let mut area = Area {
            mem,
            mode: Mode::Strict,
            slot_count: 0,
            period: Duration::ZERO,
        };
        // Pairs with the store-release of magic in `init_header` (a user-space producer's
        // area); the module's header is written before PFPROF_IOC_SET_MODE returns
        // (kmod/ring.c, pfprof_ring_start), and the area is mapped after that.
        // Litmus attach-header.
        let magic = area
            .h32(offset_of!(AreaHeader, magic))
            .load(Ordering::Acquire);
        if magic != abi::MAGIC {
            return Err(LayoutError::BadMagic { found: magic });
        }
        let version = area
            .h32(offset_of!(AreaHeader, abi_version))
            .load(Ordering::Relaxed);
        if version != abi::ABI_VERSION {
            return Err(LayoutError::VersionMismatch {
                found: version,
                expected: abi::ABI_VERSION,
            });
        }
        let mode = area
            .h32(offset_of!(AreaHeader, mode))
            .load(Ordering::Relaxed);
        area.mode = Mode::from_raw(mode).ok_or(LayoutError::NotStarted { found: mode })?;
        let expect = expect_geometry;
        let sample_size = area
            .h32(offset_of!(AreaHeader, sample_size))
            .load(Ordering::Relaxed);
        expect("sample_size", sample_size.into(), SAMPLE_SIZE)?;
        let area_size = area
            .h64(offset_of!(AreaHeader, area_size))
            .load(Ordering::Relaxed);
        expect("area_size", area_size, len as u64)?;
        let data_offset = area
            .h64(offset_of!(AreaHeader, data_offset))
            .load(Ordering::Relaxed);
        expect("data_offset", data_offset, abi::DATA_OFFSET)?;
        // Fewer slots than the data pages hold is fine (test rings); more is not.
        let max = ((area_size - data_offset) / SAMPLE_SIZE).min(MAX_SLOTS);
        let slot_count = area
            .h64(offset_of!(AreaHeader, slot_count))
            .load(Ordering::Relaxed);
        if slot_count == 0 || slot_count > max {
            return Err(LayoutError::SlotCount {
                found: slot_count,
                max,
            });
        }
        area.slot_count = slot_count;
        area.period = Duration::from_nanos(
            area.h64(offset_of!(AreaHeader, period_ns))
                .load(Ordering::Relaxed),
        );
        Ok(area)
    }

    /// What the module does at `PFPROF_IOC_SET_MODE`: every field set, the
    /// ring empty, `empty` holding one unit per slot, magic stored last.
    fn init_header(&self, area_size: u64) {
        use Ordering::Relaxed;
        let h32 = |off, v| self.h32(off).store(v, Relaxed);
        let h64 = |off, v| self.h64(off).store(v, Relaxed);
        h32(offset_of!(AreaHeader, abi_version), abi::ABI_VERSION);
        h32(offset_of!(AreaHeader, mode), self.mode.as_raw());
        h32(offset_of!(AreaHeader, sample_size), SAMPLE_SIZE as u32);
        h64(offset_of!(AreaHeader, area_size), area_size);
        h64(offset_of!(AreaHeader, data_offset), abi::DATA_OFFSET);
        h64(offset_of!(AreaHeader, slot_count), self.slot_count);
        // A period over u64::MAX ns (584 years) is published as the longest there is.
        h64(
            offset_of!(AreaHeader, period_ns),
            u64::try_from(self.period.as_nanos()).unwrap_or(u64::MAX),
        );
        for off in [
            offset_of!(AreaHeader, write_seq),
            offset_of!(AreaHeader, overwritten),
            offset_of!(AreaHeader, blocked_ns),
            offset_of!(AreaHeader, deferred),
            offset_of!(AreaHeader, read_seq),
        ] {
            h64(off, 0);
        }
        h32(offset_of!(AreaHeader, canceled), 0);
        h32(offset_of!(AreaHeader, withdrawn), 0);
        h32(offset_of!(AreaHeader, lock), abi::LOCK_FREE);
        for sem in [SemKind::Full, SemKind::Empty] {
            self.sem_waiters(sem).store(0, Relaxed);
        }
        self.sem_count(SemKind::Full).store(0, Relaxed);
        // slot_count <= MAX_SLOTS was checked by every constructor.
        self.sem_count(SemKind::Empty)
            .store(self.slot_count as u32, Relaxed);
        // Litmus attach-header.
        self.h32(offset_of!(AreaHeader, magic))
            .store(abi::MAGIC, Ordering::Release);
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub fn slot_count(&self) -> u64 {
        self.slot_count
    }

    /// The sampling period the producer published.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// A snapshot of the published counters (each read on its own).
    pub fn counters(&self) -> Counters {
        // write_seq pairs with the producer's store-release after the slot
        // (kmod/ring.c pfprof_write_slot; StrictProducer::push, RelaxedProducer::push),
        // read_seq with the consumer's (StrictConsumer::copy_out, RelaxedConsumer::drain),
        // canceled with the producer's after its last sample (kmod/ring.c
        // pfprof_cancel_locked; strict::cancel, RelaxedProducer::cancel).
        let acquire = |w: &AtomicU64| w.load(Ordering::Acquire);
        // Published with plain stores (WRITE_ONCE in kmod/ring.c): nothing to pair with.
        let relaxed = |w: &AtomicU64| w.load(Ordering::Relaxed);
        Counters {
            write_seq: acquire(self.write_seq()),
            read_seq: acquire(self.read_seq()),
            overwritten: relaxed(self.overwritten()),
            blocked_ns: relaxed(self.blocked_ns()),
            deferred: relaxed(self.deferred()),
            canceled: self.canceled().load(Ordering::Acquire) != 0,
            withdrawn: self
                .h32(offset_of!(AreaHeader, withdrawn))
                .load(Ordering::Relaxed),
        }
    }

    /// The memfd behind a user-space area, so that another process can map it.
    #[cfg(not(loom))]
    pub fn memfd(&self) -> Option<BorrowedFd<'_>> {
        self.mem.memfd.as_ref().map(|f| f.as_fd())
    }

    pub(crate) fn write_seq(&self) -> &AtomicU64 {
        self.h64(offset_of!(AreaHeader, write_seq))
    }

    pub(crate) fn overwritten(&self) -> &AtomicU64 {
        self.h64(offset_of!(AreaHeader, overwritten))
    }

    pub(crate) fn blocked_ns(&self) -> &AtomicU64 {
        self.h64(offset_of!(AreaHeader, blocked_ns))
    }

    pub(crate) fn deferred(&self) -> &AtomicU64 {
        self.h64(offset_of!(AreaHeader, deferred))
    }

    pub(crate) fn canceled(&self) -> &AtomicU32 {
        self.h32(offset_of!(AreaHeader, canceled))
    }

    pub(crate) fn read_seq(&self) -> &AtomicU64 {
        self.h64(offset_of!(AreaHeader, read_seq))
    }

    pub(crate) fn lock_word(&self) -> &AtomicU32 {
        self.h32(offset_of!(AreaHeader, lock))
    }

    fn sem_offset(sem: SemKind) -> usize {
        match sem {
            SemKind::Full => offset_of!(AreaHeader, full),
            SemKind::Empty => offset_of!(AreaHeader, empty),
        }
    }

    pub(crate) fn sem_count(&self, sem: SemKind) -> &AtomicU32 {
        self.h32(Area::sem_offset(sem) + offset_of!(Sem, count))
    }

    pub(crate) fn sem_waiters(&self, sem: SemKind) -> &AtomicU32 {
        self.h32(Area::sem_offset(sem) + offset_of!(Sem, waiters))
    }

    /// The samples of sequences [start, start + count), copied word by word
    /// from at most two runs of slots (before and after the wrap), each
    /// bounds-checked once. `count` must not exceed the slot count.
    pub(crate) fn read_slots(&self, start: u64, count: u64) -> impl Iterator<Item = Sample> + '_ {
        assert!(count <= self.slot_count);
        let first = start % self.slot_count;
        let head = count.min(self.slot_count - first);
        let words =
            |words: &SlotWords| sample_of(words.each_ref().map(|w| w.load(Ordering::Relaxed)));
        let run = |first, slots| self.slot_run(first, slots).iter().map(words);
        run(first, head).chain(run(0, count - head))
    }

    /// Store `sample` into the slot of sequence `seq`, word by word.
    pub(crate) fn write_slot(&self, seq: u64, sample: &Sample) {
        for (w, value) in slot_words(sample).into_iter().enumerate() {
            self.slot_word(seq, w).store(value, Ordering::Relaxed);
        }
    }

    fn slot_word(&self, seq: u64, word: usize) -> &AtomicU64 {
        // slot_count was validated against the mapping's length.
        let offset = abi::slot_offset(seq % self.slot_count) as usize;
        self.word64(offset + word * size_of::<u64>())
    }

    fn h32(&self, offset: usize) -> &AtomicU32 {
        debug_assert!(offset + 4 <= size_of::<AreaHeader>() && offset % 4 == 0);
        self.word32(offset)
    }

    fn h64(&self, offset: usize) -> &AtomicU64 {
        debug_assert!(offset + 8 <= size_of::<AreaHeader>() && offset % 8 == 0);
        self.word64(offset)
    }

    #[cfg(not(loom))]
    fn word32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= self.mem.map.len() && offset % 4 == 0);
        // SAFETY: in bounds (checked above), 4-aligned (the mapping is 8-aligned,
        // checked at attach, and offset % 4 == 0), valid for as long as `self`
        // owns the mapping, and both sides only ever access it atomically.
        unsafe { AtomicU32::from_ptr(self.mem.map.as_mut_ptr().add(offset).cast()) }
    }

    #[cfg(not(loom))]
    fn word64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= self.mem.map.len() && offset % 8 == 0);
        // SAFETY: as in `word32`, with 8-byte alignment.
        unsafe { AtomicU64::from_ptr(self.mem.map.as_mut_ptr().add(offset).cast()) }
    }

    /// Slots [first, first + slots) as atomic words.
    #[cfg(not(loom))]
    fn slot_run(&self, first: u64, slots: u64) -> &[SlotWords] {
        assert!(first <= self.slot_count && slots <= self.slot_count - first);
        let (offset, end) = (abi::slot_offset(first), abi::slot_offset(first + slots));
        assert!(end <= self.mem.map.len() as u64);
        // SAFETY: in bounds (asserted), 8-aligned as in `word64`, lives as long as `self`, atomics only.
        unsafe {
            std::slice::from_raw_parts(
                self.mem.map.as_mut_ptr().add(offset as usize).cast(),
                slots as usize,
            )
        }
    }

    #[cfg(loom)]
    fn slot_run(&self, first: u64, slots: u64) -> &[SlotWords] {
        &self.mem.slots[first as usize..][..slots as usize]
    }

    #[cfg(loom)]
    fn word32(&self, offset: usize) -> &AtomicU32 {
        &self.mem.words32[offset / 4]
    }

    #[cfg(loom)]
    fn word64(&self, offset: usize) -> &AtomicU64 {
        let data = abi::DATA_OFFSET as usize;
        if offset < data {
            &self.mem.words64[offset / 8]
        } else {
            let word = (offset - data) / 8;
            &self.mem.slots[word / SLOT_WORDS][word % SLOT_WORDS]
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn remap(area: &Area) -> MmapRaw {
        MmapRaw::map_raw(
            &area
                .memfd()
                .expect("memfd area")
                .try_clone_to_owned()
                .unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn a_memfd_area_attaches_with_the_same_geometry() {
        let area = Area::create_memfd(3, Mode::Relaxed, Duration::from_millis(20)).unwrap();
        let other = Area::attach(remap(&area)).unwrap();
        assert_eq!(other.mode(), Mode::Relaxed);
        // Two data pages of 64-byte samples.
        assert_eq!(other.slot_count(), 128);
        assert_eq!(other.period(), Duration::from_millis(20));
        assert_eq!(area.sem_count(SemKind::Empty).load(Ordering::Relaxed), 128);
    }

    #[test]
    fn attach_rejects_a_foreign_or_inconsistent_header() {
        let area =
            Area::create_memfd_with_slots(4, Mode::Strict, Duration::from_millis(50)).unwrap();
        let corrupt = |offset: usize, value: u64, wide: bool| {
            let map = remap(&area);
            let saved = if wide {
                area.word64(offset).swap(value, Ordering::Relaxed)
            } else {
                u64::from(area.word32(offset).swap(value as u32, Ordering::Relaxed))
            };
            let result = Area::attach(map).map(|_| ());
            if wide {
                area.word64(offset).store(saved, Ordering::Relaxed);
            } else {
                area.word32(offset).store(saved as u32, Ordering::Relaxed);
            }
            result.unwrap_err()
        };
        assert!(matches!(
            corrupt(offset_of!(AreaHeader, magic), 0, false),
            LayoutError::BadMagic { found: 0 }
        ));
        assert!(matches!(
            corrupt(offset_of!(AreaHeader, abi_version), 1, false),
            LayoutError::VersionMismatch { found: 1, .. }
        ));
        assert!(matches!(
            corrupt(offset_of!(AreaHeader, mode), 0, false),
            LayoutError::NotStarted { found: 0 }
        ));
        assert!(matches!(
            corrupt(offset_of!(AreaHeader, area_size), 1 << 20, true),
            LayoutError::Geometry {
                field: "area_size",
                ..
            }
        ));
        assert!(matches!(
            corrupt(offset_of!(AreaHeader, slot_count), 65, true),
            LayoutError::SlotCount { found: 65, max: 64 }
        ));
        assert!(matches!(
            corrupt(offset_of!(AreaHeader, slot_count), 0, true),
            LayoutError::SlotCount { found: 0, .. }
        ));
        assert!(Area::attach(remap(&area)).is_ok());
    }
}
