//! What the samples say: every fault exactly once, in both protocols.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use shared_layout::device::{Device, DeviceWaiter};
use shared_layout::relaxed::RelaxedConsumer;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::{Area, Counters, Mode, Sample};

use crate::kmod::{self, Profiled};
use crate::Env;

/// Takes every sample until the session ends (the last process left).
pub fn take_until_ended(
    consumer: &mut StrictConsumer<DeviceWaiter>,
    out: &mut Vec<Sample>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        ensure!(Instant::now() < deadline, "the session never ended");
        if consumer.take(out, Some(Duration::from_secs(1)))? == Take::Ended {
            return Ok(());
        }
    }
}

fn minor_sum(samples: &[Sample]) -> u64 {
    samples.iter().map(|s| s.minor).sum()
}

fn ensure_in_order(samples: &[Sample]) -> Result<()> {
    for w in samples.windows(2) {
        ensure!(
            w[0].time_ns <= w[1].time_ns,
            "samples out of order: {:?} then {:?}",
            w[0],
            w[1]
        );
    }
    Ok(())
}

/// Polls the area's counters until `done` holds.
fn wait_for(area: &Area, done: impl Fn(&Counters) -> bool) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let counters = area.counters();
        if done(&counters) {
            return Ok(());
        }
        ensure!(
            Instant::now() < deadline,
            "the sampler is stuck: {counters:?}"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

fn start(mode: Mode) -> Result<(Device, Arc<Area>)> {
    let dev = kmod::follow_registrations()?;
    let area = dev.start(mode)?;
    Ok((dev, area))
}

pub fn every_fault_and_cpu_nanosecond_of_a_threaded_child_lands_in_one_sample(
    env: &Env,
) -> Result<()> {
    const PAGES: u64 = 3000;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let (dev, area) = start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());

    let mut child = Profiled::spawn(&["faults", &PAGES.to_string(), "3", "exit"])?;
    let before = child.wait_asleep()?;
    // Single-threaded and asleep: its main thread's CPU time is the process's.
    let cpu_before = kmod::main_thread_cpu_ns(child.pid)?;
    kmod::register(child.pid)?;
    thread::sleep(Duration::from_millis(200));
    // Sampling reads the counters without touching them.
    let (_, during) = kmod::stat(child.pid)?;
    ensure!(
        during == before,
        "/proc/pid/stat minflt went from {before} to {during} while asleep and profiled"
    );

    child.go()?;
    ensure!(child.read_line()? == "done");
    child.wait_exited()?;
    let reaped = child.reap()?;
    ensure!(reaped.status == 0, "child failed: {:#x}", reaped.status);
    let expected = reaped.minflt - before;
    ensure!(
        expected >= PAGES,
        "wait4 reports {expected} faults since registration for {PAGES} fresh pages"
    );

    let mut samples = Vec::new();
    take_until_ended(&mut consumer, &mut samples)?;
    ensure!(samples.len() > 1, "only {} samples", samples.len());
    ensure_in_order(&samples)?;
    let got = minor_sum(&samples);
    ensure!(
        got == expected,
        "samples sum to {got} minor faults, wait4 says {expected}"
    );
    // CPU time in nanoseconds, the same clock wait4 reports (which only
    // truncates utime and stime to microseconds each).
    let cpu: u64 = samples.iter().map(|s| s.cpu_ns).sum();
    let cpu_expected = reaped.cpu_ns - cpu_before;
    ensure!(
        cpu <= cpu_expected + 2_000 && cpu + 2_000 > cpu_expected,
        "samples sum to {cpu} ns of CPU, wait4 says {cpu_expected} ns"
    );
    ensure!(
        kmod::registered()?.is_empty(),
        "the reaped child is still registered"
    );
    drop((consumer, dev));
    module.unload()
}

