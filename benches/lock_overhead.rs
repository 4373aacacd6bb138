//! What each ring protocol costs per sample, next to what the hardware allows.
//!
//! Two-thread groups follow rtrb's benches: `iter_custom`, a barrier so both threads start
//! together, the clock stopped when the consumer holds the last sample. Rings use the real
//! layout: the smallest area (2 pages, 128 slots: the producer fills it at once, so nearly
//! every hand-off blocks) and the default 512 KiB area (128 pages, 16256 slots).

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
#[repr(C)]
struct Sample {
    jiffies: u64,
    minor: u64,
    major: u64,
    cpu_ns: u64,
}

const PAGE_SIZE: u64 = 4096;
/// (pages, label): the smallest area and the default 512 KiB one.
const AREAS: [(u64, &str); 2] = [(2, "2_pages"), (128, "128_pages")];

fn slot_count(pages: u64) -> u64 {
    (pages - 1) * PAGE_SIZE / std::mem::size_of::<Sample>() as u64
}

fn sample(seq: u64) -> Sample {
    Sample {
        jiffies: seq,
        minor: seq,
        major: 0,
        cpu_ns: seq,
    }
}

/// Runs `producer` and `consumer` on two threads released together; returns the time from
/// the release to the later of the two finishing.
fn two_threads<P, C>(producer: P, consumer: C) -> Duration
where
    P: FnOnce() + Send,
    C: FnOnce() + Send,
{
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let p = s.spawn(|| {
            barrier.wait();
            producer();
            Instant::now()
        });
        barrier.wait();
        let start = Instant::now();
        consumer();
        let consumer_done = Instant::now();
        let producer_done = p.join().expect("producer thread panicked");
        consumer_done.max(producer_done) - start
    })
}

fn baselines(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_overhead/baselines");
    for (pages, label) in AREAS {
        let slots = slot_count(pages) as usize;
        group.throughput(Throughput::Elements(1));
        group.bench_function(BenchmarkId::new("spsc_rtrb", label), |b| {
            let (mut tx, mut rx) = rtrb::RingBuffer::<Sample>::new(slots);
            b.iter_custom(|iters| {
                let elapsed = two_threads(
                    || {
                        for seq in 0..iters {
                            let mut s = sample(seq);
                            while let Err(rtrb::PushError::Full(back)) = tx.push(s) {
                                s = back;
                                std::hint::spin_loop();
                            }
                        }
                    },
                    || {
                        for seq in 0..iters {
                            loop {
                                if let Ok(s) = rx.pop() {
                                    assert_eq!(s.jiffies, seq, "rtrb reordered samples");
                                    break;
                                }
                                std::hint::spin_loop();
                            }
                        }
                    },
                );
                elapsed
            });
        });
    }

    // The memory limit: the default ring's bytes copied out, as a drain would.
    let slots = slot_count(128) as usize;
    let ring: Vec<Sample> = (0..slots as u64).map(sample).collect();
    let mut out = Vec::with_capacity(slots);
    group.throughput(Throughput::Elements(slots as u64));
    group.bench_function(BenchmarkId::new("plain_copy", "128_pages"), |b| {
        b.iter(|| {
            out.clear();
            out.extend_from_slice(black_box(&ring));
            black_box(&out);
        });
    });

    group.throughput(Throughput::Elements(1));
    group.bench_function("futex_pingpong", |b| {
        b.iter_custom(futex_pingpong);
    });
    group.finish();
}

fn futex(word: &AtomicU32, op: libc::c_int, val: u32) {
    // SAFETY: `word` is a live, aligned u32; FUTEX_WAIT/FUTEX_WAKE without timeout read or
    // wake on that address only.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op | libc::FUTEX_PRIVATE_FLAG,
            val,
            std::ptr::null::<libc::timespec>(),
        );
    }
}

/// `iters` round trips between two threads, each hand-off a store + FUTEX_WAKE answered by a
/// FUTEX_WAIT: the floor for any blocking hand-off.
fn futex_pingpong(iters: u64) -> Duration {
    // 0: the ping side's turn, 1: the pong side's.
    let turn = AtomicU32::new(0);
    let wait_while = |value: u32| {
        while turn.load(Ordering::Acquire) == value {
            futex(&turn, libc::FUTEX_WAIT, value);
        }
    };
    two_threads(
        || {
            for _ in 0..iters {
                wait_while(0);
                turn.store(0, Ordering::Release);
                futex(&turn, libc::FUTEX_WAKE, 1);
            }
        },
        || {
            for _ in 0..iters {
                turn.store(1, Ordering::Release);
                futex(&turn, libc::FUTEX_WAKE, 1);
                wait_while(1);
            }
        },
    )
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .sample_size(20)
}

criterion_group! {
    name = lock_overhead;
    config = config();
    targets = baselines
}
criterion_main!(lock_overhead);
