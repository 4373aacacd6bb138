//! The strict protocol: full/empty counting semaphores and the lock; no
//! sample is ever lost or duplicated (pfprof.h, "Strict protocol").

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::abi::Sample;
use crate::area::{Area, SemKind};
use crate::lock::{lock_consumer, try_lock_producer};
use crate::mode::Mode;
/// What [`StrictProducer::push`] returns.
pub use crate::protocol::Push;
use crate::protocol::{check_mode, next_seq, ProtocolError};
use crate::sem::{let_grow, post, try_down, AdaptiveSpin, Waited};
use crate::sync::{fence, Ordering, SpinBudget};
use crate::wait::{WaitError, Waiter};

/// What [`StrictConsumer::take`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    /// This many samples were appended.
    Samples(usize),
    TimedOut,
    /// The producer canceled the ring and every sample has been taken.
    Ended,
}

/// What [`StrictConsumer::take_one`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TakeOne {
    Sample(Sample),
    TimedOut,
    Ended,
}

/// The consumer of the strict protocol.
pub struct StrictConsumer<W: Waiter> {
    area: Arc<Area>,
    waiter: W,
    /// Our own copy of read_seq: we are its only writer.
    read_seq: u64,
    /// The highest write_seq read so far: samples below it stay published
    /// until we take them, so a take that ends below it need not re-read the
    /// producer's line.
    published: u64,
    /// How long to poll `full` before sleeping on it.
    spin: AdaptiveSpin,
    /// When the last batched take ended: samples that arrived since, within
    /// [`ACTIVE_WINDOW`], mark a producer worth waiting for.
    last_take: Option<Instant>,
}

/// A batched take that finds fewer samples than this (or half the ring) ready
/// may let the batch grow first.
const GROW_TARGET: u32 = 1024;
/// For at most this long: the latency a take may add to let its batch grow.
const GROW_LIMIT: Duration = Duration::from_micros(10);
/// Only when the samples it found arrived within this long of the previous
/// take: a producer writing at least 50 k samples/s, 2500 times the module's
/// 20 samples/s, whose samples each take gets at once. (Loom has no time.)
#[cfg(not(loom))]
const ACTIVE_WINDOW: Duration = Duration::from_micros(20);

impl<W: Waiter> StrictConsumer<W> {
    pub fn new(area: Arc<Area>, waiter: W) -> Self {
        // Pairs with the store-release of read_seq by a consumer before this one
        // (StrictConsumer::copy_out).
        let read_seq = area.read_seq().load(Ordering::Acquire);
        StrictConsumer {
            area,
            waiter,
            read_seq,
            published: 0,
            spin: AdaptiveSpin::new(),
            last_take: None,
        }
    }

    /// down_all(full): take every ready sample (appended to `out`), sleeping while none is
    /// ready, at most `timeout`. Ended = canceled and nothing left.
    pub fn take(
        &mut self,
        out: &mut Vec<Sample>,
        timeout: Option<Duration>,
    ) -> Result<Take, ProtocolError> {
        let (target, last_take) = (self.grow_target(), self.last_take);
        let down_all = |area: &Area, sem| try_down_all_grown(area, sem, target, last_take);
        let k = match self.down(timeout, down_all)? {
            Down::Got(k) => k,
            Down::TimedOut => return Ok(Take::TimedOut),
            Down::Ended => return Ok(Take::Ended),
        };
        // k is only trusted once copy_out checked it: extend reserves then.
        self.copy_out(k, |area, start, count| {
            out.extend(area.read_slots(start, count))
        })?;
        self.last_take = Some(Instant::now());
        Ok(Take::Samples(k as usize))
    }

    /// The batch a take waits for: [`GROW_TARGET`] or half the ring, whichever is
    /// smaller; at most 1 (never waiting) on a ring of one to three slots.
    fn grow_target(&self) -> u32 {
        let half = u32::try_from(self.area.slot_count() / 2).unwrap_or(u32::MAX);
        half.min(GROW_TARGET)
    }

    /// down(full) by one: exactly one sample per down/lock/unlock/up (the per-sample design).
    pub fn take_one(&mut self, timeout: Option<Duration>) -> Result<TakeOne, ProtocolError> {
        let down_one = |area: &Area, sem| u32::from(try_down(area, sem));
        match self.down(timeout, down_one)? {
            Down::Got(_) => {
                let mut taken = Sample::default();
                self.copy_out(1, |area, start, count| {
                    area.read_slots(start, count)
                        .for_each(|sample| taken = sample);
                })?;
                Ok(TakeOne::Sample(taken))
            }
            Down::TimedOut => Ok(TakeOne::TimedOut),
            Down::Ended => Ok(TakeOne::Ended),
        }
    }

