//! The strict protocol over a memfd with futex waits: nothing lost, nothing
//! duplicated, no busy waiting, cancellation releases both sides.
#![cfg(not(loom))]

mod common;

use std::mem::offset_of;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{
    area, join_within, numbered, second_mapping, sequence_of, thread_cpu_time, word32, word64,
};
use rand::Rng;
use shared_layout::abi::AreaHeader;
use shared_layout::strict::{self, Push, StrictConsumer, StrictProducer, Take, TakeOne};
use shared_layout::wait::FutexWaiter;
use shared_layout::{Area, Mode, ProtocolError, Sample};

const SAMPLES: u64 = 1_000_000;
const LIMIT: Duration = Duration::from_secs(60);
/// Far longer than any wait in a correct run: a lost wake-up fails the test
/// with a timeout instead of hanging it.
const STUCK: Option<Duration> = Some(Duration::from_secs(10));

/// Push `seqs` in order, retrying when the bounded lock try fails; the
/// producer cancels after the last one.
fn spawn_producer(area: &Arc<Area>, seqs: std::ops::Range<u64>) -> thread::JoinHandle<()> {
    let mut producer = StrictProducer::new(Arc::clone(area), FutexWaiter);
    thread::spawn(move || {
        for seq in seqs {
            loop {
                match producer.push(numbered(seq), STUCK).unwrap() {
                    Push::Written => break,
                    Push::LockBusy => thread::yield_now(),
                    other => panic!("push of {seq} returned {other:?}"),
                }
            }
        }
        producer.cancel().unwrap();
    })
}

/// Now and then stall the consumer, so that the producer finds the ring full
/// at every phase of it.
fn random_pause(rng: &mut impl Rng) {
    match rng.gen_range(0..1000) {
        0 => thread::sleep(Duration::from_micros(rng.gen_range(0..200))),
        1..=20 => thread::yield_now(),
        21..=60 => (0..rng.gen_range(0..500)).for_each(|_| std::hint::spin_loop()),
        _ => {}
    }
}

/// Take until the session ends; a wait that never ends fails the test.
fn take_until_ended(consumer: &mut StrictConsumer<FutexWaiter>) -> Vec<Sample> {
    let mut received = Vec::new();
    loop {
        match consumer.take(&mut received, STUCK).unwrap() {
            Take::Samples(_) => {}
            Take::Ended => return received,
            Take::TimedOut => panic!("no end after {} samples", received.len()),
        }
    }
}

fn assert_exactly_in_order(received: &[Sample], count: u64) {
    assert_eq!(received.len() as u64, count, "received as many as produced");
    for (expected, sample) in (0..count).zip(received) {
        assert_eq!(
            sequence_of(sample),
            expected,
            "in order, no gap, no duplicate"
        );
    }
}

#[test]
fn strict_consumer_taking_batches_receives_every_sample_in_order_from_a_tiny_ring() {
    let area = area(4, Mode::Strict);
    let producer = spawn_producer(&area, 0..SAMPLES);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let mut rng = rand::thread_rng();
    let mut received = Vec::with_capacity(SAMPLES as usize);
    let mut largest_batch = 0;
    loop {
        match consumer.take(&mut received, STUCK).unwrap() {
            Take::Samples(k) => largest_batch = largest_batch.max(k),
            Take::Ended => break,
            Take::TimedOut => panic!("stuck after {} samples", received.len()),
        }
        random_pause(&mut rng);
    }
    join_within(producer, LIMIT, "the producer");
    assert_exactly_in_order(&received, SAMPLES);
    assert!(largest_batch <= 4, "a batch never exceeds the ring");
    let counters = area.counters();
    assert_eq!((counters.write_seq, counters.read_seq), (SAMPLES, SAMPLES));
}

#[test]
fn strict_consumer_taking_one_at_a_time_receives_every_sample_in_order_from_a_tiny_ring() {
    let area = area(2, Mode::Strict);
    let producer = spawn_producer(&area, 0..SAMPLES);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let mut rng = rand::thread_rng();
    let mut received = Vec::with_capacity(SAMPLES as usize);
    loop {
        match consumer.take_one(STUCK).unwrap() {
            TakeOne::Sample(sample) => received.push(sample),
            TakeOne::Ended => break,
            TakeOne::TimedOut => panic!("stuck after {} samples", received.len()),
        }
        random_pause(&mut rng);
    }
    join_within(producer, LIMIT, "the producer");
    assert_exactly_in_order(&received, SAMPLES);
}

