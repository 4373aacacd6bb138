//! The consumer side, the same for both backends: samples come out of an [`Area`] through
//! the strict or the relaxed protocol, whoever produces them.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
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

/// Tells a relaxed consumer that the session is about to end (a signal, the command's
/// exit, the sampler's last sample), so it drains every 10 ms instead of every interval
/// and sees the end at once. Sticky: once rung it stays rung. A strict consumer needs
/// none: the producer's cancellation wakes it.
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

pub enum Source<W: Waiter> {
    /// Sleeps until samples are ready and takes all of them at once.
    Strict(StrictConsumer<W>),
    /// Drains whatever is there every `interval`.
    Relaxed {
        consumer: RelaxedConsumer,
        interval: Duration,
        next: Instant,
        ending: Arc<Ending>,
    },
}

impl<W: Waiter> Source<W> {
    /// A consumer for the area's mode. `interval` is the relaxed drain period.
    pub fn new(area: Arc<Area>, waiter: W, interval: Duration) -> Self {
        match area.mode() {
            Mode::Strict => Source::Strict(StrictConsumer::new(area, waiter)),
            Mode::Relaxed => Source::Relaxed {
                consumer: RelaxedConsumer::new(area),
                interval,
                next: Instant::now() + interval,
                ending: Arc::default(),
            },
        }
    }

    /// What tells this source that the session is ending.
    pub fn ending(&self) -> Option<Arc<Ending>> {
        match self {
            Source::Strict(_) => None,
            Source::Relaxed { ending, .. } => Some(Arc::clone(ending)),
        }
    }

    /// Appends the next samples to `out`, waiting at most `max_wait` for them (so the
    /// caller can react to signals and refresh its status line).
    pub fn next(
        &mut self,
        out: &mut Vec<Sample>,
        max_wait: Duration,
    ) -> Result<Batch, ProtocolError> {
        match self {
            Source::Strict(consumer) => strict_take(consumer, out, Some(max_wait)),
            Source::Relaxed {
                consumer,
                interval,
                next,
                ending,
            } => {
                let now = Instant::now();
                let rung = if ending.is_rung() {
                    ending.wait(max_wait.min(ENDING_DRAIN))
                } else if now < *next {
                    ending.wait(max_wait.min(*next - now))
                } else {
                    false
                };
                if !rung && Instant::now() < *next {
                    return Ok(Batch::default());
                }
                *next = Instant::now() + *interval;
                relaxed_drain(consumer, out)
            }
        }
    }

    /// Takes what is ready right now, without waiting.
    pub fn drain_now(&mut self, out: &mut Vec<Sample>) -> Result<Batch, ProtocolError> {
        match self {
            Source::Strict(consumer) => strict_take(consumer, out, Some(Duration::ZERO)),
            Source::Relaxed { consumer, .. } => relaxed_drain(consumer, out),
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
    use shared_layout::relaxed::RelaxedProducer;
    use shared_layout::wait::FutexWaiter;

    use super::*;

    #[test]
    fn a_relaxed_source_drains_at_once_when_told_the_session_is_ending() {
        let area = Arc::new(
            Area::create_memfd_with_slots(4, Mode::Relaxed, Duration::from_millis(50)).unwrap(),
        );
        let mut producer = RelaxedProducer::new(Arc::clone(&area));
        producer.push(Sample::default()).unwrap();
        // An interval no test waits for: only the ending makes it drain within max_wait.
        let mut source = Source::new(area, FutexWaiter, Duration::from_secs(3600));
        source.ending().expect("relaxed sources have one").ring();
        let mut out = Vec::new();
        source.next(&mut out, Duration::from_secs(1)).unwrap();
        assert_eq!(out.len(), 1, "the ready sample was not drained");
    }
}