    /// Down `full` with `try_take`, polling then sleeping while it gets nothing.
    /// After `canceled` it looks once more: the producer cancels after its last up.
    fn down(
        &mut self,
        timeout: Option<Duration>,
        try_take: impl Fn(&Area, SemKind) -> u32,
    ) -> Result<Down, ProtocolError> {
        let area = &*self.area;
        check_mode(area, Mode::Strict)?;
        let mut wait = None;
        let down = loop {
            let k = try_take(area, SemKind::Full);
            if k > 0 {
                break Down::Got(k);
            }
            // Pairs with the producer's store-release of canceled after its last up(full)
            // (kmod/ring.c pfprof_cancel_locked; strict::cancel): litmus strict-cancel.
            if area.canceled().load(Ordering::Acquire) != 0 {
                break match try_take(area, SemKind::Full) {
                    0 => Down::Ended,
                    k => Down::Got(k),
                };
            }
            let wait = wait.get_or_insert_with(|| self.spin.begin(timeout));
            if let Waited::TimedOut = wait.wait(area, &self.waiter, SemKind::Full)? {
                break Down::TimedOut;
            }
        };
        if let Some(wait) = wait {
            self.spin.learn(&wait);
        }
        Ok(down)
    }

    /// lock, `read` slots [read_seq, read_seq + k) (area, start, count), publish read_seq,
    /// unlock, up(empty, k).
    fn copy_out(
        &mut self,
        k: u32,
        read: impl FnOnce(&Area, u64, u64),
    ) -> Result<(), ProtocolError> {
        let area = &*self.area;
        if u64::from(k) > area.slot_count() {
            return Err(ProtocolError::CountOutOfRange {
                sem: SemKind::Full,
                count: k,
                slots: area.slot_count(),
            });
        }
        let start = self.read_seq;
        // read_seq came from the area: a hostile value must not wrap.
        let end = start.checked_add(u64::from(k));
        {
            let _lock = lock_consumer(area);
            if end.map_or(true, |end| end > self.published) {
                // Pairs with the producer's store-release of write_seq after the slot
                // (kmod/ring.c pfprof_write_slot; StrictProducer::push). The lock orders
                // the slot as well: no litmus test needs this one alone.
                self.published = area.write_seq().load(Ordering::Acquire);
            }
            let Some(end) = end.filter(|&end| end <= self.published) else {
                return Err(ProtocolError::CursorOutOfRange {
                    write_seq: self.published,
                    read_seq: end.unwrap_or(start),
                });
            };
            read(area, start, end - start);
            // For a consumer that takes over (new); the copy is ordered before the
            // slots' reuse by the unlock and up(empty) (litmus strict-reuse).
            area.read_seq().store(end, Ordering::Release);
            self.read_seq = end;
        }
        post(area, &self.waiter, SemKind::Empty, k)?;
        Ok(())
    }
}

/// down_all(full), letting the batch grow first when few samples are ready and
/// they came in since a take that ended moments ago (see [`let_grow`]): a
/// producer writing that fast keeps the lines it writes while the consumer
/// waits, instead of handing them over for every take of a sample or two. A
/// take after an idle spell, a wake-up, or the module's 20 samples/s takes at
/// once: the samples it finds came in over more than [`ACTIVE_WINDOW`].
fn try_down_all_grown(area: &Area, sem: SemKind, target: u32, last_take: Option<Instant>) -> u32 {
    let count = area.sem_count(sem);
    // Test first: swapping 0 for 0 would still take the line from the poster.
    // SeqCst as try_down's (litmus strict-publish).
    let seen = count.load(Ordering::SeqCst);
    if seen == 0 {
        return 0;
    }
    if seen < target && producer_active(last_take) {
        let_grow(area, sem, seen, target, SpinBudget::start(GROW_LIMIT));
    }
    count.swap(0, Ordering::SeqCst)
}

/// Whether the last take ended within [`ACTIVE_WINDOW`]. Under loom, where time
/// means nothing, always, so that the model covers the wait.
fn producer_active(last_take: Option<Instant>) -> bool {
    #[cfg(loom)]
    {
        let _ = last_take;
        true
    }
    #[cfg(not(loom))]
    last_take.is_some_and(|at| at.elapsed() < ACTIVE_WINDOW)
}

enum Down {
    Got(u32),
    TimedOut,
    Ended,
}

