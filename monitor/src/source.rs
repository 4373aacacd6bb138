//! The consumer side, the same for both backends: samples come out of an [`Area`] through
//! the strict or the relaxed protocol, whoever produces them.

use std::sync::Arc;
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

pub enum Source<W: Waiter> {
    /// Sleeps until samples are ready and takes all of them at once.
    Strict(StrictConsumer<W>),
    /// Drains whatever is there every `interval`.
    Relaxed {
        consumer: RelaxedConsumer,
        interval: Duration,
        next: Instant,
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
            },
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
            } => {
                let now = Instant::now();
                if now < *next {
                    thread::sleep(max_wait.min(*next - now));
                    if Instant::now() < *next {
                        return Ok(Batch::default());
                    }
                }
                *next += *interval;
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
