//! One perf ring buffer, mapped read-write: the kernel writes records at `data_head` and
//! never past `data_tail`, which we move on once they are read (a full buffer drops
//! records and says how many with a `PERF_RECORD_LOST`, rather than overwriting unread
//! ones). The pairing is perf_event_open(2)'s: an acquire load of `data_head`, the
//! records below it read, a release store of `data_tail`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use super::abi::{DATA_HEAD, DATA_TAIL, HEADER_SIZE, PERF_RECORD_LOST, PERF_RECORD_SAMPLE};

/// What a record of the fault events says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// A fault: the process and thread that took it, when (`CLOCK_MONOTONIC`, ns), and the
    /// address.
    Sample {
        pid: u32,
        tid: u32,
        time_ns: u64,
        addr: u64,
    },
    /// The kernel could not write this many records: its buffer was full.
    Lost(u64),
}

/// A mapped ring buffer of an event opened with `PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
/// PERF_SAMPLE_ADDR`, and its descriptor.
pub struct Ring {
    fd: OwnedFd,
    map: MmapRaw,
    page_size: usize,
    data_size: usize,
    /// One record, copied out of the ring (it may wrap around its end).
    record: Vec<u8>,
}

impl Ring {
    /// Maps the ring of event `fd`: a control page and `data_pages` (a power of two) of
    /// records.
    pub fn map(fd: OwnedFd, data_pages: usize) -> io::Result<Ring> {
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

    /// Hands every record written since the last drain to `each`, then gives their
    /// space back to the kernel. Records of other types are skipped.
    pub fn drain(&mut self, mut each: impl FnMut(Record)) {
        let head = self.word(DATA_HEAD).load(Ordering::Acquire);
        let mut tail = self.word(DATA_TAIL).load(Ordering::Relaxed);
        while head.wrapping_sub(tail) >= HEADER_SIZE as u64 {
            self.copy_out(tail, HEADER_SIZE);
            let kind = u32::from_ne_bytes(self.record[0..4].try_into().unwrap_or_default());
            let size = usize::from(u16::from_ne_bytes(
                self.record[6..8].try_into().unwrap_or_default(),
            ));
            if size < HEADER_SIZE || head.wrapping_sub(tail) < size as u64 {
                // Not a record the kernel wrote: drop what is left rather than misread.
                tail = head;
                break;
            }
            self.copy_out(tail, size);
            if let Some(record) = parse(kind, &self.record[HEADER_SIZE..]) {
                each(record);
            }
            tail = tail.wrapping_add(size as u64);
        }
        self.word(DATA_TAIL).store(tail, Ordering::Release);
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

/// A record's body, after its header.
fn parse(kind: u32, body: &[u8]) -> Option<Record> {
    let u64_at = |at: usize| Some(u64::from_ne_bytes(body.get(at..at + 8)?.try_into().ok()?));
    let u32_at = |at: usize| Some(u32::from_ne_bytes(body.get(at..at + 4)?.try_into().ok()?));
    match kind {
        // sample_type TID | TIME | ADDR, in the kernel's order: pid, tid, time, addr.
        PERF_RECORD_SAMPLE => Some(Record::Sample {
            pid: u32_at(0)?,
            tid: u32_at(4)?,
            time_ns: u64_at(8)?,
            addr: u64_at(16)?,
        }),
        // id, lost.
        PERF_RECORD_LOST => Some(Record::Lost(u64_at(8)?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_losses_are_read_from_their_bodies_and_other_records_skipped() {
        let mut body = Vec::new();
        body.extend_from_slice(&7u32.to_ne_bytes());
        body.extend_from_slice(&8u32.to_ne_bytes());
        body.extend_from_slice(&1234u64.to_ne_bytes());
        body.extend_from_slice(&0x7f00_0000_1000u64.to_ne_bytes());
        assert_eq!(
            parse(PERF_RECORD_SAMPLE, &body),
            Some(Record::Sample {
                pid: 7,
                tid: 8,
                time_ns: 1234,
                addr: 0x7f00_0000_1000
            })
        );
        assert_eq!(parse(PERF_RECORD_SAMPLE, &body[..20]), None);
        let lost: Vec<u8> = [1u64, 42].iter().flat_map(|v| v.to_ne_bytes()).collect();
        assert_eq!(parse(PERF_RECORD_LOST, &lost), Some(Record::Lost(42)));
        assert_eq!(parse(3, &lost), None);
    }
}
