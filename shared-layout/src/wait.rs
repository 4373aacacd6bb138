//! How a side sleeps on a semaphore and wakes the other side.
//!
//! The protocols decide *whether* to sleep (the waiters-word Dekker pattern in
//! [`crate::sem`]); a [`Waiter`] only does the sleeping and the waking, with a
//! futex on the waiters word ([`FutexWaiter`]) or with the module's ioctls.

use std::time::Duration;

use crate::area::Area;
/// Named here too: every [`Waiter`] takes one.
pub use crate::area::SemKind;

/// Sleeping failed.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error("interrupted by a signal while waiting")]
    Interrupted,
    #[error("waiting on the shared area failed: {0}")]
    Io(#[from] std::io::Error),
}

pub trait Waiter {
    /// Sleep until the other side clears the semaphore's waiters word, `timeout`
    /// passes, or a spurious wake-up; the caller re-checks count and canceled afterwards.
    fn wait(&self, area: &Area, sem: SemKind, timeout: Option<Duration>) -> Result<(), WaitError>;
    /// Wake the side sleeping on `sem` (called after xchg(waiters, 0) returned non-zero).
    fn wake(&self, area: &Area, sem: SemKind) -> Result<(), WaitError>;
}

/// FUTEX_WAIT / FUTEX_WAKE on the waiters word. Not FUTEX_PRIVATE_FLAG: the
/// area may be a memfd mapped by another process.
#[cfg(not(loom))]
#[derive(Clone, Copy, Debug, Default)]
pub struct FutexWaiter;

#[cfg(not(loom))]
impl Waiter for FutexWaiter {
    fn wait(&self, area: &Area, sem: SemKind, timeout: Option<Duration>) -> Result<(), WaitError> {
        let word = area.sem_waiters(sem).as_ptr();
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: libc::time_t::try_from(t.as_secs()).unwrap_or(libc::time_t::MAX),
            // Below 10^9: fits the c_long of every target (i32 on 32-bit ones).
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let ts_ptr = ts
            .as_ref()
            .map_or(std::ptr::null(), |ts| ts as *const libc::timespec);
        // SAFETY: `word` is a live, 4-aligned u32 of the mapping (owned by
        // `area` for the whole call); `ts_ptr` is null or points to `ts`.
        let ret = unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAIT, 1u32, ts_ptr) };
        if ret == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            // The word was no longer 1, or the timeout passed: the caller re-checks.
            Some(libc::EAGAIN | libc::ETIMEDOUT) => Ok(()),
            Some(libc::EINTR) => Err(WaitError::Interrupted),
            _ => Err(err.into()),
        }
    }

    fn wake(&self, area: &Area, sem: SemKind) -> Result<(), WaitError> {
        let word = area.sem_waiters(sem).as_ptr();
        // SAFETY: as in `wait`; FUTEX_WAKE only uses the address as a key.
        let ret = unsafe { libc::syscall(libc::SYS_futex, word, libc::FUTEX_WAKE, i32::MAX) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(())
    }
}

/// The futex, modeled for loom: FUTEX_WAIT checks the word and sleeps in one
/// step with respect to FUTEX_WAKE, so a lost wake-up is a deadlock loom finds.
#[cfg(loom)]
#[derive(Clone, Default)]
pub struct ModelFutex {
    kernel: loom::sync::Arc<(loom::sync::Mutex<u64>, loom::sync::Condvar)>,
}

#[cfg(loom)]
impl Waiter for ModelFutex {
    fn wait(&self, area: &Area, sem: SemKind, _timeout: Option<Duration>) -> Result<(), WaitError> {
        let (wakes, woken) = &*self.kernel;
        let mut wakes = wakes.lock().expect("model futex lock");
        if area.sem_waiters(sem).load(crate::sync::Ordering::SeqCst) != 1 {
            return Ok(());
        }
        let seen = *wakes;
        while *wakes == seen {
            wakes = woken.wait(wakes).expect("model futex lock");
        }
        Ok(())
    }

    fn wake(&self, _area: &Area, _sem: SemKind) -> Result<(), WaitError> {
        let (wakes, woken) = &*self.kernel;
        *wakes.lock().expect("model futex lock") += 1;
        woken.notify_all();
        Ok(())
    }
}
