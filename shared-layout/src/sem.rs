//! The semaphore steps both protocols share: down, down-all, post, and the
//! waiting side's half of the waiters-word Dekker pattern (pfprof.h).

use std::time::{Duration, Instant};

use crate::sync::{fence, Ordering::SeqCst};
use crate::wait::{SemKind, WaitError, Waiter};
use crate::Area;

/// down(sem) by one if a unit is available; never takes the count below zero.
pub(crate) fn try_down(area: &Area, sem: SemKind) -> bool {
    let count = area.sem_count(sem);
    let mut seen = count.load(SeqCst);
    while seen > 0 {
        match count.compare_exchange_weak(seen, seen - 1, SeqCst, SeqCst) {
            Ok(_) => return true,
            Err(now) => seen = now,
        }
    }
    false
}

/// down(sem) by every unit available at once; 0 when none is.
pub(crate) fn try_down_all(area: &Area, sem: SemKind) -> u32 {
    area.sem_count(sem).swap(0, SeqCst)
}

/// up(sem, k), waking the other side if it announced it may sleep.
pub(crate) fn post<W: Waiter>(
    area: &Area,
    waiter: &W,
    sem: SemKind,
    k: u32,
) -> Result<(), WaitError> {
    area.sem_count(sem).fetch_add(k, SeqCst);
    fence(SeqCst);
    if area.sem_waiters(sem).swap(0, SeqCst) != 0 {
        waiter.wake(area, sem)?;
    }
    Ok(())
}

/// What a caller of [`sleep_on`] does next.
pub(crate) enum Slept {
    /// Re-check the count and `canceled`.
    Retry,
    /// The deadline has passed.
    TimedOut,
}

/// Announce on the waiters word, re-check, then sleep: either this side sees
/// the poster's count (or `canceled`), or the poster sees waiters == 1 and
/// wakes it.
pub(crate) fn sleep_on<W: Waiter>(
    area: &Area,
    waiter: &W,
    sem: SemKind,
    deadline: Option<Instant>,
) -> Result<Slept, WaitError> {
    let timeout = match deadline {
        None => None,
        Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
            Some(left) if !left.is_zero() => Some(left),
            _ => return Ok(Slept::TimedOut),
        },
    };
    // Read-modify-writes rather than stores: the same on x86 (a SeqCst store
    // is an xchg there), and they keep the word's modification order a chain
    // that loom can model exactly.
    let waiters = area.sem_waiters(sem);
    waiters.swap(1, SeqCst);
    fence(SeqCst);
    if area.sem_count(sem).load(SeqCst) > 0 || area.canceled().load(SeqCst) != 0 {
        waiters.swap(0, SeqCst);
        return Ok(Slept::Retry);
    }
    waiter.wait(area, sem, timeout)?;
    Ok(Slept::Retry)
}

/// The instant `timeout` from now; `None` waits for ever.
pub(crate) fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.map(|t| Instant::now().checked_add(t).unwrap_or_else(far_future))
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(100 * 365 * 24 * 3600)
}
