//! The faults region (ABI 5, pfprof.h's "Where the faults were"): the faults the module
//! recorded, read by the consumer, with an exact count of those it could not deliver.
//!
//! The module is its only writer and never waits: the oldest records are overwritten
//! when the consumer falls behind, and a record being overwritten while it is copied is
//! told by the claim the writer makes first. Nothing here is trusted beyond the region's
//! own bounds: a record of an unknown kind is lost, not guessed at.

use core::mem::{offset_of, size_of};
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use memmap2::MmapRaw;

use crate::abi::{self, FaultRecord, FaultsHeader};
use crate::area::{expect_geometry, LayoutError};

const RECORD_SIZE: u64 = size_of::<FaultRecord>() as u64;
const RECORD_WORDS: usize = size_of::<FaultRecord>() / size_of::<u64>();
/// How many times a drain reads the per-kind counts again while a batch is being written.
const COUNT_TRIES: usize = 4;

/// One fault as the module recorded it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// `CLOCK_MONOTONIC` when it was taken, ns.
    pub time_ns: u64,
    pub address: u64,
    /// Its process (tgid), in the opener's pid namespace.
    pub pid: u32,
    /// A major fault; otherwise one minor fault recorded in `minor_sampling`.
    pub major: bool,
    /// The user instruction that took it, or where its process entered the kernel
    /// that took it for it; 0: none.
    pub ip: u64,
}

/// Faults the consumer did not get, since the last drain, by kind: overwritten before
/// or while they were read (lost), or never recorded by the module (dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Missed {
    pub major: u64,
    pub minor: u64,
}

/// The consumer's side of a mapped faults region.
pub struct FaultsRegion {
    map: MmapRaw,
    record_count: u64,
    minor_sampling: u64,
    /// The next record to read.
    read: u64,
    /// Records received, ever, by kind: what the module wrote less these is lost.
    received: Missed,
    /// Lost and dropped as last accounted, ever.
    lost: Missed,
    dropped: Missed,
}

impl FaultsRegion {
    /// Takes a mapping of the whole region the module made, after checking its magic
    /// and geometry against the mapping's length.
    pub fn attach(map: MmapRaw) -> Result<FaultsRegion, LayoutError> {
        let len = map.len() as u64;
        if len < abi::PAGE_SIZE + RECORD_SIZE {
            return Err(LayoutError::TooSmall { len: map.len() });
        }
        if map.as_ptr().align_offset(8) != 0 {
            return Err(LayoutError::Misaligned);
        }
        let mut region = FaultsRegion {
            map,
            record_count: 0,
            minor_sampling: 0,
            read: 0,
            received: Missed::default(),
            lost: Missed::default(),
            dropped: Missed::default(),
        };
        let magic = region.h32(offset_of!(FaultsHeader, magic));
        if magic != abi::FAULTS_MAGIC {
            return Err(LayoutError::BadMagic { found: magic });
        }
        let expect = expect_geometry;
        expect(
            "record_size",
            region.h32(offset_of!(FaultsHeader, record_size)).into(),
            RECORD_SIZE,
        )?;
        expect(
            "region_size",
            region.h64(offset_of!(FaultsHeader, region_size)),
            len,
        )?;
        expect(
            "data_offset",
            region.h64(offset_of!(FaultsHeader, data_offset)),
            abi::PAGE_SIZE,
        )?;
        let max = (len - abi::PAGE_SIZE) / RECORD_SIZE;
        let record_count = region.h64(offset_of!(FaultsHeader, record_count));
        if record_count == 0 || record_count > max {
            return Err(LayoutError::SlotCount {
                found: record_count,
                max,
            });
        }
        region.record_count = record_count;
        region.minor_sampling = region.h64(offset_of!(FaultsHeader, minor_sampling));
        // Whatever was written before this consumer attached is its own to read.
        Ok(region)
    }

    /// One minor fault in this many is recorded.
    pub fn minor_sampling(&self) -> u64 {
        self.minor_sampling
    }

    /// Processes of the session the module does not record (pfprof.h).
    pub fn unattributed(&self) -> u32 {
        self.word32(offset_of!(FaultsHeader, unattributed))
            .load(Ordering::Relaxed)
    }

