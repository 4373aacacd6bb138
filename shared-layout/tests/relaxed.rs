//! The relaxed protocol: the producer never waits for the consumer, and the
//! consumer accounts for every sample exactly once, as received or as lost.
#![cfg(not(loom))]

mod common;

use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{area, join_within, numbered, second_mapping, sequence_of, word64};
use rand::Rng;
use shared_layout::abi::AreaHeader;
use shared_layout::relaxed::{Drain, RelaxedConsumer, RelaxedProducer};
use shared_layout::{Mode, ProtocolError, Push, Sample};

const LIMIT: Duration = Duration::from_secs(60);

/// One drain into `batch`, whose samples (numbered by the producer) must come after
/// `last` and each other, untorn.
fn drain_in_order(
    consumer: &mut RelaxedConsumer,
    batch: &mut Vec<Sample>,
    last: &mut Option<u64>,
) -> Drain {
    batch.clear();
    let drain = consumer.drain(batch).unwrap();
    assert_eq!(drain.received, batch.len());
    for sample in batch.iter() {
        let seq = sequence_of(sample);
        assert!(last.map_or(true, |l| seq > l), "{seq} after {last:?}");
        *last = Some(seq);
    }
    drain
}

#[test]
fn relaxed_consumer_slower_than_its_producer_gets_increasing_untorn_samples_and_counts_every_loss()
{
    const SAMPLES: u64 = 1_000_000;
    const PACE_SPINS: u32 = 32;
    let area = area(8, Mode::Relaxed);
    let mut producer = RelaxedProducer::new(Arc::clone(&area));
    let producing = thread::spawn(move || {
        let mut written = 0u64;
        let mut busy = 0u64;
        while written < SAMPLES {
            match producer.push(numbered(written)).unwrap() {
                Push::Written => written += 1,
                Push::LockBusy => busy += 1,
                other => panic!("relaxed push returned {other:?}"),
            }
            // Paced at some 10 pushes per 8-slot copy: still far faster than a consumer
            // that sleeps up to 300 µs between drains, and not so fast that every copy is
            // lapped while it is made (at full speed nearly all were, with 64-byte
            // samples: no batch to check).
            for _ in 0..PACE_SPINS {
                std::hint::spin_loop();
            }
        }
        producer.cancel().unwrap();
        (written, busy)
    });

    let mut consumer = RelaxedConsumer::new(Arc::clone(&area));
    let mut rng = rand::thread_rng();
    let (mut received, mut lost, mut drains) = (0u64, 0u64, 0u64);
    let mut last: Option<u64> = None;
    let mut batch = Vec::new();
    loop {
        let drain = drain_in_order(&mut consumer, &mut batch, &mut last);
        drains += 1;
        received += batch.len() as u64;
        lost += drain.lost;
        if drain.ended {
            break;
        }
        // Slower than the producer: it laps the ring between drains.
        thread::sleep(Duration::from_micros(rng.gen_range(0..300)));
    }
    let (produced, _busy) = join_within(producing, LIMIT, "the producer");
    assert_eq!(
        received + lost,
        produced,
        "received {received}, lost {lost}"
    );
    assert!(lost > 0, "the producer lapped the consumer");
    assert!(
        received > drains,
        "the consumer got more than one sample per drain: {received} in {drains} drains, \
         {lost} lost"
    );
    assert_eq!(last, Some(produced - 1), "the last sample is never lost");
    let counters = area.counters();
    assert_eq!(
        (counters.write_seq, counters.read_seq),
        (produced, produced)
    );
}

#[test]
fn relaxed_consumer_reports_exactly_the_samples_overwritten_before_it_drained() {
    let area = area(4, Mode::Relaxed);
    let mut producer = RelaxedProducer::new(Arc::clone(&area));
    let mut consumer = RelaxedConsumer::new(Arc::clone(&area));
    for seq in 0..10 {
        assert_eq!(producer.push(numbered(seq)).unwrap(), Push::Written);
    }
    let mut out = Vec::new();
    let drain = consumer.drain(&mut out).unwrap();
    assert_eq!((drain.received, drain.lost, drain.ended), (4, 6, false));
    assert_eq!(out, (6..10).map(numbered).collect::<Vec<_>>());
    assert_eq!(area.counters().overwritten, 6);
    producer.cancel().unwrap();
    let drain = consumer.drain(&mut out).unwrap();
    assert_eq!((drain.received, drain.lost, drain.ended), (0, 0, true));
}

#[test]
fn relaxed_producer_refuses_a_write_seq_that_cannot_advance_instead_of_overflowing() {
    let area = area(4, Mode::Relaxed);
    let scribbler = second_mapping(&area);
    word64(&scribbler, offset_of!(AreaHeader, write_seq)).store(u64::MAX, Ordering::SeqCst);
    let mut producer = RelaxedProducer::new(Arc::clone(&area));
    let err = producer.push(numbered(0)).unwrap_err();
    assert!(
        matches!(
            err,
            ProtocolError::SequenceOverflow {
                write_seq: u64::MAX
            }
        ),
        "{err}"
    );
    assert_eq!(area.counters().write_seq, u64::MAX);
}

#[test]
fn a_sample_overwritten_while_it_was_copied_is_dropped_and_counted_lost() {
    // One slot, a producer pushing without pause: the slot a drain copies is often
    // rewritten while it copies it (when both threads run at once), and the drain must
    // drop its copy (torn) and count it lost. A drain that finds a new sample and returns
    // none did exactly that. The producer stops once ten drains did, or after 20 s.
    let area = area(1, Mode::Relaxed);
    let mut producer = RelaxedProducer::new(Arc::clone(&area));
    let enough = Arc::new(AtomicBool::new(false));
    let stop = Arc::clone(&enough);
    let producing = thread::spawn(move || {
        let mut written = 0u64;
        while !stop.load(Ordering::Relaxed) {
            if producer.push(numbered(written)).unwrap() == Push::Written {
                written += 1;
            }
        }
        producer.cancel().unwrap();
        written
    });
    let started = Instant::now();
    let mut consumer = RelaxedConsumer::new(Arc::clone(&area));
    let (mut received, mut lost, mut torn_drains) = (0u64, 0u64, 0u64);
    let mut last: Option<u64> = None;
    let mut batch = Vec::new();
    loop {
        let drain = drain_in_order(&mut consumer, &mut batch, &mut last);
        received += batch.len() as u64;
        lost += drain.lost;
        torn_drains += u64::from(batch.is_empty() && drain.lost > 0);
        if torn_drains >= 10 || started.elapsed() > Duration::from_secs(20) {
            enough.store(true, Ordering::Relaxed);
        }
        if drain.ended {
            break;
        }
    }
    let produced = join_within(producing, LIMIT, "the producer");
    assert_eq!(
        received + lost,
        produced,
        "received {received}, lost {lost}"
    );
    assert!(
        torn_drains > 0,
        "no drain found its copy overwritten in 20 s: the test proves nothing"
    );
}
