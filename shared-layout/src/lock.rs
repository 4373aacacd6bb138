//! The test-and-set lock word: 0 free, otherwise its owner.
//!
//! Taken with a compare-and-swap (acquire) so that a failed attempt leaves the
//! owner's value intact, released with a store (release).

use crate::abi::{LOCK_CONSUMER, LOCK_FREE, LOCK_PRODUCER, LOCK_SPIN_NS};
use std::time::Duration;

use crate::sync::{backoff, Ordering, SpinBudget};
use crate::Area;

/// How long the producer tries before it defers its sample, as the module
/// does (PFPROF_LOCK_SPIN_NS): the consumer holds the lock only to copy a batch.
const PRODUCER_SPIN: Duration = Duration::from_nanos(LOCK_SPIN_NS as u64);
/// How long the consumer spins before it yields and sleeps. A user-space
/// producer that never waits (the module's role, unpaced) takes the lock back
/// within nanoseconds of each release; a consumer that gave up after 64 tries
/// slept 50 µs-1 ms while the ring was overwritten (finding 4). Spinning, it
/// gets a turn between two samples and holds the lock for a few loads and
/// stores, far within the producer's own bounded try: the producer never
/// waits on anything the consumer promises, so a consumer that lies or dies
/// cannot make it wait longer than that budget.
const CONSUMER_SPIN: Duration = Duration::from_micros(20);

fn try_lock(area: &Area, owner: u32) -> bool {
    let word = area.lock_word();
    // Test before test-and-set: spinning on a load keeps the line shared.
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
        self.area.lock_word().store(LOCK_FREE, Ordering::Release);
    }
}