    /// Appends every fault written since the last drain to `out`, and returns those
    /// missed since then: records overwritten before or while they were read, and faults
    /// the module could not record.
    pub fn drain(&mut self, out: &mut Vec<Fault>) -> Missed {
        let n = self.record_count;
        // Acquire: the records below write_seq are complete (pairs with its release; litmus
        // faults-publish).
        let written = self
            .word64(offset_of!(FaultsHeader, write_seq))
            .load(Ordering::Acquire);
        // A write_seq behind ours is a scribble: nothing new.
        let start = self.read.max(written.saturating_sub(n));
        let mut copied: Vec<(u64, [u64; RECORD_WORDS])> = Vec::new();
        for seq in start..written.max(start) {
            copied.push((seq, self.record_words(seq % n)));
        }
        // The claim is read after the copies: one the writer made before overwriting a
        // record copied is seen (pairs with its write barrier; litmus faults-torn).
        fence(Ordering::Acquire);
        let claimed = self
            .word64(offset_of!(FaultsHeader, claimed_seq))
            .load(Ordering::Relaxed);
        let safe_from = claimed.saturating_sub(n);
        for (seq, words) in copied {
            if seq < safe_from {
                continue;
            }
            if let Some(fault) = decode(words) {
                if fault.major {
                    self.received.major += 1;
                } else {
                    self.received.minor += 1;
                }
                out.push(fault);
            }
        }
        self.read = self.read.max(written);
        let mut missed = Missed::default();
        if let Some((major, minor)) = self.written_counts() {
            let lost = Missed {
                major: major.saturating_sub(self.received.major),
                minor: minor.saturating_sub(self.received.minor),
            };
            missed.major += lost.major.saturating_sub(self.lost.major);
            missed.minor += lost.minor.saturating_sub(self.lost.minor);
            self.lost.major = self.lost.major.max(lost.major);
            self.lost.minor = self.lost.minor.max(lost.minor);
        }
        let dropped = Missed {
            major: self.h64(offset_of!(FaultsHeader, dropped_major)),
            minor: self.h64(offset_of!(FaultsHeader, dropped_minor)),
        };
        missed.major += dropped.major.saturating_sub(self.dropped.major);
        missed.minor += dropped.minor.saturating_sub(self.dropped.minor);
        self.dropped.major = self.dropped.major.max(dropped.major);
        self.dropped.minor = self.dropped.minor.max(dropped.minor);
        missed
    }

    /// The records of each kind the module wrote up to `read`, if it was not writing
    /// while they were read (then the next drain accounts for them). A seqlock read:
    /// write_seq's acquire, the counts, a fence, then claimed_seq (litmus faults-counts).
    fn written_counts(&self) -> Option<(u64, u64)> {
        for _ in 0..COUNT_TRIES {
            let seq = self
                .word64(offset_of!(FaultsHeader, write_seq))
                .load(Ordering::Acquire);
            let major = self.h64(offset_of!(FaultsHeader, written_major));
            let minor = self.h64(offset_of!(FaultsHeader, written_minor));
            fence(Ordering::Acquire);
            let claimed = self
                .word64(offset_of!(FaultsHeader, claimed_seq))
                .load(Ordering::Relaxed);
            if claimed == seq && seq == self.read {
                return Some((major, minor));
            }
            if seq != self.read {
                // Written since this drain read: those records are the next drain's.
                return None;
            }
        }
        None
    }

    fn record_words(&self, index: u64) -> [u64; RECORD_WORDS] {
        let offset = abi::PAGE_SIZE + index * RECORD_SIZE;
        core::array::from_fn(|i| {
            self.word64(offset as usize + i * size_of::<u64>())
                .load(Ordering::Relaxed)
        })
    }

    fn h32(&self, offset: usize) -> u32 {
        self.word32(offset).load(Ordering::Relaxed)
    }

    fn h64(&self, offset: usize) -> u64 {
        self.word64(offset).load(Ordering::Relaxed)
    }

    fn word32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset + 4 <= self.map.len() && offset % 4 == 0);
        // SAFETY: in bounds and aligned (checked above; the mapping is page-aligned),
        // and the mapping lives as long as `self`; the module writes the word
        // concurrently, so it is only ever accessed atomically.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU32>() }
    }

    fn word64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset + 8 <= self.map.len() && offset % 8 == 0);
        // SAFETY: as in `word32`.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }
}

