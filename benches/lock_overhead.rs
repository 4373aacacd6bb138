//! What each ring protocol costs per sample, next to what the hardware allows
//! (docs/benchmarks.md reads the numbers).
//!
//! Two-thread groups follow rtrb's benches: `iter_custom`, a barrier so both threads start
//! together, the clock stopped when both are done. The producer thread plays the module with
//! shared_layout's own producers, the consumer runs the monitor's side, on a memfd area of
//! the real layout. Under criterion's lines each two-thread benchmark prints how often each
//! thread slept and was preempted, so the doc can say where the time went.

use std::hint::black_box;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use shared_layout::relaxed::{RelaxedConsumer, RelaxedProducer};
use shared_layout::strict::{StrictConsumer, StrictProducer, Take, TakeOne};
use shared_layout::wait::FutexWaiter;
use shared_layout::{Area, Mode, Push, Sample};

/// The rings every two-thread group runs on: a tiny one, where nearly every hand-off finds
/// the ring full or empty, and the module's default 512 KiB area.
#[derive(Clone, Copy)]
enum Ring {
    Slots(u64),
    Pages(u64),
}

const RINGS: [(Ring, &str); 2] = [(Ring::Slots(8), "8_slots"), (Ring::Pages(128), "128_pages")];
const DEFAULT_RING: Ring = Ring::Pages(128);

fn area(ring: Ring, mode: Mode) -> Arc<Area> {
    // hz and period only label samples; nothing here waits for a period.
    let area = match ring {
        Ring::Slots(slots) => Area::create_memfd_with_slots(slots, mode, Duration::from_millis(50)),
        Ring::Pages(pages) => Area::create_memfd(pages, mode, Duration::from_millis(50)),
    };
    Arc::new(area.expect("creating a memfd area"))
}

fn sample(seq: u64) -> Sample {
    Sample {
        time_ns: seq,
        minor: seq,
        cpu_ns: seq,
        rss_anon: seq,
        ..Sample::default()
    }
}

/// Context switches of the calling thread so far (getrusage RUSAGE_THREAD).
#[derive(Clone, Copy, Default)]
struct Switches {
    /// The thread gave up the CPU itself: it slept (FUTEX_WAIT, barrier, nanosleep).
    slept: u64,
    /// The scheduler took the CPU away: preemption by the other thread or anyone else.
    preempted: u64,
}

impl Switches {
    fn now() -> Switches {
        // SAFETY: getrusage only writes the struct we pass; all-zero is a valid rusage.
        let ru = unsafe {
            let mut ru: libc::rusage = std::mem::zeroed();
            libc::getrusage(libc::RUSAGE_THREAD, &mut ru);
            ru
        };
        Switches {
            slept: ru.ru_nvcsw as u64,
            preempted: ru.ru_nivcsw as u64,
        }
    }

    fn since(self, start: Switches) -> Switches {
        Switches {
            slept: self.slept - start.slept,
            preempted: self.preempted - start.preempted,
        }
    }

    fn add(&mut self, other: Switches) {
        self.slept += other.slept;
        self.preempted += other.preempted;
    }
}

/// One two-thread run: wall time and each thread's context switches during it.
struct Run {
    elapsed: Duration,
    producer: Switches,
    consumer: Switches,
}

/// Runs `producer` and `consumer` on two threads released together; the time runs from
/// the release to the later of the two finishing.
fn two_threads<P, C>(producer: P, consumer: C) -> Run
where
    P: FnOnce() + Send,
    C: FnOnce() + Send,
{
    let barrier = Barrier::new(2);
    thread::scope(|s| {
        let p = s.spawn(|| {
            barrier.wait();
            let before = Switches::now();
            producer();
            (Instant::now(), Switches::now().since(before))
        });
        barrier.wait();
        let before = Switches::now();
        let start = Instant::now();
        consumer();
        let consumer_done = Instant::now();
        let consumer_switches = Switches::now().since(before);
        let (producer_done, producer_switches) = p.join().expect("producer thread panicked");
        Run {
            elapsed: consumer_done.max(producer_done) - start,
            producer: producer_switches,
            consumer: consumer_switches,
        }
    })
}