#[test]
fn strict_consumer_blocked_on_an_empty_ring_uses_almost_no_cpu() {
    let area = area(4, Mode::Strict);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let waiting = thread::spawn(move || {
        let (cpu, start) = (thread_cpu_time(), Instant::now());
        let timed_out = consumer.take(&mut Vec::new(), Some(Duration::from_millis(500)));
        let (cpu, waited) = (thread_cpu_time() - cpu, start.elapsed());
        assert_eq!(timed_out.unwrap(), Take::TimedOut);
        // Then a producer's up(full) must wake it.
        let mut out = Vec::new();
        let woken = consumer.take(&mut out, None).unwrap();
        (cpu, waited, woken, out)
    });
    thread::sleep(Duration::from_millis(700));
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    assert_eq!(producer.push(numbered(0), None).unwrap(), Push::Written);
    let (cpu, waited, woken, out) = join_within(waiting, LIMIT, "the consumer");
    assert!(waited >= Duration::from_millis(500), "waited {waited:?}");
    assert!(
        cpu < Duration::from_millis(20),
        "used {cpu:?} of CPU waiting"
    );
    assert_eq!((woken, out), (Take::Samples(1), vec![numbered(0)]));
}

#[test]
fn canceling_releases_a_producer_blocked_on_a_full_ring_and_loses_nothing() {
    let area = area(4, Mode::Strict);
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    let pushing = thread::spawn(move || {
        (0..10)
            .map(|seq| producer.push(numbered(seq), None).unwrap())
            .take_while(|pushed| *pushed == Push::Written)
            .count()
    });
    while area.counters().write_seq < 4 {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(100)); // let it fall asleep on `empty`
    assert!(!pushing.is_finished(), "the producer waits for a free slot");
    strict::cancel(&area, &FutexWaiter).unwrap();
    let written = join_within(pushing, LIMIT, "the blocked producer");
    assert_eq!(written, 4);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    assert_exactly_in_order(&take_until_ended(&mut consumer), 4);
}

#[test]
fn canceling_releases_a_consumer_blocked_on_an_empty_ring_after_it_took_everything() {
    let area = area(4, Mode::Strict);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let taking = thread::spawn(move || take_until_ended(&mut consumer));
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    for seq in 0..3 {
        assert_eq!(producer.push(numbered(seq), None).unwrap(), Push::Written);
    }
    while area.counters().read_seq < 3 {
        thread::sleep(Duration::from_millis(1));
    }
    thread::sleep(Duration::from_millis(100)); // let it fall asleep on `full`
    assert!(!taking.is_finished(), "the consumer waits for samples");
    producer.cancel().unwrap();
    let received = join_within(taking, LIMIT, "the blocked consumer");
    assert_exactly_in_order(&received, 3);
}

#[test]
fn strict_push_times_out_on_a_full_ring_and_keeps_its_sample() {
    let area = area(2, Mode::Strict);
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    let timeout = Some(Duration::from_millis(20));
    for seq in 0..2 {
        assert_eq!(
            producer.push(numbered(seq), timeout).unwrap(),
            Push::Written
        );
    }
    assert_eq!(producer.push(numbered(2), timeout).unwrap(), Push::Full);
    assert!(area.counters().blocked_ns >= 20_000_000);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    assert_eq!(
        consumer.take_one(timeout).unwrap(),
        TakeOne::Sample(numbered(0))
    );
    assert_eq!(producer.push(numbered(2), timeout).unwrap(), Push::Written);
    let mut received = Vec::new();
    assert_eq!(
        consumer.take(&mut received, timeout).unwrap(),
        Take::Samples(2)
    );
    assert_eq!(received, [numbered(1), numbered(2)]);
    assert_eq!(
        consumer.take(&mut received, timeout).unwrap(),
        Take::TimedOut
    );
}

#[test]
fn strict_consumer_refuses_a_full_count_larger_than_the_ring_instead_of_reading_past_it() {
    let area = area(4, Mode::Strict);
    let scribbler = second_mapping(&area);
    let full_count = offset_of!(AreaHeader, full);
    word32(&scribbler, full_count).store(1_000_000, Ordering::SeqCst);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let mut out = Vec::new();
    let err = consumer.take(&mut out, STUCK).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::CountOutOfRange {
                count: 1_000_000,
                slots: 4,
                ..
            }
        ),
        "{err}"
    );
    assert!(out.is_empty());
}