/// A record's fault, or `None` for a kind this consumer does not know.
fn decode(words: [u64; RECORD_WORDS]) -> Option<Fault> {
    let [time_ns, address, pid_kind, ip] = words;
    // pid is the low half of the third word on a little-endian machine, kind the high.
    let (pid, kind) = if cfg!(target_endian = "little") {
        (pid_kind as u32, (pid_kind >> 32) as u32)
    } else {
        ((pid_kind >> 32) as u32, pid_kind as u32)
    };
    let major = match kind {
        abi::FAULT_MAJOR => true,
        abi::FAULT_MINOR => false,
        _ => return None,
    };
    Some(Fault {
        time_ns,
        address,
        pid,
        major,
        ip,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::FromRawFd;

    use memmap2::MmapOptions;

    /// The module's side, as kmod/faults.c writes: claim, records, counts, write_seq;
    /// over a memfd the reader maps a second time, as the monitor maps the module's pages.
    struct Writer {
        file: File,
        map: MmapRaw,
        count: u64,
        seq: u64,
        major: u64,
        minor: u64,
    }

    impl Writer {
        fn new(count: u64) -> Writer {
            let len =
                (abi::PAGE_SIZE + count * RECORD_SIZE).div_ceil(abi::PAGE_SIZE) * abi::PAGE_SIZE;
            // SAFETY: the name is a NUL-terminated C string literal.
            let fd = unsafe { libc::memfd_create(c"faults".as_ptr(), libc::MFD_CLOEXEC) };
            assert!(fd >= 0);
            // SAFETY: memfd_create just returned it; nothing else owns it.
            let file = unsafe { File::from_raw_fd(fd) };
            file.set_len(len).unwrap();
            let map = MmapOptions::new().len(len as usize).map_raw(&file).unwrap();
            let w = Writer {
                file,
                map,
                count,
                seq: 0,
                major: 0,
                minor: 0,
            };
            w.set32(offset_of!(FaultsHeader, magic), abi::FAULTS_MAGIC);
            w.set32(offset_of!(FaultsHeader, record_size), RECORD_SIZE as u32);
            w.set64(offset_of!(FaultsHeader, region_size), len);
            w.set64(offset_of!(FaultsHeader, data_offset), abi::PAGE_SIZE);
            w.set64(offset_of!(FaultsHeader, record_count), count);
            w.set64(offset_of!(FaultsHeader, minor_sampling), 61);
            w
        }

        fn reader(&self) -> FaultsRegion {
            let map = MmapOptions::new()
                .len(self.map.len())
                .map_raw(&self.file)
                .unwrap();
            FaultsRegion::attach(map).unwrap()
        }

        fn word(&self, off: usize) -> &AtomicU64 {
            // SAFETY: in bounds and aligned (offsets of the layout), accessed atomically only.
            unsafe { &*self.map.as_ptr().add(off).cast::<AtomicU64>() }
        }

        fn set32(&self, off: usize, v: u32) {
            // SAFETY: as in `word`.
            unsafe { &*self.map.as_ptr().add(off).cast::<AtomicU32>() }.store(v, Ordering::Relaxed);
        }

        fn set64(&self, off: usize, v: u64) {
            self.word(off).store(v, Ordering::Relaxed);
        }

        fn claim(&self, n: u64) {
            self.set64(offset_of!(FaultsHeader, claimed_seq), self.seq + n);
            fence(Ordering::Release);
        }

        fn record(&mut self, fault: Fault) {
            self.record_kind(
                fault,
                if fault.major {
                    abi::FAULT_MAJOR
                } else {
                    abi::FAULT_MINOR
                },
            );
        }

        fn record_kind(&mut self, fault: Fault, kind: u32) {
            let off = (abi::PAGE_SIZE + (self.seq % self.count) * RECORD_SIZE) as usize;
            self.set64(off, fault.time_ns);
            self.set64(off + 8, fault.address);
            self.set64(off + 16, u64::from(fault.pid) | (u64::from(kind) << 32));
            self.set64(off + 24, fault.ip);
            if fault.major {
                self.major += 1;
            } else {
                self.minor += 1;
            }
            self.seq += 1;
        }

        fn publish(&self) {
            self.set64(offset_of!(FaultsHeader, written_major), self.major);
            self.set64(offset_of!(FaultsHeader, written_minor), self.minor);
            self.word(offset_of!(FaultsHeader, write_seq))
                .store(self.seq, Ordering::Release);
        }

        fn write(&mut self, faults: &[Fault]) {
            self.claim(faults.len() as u64);
            for &f in faults {
                self.record(f);
            }
            self.publish();
        }
    }

    fn fault(i: u64) -> Fault {
        Fault {
            time_ns: 1000 + i,
            address: 0x1000 * i,
            pid: 7 + i as u32 % 2,
            major: i % 3 == 0,
            ip: 0x40_0000 + i,
        }
    }

    fn faults(range: std::ops::Range<u64>) -> Vec<Fault> {
        range.map(fault).collect()
    }

    #[test]
    fn records_are_decoded_in_order_with_their_process_address_kind_and_instruction() {
        let mut w = Writer::new(16);
        let mut r = w.reader();
        assert_eq!(r.minor_sampling(), 61);
        w.write(&faults(0..5));
        w.write(&faults(5..9));
        let mut out = Vec::new();
        assert_eq!(r.drain(&mut out), Missed::default());
        assert_eq!(out, faults(0..9));
        out.clear();
        assert_eq!(r.drain(&mut out), Missed::default());
        assert!(out.is_empty());
    }

    #[test]
    fn a_lapped_consumer_counts_every_overwritten_record_by_its_kind() {
        let mut w = Writer::new(8);
        let mut r = w.reader();
        let written = faults(0..30);
        for chunk in written.chunks(5) {
            w.write(chunk);
        }
        let mut out = Vec::new();
        let missed = r.drain(&mut out);
        assert_eq!(out, faults(22..30), "the newest record_count records");
        let lost = &written[..22];
        assert_eq!(
            missed,
            Missed {
                major: lost.iter().filter(|f| f.major).count() as u64,
                minor: lost.iter().filter(|f| !f.major).count() as u64,
            }
        );
        // received + lost == written, exactly, and nothing is counted twice.
        w.write(&faults(30..33));
        out.clear();
        assert_eq!(r.drain(&mut out), Missed::default());
        assert_eq!(out, faults(30..33));
    }

    #[test]
    fn records_a_writer_is_overwriting_while_they_are_read_are_lost_not_taken() {
        let mut w = Writer::new(8);
        let mut r = w.reader();
        w.write(&faults(0..8));
        // The writer claimed 3 more and has written one of them over record 0's slot,
        // not published yet: records 0..3 are suspect, 3..8 are safe.
        w.claim(3);
        w.record(fault(100));
        let mut out = Vec::new();
        let missed = r.drain(&mut out);
        assert_eq!(out, faults(3..8));
        // The counts are the next drain's: a batch was being written.
        assert_eq!(missed, Missed::default());
        w.record(fault(101));
        w.record(fault(102));
        w.publish();
        out.clear();
        let missed = r.drain(&mut out);
        assert_eq!(out, vec![fault(100), fault(101), fault(102)]);
        let lost = faults(0..3);
        assert_eq!(
            missed,
            Missed {
                major: lost.iter().filter(|f| f.major).count() as u64,
                minor: lost.iter().filter(|f| !f.major).count() as u64,
            }
        );
    }

    #[test]
    fn drops_the_module_counted_are_missed_once_and_unknown_kinds_are_lost() {
        let mut w = Writer::new(8);
        let mut r = w.reader();
        w.set64(offset_of!(FaultsHeader, dropped_major), 4);
        w.set64(offset_of!(FaultsHeader, dropped_minor), 9);
        w.claim(1);
        w.record_kind(fault(3), 77);
        w.publish();
        let mut out = Vec::new();
        let missed = r.drain(&mut out);
        assert!(out.is_empty());
        assert_eq!(missed, Missed { major: 5, minor: 9 });
        assert_eq!(r.drain(&mut out), Missed::default());
    }

    #[test]
    fn a_region_whose_geometry_does_not_match_its_mapping_is_refused() {
        let w = Writer::new(8);
        w.set64(offset_of!(FaultsHeader, record_count), 1 << 40);
        let map = MmapOptions::new()
            .len(w.map.len())
            .map_raw(&w.file)
            .unwrap();
        assert!(matches!(
            FaultsRegion::attach(map),
            Err(LayoutError::SlotCount { .. })
        ));
        w.set64(offset_of!(FaultsHeader, record_count), 8);
        w.set32(offset_of!(FaultsHeader, magic), abi::MAGIC);
        let map = MmapOptions::new()
            .len(w.map.len())
            .map_raw(&w.file)
            .unwrap();
        assert!(matches!(
            FaultsRegion::attach(map),
            Err(LayoutError::BadMagic { .. })
        ));
    }
}
