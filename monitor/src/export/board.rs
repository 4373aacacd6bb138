//! The board the consumer posts the latest snapshot to and the exporters' threads read
//! it from, each reporting how its delivery went.

use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use super::metrics::Snapshot;

/// The latest snapshot, shared between the consumer, which posts it, and the exporters'
/// threads, which read it and report how delivery went.
pub(crate) struct Board {
    state: Mutex<Posted>,
    pub(super) changed: Condvar,
}

#[derive(Default)]
pub(super) struct Posted {
    pub(super) snapshot: Snapshot,
    /// Counts the posts: a reader tells a new snapshot by it.
    pub(super) generation: u64,
    /// How many scrapers (distinct addresses) the final values have been served to.
    pub(super) final_scrapers: usize,
    /// The pusher is done: the final values delivered, or given up.
    pub(super) pushed: bool,
    /// Lingering is over: exporters' threads stop.
    pub(super) closed: bool,
    /// Readers asleep in [`Board::wait`] for a post: with none (a fleet's targets, read
    /// only at scrapes), a post wakes nobody and costs no system call.
    waiting_for_posts: usize,
}

impl Board {
    pub(super) fn new(snapshot: Snapshot) -> Board {
        Board {
            state: Mutex::new(Posted {
                snapshot,
                ..Posted::default()
            }),
            changed: Condvar::new(),
        }
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Posted> {
        // Nothing is left half-updated under this lock.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn post(&self, snapshot: &Snapshot) {
        let mut state = self.lock();
        state.snapshot = snapshot.clone();
        state.generation += 1;
        let waiting = state.waiting_for_posts > 0;
        drop(state);
        if waiting {
            self.changed.notify_all();
        }
    }

    /// The latest snapshot and its generation.
    pub(super) fn latest(&self) -> (Snapshot, u64) {
        let state = self.lock();
        (state.snapshot.clone(), state.generation)
    }

    /// Waits until a snapshot newer than `seen` is posted, or `until`, or the board is
    /// closed; the latest snapshot and its generation, `None` once closed.
    pub(super) fn wait_newer(&self, seen: u64, until: Instant) -> Option<(Snapshot, u64)> {
        self.wait(until, |state| state.generation > seen)
    }

    /// Waits until `until`, or until `urgent` says the snapshot cannot wait; the latest
    /// snapshot, `None` once the board is closed.
    pub(super) fn wait_until(
        &self,
        until: Instant,
        urgent: impl Fn(&Snapshot) -> bool,
    ) -> Option<Snapshot> {
        self.wait(until, |state| urgent(&state.snapshot))
            .map(|(snapshot, _)| snapshot)
    }

    fn wait(&self, until: Instant, ready: impl Fn(&Posted) -> bool) -> Option<(Snapshot, u64)> {
        let mut state = self.lock();
        while !state.closed && !ready(&state) {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state.waiting_for_posts += 1;
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            state.waiting_for_posts -= 1;
        }
        (!state.closed).then(|| (state.snapshot.clone(), state.generation))
    }

    pub(super) fn is_closed(&self) -> bool {
        self.lock().closed
    }

    pub(super) fn set(&self, f: impl FnOnce(&mut Posted)) {
        f(&mut self.lock());
        self.changed.notify_all();
    }
}