#[test]
fn strict_consumer_refuses_samples_the_producer_never_published() {
    let area = area(4, Mode::Strict);
    let scribbler = second_mapping(&area);
    word32(&scribbler, offset_of!(AreaHeader, full)).store(2, Ordering::SeqCst);
    word64(&scribbler, offset_of!(AreaHeader, write_seq)).store(1, Ordering::SeqCst);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let err = consumer.take(&mut Vec::new(), STUCK).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::CursorOutOfRange {
                write_seq: 1,
                read_seq: 2
            }
        ),
        "{err}"
    );
}

#[test]
fn strict_consumer_refuses_a_read_seq_that_would_wrap_instead_of_overflowing() {
    const WRAPPING: u64 = u64::MAX - 1;
    let area = area(4, Mode::Strict);
    let scribbler = second_mapping(&area);
    word64(&scribbler, offset_of!(AreaHeader, read_seq)).store(WRAPPING, Ordering::SeqCst);
    word32(&scribbler, offset_of!(AreaHeader, full)).store(4, Ordering::SeqCst);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let mut out = Vec::new();
    let err = consumer.take(&mut out, STUCK).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::CursorOutOfRange {
                read_seq: WRAPPING,
                ..
            }
        ),
        "{err}"
    );
    assert!(out.is_empty());
}

#[test]
fn strict_producer_refuses_a_write_seq_that_cannot_advance_and_keeps_its_slot() {
    let area = area(4, Mode::Strict);
    let scribbler = second_mapping(&area);
    word64(&scribbler, offset_of!(AreaHeader, write_seq)).store(u64::MAX, Ordering::SeqCst);
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    let err = producer.push(numbered(0), STUCK).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::SequenceOverflow {
                write_seq: u64::MAX
            }
        ),
        "{err}"
    );
    let empty = word32(&scribbler, offset_of!(AreaHeader, empty));
    assert_eq!(empty.load(Ordering::SeqCst), 4, "no free slot was taken");
}

#[test]
fn a_wait_whose_deadline_cannot_be_represented_waits_instead_of_timing_out() {
    // Duration::MAX from now overflows an Instant: the wait has no deadline then.
    let area = area(4, Mode::Strict);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let waiting = thread::spawn(move || {
        let mut out = Vec::new();
        let took = consumer.take(&mut out, Some(Duration::MAX)).unwrap();
        (took, out)
    });
    thread::sleep(Duration::from_millis(100));
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    assert_eq!(producer.push(numbered(0), None).unwrap(), Push::Written);
    let (took, out) = join_within(waiting, LIMIT, "the consumer");
    assert_eq!((took, out), (Take::Samples(1), vec![numbered(0)]));
}

#[test]
fn each_side_refuses_an_area_of_the_other_protocol() {
    let relaxed = area(4, Mode::Relaxed);
    let strict = area(4, Mode::Strict);
    let wrong = |e: ProtocolError, expected| {
        assert!(
            matches!(e, ProtocolError::WrongMode { expected: x, .. } if x == expected),
            "{e}"
        );
    };
    let mut consumer = StrictConsumer::new(Arc::clone(&relaxed), FutexWaiter);
    wrong(
        consumer
            .take(&mut Vec::new(), Some(Duration::ZERO))
            .unwrap_err(),
        Mode::Strict,
    );
    let mut producer = StrictProducer::new(Arc::clone(&relaxed), FutexWaiter);
    wrong(
        producer
            .push(numbered(0), Some(Duration::ZERO))
            .unwrap_err(),
        Mode::Strict,
    );
    let mut consumer = shared_layout::relaxed::RelaxedConsumer::new(Arc::clone(&strict));
    wrong(consumer.drain(&mut Vec::new()).unwrap_err(), Mode::Relaxed);
    let mut producer = shared_layout::relaxed::RelaxedProducer::new(Arc::clone(&strict));
    wrong(producer.push(numbered(0)).unwrap_err(), Mode::Relaxed);
    assert_eq!(
        (relaxed.counters().write_seq, strict.counters().write_seq),
        (0, 0)
    );
}
