//! The atomics and scheduling hints the protocols use: std's, or loom's when
//! the protocols are model-checked (`--cfg loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64};
pub(crate) use std::sync::atomic::Ordering;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64};

/// One step of a bounded or unbounded busy wait.
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::hint::spin_loop();
}

/// Back off after `round` failed attempts: spin, then yield, then sleep a
/// little longer each time (at most 1 ms), so a waiter that is not the
/// lock's owner leaves the CPU to it.
pub(crate) fn backoff(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    match round {
        0..64 => std::hint::spin_loop(),
        64..128 => std::thread::yield_now(),
        _ => std::thread::sleep(std::time::Duration::from_micros(
            u64::from(round - 127).min(20) * 50,
        )),
    }
}