/// What every run of one benchmark added up to, printed under criterion's lines so the
/// table in docs/benchmarks.md can say where the time went.
#[derive(Default)]
struct Tally {
    samples: u64,
    elapsed: Duration,
    producer: Switches,
    consumer: Switches,
    lost: u64,
}

impl Tally {
    fn add(&mut self, samples: u64, run: &Run) -> Duration {
        self.samples += samples;
        self.elapsed += run.elapsed;
        self.producer.add(run.producer);
        self.consumer.add(run.consumer);
        run.elapsed
    }

    /// `blocked_ns`: the strict producer's time waiting for a free slot, from the area.
    fn report(&self, id: &str, blocked_ns: Option<u64>) {
        if self.samples == 0 {
            return; // filtered out
        }
        let per_k = |n: u64| n as f64 * 1000.0 / self.samples.max(1) as f64;
        let mut line = format!(
            "  {id}: {} samples in {:.2?}; per 1000: producer slept {:.1}, \
             consumer slept {:.1}, preempted {:.1}",
            self.samples,
            self.elapsed,
            per_k(self.producer.slept),
            per_k(self.consumer.slept),
            per_k(self.producer.preempted + self.consumer.preempted),
        );
        if let Some(ns) = blocked_ns {
            let share = ns as f64 / self.elapsed.as_nanos().max(1) as f64;
            line += &format!("; producer blocked {:.0}% of the time", share * 100.0);
        }
        if self.lost > 0 {
            let share = self.lost as f64 / self.samples.max(1) as f64;
            line += &format!("; lost {:.1}%", share * 100.0);
        }
        eprintln!("{line}");
    }
}

fn strict_group(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_overhead/strict");
    group.throughput(Throughput::Elements(1));
    for (ring, label) in RINGS {
        for batched in [false, true] {
            let name = if batched { "batched" } else { "per_sample" };
            let id = format!("{name}/{label}");
            let area = area(ring, Mode::Strict);
            let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
            let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
            let mut out = Vec::with_capacity(area.slot_count() as usize);
            let mut next = 0;
            let mut tally = Tally::default();
            group.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let first = next;
                    next += iters;
                    let run = two_threads(
                        || strict_push_all(&mut producer, first..first + iters),
                        || {
                            if batched {
                                strict_take_all(&mut consumer, &mut out, first..first + iters);
                            } else {
                                strict_take_each(&mut consumer, first..first + iters);
                            }
                        },
                    );
                    tally.add(iters, &run)
                });
            });
            tally.report(&format!("strict/{id}"), Some(area.counters().blocked_ns));
        }
    }

    // One down_all(k) of a full default ring by itself: compare with plain_copy.
    let area = area(DEFAULT_RING, Mode::Strict);
    let slots = area.slot_count();
    let mut producer = StrictProducer::new(Arc::clone(&area), FutexWaiter);
    let mut consumer = StrictConsumer::new(Arc::clone(&area), FutexWaiter);
    let mut out = Vec::with_capacity(slots as usize);
    let mut next = 0;
    group.throughput(Throughput::Elements(slots));
    group.bench_function("take_full_ring/128_pages", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                strict_push_all(&mut producer, next..next + slots);
                next += slots;
                out.clear();
                let start = Instant::now();
                let took = consumer.take(&mut out, None).expect("strict take");
                elapsed += start.elapsed();
                assert_eq!(took, Take::Samples(slots as usize));
            }
            elapsed
        });
    });
    group.finish();
}

/// The module's role: push each sample, retrying when the consumer holds the lock.
fn strict_push_all(producer: &mut StrictProducer<FutexWaiter>, seqs: std::ops::Range<u64>) {
    for seq in seqs {
        loop {
            match producer.push(sample(seq), None).expect("strict push") {
                Push::Written => break,
                Push::LockBusy => continue,
                other => panic!("strict push without timeout gave {other:?}"),
            }
        }
    }
}

/// The per-sample design: one down/lock/unlock/up per sample.
fn strict_take_each(consumer: &mut StrictConsumer<FutexWaiter>, seqs: std::ops::Range<u64>) {
    for seq in seqs {
        match consumer.take_one(None).expect("strict take_one") {
            TakeOne::Sample(s) => assert_eq!(s.time_ns, seq, "strict reordered samples"),
            other => panic!("strict take_one without timeout gave {other:?}"),
        }
    }
}

