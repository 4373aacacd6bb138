//! One perf ring buffer, mapped read-write: the kernel writes records at `data_head` and
//! never past `data_tail`, which we move on once they are read (a full buffer drops
//! records and says how many with a `PERF_RECORD_LOST`, rather than overwriting unread
//! ones). The pairing is perf_event_open(2)'s: an acquire load of `data_head`, the
//! records below it read, a release store of `data_tail`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::abi::{
    mmap2, task, DATA_HEAD, DATA_TAIL, HEADER_SIZE, PERF_RECORD_COMM, PERF_RECORD_EXIT,
    PERF_RECORD_FORK, PERF_RECORD_LOST, PERF_RECORD_MISC_COMM_EXEC, PERF_RECORD_MISC_MMAP_BUILD_ID,
    PERF_RECORD_MMAP2, PERF_RECORD_SAMPLE, SAMPLE_ID_SIZE, SAMPLE_ID_TIME,
};
use crate::attribution::FileId;

/// What a record of the fault events says. Times are `CLOCK_MONOTONIC`, in ns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A fault: the process and thread that took it, when, the address, and the
    /// instruction's (a kernel address for a fault taken in a system call); the id of
    /// the cgroup the thread was in, where the events ask for it (0 where not).
    Sample {
        ip: u64,
        pid: u32,
        tid: u32,
        time_ns: u64,
        addr: u64,
        cgroup: u64,
    },
    /// The kernel could not write this many records: its buffer was full.
    Lost(u64),
    /// A mappings ring was found full to within a record at a drain: the kernel may
    /// have dropped records it has not said yet ([`super::FaultEvents::drain`]).
    Overflowed,
    /// A mapping made: by mmap(), mprotect(), brk's growth, an exec.
    Mmap(Mmap),
    /// Process `pid` was forked by process `ppid` (the same pid: a thread was started).
    Fork { pid: u32, ppid: u32, time_ns: u64 },
    /// Process `pid` exec'd: its mappings are gone, the new program's come as records.
    Exec { pid: u32, time_ns: u64 },
    /// Thread `tid` of process `pid` ended (`tid == pid`: its first thread).
    Exit { pid: u32, tid: u32, time_ns: u64 },
}

impl Record {
    /// When it happened; a loss has no time of its own.
    pub fn time_ns(&self) -> Option<u64> {
        match self {
            Record::Sample { time_ns, .. }
            | Record::Fork { time_ns, .. }
            | Record::Exec { time_ns, .. }
            | Record::Exit { time_ns, .. } => Some(*time_ns),
            Record::Mmap(m) => Some(m.time_ns),
            Record::Lost(_) | Record::Overflowed => None,
        }
    }
}

/// A `PERF_RECORD_MMAP2`: a region of process `pid` mapped, replacing what it overlaps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mmap {
    pub pid: u32,
    pub time_ns: u64,
    pub start: u64,
    pub end: u64,
    /// The file offset mapped at `start`, in bytes.
    pub pgoff: u64,
    /// The file's device and inode, as `/proc/PID/maps` shows them (zeros when none).
    pub file: FileId,
    pub exec: bool,
    pub shared: bool,
    /// The kernel's name for it: a file's path, `[heap]`, `[stack]`, `[vdso]`, or
    /// `//anon` for anonymous memory.
    pub name: String,
}

/// A mapped ring buffer of events opened with `PERF_SAMPLE_IP | PERF_SAMPLE_TID |
/// PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR` and `sample_id_all`, and its descriptor.
pub struct Ring {
    fd: OwnedFd,
    map: MmapRaw,
    page_size: usize,
    data_size: usize,
    /// One record, copied out of the ring (it may wrap around its end).
    record: Vec<u8>,
    /// Its samples end with their cgroup's id (`PERF_SAMPLE_CGROUP`): one without is
    /// not read.
    cgroup_in_samples: bool,
}