/// The producer of the strict protocol (the module's role, in user space).
pub struct StrictProducer<W: Waiter> {
    area: Arc<Area>,
    waiter: W,
    /// Our own write_seq: published, never read back.
    write_seq: u64,
    /// How long to poll `empty` before sleeping on it.
    spin: AdaptiveSpin,
}

impl<W: Waiter> StrictProducer<W> {
    pub fn new(area: Arc<Area>, waiter: W) -> Self {
        // Pairs with the store-release of write_seq by a producer before this one
        // (StrictProducer::push).
        let write_seq = area.write_seq().load(Ordering::Acquire);
        StrictProducer {
            area,
            waiter,
            write_seq,
            spin: AdaptiveSpin::new(),
        }
    }

    /// down(empty) (polling, then sleeping while full, bounded by `timeout`), lock, write,
    /// unlock, up(full). Time spent waiting for a slot is added to `blocked_ns`.
    pub fn push(
        &mut self,
        sample: Sample,
        timeout: Option<Duration>,
    ) -> Result<Push, ProtocolError> {
        let area = &*self.area;
        check_mode(area, Mode::Strict)?;
        let next_seq = next_seq(self.write_seq)?;
        let mut wait = None;
        let refused = loop {
            // Pairs with the store of canceled by another thread ending the ring
            // (strict::cancel, sequentially consistent).
            if area.canceled().load(Ordering::Acquire) != 0 {
                break Some(Push::Canceled);
            }
            if try_down(area, SemKind::Empty) {
                break None;
            }
            let wait = wait.get_or_insert_with(|| self.spin.begin(timeout));
            if let Waited::TimedOut = wait.wait(area, &self.waiter, SemKind::Empty)? {
                break Some(Push::Full);
            }
        };
        if let Some(wait) = wait {
            let ns = u64::try_from(wait.elapsed().as_nanos()).unwrap_or(u64::MAX);
            area.blocked_ns().fetch_add(ns, Ordering::Relaxed);
            self.spin.learn(&wait);
        }
        if let Some(refused) = refused {
            return Ok(refused);
        }
        let Some(lock) = try_lock_producer(area) else {
            // Give the slot back: the caller retries or defers the sample.
            post(area, &self.waiter, SemKind::Empty, 1)?;
            return Ok(Push::LockBusy);
        };
        area.write_slot(self.write_seq, &sample);
        self.write_seq = next_seq;
        // As kmod/ring.c pfprof_write_slot's: the lock and up(full) order the slot
        // as well (litmus strict-publish).
        area.write_seq().store(self.write_seq, Ordering::Release);
        drop(lock);
        post(area, &self.waiter, SemKind::Full, 1)?;
        Ok(Push::Written)
    }

    /// Set `canceled` after the last sample and wake the consumer.
    pub fn cancel(&mut self) -> Result<(), ProtocolError> {
        Ok(cancel(&self.area, &self.waiter)?)
    }
}

/// Sets `canceled` and wakes whichever side sleeps on a semaphore. The producer's last
/// act; from another thread it also releases a producer blocked on a full ring (a push
/// racing with it may go unread).
pub fn cancel<W: Waiter>(area: &Area, waiter: &W) -> Result<(), WaitError> {
    // Litmus user-cancel-waiters: a sleeper's swap that follows the swap below
    // sees canceled through the swap's release or the fence, either one.
    area.canceled().store(1, Ordering::SeqCst);
    fence(Ordering::SeqCst);
    for sem in [SemKind::Full, SemKind::Empty] {
        if area.sem_waiters(sem).swap(0, Ordering::SeqCst) != 0 {
            waiter.wake(area, sem)?;
        }
    }
    Ok(())
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_samples_that_came_in_moments_after_the_last_take_mark_an_active_producer() {
        assert!(!producer_active(None), "the first take");
        let now = Instant::now();
        assert!(producer_active(Some(now)));
        // The module's 20 samples/s: 50 ms apart.
        assert!(!producer_active(Some(now - Duration::from_millis(50))));
        assert!(!producer_active(Some(now - 2 * ACTIVE_WINDOW)));
    }

    #[test]
    fn the_batch_a_take_waits_for_is_half_the_ring_at_most() {
        for (slots, target) in [
            (1, 0),
            (3, 1),
            (4, 2),
            (8, 4),
            (crate::abi::slots_in(128), GROW_TARGET),
        ] {
            let area =
                Area::create_memfd_with_slots(slots, Mode::Strict, Duration::from_millis(50))
                    .expect("memfd area");
            let consumer = StrictConsumer::new(Arc::new(area), crate::wait::FutexWaiter);
            assert_eq!(consumer.grow_target(), target, "{slots} slots");
        }
    }
}
