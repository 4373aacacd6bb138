//! The user-space producer playing the module's role: it never blocks on a
//! lock the consumer holds, and whatever it cannot write it merges into a
//! later sample, so no fault and no nanosecond is lost.
#![cfg(not(loom))]

mod common;

use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{area, join_within, second_mapping, word32, word64};
use shared_layout::abi::{AreaHeader, LOCK_CONSUMER, LOCK_FREE};
use shared_layout::producer::{Finish, Producer};
use shared_layout::relaxed::RelaxedConsumer;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::wait::FutexWaiter;
use shared_layout::{Area, Mode, Push, Sample};

const LIMIT: Duration = Duration::from_secs(60);

fn delta(period: u64) -> Sample {
    Sample {
        time_ns: period * 5,
        minor: period + 1,
        major: period % 3,
        cpu_ns: 1_000_000 + period,
        rss_anon: (period + 1) << 20,
        rss_file: period << 12,
        rss_shmem: period % 2 * 4096,
        swap: (10 - period % 10) << 16,
    }
}

/// The memory levels of a sample: what a merged sample takes from its latest period.
fn levels(s: &Sample) -> [u64; 4] {
    [s.rss_anon, s.rss_file, s.rss_shmem, s.swap]
}

/// What the consumer must see in total once every delta is written.
fn totals(samples: &[Sample]) -> (u64, u64, u64) {
    samples.iter().fold((0, 0, 0), |(mi, ma, ns), s| {
        (mi + s.minor, ma + s.major, ns + s.cpu_ns)
    })
}

fn drain_all(area: &Arc<Area>) -> Vec<Sample> {
    let mut out = Vec::new();
    match area.mode() {
        Mode::Strict => {
            let mut consumer = StrictConsumer::new(Arc::clone(area), FutexWaiter);
            while let Take::Samples(_) = consumer.take(&mut out, Some(Duration::ZERO)).unwrap() {}
        }
        Mode::Relaxed => {
            let drain = RelaxedConsumer::new(Arc::clone(area))
                .drain(&mut out)
                .unwrap();
            assert_eq!(drain.lost, 0);
        }
    }
    out
}

#[test]
fn producer_defers_without_blocking_while_a_dead_consumer_holds_the_lock_and_conserves_counts() {
    for mode in [Mode::Strict, Mode::Relaxed] {
        let area = area(8, mode);
        let dead_consumer = second_mapping(&area);
        word32(&dead_consumer, offset_of!(AreaHeader, lock))
            .store(LOCK_CONSUMER, Ordering::Release);

        let mut producer = Producer::new(Arc::clone(&area));
        let deltas: Vec<Sample> = (0..20).map(delta).collect();
        let start = Instant::now();
        for d in &deltas {
            assert_eq!(producer.record(*d).unwrap(), Push::LockBusy, "{mode}");
        }
        // 20 bounded lock tries, nowhere near the 50 ms a single period lasts.
        assert!(
            start.elapsed() < Duration::from_millis(500),
            "{mode}: blocked"
        );
        assert_eq!(area.counters().deferred, 20, "{mode}");
        assert_eq!(area.counters().write_seq, 0, "{mode}");

        word32(&dead_consumer, offset_of!(AreaHeader, lock)).store(LOCK_FREE, Ordering::Release);
        let last = delta(20);
        assert_eq!(producer.record(last).unwrap(), Push::Written, "{mode}");
        let received = drain_all(&area);
        assert_eq!(received.len(), 1, "{mode}: the deferred periods merged");
        assert_eq!(
            received[0].time_ns, last.time_ns,
            "{mode}: stamped with the last period"
        );
        let all: Vec<Sample> = deltas.iter().copied().chain([last]).collect();
        let sample = &received[0];
        assert_eq!(
            (sample.minor, sample.major, sample.cpu_ns),
            totals(&all),
            "{mode}"
        );
        assert_eq!(
            levels(sample),
            levels(&last),
            "{mode}: the last period's memory"
        );
    }
}