impl Ring {
    /// Maps the ring of event `fd`: a control page and `data_pages` (a power of two) of
    /// records; `cgroup_in_samples`: its events ask for their samples' cgroup.
    pub fn map(fd: OwnedFd, data_pages: usize, cgroup_in_samples: bool) -> io::Result<Ring> {
        let page_size = crate::system::page_size();
        let map = MmapOptions::new()
            .len((1 + data_pages) * page_size)
            .map_raw(&fd)?;
        Ok(Ring {
            fd,
            map,
            page_size,
            data_size: data_pages * page_size,
            record: Vec::with_capacity(64),
            cgroup_in_samples,
        })
    }

    /// The event's descriptor: other events' records can be sent here, and it is
    /// readable (poll) once the ring fills past its watermark.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: the control page is mapped for as long as `self.map` lives, and the
        // word at `offset` (DATA_HEAD or DATA_TAIL, 8-aligned in a page-aligned map) is a
        // u64 the kernel and this process share: accessed only atomically here.
        unsafe { &*self.map.as_ptr().add(offset).cast::<AtomicU64>() }
    }

    /// The bytes its records may take.
    pub fn data_size(&self) -> usize {
        self.data_size
    }

    /// Hands every record written since the last drain to `each`, then gives their
    /// space back to the kernel; returns how many bytes of records it found. Records of
    /// other types are skipped.
    pub fn drain(&mut self, mut each: impl FnMut(Record)) -> usize {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        let found = usize::try_from(head.wrapping_sub(tail)).unwrap_or(usize::MAX);
        while head.wrapping_sub(tail) >= HEADER_SIZE as u64 {
            self.copy_out(tail, HEADER_SIZE);
            let kind = u32::from_ne_bytes(self.record[0..4].try_into().unwrap_or_default());
            let misc = u16::from_ne_bytes(self.record[4..6].try_into().unwrap_or_default());
            let size = usize::from(u16::from_ne_bytes(
                self.record[6..8].try_into().unwrap_or_default(),
            ));
            if size < HEADER_SIZE || head.wrapping_sub(tail) < size as u64 {
                // Not a record the kernel wrote: drop what is left rather than misread.
                tail = head;
                break;
            }
            self.copy_out(tail, size);
            let body = &self.record[HEADER_SIZE..];
            if let Some(record) = parse(kind, misc, body, self.cgroup_in_samples) {
                each(record);
            }
            tail = tail.wrapping_add(size as u64);
        }
        self.word(DATA_TAIL).store(tail, Ordering::Release);
        found
    }

    /// Copies `len` bytes from ring position `pos` into `self.record`.
    fn copy_out(&mut self, pos: u64, len: usize) {
        self.record.clear();
        self.record.resize(len.min(self.data_size), 0);
        let offset = (pos % self.data_size as u64) as usize;
        let first = self.record.len().min(self.data_size - offset);
        let second = self.record.len() - first;
        // SAFETY: the data pages follow the control page in the mapping; `offset + first`
        // and `second` are within `data_size`, and `self.record` holds `first + second`
        // bytes. The bytes below `data_head` (acquired) are the kernel's finished records,
        // which it does not touch again before `data_tail` passes them.
        unsafe {
            let data = self.map.as_ptr().add(self.page_size);
            std::ptr::copy_nonoverlapping(data.add(offset), self.record.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(data, self.record.as_mut_ptr().add(first), second);
        }
    }
}

