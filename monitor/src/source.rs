//! The consumer side, the same for both backends: samples come out of an [`Area`] through
//! the strict or the relaxed protocol, whoever produces them.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use shared_layout::abi::Sample;
use shared_layout::relaxed::RelaxedConsumer;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::wait::{WaitError, Waiter};
use shared_layout::{Area, Mode, ProtocolError};

/// What one call to [`Source::next`] produced besides the samples.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    /// Samples the producer overwrote before we read them (relaxed only).
    pub lost: u64,
    /// The producer canceled the session and every sample has been taken.
    pub ended: bool,
}

/// How often a relaxed consumer drains once the session is ending.
const ENDING_DRAIN: Duration = Duration::from_millis(10);

/// Tells a consumer that the session is about to end (a signal, the command's exit, the
/// sampler's last sample), so it stops waiting for its next interval and sees the end at
/// once. Sticky: once rung it stays rung.
#[derive(Debug, Default)]
pub struct Ending {
    rung: Mutex<bool>,
    changed: Condvar,
}

impl Ending {
    pub fn ring(&self) {
        *self.rung.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    pub fn is_rung(&self) -> bool {
        *self.rung.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps `timeout` or until rung; whether it is rung.
    fn wait(&self, timeout: Duration) -> bool {
        let rung = self.rung.lock().unwrap_or_else(PoisonError::into_inner);
        let (rung, _) = self
            .changed
            .wait_timeout_while(rung, timeout, |rung| !*rung)
            .unwrap_or_else(PoisonError::into_inner);
        *rung
    }
}

enum Side<W: Waiter> {
    /// Takes every ready sample at once; sleeps on the semaphore once the session ends.
    Strict(StrictConsumer<W>),
    /// Drains whatever is there.
    Relaxed(RelaxedConsumer),
}

/// Samples taken every `interval`, in batches: one wake-up per interval, not per sample,
/// is what keeps the monitor's own cost low. Once the session is ending it follows the
/// producer closely.
pub struct Source<W: Waiter> {
    side: Side<W>,
    interval: Duration,
    next: Instant,
    ending: Arc<Ending>,
    /// The ending was already seen: relaxed drains come every [`ENDING_DRAIN`].
    ending_seen: bool,
}

impl<W: Waiter> Source<W> {
    /// A consumer for the area's mode, taking samples every `interval`.
    pub fn new(area: Arc<Area>, waiter: W, interval: Duration) -> Self {
        let side = match area.mode() {
            Mode::Strict => Side::Strict(StrictConsumer::new(area, waiter)),
            Mode::Relaxed => Side::Relaxed(RelaxedConsumer::new(area)),
        };
        Source {
            side,
            interval,
            next: Instant::now() + interval,
            ending: Arc::default(),
            ending_seen: false,
        }
    }

    /// What tells this source that the session is ending.
    pub fn ending(&self) -> Arc<Ending> {
        Arc::clone(&self.ending)
    }

    /// Appends the next samples to `out`, waiting at most `max_wait` for them (so the
    /// caller can refresh its status line and watch its deadlines).
    pub fn next(
        &mut self,
        out: &mut Vec<Sample>,
        max_wait: Duration,
    ) -> Result<Batch, ProtocolError> {
        let now = Instant::now();
        let ending = self.ending.is_rung()
            || (now < self.next && self.ending.wait(max_wait.min(self.next - now)));
        if !ending {
            if Instant::now() < self.next {
                return Ok(Batch::default());
            }
            self.next = Instant::now() + self.interval;
            return self.drain_now(out);
        }
        match &mut self.side {
            // The producer's cancellation wakes it.
            Side::Strict(consumer) => strict_take(consumer, out, Some(max_wait)),
            Side::Relaxed(consumer) => {
                if self.ending_seen {
                    thread::sleep(max_wait.min(ENDING_DRAIN));
                }
                self.ending_seen = true;
                relaxed_drain(consumer, out)
            }
        }
    }

    /// Takes what is ready right now, without waiting.
    pub fn drain_now(&mut self, out: &mut Vec<Sample>) -> Result<Batch, ProtocolError> {
        match &mut self.side {
            Side::Strict(consumer) => strict_take(consumer, out, Some(Duration::ZERO)),
            Side::Relaxed(consumer) => relaxed_drain(consumer, out),
        }
    }
}

fn strict_take<W: Waiter>(
    consumer: &mut StrictConsumer<W>,
    out: &mut Vec<Sample>,
    timeout: Option<Duration>,
) -> Result<Batch, ProtocolError> {
    match consumer.take(out, timeout) {
        Ok(take) => Ok(Batch {
            lost: 0,
            ended: take == Take::Ended,
        }),
        // A signal (SIGINT, SIGTERM) woke us: the caller decides what to do about it.
        Err(ProtocolError::Wait(WaitError::Interrupted)) => Ok(Batch::default()),
        Err(e) => Err(e),
    }
}

fn relaxed_drain(
    consumer: &mut RelaxedConsumer,
    out: &mut Vec<Sample>,
) -> Result<Batch, ProtocolError> {
    let drain = consumer.drain(out)?;
    Ok(Batch {
        lost: drain.lost,
        ended: drain.ended,
    })
}

#[cfg(test)]
mod tests {
    use shared_layout::producer::Producer;
    use shared_layout::wait::FutexWaiter;

    use super::*;

    #[test]
    fn a_source_takes_what_is_ready_at_once_when_told_the_session_is_ending() {
        for mode in [Mode::Strict, Mode::Relaxed] {
            let area = Arc::new(
                Area::create_memfd_with_slots(4, mode, Duration::from_millis(50)).unwrap(),
            );
            let mut producer = Producer::new(Arc::clone(&area));
            producer.record(Sample::default()).unwrap();
            // An interval no test waits for: only the ending makes it take the sample.
            let mut source = Source::new(area, FutexWaiter, Duration::from_secs(3600));
            let mut out = Vec::new();
            source.next(&mut out, Duration::from_millis(1)).unwrap();
            assert!(out.is_empty(), "{mode}: taken before the interval");
            source.ending().ring();
            source.next(&mut out, Duration::from_secs(1)).unwrap();
            assert_eq!(out.len(), 1, "{mode}: the ready sample was not taken");
        }
    }
}
