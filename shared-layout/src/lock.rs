//! The test-and-set lock word: 0 free, otherwise its owner.
//!
//! Taken with a compare-and-swap (acquire) so that a failed attempt leaves the
//! owner's value intact, released with a store (release).

use crate::abi::{LOCK_CONSUMER, LOCK_FREE, LOCK_PRODUCER};
use crate::sync::{backoff, spin_hint, Ordering};
use crate::Area;

/// How many times the producer tries before it defers its sample: a few
/// microseconds, since the consumer holds the lock only to copy a batch.
#[cfg(not(loom))]
const PRODUCER_TRIES: u32 = 1000;
#[cfg(loom)]
const PRODUCER_TRIES: u32 = 1;

fn try_lock(area: &Area, owner: u32) -> bool {
    let word = area.lock_word();
    // Test before test-and-set: spinning on a load keeps the line shared.
    word.load(Ordering::Relaxed) == LOCK_FREE
        && word
            .compare_exchange(LOCK_FREE, owner, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
}

/// The consumer's lock: spins briefly, then yields, then sleeps, until it is free.
pub(crate) fn lock_consumer(area: &Area) -> Guard<'_> {
    let mut round = 0u32;
    while !try_lock(area, LOCK_CONSUMER) {
        backoff(round);
        round = round.saturating_add(1);
    }
    Guard { area }
}

/// The producer's lock: a bounded number of tries, `None` when still held,
/// so that a consumer that died holding it cannot hang the producer.
pub(crate) fn try_lock_producer(area: &Area) -> Option<Guard<'_>> {
    for attempt in 0..PRODUCER_TRIES {
        if attempt > 0 {
            spin_hint();
        }
        if try_lock(area, LOCK_PRODUCER) {
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
        self.area.lock_word().store(LOCK_FREE, Ordering::Release);
    }
}
