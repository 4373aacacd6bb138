//! Helpers the protocol tests share.
#![allow(dead_code)] // each test binary uses its own subset

use std::sync::atomic::{AtomicU32, AtomicU64};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use memmap2::MmapRaw;
use shared_layout::{abi, Area, Mode, Sample};

/// The control page's size: the words these helpers reach.
const CONTROL_PAGE: usize = abi::DATA_OFFSET as usize;

pub fn area(slots: u64, mode: Mode) -> Arc<Area> {
    Arc::new(
        Area::create_memfd_with_slots(slots, mode, Duration::from_millis(50)).expect("memfd area"),
    )
}

/// Sample number `seq`: every word is derived from it, so a sample whose
/// words come from two different writes (a torn copy) is detectable.
pub fn numbered(seq: u64) -> Sample {
    Sample {
        time_ns: seq,
        minor: seq.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        major: !seq,
        cpu_ns: seq.rotate_left(17) ^ 0xA5A5_A5A5_A5A5_A5A5,
        rss_anon: seq.wrapping_add(1) << 12,
        rss_file: seq.swap_bytes(),
        rss_shmem: seq ^ 0x5A5A_5A5A_5A5A_5A5A,
        swap: seq.wrapping_mul(3).rotate_right(9),
    }
}

/// The sequence number of `sample`, after checking it is not torn.
pub fn sequence_of(sample: &Sample) -> u64 {
    assert_eq!(*sample, numbered(sample.time_ns), "torn sample");
    sample.time_ns
}

/// Join `handle`, failing the test instead of hanging if it takes too long.
pub fn join_within<T>(handle: JoinHandle<T>, limit: Duration, what: &str) -> T {
    let start = Instant::now();
    while !handle.is_finished() {
        assert!(
            start.elapsed() < limit,
            "{what} did not return within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    handle.join().expect("thread panicked")
}

/// CPU time the calling thread has used.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let ret = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(ret, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// A second mapping of the same memfd: what another process (a consumer that
/// dies holding the lock, or one that scribbles over the header) would see.
pub fn second_mapping(area: &Area) -> MmapRaw {
    let fd = area
        .memfd()
        .expect("memfd area")
        .try_clone_to_owned()
        .unwrap();
    MmapRaw::map_raw(&fd).unwrap()
}

/// The 32-bit word at `offset` of the control page.
pub fn word32(map: &MmapRaw, offset: usize) -> &AtomicU32 {
    assert!(offset + 4 <= CONTROL_PAGE && offset % 4 == 0);
    // SAFETY: in bounds and 4-aligned in the page-aligned mapping, which
    // outlives the reference; both sides access the word atomically.
    unsafe { AtomicU32::from_ptr(map.as_mut_ptr().add(offset).cast()) }
}

/// The 64-bit word at `offset` of the control page.
pub fn word64(map: &MmapRaw, offset: usize) -> &AtomicU64 {
    assert!(offset + 8 <= CONTROL_PAGE && offset % 8 == 0);
    // SAFETY: as in `word32`, 8-aligned.
    unsafe { AtomicU64::from_ptr(map.as_mut_ptr().add(offset).cast()) }
}
