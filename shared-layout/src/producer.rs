//! Twin of `kmod/ring.c` (the offers of a sample to the ring) and of the pending sample
//! `kmod/sampler.c` keeps: the same protocol from user space, where a sample the ring
//! cannot take (strict ring full; lock held, *deferred*) stays *pending* and is merged into
//! the next.
//!
//! The user-space producer that plays the module's role on a memfd area.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::abi::Sample;
use crate::area::Area;
use crate::mode::Mode;
use crate::protocol::{ProtocolError, Push};
use crate::relaxed::RelaxedProducer;
use crate::strict::StrictProducer;
use crate::sync::Ordering;
use crate::wait::FutexWaiter;

/// How long `finish` waits before retrying a sample the lock refused.
const LOCK_RETRY: Duration = Duration::from_millis(1);

enum Side {
    Strict(StrictProducer<FutexWaiter>),
    Relaxed(RelaxedProducer),
}

/// What [`Producer::finish`] managed before it canceled the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// Every recorded count reached the ring.
    Flushed,
    /// The deadline passed first; this merged sample was never written.
    Unflushed(Sample),
}

/// Accumulates per-period deltas; a period whose sample cannot be written (ring full in
/// strict mode, lock held) is merged into the next one, exactly as the module does, so
/// counts are conserved. Used by the monitor's procfs backend, tests and benches.
pub struct Producer {
    area: Arc<Area>,
    side: Side,
    /// Counts recorded but not yet written: merged into the next sample.
    pending: Option<Sample>,
    /// How long a strict push may wait for a free slot: one period, as the module.
    slot_wait: Duration,
}

impl Producer {
    pub fn new(area: Arc<Area>) -> Producer {
        let side = match area.mode() {
            Mode::Strict => Side::Strict(StrictProducer::new(Arc::clone(&area), FutexWaiter)),
            Mode::Relaxed => Side::Relaxed(RelaxedProducer::new(Arc::clone(&area))),
        };
        let slot_wait = area.period();
        Producer {
            area,
            side,
            pending: None,
            slot_wait,
        }
    }

    /// A producer whose strict pushes do not wait for a free slot: a full ring leaves the
    /// counts pending for the next period at once. For a thread that feeds many rings,
    /// which one slow consumer must not hold up.
    pub fn never_waiting(mut self) -> Producer {
        self.slot_wait = Duration::ZERO;
        self
    }

    /// Record one period's `delta` (its `time_ns` is the period's end) and try
    /// to write it together with whatever earlier periods could not be
    /// written. `Full` and `LockBusy` mean it waits for the next period.
    pub fn record(&mut self, delta: Sample) -> Result<Push, ProtocolError> {
        // Twin of the module's deferral: pfprof_sampler_fn's undelivered sample (kmod/sampler.c).
        let mut sample = self.pending.take().unwrap_or_default();
        sample += delta;
        let pushed = match self.push(sample, Some(self.slot_wait)) {
            Ok(pushed) => pushed,
            Err(e) => {
                // Not written: the counts stay pending, whatever the caller does next.
                self.pending = Some(sample);
                return Err(e);
            }
        };
        if pushed != Push::Written {
            self.pending = Some(sample);
        }
        if pushed == Push::LockBusy {
            self.area.deferred().fetch_add(1, Ordering::Relaxed);
        }
        Ok(pushed)
    }

    /// Counts recorded but not yet in the ring.
    pub fn pending(&self) -> Option<Sample> {
        self.pending
    }

    /// Tries once more to write what is pending, waiting for a free slot no longer than a
    /// push does; whether nothing is left pending. For a last sample that must not hold
    /// up its thread, retried later instead.
    pub fn retry_pending(&mut self) -> Result<bool, ProtocolError> {
        let Some(sample) = self.pending else {
            return Ok(true);
        };
        match self.push(sample, Some(self.slot_wait))? {
            Push::Written => self.pending = None,
            Push::LockBusy | Push::Full => {}
            // Nobody takes samples any more: it stays pending, and `finish` says it is lost.
            Push::Canceled => {}
        }
        Ok(self.pending.is_none())
    }

    /// Write what is pending (retrying until `deadline`), then cancel the
    /// ring and wake both sides.
    pub fn finish(mut self, deadline: Instant) -> Result<Finish, ProtocolError> {
        while let Some(sample) = self.pending {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            match self.push(sample, Some(left))? {
                Push::Written => self.pending = None,
                Push::LockBusy => std::thread::sleep(LOCK_RETRY.min(left)),
                Push::Full => {}
                Push::Canceled => break,
            }
        }
        match &mut self.side {
            Side::Strict(p) => p.cancel()?,
            Side::Relaxed(p) => p.cancel()?,
        }
        Ok(self.pending.map_or(Finish::Flushed, Finish::Unflushed))
    }

    fn push(&mut self, sample: Sample, timeout: Option<Duration>) -> Result<Push, ProtocolError> {
        match &mut self.side {
            Side::Strict(p) => p.push(sample, timeout),
            Side::Relaxed(p) => p.push(sample),
        }
    }
}
