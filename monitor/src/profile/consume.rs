//! The consumer loop: takes samples until the producer ends the session, or a stop (a
//! signal, a closed output, `--count` rows taken) and the backend's grace period, makes
//! rows of them with their share of the memory pressure, and hands each to the
//! [`Consumers`].

use std::time::{Duration, Instant};

use shared_layout::wait::Waiter;
use shared_layout::{ProtocolError, Sample};

use super::consumers::{Consumed, Consumers, STATUS_EVERY};
use super::error::ProfileError;
use super::Started;
use crate::backend::Backend;
use crate::command::signals::Signals;
use crate::rows::row::Timeline;
use crate::rows::source::{Batch, Source};
use crate::system::peak::PeakRss;

/// How long the consumer waits for samples at most while nothing else needs it: the
/// producer's cancellation and every signal wake it earlier.
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// How the consumer loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    /// The producer ended the session: every process is gone.
    Finished,
    /// A signal stopped it.
    Stopped,
    /// The output's reader went away.
    OutputClosed,
}

pub(super) fn consume<B: Backend>(
    started: &mut Started<B>,
    mut consumers: Consumers,
) -> Result<(Consumed, End), ProfileError> {
    let backend = &started.backend;
    let ring_error = |source| ProfileError::Ring {
        advice: backend.ring_advice(),
        source,
    };
    let period = started.area.period();
    let mut timeline = if backend.first_sample_marks_the_start() {
        Timeline::with_start_mark(period, started.metadata.start_mono_ns())
    } else {
        Timeline::new(period)
    };
    let mut stop = Stop::default();
    let mut counted_out = false;
    let mut samples = Vec::new();
    let mut rows = Vec::new();
    let idle = if consumers.draws_status() {
        STATUS_EVERY
    } else {
        IDLE_WAIT
    };
    consumers.start(period, &started.metadata);
    loop {
        stop.notice(&started.signals, backend.grace(), &consumers);
        if let Some(at) = sooner_than_the_interval(&consumers, period) {
            started.source.wake_by(at);
        }
        let batch = stop
            .next(&mut started.source, &mut samples, idle)
            .map_err(ring_error)?;
        started.peaks.iter_mut().for_each(PeakRss::read);
        rows.extend(
            samples
                .drain(..)
                .filter_map(|sample| timeline.place(&sample)),
        );
        if batch.ended {
            rows.extend(timeline.finish());
        }
        started.pressure.fill(&mut rows);
        for row in rows.drain(..) {
            consumers.row(row);
        }
        consumers.batch_done(batch);
        if consumers.full() && !counted_out {
            // `--count` rows taken: end as SIGTERM does (`monitor run`: the command gets
            // it), once; the rows after them are not taken.
            started.signals.end_as_sigterm();
            counted_out = true;
        }
        if consumers.output_closed() && stop.give_up.is_none() {
            // Nobody reads on: end the profile now, whatever it profiles.
            started.signals.request_stop();
            continue;
        }
        consumers.draw_status();
        if batch.ended {
            break;
        }
    }
    let consumed = consumers.finish();
    match started.signals.take_stop_error() {
        Some(e) => Err(e.into()),
        None => Ok((consumed, stop.end)),
    }
}

/// When the samples must be taken if that comes before the interval: the live line is
/// redrawn with the samples of its last [`STATUS_EVERY`], and the last of the `--count`
/// rows, one period apart, is due after as many periods as are left.
fn sooner_than_the_interval(consumers: &Consumers, period: Duration) -> Option<Instant> {
    let status = consumers.draws_status().then_some(STATUS_EVERY);
    let count = match consumers.rows_left() {
        Some(left @ 1..) => Some(period.saturating_mul(u32::try_from(left).unwrap_or(u32::MAX))),
        _ => None,
    };
    let due = status.into_iter().chain(count).min()?;
    Instant::now().checked_add(due)
}

/// Whether the loop is being stopped, and until when it waits for the session's end.
struct Stop {
    give_up: Option<Instant>,
    end: End,
}

impl Default for Stop {
    fn default() -> Stop {
        Stop {
            give_up: None,
            end: End::Finished,
        }
    }
}

impl Stop {
    /// A stop was requested: the session has `grace` to end by itself.
    fn notice(&mut self, signals: &Signals, grace: Duration, consumers: &Consumers) {
        if self.give_up.is_some() || !signals.stop_requested() {
            return;
        }
        self.give_up = Some(Instant::now() + grace);
        self.end = if consumers.output_closed() {
            End::OutputClosed
        } else {
            End::Stopped
        };
    }

    /// The next samples, waiting at most `idle`; past the deadline, what is ready, and
    /// the end.
    fn next<W: Waiter>(
        &self,
        source: &mut Source<W>,
        samples: &mut Vec<Sample>,
        idle: Duration,
    ) -> Result<Batch, ProtocolError> {
        match self.give_up {
            Some(deadline) if Instant::now() >= deadline => {
                let batch = source.drain_now(samples)?;
                Ok(Batch {
                    ended: true,
                    ..batch
                })
            }
            Some(deadline) => source.next(samples, idle.min(deadline - Instant::now())),
            None => source.next(samples, idle),
        }
    }
}