/// The batched design: every ready sample under one down_all(k)/up(k).
fn strict_take_all(
    consumer: &mut StrictConsumer<FutexWaiter>,
    out: &mut Vec<Sample>,
    seqs: std::ops::Range<u64>,
) {
    let mut expected = seqs.start;
    while expected < seqs.end {
        out.clear();
        match consumer.take(out, None).expect("strict take") {
            Take::Samples(_) => {
                let last = out.last().expect("take returned samples");
                assert_eq!(
                    last.time_ns,
                    expected + out.len() as u64 - 1,
                    "strict lost samples"
                );
                expected += out.len() as u64;
            }
            other => panic!("strict take without timeout gave {other:?}"),
        }
    }
}

fn relaxed_group(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_overhead/relaxed");
    group.throughput(Throughput::Elements(1));
    // paced: the bench's producer waits for room before it pushes, as rtrb's does, so every
    // sample arrives and the rate is the protocol's. unpaced: it never waits, as the module
    // does; the consumer then loses what it cannot keep up with (printed as "lost").
    for paced in [true, false] {
        for (ring, label) in RINGS {
            let name = if paced { "batched" } else { "batched_unpaced" };
            let id = format!("{name}/{label}");
            let area = area(ring, Mode::Relaxed);
            let mut producer = RelaxedProducer::new(Arc::clone(&area));
            let mut consumer = RelaxedConsumer::new(Arc::clone(&area));
            let mut out = Vec::with_capacity(area.slot_count() as usize);
            let mut next = 0;
            let mut tally = Tally::default();
            group.bench_function(&id, |b| {
                b.iter_custom(|iters| {
                    let seqs = next..next + iters;
                    next += iters;
                    let mut lost = 0;
                    let run = two_threads(
                        || {
                            if paced {
                                relaxed_push_paced(&mut producer, &area, seqs);
                            } else {
                                relaxed_push_all(&mut producer, seqs);
                            }
                        },
                        || lost = relaxed_drain_until(&mut consumer, &mut out, iters),
                    );
                    tally.lost += lost;
                    tally.add(iters, &run)
                });
            });
            tally.report(&format!("relaxed/{id}"), None);
        }
    }

    // One drain of a full default ring by itself: compare with plain_copy.
    let area = area(DEFAULT_RING, Mode::Relaxed);
    let slots = area.slot_count();
    let mut producer = RelaxedProducer::new(Arc::clone(&area));
    let mut consumer = RelaxedConsumer::new(Arc::clone(&area));
    let mut out = Vec::with_capacity(slots as usize);
    let mut next = 0;
    group.throughput(Throughput::Elements(slots));
    group.bench_function("drain_full_ring/128_pages", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            for _ in 0..iters {
                relaxed_push_all(&mut producer, next..next + slots);
                next += slots;
                out.clear();
                let start = Instant::now();
                let drained = consumer.drain(&mut out).expect("relaxed drain");
                elapsed += start.elapsed();
                assert_eq!((drained.received, drained.lost), (slots as usize, 0));
            }
            elapsed
        });
    });
    group.finish();
}

fn relaxed_push_all(producer: &mut RelaxedProducer, seqs: std::ops::Range<u64>) {
    for seq in seqs {
        while producer.push(sample(seq)).expect("relaxed push") == Push::LockBusy {}
    }
}

/// Like [`relaxed_push_all`], but first waits (spinning) until the consumer's read_seq
/// leaves a free slot, rereading it only when the ring looks full, as rtrb does.
fn relaxed_push_paced(producer: &mut RelaxedProducer, area: &Area, seqs: std::ops::Range<u64>) {
    let slots = area.slot_count();
    let mut read_seq = area.counters().read_seq;
    for seq in seqs {
        while seq >= read_seq + slots {
            std::hint::spin_loop();
            read_seq = area.counters().read_seq;
        }
        while producer.push(sample(seq)).expect("relaxed push") == Push::LockBusy {}
    }
}

