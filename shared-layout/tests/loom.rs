//! Model checks of both protocols on tiny rings with loom: every interleaving
//! (up to the preemption bound) of one producer and one consumer. Each bounded
//! spin (the strict sides' poll before they sleep, the lock's tries, a batched
//! take's wait for its batch to grow) is modeled as two attempts with the
//! other side free to run between them.
//!
//! RUSTFLAGS="--cfg loom" cargo test -p shared-layout --test loom --release
#![cfg(loom)]

use std::sync::Arc;

use loom::thread;
use shared_layout::relaxed::{RelaxedConsumer, RelaxedProducer};
use shared_layout::strict::{Push, StrictConsumer, StrictProducer, Take, TakeOne};
use shared_layout::wait::ModelFutex;
use shared_layout::{Area, Mode, Sample};

const SLOTS: u64 = 2;

fn numbered(seq: u64) -> Sample {
    Sample {
        time_ns: seq,
        minor: seq + 100,
        major: seq + 200,
        cpu_ns: seq + 300,
        rss_anon: seq + 400,
        rss_file: seq + 500,
        rss_shmem: seq + 600,
        swap: seq + 700,
    }
}

fn model(test: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(3);
    }
    builder.check(test);
}

/// One producer pushing 3 samples into a ring of `slots` (retrying a refused
/// lock) and cancelling, against a consumer running `consume` until the end.
fn strict_model(slots: u64, consume: fn(&mut StrictConsumer<ModelFutex>) -> Vec<Sample>) {
    model(move || {
        let area = Arc::new(Area::model(slots, Mode::Strict));
        let futex = ModelFutex::default();
        let mut producer = StrictProducer::new(Arc::clone(&area), futex.clone());
        let producing = thread::spawn(move || {
            for seq in 0..3 {
                loop {
                    match producer.push(numbered(seq), None).unwrap() {
                        Push::Written => break,
                        Push::LockBusy => thread::yield_now(),
                        other => panic!("push returned {other:?}"),
                    }
                }
            }
            producer.cancel().unwrap();
        });
        let received = consume(&mut StrictConsumer::new(Arc::clone(&area), futex));
        producing.join().unwrap();
        assert_eq!(received, (0..3).map(numbered).collect::<Vec<_>>());
    });
}

#[test]
fn strict_batches_deliver_every_sample_once_in_order_under_every_interleaving() {
    strict_model(SLOTS, take_batches);
}

/// With four slots a batched take that finds one sample ready lets the batch
/// grow towards two first (two looks at the count, the producer free to run
/// between them; under loom the producer always counts as active).
#[test]
fn strict_batches_that_wait_to_grow_deliver_every_sample_once_in_order_under_every_interleaving() {
    strict_model(4, take_batches);
}

fn take_batches(consumer: &mut StrictConsumer<ModelFutex>) -> Vec<Sample> {
    let mut received = Vec::new();
    while consumer.take(&mut received, None).unwrap() != Take::Ended {}
    received
}

#[test]
fn strict_single_takes_deliver_every_sample_once_in_order_under_every_interleaving() {
    strict_model(SLOTS, take_each);
}

/// With one slot every push after the first waits on `empty` and every take
/// on `full`: both sides poll, then sleep, at every hand-off.
#[test]
fn strict_hand_offs_through_one_slot_poll_and_sleep_without_losing_a_wake_up() {
    strict_model(1, take_each);
}

fn take_each(consumer: &mut StrictConsumer<ModelFutex>) -> Vec<Sample> {
    let mut received = Vec::new();
    while let TakeOne::Sample(sample) = consumer.take_one(None).unwrap() {
        received.push(sample);
    }
    received
}

#[test]
fn relaxed_drains_account_for_every_sample_and_never_return_a_torn_one() {
    model(|| {
        let area = Arc::new(Area::model(SLOTS, Mode::Relaxed));
        let mut producer = RelaxedProducer::new(Arc::clone(&area));
        let producing = thread::spawn(move || {
            let mut written = 0;
            while written < 3 {
                match producer.push(numbered(written)).unwrap() {
                    Push::Written => written += 1,
                    Push::LockBusy => thread::yield_now(),
                    other => panic!("push returned {other:?}"),
                }
            }
            producer.cancel().unwrap();
        });
        let mut consumer = RelaxedConsumer::new(Arc::clone(&area));
        let (mut received, mut lost) = (Vec::new(), 0);
        // Two drains racing the producer, then one after it ended.
        for _ in 0..2 {
            lost += consumer.drain(&mut received).unwrap().lost;
        }
        producing.join().unwrap();
        let last = consumer.drain(&mut received).unwrap();
        assert!(last.ended);
        lost += last.lost;
        assert!(received.windows(2).all(|w| w[0].time_ns < w[1].time_ns));
        assert!(
            received.iter().all(|s| *s == numbered(s.time_ns)),
            "torn: {received:?}"
        );
        assert_eq!(received.len() as u64 + lost, 3);
        assert_eq!(received.last(), Some(&numbered(2)));
    });
}
