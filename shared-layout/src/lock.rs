//! The test-and-set lock word: 0 free, otherwise its owner.
//!
//! Taken with a compare-and-swap (acquire) so that a failed attempt leaves the
//! owner's value intact, released with a store (release).

use crate::abi::{LOCK_CONSUMER, LOCK_FREE, LOCK_PRODUCER, LOCK_SPIN_NS};
use std::time::Duration;

use crate::area::Area;
use crate::sync::{backoff, Ordering, SpinBudget};

/// How long the producer tries before it defers its sample, as the module
/// does (PFPROF_LOCK_SPIN_NS): the consumer holds the lock only to copy a batch.
const PRODUCER_SPIN: Duration = Duration::from_nanos(LOCK_SPIN_NS as u64);
/// How long the consumer spins before it yields and sleeps. A user-space
/// producer that never waits (the module's role, unpaced) takes the lock back
/// within nanoseconds of each release: a consumer that gave up after 64 tries
/// would sleep 50 µs-1 ms while the ring is overwritten. Spinning,
/// it gets a turn between two samples and holds the lock for a few loads and
/// stores, far within the producer's own bounded try: the producer never
/// waits on anything the consumer promises, so a consumer that lies or dies
/// cannot make it wait longer than that budget.
const CONSUMER_SPIN: Duration = Duration::from_micros(20);

fn try_lock(area: &Area, owner: u32) -> bool {
    let word = area.lock_word();
    // Test before test-and-set: spinning on a load keeps the line shared. The acquire
    // pairs with the owner's store-release that freed it (kmod/ring.c
    // pfprof_lock_release; Guard::drop): litmus relaxed-torn, relaxed-overwritten.
    word.load(Ordering::Relaxed) == LOCK_FREE
        && word
            .compare_exchange(LOCK_FREE, owner, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
}

/// The consumer's lock: spins for [`CONSUMER_SPIN`], then yields, then sleeps, until it is free.
pub(crate) fn lock_consumer(area: &Area) -> Guard<'_> {
    if let Some(guard) = lock_within(area, LOCK_CONSUMER, CONSUMER_SPIN) {
        return guard;
    }
    let mut round = 0u32;
    while !try_lock(area, LOCK_CONSUMER) {
        backoff(round);
        round = round.saturating_add(1);
    }
    Guard { area }
}

/// The producer's lock: tried for [`PRODUCER_SPIN`], `None` when still held,
/// so that a consumer that died holding it cannot hang the producer.
pub(crate) fn try_lock_producer(area: &Area) -> Option<Guard<'_>> {
    lock_within(area, LOCK_PRODUCER, PRODUCER_SPIN)
}

/// The lock for `owner` if it comes free within `limit`.
fn lock_within(area: &Area, owner: u32, limit: Duration) -> Option<Guard<'_>> {
    // Uncontended, the first try succeeds: only a failed one is worth a clock read.
    if try_lock(area, owner) {
        return Some(Guard { area });
    }
    let budget = SpinBudget::start(limit);
    while !budget.spent() {
        if try_lock(area, owner) {
            return Some(Guard { area });
        }
    }
    None
}

/// Releases the lock when dropped.
pub(crate) struct Guard<'a> {
    area: &'a Area,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        // Litmus relaxed-torn, relaxed-overwritten.
        self.area.lock_word().store(LOCK_FREE, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::thread;

    use super::*;
    use crate::Mode;

    #[test]
    fn a_lock_released_within_the_limit_is_taken_not_given_up_at_the_first_try() {
        let area = Area::create_memfd_with_slots(4, Mode::Strict, Duration::from_millis(50))
            .expect("a memfd area");
        assert!(try_lock(&area, LOCK_CONSUMER));
        let held = Guard { area: &area };
        thread::scope(|s| {
            s.spawn(move || {
                thread::sleep(Duration::from_millis(20));
                drop(held);
            });
            let taken = lock_within(&area, LOCK_PRODUCER, Duration::from_secs(10));
            assert!(taken.is_some(), "given up while the lock came free in time");
        });
        assert_eq!(area.lock_word().load(Ordering::Relaxed), LOCK_FREE);
        assert!(lock_within(&area, LOCK_PRODUCER, Duration::ZERO).is_some());
    }
}