#[test]
fn producer_merges_periods_while_the_strict_ring_is_full_and_finish_flushes_them() {
    let area =
        Arc::new(Area::create_memfd_with_slots(2, Mode::Strict, Duration::from_millis(5)).unwrap());
    let mut producer = Producer::new(Arc::clone(&area));
    let deltas: Vec<Sample> = (0..10).map(delta).collect();
    let pushed: Vec<Push> = deltas
        .iter()
        .map(|d| producer.record(*d).unwrap())
        .collect();
    assert_eq!(pushed[..2], [Push::Written, Push::Written]);
    assert!(pushed[2..].iter().all(|p| *p == Push::Full), "{pushed:?}");
    // Each refused period waited one period (5 ms) for a slot.
    assert!(area.counters().blocked_ns >= 8 * 5_000_000);
    assert_eq!(
        area.counters().deferred,
        0,
        "a full ring is waited on, not deferred"
    );

    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let taking = thread::spawn(move || {
        let mut out = Vec::new();
        while consumer.take(&mut out, Some(LIMIT)).unwrap() != Take::Ended {}
        out
    });
    let finish = producer.finish(Instant::now() + LIMIT).unwrap();
    assert_eq!(finish, Finish::Flushed);
    let received = join_within(taking, LIMIT, "the consumer");
    assert_eq!(received.len(), 3, "two periods, then the eight merged ones");
    assert_eq!(received[2].time_ns, deltas[9].time_ns);
    assert_eq!(levels(&received[2]), levels(&deltas[9]));
    assert_eq!(totals(&received), totals(&deltas));
    assert!(area.counters().canceled);
}

#[test]
fn a_never_waiting_producer_defers_at_once_on_a_full_ring_and_its_retry_writes_the_merged_counts() {
    // A period long enough that a wait for a slot would show: a minute.
    let area = Arc::new(Area::create_memfd_with_slots(1, Mode::Strict, LIMIT).unwrap());
    let mut producer = Producer::new(Arc::clone(&area)).never_waiting();
    assert_eq!(producer.record(delta(0)).unwrap(), Push::Written);
    assert!(producer.retry_pending().unwrap(), "nothing pending");
    let start = Instant::now();
    assert_eq!(producer.record(delta(1)).unwrap(), Push::Full);
    assert_eq!(producer.record(delta(2)).unwrap(), Push::Full);
    assert!(!producer.retry_pending().unwrap(), "the ring is still full");
    // Waiting for a slot, each would have taken the period: a minute.
    assert!(
        area.counters().blocked_ns < 1_000_000_000,
        "no push waited for a slot"
    );
    assert!(start.elapsed() < LIMIT);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let mut received = Vec::new();
    consumer.take(&mut received, Some(Duration::ZERO)).unwrap();
    assert!(producer.retry_pending().unwrap(), "a slot freed: written");
    assert_eq!(producer.pending(), None);
    consumer.take(&mut received, Some(Duration::ZERO)).unwrap();
    assert_eq!(received.len(), 2, "the first period, then the two merged");
    assert_eq!(totals(&received), totals(&[delta(0), delta(1), delta(2)]));
    assert_eq!(levels(&received[1]), levels(&delta(2)));
}

#[test]
fn producer_finish_gives_up_at_its_deadline_and_returns_what_it_could_not_write() {
    let area =
        Arc::new(Area::create_memfd_with_slots(1, Mode::Strict, Duration::from_millis(1)).unwrap());
    let mut producer = Producer::new(Arc::clone(&area));
    assert_eq!(producer.record(delta(0)).unwrap(), Push::Written);
    assert_eq!(producer.record(delta(1)).unwrap(), Push::Full);
    assert_eq!(producer.record(delta(2)).unwrap(), Push::Full);
    let finish = producer
        .finish(Instant::now() + Duration::from_millis(20))
        .unwrap();
    let merged = Sample {
        time_ns: delta(2).time_ns,
        minor: delta(1).minor + delta(2).minor,
        major: delta(1).major + delta(2).major,
        cpu_ns: delta(1).cpu_ns + delta(2).cpu_ns,
        ..delta(2)
    };
    assert_eq!(finish, Finish::Unflushed(merged));
    assert!(area.counters().canceled);
    assert_eq!(drain_all(&area), [delta(0)]);
}

#[test]
fn a_sample_the_ring_refuses_with_an_error_stays_pending_with_later_counts_merged_in() {
    for mode in [Mode::Strict, Mode::Relaxed] {
        let area = area(8, mode);
        let scribbler = second_mapping(&area);
        word64(&scribbler, offset_of!(AreaHeader, write_seq)).store(u64::MAX, Ordering::SeqCst);
        let mut producer = Producer::new(Arc::clone(&area));
        assert!(producer.record(delta(0)).is_err());
        assert!(producer.record(delta(1)).is_err());
        let merged = producer.pending().expect("the counts are still pending");
        assert_eq!(
            totals(&[merged]),
            totals(&[delta(0), delta(1)]),
            "{mode}: every count kept"
        );
        assert_eq!(merged.time_ns, delta(1).time_ns);
        assert_eq!(levels(&merged), levels(&delta(1)));
    }
}