/// A record's body, after its header (`misc`: the header's flags; `cgroup_in_samples`:
/// a sample ends with its cgroup's id).
fn parse(kind: u32, misc: u16, body: &[u8], cgroup_in_samples: bool) -> Option<Record> {
    let u64_at = |at: usize| Some(u64::from_ne_bytes(body.get(at..at + 8)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(body.get(at..at + 4)?.try_into().ok()?));
    // Every record but a sample ends with the sample's id fields (`sample_id_all`).
    let fields_end = body.len().checked_sub(SAMPLE_ID_SIZE);
    let stamped = || u64_at(fields_end? + SAMPLE_ID_TIME);
    match kind {
        // sample_type IP | TID | TIME | ADDR, in the kernel's order: ip, pid, tid, time,
        // addr; then the cgroup's id where CGROUP is asked for too (a fleet's events).
        PERF_RECORD_SAMPLE => Some(Record::Sample {
            ip: u64_at(0)?,
            pid: u32_at(8)?,
            tid: u32_at(12)?,
            time_ns: u64_at(16)?,
            addr: u64_at(24)?,
            cgroup: match cgroup_in_samples {
                true => u64_at(32)?,
                false => 0,
            },
        }),
        // id, lost.
        PERF_RECORD_LOST => Some(Record::Lost(u64_at(8)?)),
        // Its device and inode are not there: not a record these events ask for.
        PERF_RECORD_MMAP2 if misc & PERF_RECORD_MISC_MMAP_BUILD_ID != 0 => None,
        PERF_RECORD_MMAP2 => {
            let start = u64_at(mmap2::ADDR)?;
            let name = body.get(mmap2::FILENAME..fields_end?)?;
            let name = name.split(|&b| b == 0).next().unwrap_or_default();
            Some(Record::Mmap(Mmap {
                pid: u32_at(mmap2::PID)?,
                time_ns: stamped()?,
                start,
                end: start.checked_add(u64_at(mmap2::LEN)?)?,
                pgoff: u64_at(mmap2::PGOFF)?,
                file: FileId {
                    major: u32_at(mmap2::MAJ)?,
                    minor: u32_at(mmap2::MIN)?,
                    inode: u64_at(mmap2::INO)?,
                },
                exec: u32_at(mmap2::PROT)? & libc::PROT_EXEC as u32 != 0,
                shared: u32_at(mmap2::FLAGS)? & libc::MAP_SHARED as u32 != 0,
                name: String::from_utf8_lossy(name).into_owned(),
            }))
        }
        PERF_RECORD_FORK => Some(Record::Fork {
            pid: u32_at(task::PID)?,
            ppid: u32_at(task::PPID)?,
            time_ns: stamped()?,
        }),
        PERF_RECORD_EXIT => Some(Record::Exit {
            pid: u32_at(task::PID)?,
            tid: u32_at(task::TID)?,
            time_ns: stamped()?,
        }),
        // A rename that is not an exec's changes no mapping.
        PERF_RECORD_COMM if misc & PERF_RECORD_MISC_COMM_EXEC != 0 => Some(Record::Exec {
            pid: u32_at(task::PID)?,
            time_ns: stamped()?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_losses_are_read_from_their_bodies_and_other_records_skipped() {
        let mut body = Vec::new();
        body.extend_from_slice(&0x5555_0000_2345u64.to_ne_bytes());
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(&1234u64.to_ne_bytes());
        body.extend_from_slice(&0x7f00_0000_1000u64.to_ne_bytes());
        assert_eq!(
            parse(PERF_RECORD_SAMPLE, 0, &body, false),
            Some(Record::Sample {
                ip: 0x5555_0000_2345,
                pid: 7,
                tid: 8,
                time_ns: 1234,
                addr: 0x7f00_0000_1000,
                cgroup: 0,
            })
        );
        assert_eq!(parse(PERF_RECORD_SAMPLE, 0, &body[..28], false), None);
        // Asked for, a cgroup's id is read, not taken as 0 where it is missing.
        assert_eq!(parse(PERF_RECORD_SAMPLE, 0, &body, true), None);
        body.extend_from_slice(&9876u64.to_ne_bytes());
        assert!(matches!(
            parse(PERF_RECORD_SAMPLE, 0, &body, true),
            Some(Record::Sample { cgroup: 9876, .. })
        ));
        let lost: Vec<u8> = [1u64, 42].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(
            parse(PERF_RECORD_LOST, 0, &lost, false),
            Some(Record::Lost(42))
        );
        assert_eq!(parse(5, 0, &lost, false), None);
    }
}
