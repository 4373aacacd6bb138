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
/// once. Sticky: once announced it stays announced.
#[derive(Debug, Default)]
pub struct Ending {
    announced: Mutex<bool>,
    changed: Condvar,
}

impl Ending {
    pub fn announce(&self) {
        *self
            .announced
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.changed.notify_all();
    }

    pub fn is_announced(&self) -> bool {
        *self
            .announced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps `timeout` or until announced; whether it is announced.
    fn wait(&self, timeout: Duration) -> bool {
        let announced = self
            .announced
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (announced, _) = self
            .changed
            .wait_timeout_while(announced, timeout, |announced| !*announced)
            .unwrap_or_else(PoisonError::into_inner);
        *announced
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
        let ending = self.ending.is_announced()
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

    /// Takes the samples at `deadline` at the latest, if that comes before the interval
    /// does (`--count`'s last sample is due then).
    pub fn wake_by(&mut self, deadline: Instant) {
        self.next = self.next.min(deadline);
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
            source.ending().announce();
            source.next(&mut out, Duration::from_secs(1)).unwrap();
            assert_eq!(out.len(), 1, "{mode}: the ready sample was not taken");
        }
    }

    #[test]
    fn an_ending_announced_while_a_source_waits_for_its_interval_wakes_it_at_once() {
        for mode in [Mode::Strict, Mode::Relaxed] {
            let area = Arc::new(
                Area::create_memfd_with_slots(4, mode, Duration::from_millis(50)).unwrap(),
            );
            Producer::new(Arc::clone(&area))
                .record(Sample::default())
                .unwrap();
            let mut source = Source::new(area, FutexWaiter, Duration::from_secs(3600));
            let ending = source.ending();
            let announcer = thread::spawn(move || {
                thread::sleep(Duration::from_millis(100));
                ending.announce();
            });
            // One call, which may wait 30 s: only the announcement ends its wait sooner, and
            // it then takes the ready sample.
            let mut out = Vec::new();
            source.next(&mut out, Duration::from_secs(30)).unwrap();
            assert_eq!(out.len(), 1, "{mode}: the call returned before the ending");
            announcer.join().unwrap();
        }
    }

    #[test]
    fn a_source_takes_samples_once_an_interval_not_as_they_come() {
        for mode in [Mode::Strict, Mode::Relaxed] {
            let area = Arc::new(
                Area::create_memfd_with_slots(4, mode, Duration::from_millis(50)).unwrap(),
            );
            let mut producer = Producer::new(Arc::clone(&area));
            let mut source = Source::new(area, FutexWaiter, Duration::from_millis(500));
            producer.record(Sample::default()).unwrap();
            let mut out = Vec::new();
            // Waits out the first interval, then takes the sample.
            source.next(&mut out, Duration::from_secs(30)).unwrap();
            assert_eq!(out.len(), 1, "{mode}: the first interval's sample");
            // The next one waits for the next interval, however ready it is.
            producer.record(Sample::default()).unwrap();
            source.next(&mut out, Duration::ZERO).unwrap();
            assert_eq!(out.len(), 1, "{mode}: taken before its interval");
        }
    }

    #[test]
    fn once_ending_a_strict_source_waits_for_the_producer_not_for_its_interval() {
        let area = Arc::new(
            Area::create_memfd_with_slots(4, Mode::Strict, Duration::from_millis(50)).unwrap(),
        );
        let mut producer = Producer::new(Arc::clone(&area));
        // Its interval is over before the first call: that call would drain at once, and
        // find nothing, but for the ending, which has it wait for the next sample.
        let mut source = Source::new(area, FutexWaiter, Duration::from_millis(1));
        thread::sleep(Duration::from_millis(5));
        source.ending().announce();
        let late = thread::spawn(move || {
            thread::sleep(Duration::from_millis(100));
            producer.record(Sample::default()).unwrap();
        });
        let mut out = Vec::new();
        source.next(&mut out, Duration::from_secs(30)).unwrap();
        assert_eq!(
            out.len(),
            1,
            "the ending source did not wait for the sample"
        );
        late.join().unwrap();
    }

    #[test]
    fn a_relaxed_source_lapped_by_its_producer_reports_exactly_the_samples_it_lost() {
        let area = Arc::new(
            Area::create_memfd_with_slots(4, Mode::Relaxed, Duration::from_millis(50)).unwrap(),
        );
        let mut producer = Producer::new(Arc::clone(&area));
        let mut source = Source::new(Arc::clone(&area), FutexWaiter, Duration::from_secs(3600));
        let mut out = Vec::new();
        // Ten samples into four slots before the first look: the first six are gone.
        for minor in 0..10 {
            producer
                .record(Sample {
                    minor,
                    ..Sample::default()
                })
                .unwrap();
        }
        let batch = source.drain_now(&mut out).unwrap();
        assert_eq!(batch.lost, 6);
        assert_eq!(
            out.iter().map(|s| s.minor).collect::<Vec<_>>(),
            [6, 7, 8, 9]
        );
        // Kept up with: nothing more is lost.
        producer
            .record(Sample {
                minor: 10,
                ..Sample::default()
            })
            .unwrap();
        assert_eq!(source.drain_now(&mut out).unwrap().lost, 0);
        assert_eq!(out.len(), 5);
    }
}
