//! The semaphore steps both protocols share: down, post, the wait for a
//! down-all's batch to grow, and the waiting side's half of the waiters-word
//! Dekker pattern (pfprof.h), preceded by a bounded, adaptive poll.

use std::time::{Duration, Instant};

use crate::area::{Area, SemKind};
use crate::sync::{dekker_fence, Ordering::Relaxed, Ordering::SeqCst, SpinBudget};
use crate::wait::{WaitError, Waiter};

/// down(sem) by one if a unit is available; never takes the count below zero.
pub(crate) fn try_down(area: &Area, sem: SemKind) -> bool {
    let count = area.sem_count(sem);
    // SeqCst as the module's cmpxchg; the consumer's copy needs it only with
    // the lock's acquire gone (litmus strict-publish).
    let mut seen = count.load(SeqCst);
    while seen > 0 {
        match count.compare_exchange_weak(seen, seen - 1, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
    false
}

/// Let `sem`'s count grow towards `target` before a down-all takes it: look
/// at it every [`GROW_PAUSES`] pauses, and stop once it reaches `target`, once
/// it stopped moving between two looks (the other side is idle, preempted,
/// done or canceled), or when `budget` is spent. Loads only, and sparse ones:
/// between two looks the poster keeps the count's line (and the lock's and
/// the slots') to itself, which is the point of waiting.
pub(crate) fn let_grow(area: &Area, sem: SemKind, seen: u32, target: u32, budget: SpinBudget) {
    let count = area.sem_count(sem);
    let mut seen = seen;
    while !budget.spent() {
        #[cfg(not(loom))]
        for _ in 0..GROW_PAUSES {
            std::hint::spin_loop();
        }
        let now = count.load(Relaxed);
        if now >= target || now == seen {
            return;
        }
        seen = now;
    }
}

/// Pauses between two looks at a growing count: a few hundred ns on x86, long
/// enough for an active poster to add several units without losing its line.
#[cfg(not(loom))]
const GROW_PAUSES: u32 = 16;

/// up(sem, k), waking the other side if it announced it may sleep.
pub(crate) fn post<W: Waiter>(
    area: &Area,
    waiter: &W,
    sem: SemKind,
    k: u32,
) -> Result<(), WaitError> {
    // SeqCst, and so is the load of waiters after it: the Dekker handshake
    // (litmus user-waiters; strict-empty-waiters against the module).
    area.sem_count(sem).fetch_add(k, SeqCst);
    dekker_fence();
    // Test first: with the other side polling instead of sleeping, waiters is
    // nearly always 0, and only the xchg that clears a 1 may wake.
    let waiters = area.sem_waiters(sem);
    if waiters.load(SeqCst) != 0 && waiters.swap(0, SeqCst) != 0 {
        waiter.wake(area, sem)?;
    }
    Ok(())
}

/// What a caller of [`Wait::wait`] does next.
pub(crate) enum Waited {
    /// Re-check the count and `canceled`.
    Retry,
    /// The deadline has passed.
    TimedOut,
}

/// The shortest poll: a hand-off already under way (the other side between its
/// down and its up) is still caught without a sleep.
const MIN_SPIN: Duration = Duration::from_micros(1);
/// The longest poll: about twice what a sleep and wake-up cost, on the slowest
/// machine measured (a futex hand-off takes 6 µs on one, 24 µs on another,
/// where a wake-up costs the woken thread 46 µs of CPU: docs/benchmarks.md).
/// It must outlast the other side's wake-up: with a ceiling below it, two
/// sides that once woke each other could never again catch each other by
/// polling and kept sleeping at every turn of a small ring (the convoy: with a
/// 20 µs ceiling where a hand-off takes 24 µs, 35-60 sleeps per 1000 samples on
/// 8 slots).
const MAX_SPIN: Duration = Duration::from_micros(100);

/// How long one side polls a semaphore (its count and `canceled`) before it
/// announces itself on the waiters word and sleeps. Kept by each user-space
/// side for itself, never in the area. It learns from that side's own waits:
/// a poll that paid off raises the limit to twice what the wait took (at most
/// [`MAX_SPIN`]); a wait that slept halves it, down to [`MIN_SPIN`]. So a
/// consumer idling between 50 ms samples polls 1 µs per wait, and on a machine
/// too busy to run both sides at once (where polling only delays the side it
/// waits for) the polls shrink as well: there, sleeping is what makes a wait
/// short, so a short wait that slept is no reason to poll longer.
pub(crate) struct AdaptiveSpin {
    limit: Duration,
}

impl AdaptiveSpin {
    pub(crate) fn new() -> AdaptiveSpin {
        AdaptiveSpin { limit: MIN_SPIN }
    }

    /// A wait that begins now, after a try found nothing: it ends at `timeout`.
    pub(crate) fn begin(&self, timeout: Option<Duration>) -> Wait {
        let started = Instant::now();
        Wait {
            started,
            deadline: timeout.map(|t| started.checked_add(t).unwrap_or_else(far_future)),
            poll: Some(self.limit),
            slept: false,
        }
    }

    /// The wait is over (a unit taken, canceled, or timed out): adapt to how it went.
    pub(crate) fn learn(&mut self, wait: &Wait) {
        self.limit = if wait.slept {
            (self.limit / 2).max(MIN_SPIN)
        } else {
            (2 * wait.elapsed()).clamp(self.limit, MAX_SPIN)
        };
    }
}

/// One side's wait for a unit of a semaphore, from the try that found none.
pub(crate) struct Wait {
    started: Instant,
    deadline: Option<Instant>,
    /// How long to poll first; `None` once polled.
    poll: Option<Duration>,
    /// The poll did not pay off.
    slept: bool,
}

impl Wait {
    /// How long the side has waited so far.
    pub(crate) fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Poll `sem` (only the first time), then announce and sleep until it may
    /// have a unit, the ring is canceled, or the deadline passes.
    pub(crate) fn wait<W: Waiter>(
        &mut self,
        area: &Area,
        waiter: &W,
        sem: SemKind,
    ) -> Result<Waited, WaitError> {
        if let Some(limit) = self.poll.take() {
            let polled = self.started + limit;
            let until = self.deadline.map_or(polled, |d| d.min(polled));
            if poll(area, sem, SpinBudget::until(until)) {
                return Ok(Waited::Retry);
            }
        }
        self.slept = true;
        sleep_on(area, waiter, sem, self.deadline)
    }
}

/// Read `sem`'s count and `canceled` until either is set (true) or `budget` is spent.
/// Loads only: the poster's line is not taken from it, and the waiters word stays 0,
/// so a unit posted meanwhile costs neither side a system call.
fn poll(area: &Area, sem: SemKind, budget: SpinBudget) -> bool {
    loop {
        if area.sem_count(sem).load(Relaxed) > 0 || area.canceled().load(Relaxed) != 0 {
            return true;
        }
        if budget.spent() {
            return false;
        }
    }
}

/// Announce on the waiters word, re-check, then sleep: either this side sees
/// the poster's count (or `canceled`), or the poster sees waiters == 1 and
/// wakes it.
fn sleep_on<W: Waiter>(
    area: &Area,
    waiter: &W,
    sem: SemKind,
    deadline: Option<Instant>,
) -> Result<Waited, WaitError> {
    let timeout = match deadline {
        None => None,
        Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Some(left),
            _ => return Ok(Waited::TimedOut),
        },
    };
    // Read-modify-writes rather than stores: the same on x86 (a SeqCst store
    // is an xchg there), and they keep the word's modification order a chain
    // that loom can model exactly. SeqCst swap and loads: litmus user-waiters,
    // user-cancel-waiters.
    let waiters = area.sem_waiters(sem);
    waiters.swap(1, SeqCst);
    dekker_fence();
    if area.sem_count(sem).load(SeqCst) > 0 || area.canceled().load(SeqCst) != 0 {
        waiters.swap(0, SeqCst);
        return Ok(Waited::Retry);
    }
    waiter.wait(area, sem, timeout)?;
    Ok(Waited::Retry)
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Mode;

    /// A wait of `spin` that began `ago` and `slept` or ended in the poll.
    fn wait_that_took(spin: &AdaptiveSpin, ago: Duration, slept: bool) -> Wait {
        let mut wait = spin.begin(None);
        wait.started -= ago;
        wait.slept = slept;
        wait
    }

    #[test]
    fn waits_that_slept_shrink_the_poll_to_its_floor_however_short_they_were() {
        let mut spin = AdaptiveSpin { limit: MAX_SPIN };
        for ago in [Duration::from_millis(50), Duration::from_micros(5)].repeat(5) {
            spin.learn(&wait_that_took(&spin, ago, true));
        }
        assert_eq!(spin.limit, MIN_SPIN);
    }

    #[test]
    fn a_poll_that_paid_off_raises_the_limit_to_twice_what_it_took_and_never_past_the_ceiling() {
        let mut spin = AdaptiveSpin::new();
        spin.learn(&wait_that_took(&spin, Duration::from_micros(6), false));
        assert!(spin.limit >= Duration::from_micros(12), "{:?}", spin.limit);
        spin.learn(&wait_that_took(&spin, Duration::from_micros(1), false));
        assert!(
            spin.limit >= Duration::from_micros(12),
            "a quick one keeps it"
        );
        spin.learn(&wait_that_took(&spin, MAX_SPIN * 3 / 4, false));
        assert_eq!(spin.limit, MAX_SPIN);
        spin.learn(&wait_that_took(&spin, Duration::from_millis(50), true));
        assert_eq!(spin.limit, MAX_SPIN / 2);
    }

    /// Sleeps return at once and are counted, with the waiters word as they found it.
    #[derive(Default)]
    struct CountingWaiter {
        waits: std::cell::Cell<u32>,
    }

    impl Waiter for CountingWaiter {
        fn wait(&self, area: &Area, sem: SemKind, _: Option<Duration>) -> Result<(), WaitError> {
            assert_eq!(area.sem_waiters(sem).load(SeqCst), 1, "announced first");
            self.waits.set(self.waits.get() + 1);
            Ok(())
        }

        fn wake(&self, _: &Area, _: SemKind) -> Result<(), WaitError> {
            Ok(())
        }
    }

    fn area() -> Area {
        Area::create_memfd_with_slots(4, Mode::Strict, Duration::from_millis(50))
            .expect("memfd area")
    }

    #[test]
    fn a_wait_polls_for_its_limit_once_and_only_then_sleeps() {
        let (area, waiter) = (area(), CountingWaiter::default());
        let spin = AdaptiveSpin { limit: MAX_SPIN };
        let start = Instant::now();
        let mut wait = spin.begin(None);
        assert!(matches!(
            wait.wait(&area, &waiter, SemKind::Full),
            Ok(Waited::Retry)
        ));
        assert!(start.elapsed() >= MAX_SPIN, "polled {:?}", start.elapsed());
        assert_eq!(waiter.waits.get(), 1);
        assert!(wait.slept, "learns that the poll did not pay off");
        let start = Instant::now();
        assert!(matches!(
            wait.wait(&area, &waiter, SemKind::Full),
            Ok(Waited::Retry)
        ));
        assert!(start.elapsed() < MAX_SPIN, "polled again");
        assert_eq!(waiter.waits.get(), 2);
    }

    #[test]
    fn a_poll_that_sees_a_unit_or_the_end_returns_at_once_without_sleeping() {
        let area = area();
        for word in [area.sem_count(SemKind::Full), area.canceled()] {
            word.store(1, SeqCst);
            let waiter = CountingWaiter::default();
            let spin = AdaptiveSpin {
                limit: Duration::from_secs(1),
            };
            let start = Instant::now();
            let mut wait = spin.begin(None);
            let waited = wait.wait(&area, &waiter, SemKind::Full);
            assert!(matches!(waited, Ok(Waited::Retry)));
            assert!(start.elapsed() < Duration::from_millis(500), "polled on");
            assert_eq!(waiter.waits.get(), 0);
            assert!(!wait.slept, "learns that the poll paid off");
            word.store(0, SeqCst);
        }
    }

    #[test]
    fn a_batch_stops_growing_at_once_when_the_count_does_not_move() {
        let area = area();
        area.sem_count(SemKind::Full).store(1, SeqCst);
        let start = Instant::now();
        let_grow(
            &area,
            SemKind::Full,
            1,
            4,
            SpinBudget::start(Duration::from_secs(10)),
        );
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{:?}",
            start.elapsed()
        );
    }

    #[test]
    fn a_batch_stops_growing_at_its_target_or_its_budget() {
        let area = area();
        area.sem_count(SemKind::Full).store(4, SeqCst);
        let start = Instant::now();
        // Seen as 1 before: it moved, and reached the target.
        let budget = SpinBudget::start(Duration::from_secs(10));
        let_grow(&area, SemKind::Full, 1, 4, budget);
        assert!(start.elapsed() < Duration::from_secs(1));
        // A count that moves without reaching it: only the budget ends the wait.
        let count = area.sem_count(SemKind::Full);
        count.store(1, SeqCst);
        let done = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                while !done.load(Relaxed) {
                    count.store(if count.load(Relaxed) == 1 { 2 } else { 1 }, Relaxed);
                    std::hint::spin_loop();
                }
            });
            let start = Instant::now();
            let_grow(
                &area,
                SemKind::Full,
                1,
                4,
                SpinBudget::start(Duration::from_micros(200)),
            );
            done.store(true, Relaxed);
            assert!(start.elapsed() < Duration::from_secs(1));
        });
    }

    #[test]
    fn a_poll_ends_at_the_deadline() {
        let (area, waiter) = (area(), CountingWaiter::default());
        let spin = AdaptiveSpin {
            limit: Duration::from_secs(1),
        };
        let mut wait = spin.begin(Some(Duration::from_millis(1)));
        let start = Instant::now();
        assert!(matches!(
            wait.wait(&area, &waiter, SemKind::Full),
            Ok(Waited::TimedOut)
        ));
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "{:?}",
            start.elapsed()
        );
    }
}