pub fn faults_before_the_session_starts_reach_its_first_sample(env: &Env) -> Result<()> {
    const PAGES: u64 = 2000;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let mut child = Profiled::spawn(&["faults", &PAGES.to_string(), "0", "stay"])?;
    let before = child.wait_asleep()?;
    kmod::register(child.pid)?;
    child.go()?;
    ensure!(child.read_line()? == "done");
    child.wait_asleep()?;
    thread::sleep(Duration::from_millis(100));

    let (dev, area) = start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    let mut samples = Vec::new();
    let took = consumer.take(&mut samples, Some(Duration::from_secs(5)))?;
    ensure!(
        matches!(took, Take::Samples(_)),
        "no first sample: {took:?}"
    );
    ensure!(
        samples[0].minor >= PAGES,
        "first sample has {} minor faults, the child took {PAGES}+ before",
        samples[0].minor
    );

    let reaped = child.reap()?;
    take_until_ended(&mut consumer, &mut samples)?;
    let (got, expected) = (minor_sum(&samples), reaped.minflt - before);
    ensure!(
        got == expected,
        "samples sum to {got} minor faults, wait4 says {expected}"
    );
    drop((consumer, dev));
    module.unload()
}

pub fn strict_mode_with_a_slow_consumer_on_a_small_ring_loses_nothing(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=1", "buffer_pages=2"])?;
    let (dev, area) = start(Mode::Strict)?;
    let slots = area.slot_count();
    let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());

    let mut churn = Profiled::spawn(&["churn"])?;
    let before = churn.wait_asleep()?;
    kmod::register(churn.pid)?;
    churn.go()?;
    // Slow: we look only once the ring is full and the sampler has waited.
    let mut samples = Vec::new();
    for _ in 0..5 {
        wait_for(&area, |c| c.write_seq - c.read_seq == slots)?;
        thread::sleep(Duration::from_millis(200));
        consumer.take(&mut samples, Some(Duration::from_millis(10)))?;
    }
    churn.go()?;
    let reaped = churn.reap()?;
    take_until_ended(&mut consumer, &mut samples)?;

    let counters = area.counters();
    let received = samples.len() as u64;
    ensure!(
        received == counters.write_seq,
        "received {received} of {} samples written",
        counters.write_seq
    );
    ensure!(
        received >= 4 * slots,
        "{received} samples did not wrap a {slots}-slot ring 4 times"
    );
    ensure!(
        counters.blocked_ns > 0,
        "the sampler never waited for a free slot"
    );
    ensure_in_order(&samples)?;
    // A sample written after a wait covers the longer interval.
    let longest = samples
        .windows(2)
        .map(|w| w[1].time_ns - w[0].time_ns)
        .max()
        .unwrap_or(0);
    ensure!(
        longest >= 100_000_000,
        "no sample covers a wait: longest gap {longest} ns"
    );
    let (got, expected) = (minor_sum(&samples), reaped.minflt - before);
    ensure!(
        got == expected,
        "samples sum to {got} minor faults, wait4 says {expected}"
    );
    drop((consumer, area, dev));
    module.unload()
}

pub fn relaxed_consumer_sleeping_past_a_wrap_accounts_for_every_sample(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=1", "buffer_pages=2"])?;
    let (dev, area) = start(Mode::Relaxed)?;
    let mut consumer = RelaxedConsumer::new(area.clone());

    let mut churn = Profiled::spawn(&["churn"])?;
    let before = churn.wait_asleep()?;
    kmod::register(churn.pid)?;
    churn.go()?;
    let (mut samples, mut lost) = (Vec::new(), 0u64);
    for _ in 0..3 {
        // Sleep until the sampler has lapped us.
        let read = area.counters().read_seq;
        wait_for(&area, |c| c.write_seq > read + area.slot_count() + 8)?;
        lost += consumer.drain(&mut samples)?.lost;
    }
    churn.go()?;
    let reaped = churn.reap()?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let drained = consumer.drain(&mut samples)?;
        lost += drained.lost;
        if drained.ended {
            break;
        }
        ensure!(Instant::now() < deadline, "the session never ended");
        thread::sleep(Duration::from_millis(20));
    }

    let counters = area.counters();
    let received = samples.len() as u64;
    ensure!(
        received + lost == counters.write_seq,
        "received {received} + lost {lost} != produced {}",
        counters.write_seq
    );
    ensure!(
        lost > 0,
        "nothing was lost: the consumer never slept past a wrap"
    );
    ensure!(
        counters.overwritten > 0,
        "the module did not count what it overwrote"
    );
    ensure_in_order(&samples)?;
    let (got, total) = (minor_sum(&samples), reaped.minflt - before);
    ensure!(
        got <= total,
        "received samples hold {got} minor faults, more than the {total} taken"
    );
    drop((consumer, area, dev));
    module.unload()
}