/// Drains until `count` samples are accounted for, received or lost; returns how many
/// were lost. The consumer spins: nothing in the relaxed protocol sleeps.
fn relaxed_drain_until(consumer: &mut RelaxedConsumer, out: &mut Vec<Sample>, count: u64) -> u64 {
    let (mut accounted, mut lost) = (0, 0);
    while accounted < count {
        out.clear();
        let drained = consumer.drain(out).expect("relaxed drain");
        accounted += drained.received as u64 + drained.lost;
        lost += drained.lost;
        if drained.received == 0 && drained.lost == 0 {
            std::hint::spin_loop();
        }
    }
    lost
}

fn baselines(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_overhead/baselines");
    group.throughput(Throughput::Elements(1));
    for (ring, label) in RINGS {
        let id = format!("spsc_rtrb/{label}");
        let (mut tx, mut rx) = rtrb::RingBuffer::<Sample>::new(slot_count(ring) as usize);
        let mut tally = Tally::default();
        group.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let run = two_threads(
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
                                    assert_eq!(s.time_ns, seq, "rtrb reordered samples");
                                    break;
                                }
                                std::hint::spin_loop();
                            }
                        }
                    },
                );
                tally.add(iters, &run)
            });
        });
        tally.report(&format!("baselines/{id}"), None);
    }

    // The least any per-sample semaphore design can cost: only the two counts, downed and
    // upped once per sample by each side, with no slot, no lock and no sleeping.
    for (ring, label) in RINGS {
        let id = format!("semaphore_pair/{label}");
        let mut tally = Tally::default();
        group.bench_function(&id, |b| {
            b.iter_custom(|iters| {
                let run = semaphore_pair(slot_count(ring), iters);
                tally.add(iters, &run)
            });
        });
        tally.report(&format!("baselines/{id}"), None);
    }

    // The memory limit: the default ring's bytes copied out, as a drain would.
    let slots = slot_count(DEFAULT_RING);
    let ring: Vec<Sample> = (0..slots).map(sample).collect();
    let mut out = Vec::with_capacity(slots as usize);
    group.throughput(Throughput::Elements(slots));
    group.bench_function("plain_copy/128_pages", |b| {
        b.iter(|| {
            out.clear();
            out.extend_from_slice(black_box(&ring));
            black_box(&out);
        });
    });

    group.throughput(Throughput::Elements(1));
    let mut tally = Tally::default();
    group.bench_function("futex_pingpong", |b| {
        b.iter_custom(|iters| {
            let run = futex_pingpong(iters);
            tally.add(iters, &run)
        });
    });
    tally.report("baselines/futex_pingpong (per round trip)", None);
    group.finish();
}

/// A count on a line of its own, as the area's semaphores are.
#[repr(align(64))]
struct LineCount(AtomicU64);

/// Spins until `count` is above zero and takes one (the semaphores' compare-and-swap down).
fn spin_down(count: &AtomicU64) {
    let mut seen = count.load(Ordering::Relaxed);
    loop {
        if seen == 0 {
            std::hint::spin_loop();
            seen = count.load(Ordering::Relaxed);
            continue;
        }
        match count.compare_exchange_weak(seen, seen - 1, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => seen = now,
        }
    }
}

/// `iters` items handed over through a full/empty pair of counts on `slots` slots: the
/// producer downs empty and ups full per item, the consumer downs full and ups empty.
fn semaphore_pair(slots: u64, iters: u64) -> Run {
    let full = LineCount(AtomicU64::new(0));
    let empty = LineCount(AtomicU64::new(slots));
    two_threads(
        || {
            for _ in 0..iters {
                spin_down(&empty.0);
                full.0.fetch_add(1, Ordering::Release);
            }
        },
        || {
            for _ in 0..iters {
                spin_down(&full.0);
                empty.0.fetch_add(1, Ordering::Release);
            }
        },
    )
}

