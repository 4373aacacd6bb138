//! The atomics and scheduling hints the protocols use: std's, or loom's when
//! the protocols are model-checked (`--cfg loom`).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU32, AtomicU64};
pub(crate) use std::sync::atomic::Ordering;
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU32, AtomicU64};

/// The full barrier each side of the waiters-word Dekker pattern (pfprof.h)
/// puts between its SeqCst read-modify-write of one word and its SeqCst load
/// of the other. Outside loom the pattern already has it: SeqCst operations
/// form one total order, so the two loads cannot both miss the other side's
/// write (C++20 [atomics.order]), and on x86 the locked instruction is the
/// barrier; an extra fence cost every post a locked instruction of its own.
/// Loom models SeqCst accesses as acquire/release only and needs the fence.
/// The litmus test user-waiters checks the pattern without it, under RC11.
#[inline]
pub(crate) fn dekker_fence() {
    #[cfg(loom)]
    fence(Ordering::SeqCst);
}

/// A bounded busy wait: it lasts `limit`, or under loom (where time means
/// nothing) two attempts, so that a spin that fails and then succeeds, and one
/// that fails twice, are both models.
pub(crate) struct SpinBudget {
    #[cfg(not(loom))]
    until: std::time::Instant,
    #[cfg(loom)]
    retries: std::cell::Cell<u32>,
}

impl SpinBudget {
    pub(crate) fn start(limit: std::time::Duration) -> SpinBudget {
        SpinBudget::until(std::time::Instant::now() + limit)
    }

    /// A budget that ends at `until`: for a caller that has just read the clock.
    pub(crate) fn until(until: std::time::Instant) -> SpinBudget {
        #[cfg(loom)]
        let _ = until;
        SpinBudget {
            #[cfg(not(loom))]
            until,
            #[cfg(loom)]
            retries: std::cell::Cell::new(1),
        }
    }

    /// Whether the budget is used up; otherwise pause before the next attempt.
    pub(crate) fn spent(&self) -> bool {
        #[cfg(loom)]
        {
            let retries = self.retries.get();
            if retries == 0 {
                return true;
            }
            self.retries.set(retries - 1);
            // The other side may run meanwhile, as it would during a real spin.
            loom::thread::yield_now();
            false
        }
        #[cfg(not(loom))]
        {
            let spent = std::time::Instant::now() >= self.until;
            if !spent {
                std::hint::spin_loop();
            }
            spent
        }
    }
}

/// Back off after `round` failed attempts that followed a spin: yield, then
/// sleep a little longer each time (at most 1 ms), so a waiter that is not the
/// lock's owner leaves the CPU to it.
pub(crate) fn backoff(round: u32) {
    #[cfg(loom)]
    {
        let _ = round;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    match round {
        0..64 => std::thread::yield_now(),
        _ => std::thread::sleep(std::time::Duration::from_micros(
            u64::from(round - 63).min(20) * 50,
        )),
    }
}
