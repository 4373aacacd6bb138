//! The test-and-set lock word: 0 free, otherwise its owner.
//!
//! Taken with a compare-and-swap (acquire) so that a failed attempt leaves the
//! owner's value intact, released with a store (release).

use crate::abi::{LOCK_CONSUMER, LOCK_FREE, LOCK_PRODUCER};
use std::time::Duration;

use crate::sync::{backoff, Ordering, SpinBudget};
use crate::Area;

/// How long the producer tries before it defers its sample, as the module
/// does (PFPROF_LOCK_SPIN_NS): the consumer holds the lock only to copy a batch.
const PRODUCER_SPIN: Duration = Duration::from_micros(10);

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

/// The producer's lock: tried for [`PRODUCER_SPIN`], `None` when still held,
/// so that a consumer that died holding it cannot hang the producer.
pub(crate) fn try_lock_producer(area: &Area) -> Option<Guard<'_>> {
    // Uncontended, the first try succeeds: only a failed one is worth a clock read.
    if try_lock(area, LOCK_PRODUCER) {
        return Some(Guard { area });
    }
    let budget = SpinBudget::start(PRODUCER_SPIN);
    while !budget.spent() {
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