fn slot_count(ring: Ring) -> u64 {
    match ring {
        Ring::Slots(slots) => slots,
        Ring::Pages(pages) => shared_layout::abi::slots_in(pages),
    }
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
fn futex_pingpong(iters: u64) -> Run {
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

/// A strict consumer blocked on an empty ring, woken by the producer's up(full): two threads
/// each push into one 8-slot ring and take_one from the other, so every take finds its ring
/// empty and sleeps. One element is one round trip (two blocked wake-ups), as in
/// baselines/futex_pingpong.
fn wakeup(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_overhead/wakeup");
    group.throughput(Throughput::Elements(1));
    let (there, back) = (
        area(Ring::Slots(8), Mode::Strict),
        area(Ring::Slots(8), Mode::Strict),
    );
    let mut ping = StrictProducer::new(Arc::clone(&there), FutexWaiter);
    let mut ping_back = StrictConsumer::new(Arc::clone(&back), FutexWaiter);
    let mut pong = StrictConsumer::new(Arc::clone(&there), FutexWaiter);
    let mut pong_back = StrictProducer::new(Arc::clone(&back), FutexWaiter);
    let mut next = 0;
    let mut tally = Tally::default();
    group.bench_function("strict_blocked_pingpong", |b| {
        b.iter_custom(|iters| {
            let first = next;
            next += iters;
            let run = two_threads(
                || {
                    for seq in first..first + iters {
                        strict_take_each(&mut pong, seq..seq + 1);
                        strict_push_all(&mut pong_back, seq..seq + 1);
                    }
                },
                || {
                    for seq in first..first + iters {
                        strict_push_all(&mut ping, seq..seq + 1);
                        strict_take_each(&mut ping_back, seq..seq + 1);
                    }
                },
            );
            tally.add(iters, &run)
        });
    });
    tally.report("wakeup/strict_blocked_pingpong (per round trip)", None);
    group.finish();
}

/// Each protocol step alone, one thread, nothing contended, on the default ring. down, up,
/// lock and unlock are private to shared_layout, so these are the smallest public steps:
/// strict push = down(empty) lock write unlock up(full); strict take_one = down(full) lock
/// read unlock up(empty); relaxed push = lock write unlock; an empty relaxed drain = two
/// lock/unlock pairs.
fn primitives(c: &mut Criterion) {
    let mut group = c.benchmark_group("lock_overhead/primitives");
    group.throughput(Throughput::Elements(1));

    let strict = area(DEFAULT_RING, Mode::Strict);
    let slots = strict.slot_count();
    let mut producer = StrictProducer::new(Arc::clone(&strict), FutexWaiter);
    let mut consumer = StrictConsumer::new(Arc::clone(&strict), FutexWaiter);
    let mut out = Vec::with_capacity(slots as usize);
    let mut next = 0;
    // Both strict steps run in ring-sized rounds, timing one side while the other makes room.
    group.bench_function("strict_push", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(slots);
                let start = Instant::now();
                strict_push_all(&mut producer, next..next + n);
                elapsed += start.elapsed();
                strict_take_all(&mut consumer, &mut out, next..next + n);
                next += n;
                left -= n;
            }
            elapsed
        });
    });
    group.bench_function("strict_take_one", |b| {
        b.iter_custom(|iters| {
            let mut elapsed = Duration::ZERO;
            let mut left = iters;
            while left > 0 {
                let n = left.min(slots);
                strict_push_all(&mut producer, next..next + n);
                let start = Instant::now();
                strict_take_each(&mut consumer, next..next + n);
                elapsed += start.elapsed();
                next += n;
                left -= n;
            }
            elapsed
        });
    });

    let relaxed = area(DEFAULT_RING, Mode::Relaxed);
    let mut producer = RelaxedProducer::new(Arc::clone(&relaxed));
    let mut consumer = RelaxedConsumer::new(Arc::clone(&relaxed));
    let mut next = 0;
    group.bench_function("relaxed_push", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            relaxed_push_all(&mut producer, next..next + iters);
            next += iters;
            start.elapsed()
        });
    });
    // Catch up first, so that every drain below finds nothing.
    out.clear();
    consumer.drain(&mut out).expect("relaxed drain");
    group.bench_function("relaxed_drain_empty", |b| {
        b.iter(|| {
            out.clear();
            let drained = consumer.drain(&mut out).expect("relaxed drain");
            assert_eq!(drained.received, 0);
        });
    });
    group.finish();
}

/// 19 benchmarks in about two minutes on an idle 2-core machine: short enough to find a
/// quiet window on a shared one.
fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20)
}

criterion_group! {
    name = lock_overhead;
    config = config();
    targets = strict_group, relaxed_group, baselines, wakeup, primitives
}
criterion_main!(lock_overhead);
