//! What the samples say: every fault exactly once, in both protocols.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use shared_layout::abi;
use shared_layout::device::Device;
use shared_layout::relaxed::{Drain, RelaxedConsumer};
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::{Area, Counters, Mode, Sample};

use crate::device::{add, raw_open, set_mode, take_until_ended, Mapping};
use crate::harness::Env;
use crate::kmod::{self, Profiled};

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

/// Drains `consumer`, numbering what it received: a drain's samples are the last ones
/// before the read_seq it published (`area`'s, which only the consumer writes).
fn drain_numbered(
    consumer: &mut RelaxedConsumer,
    area: &Area,
    out: &mut Vec<(u64, Sample)>,
) -> Result<Drain> {
    let mut batch = Vec::new();
    let drain = consumer.drain(&mut batch)?;
    let first = area.counters().read_seq - batch.len() as u64;
    out.extend((first..).zip(batch));
    Ok(drain)
}

/// Drains until the session ends (within 30 s), sleeping `pause` between drains.
fn drain_until_ended(
    consumer: &mut RelaxedConsumer,
    area: &Area,
    out: &mut Vec<(u64, Sample)>,
    pause: Duration,
) -> Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lost = 0;
    loop {
        let drained = drain_numbered(consumer, area, out)?;
        lost += drained.lost;
        if drained.ended {
            return Ok(lost);
        }
        ensure!(Instant::now() < deadline, "the session never ended");
        thread::sleep(pause);
    }
}

/// The relaxed ring's numbers, checked against time rather than against the consumer's
/// own arithmetic (received + lost == write_seq holds whatever the module did): each
/// sample is written at a deadline of its own, the deadlines a period apart, so two
/// delivered samples `k` numbers apart are at least `k` periods apart, less the lateness
/// of the first (its timestamp is taken when it is collected, after its deadline; less
/// than a period: one woken later skips the deadlines it missed; but its collection may
/// be held up on a loaded machine past the next deadline, whose sample then follows at
/// once: so the first is one whose next number came half a period later or more). Any two samples, however
/// far apart: a module that skipped a number now and then (or wrote a sample no deadline
/// collected) runs ahead of the clock by a period each time. The session's last sample is
/// collected when its process leaves, not at a deadline: it is left out, and so is the
/// first (number 0): its period starts when the process joins, and its collection, the
/// session's first, allocates and reads everything for the first time (stamped 20.4 ms
/// after a 20 ms deadline once on the debug kernel, its next samples on time). `span_ns`: from
/// before the first process joined to after the end; no more samples (written or
/// deferred) than deadlines in it.
fn ensure_numbers_fit_the_time(
    samples: &[(u64, Sample)],
    counters: &Counters,
    period_ns: u64,
    span_ns: u64,
) -> Result<()> {
    let at_deadlines = samples[..samples.len().saturating_sub(1)]
        .iter()
        .filter(|(seq, _)| *seq > 0);
    // (s_j - s_i) * period - (t_j - t_i) at its largest for each j: against the i < j
    // where s_i * period - t_i is smallest.
    let ahead = |(seq, sample): &(u64, Sample)| {
        i128::from(*seq) * i128::from(period_ns) - i128::from(sample.time_ns)
    };
    let stamped: std::collections::HashMap<u64, u64> =
        samples.iter().map(|(seq, s)| (*seq, s.time_ns)).collect();
    let on_time = |(seq, sample): &(u64, Sample)| {
        stamped
            .get(&(seq + 1))
            .is_some_and(|next| next.saturating_sub(sample.time_ns) >= period_ns / 2)
    };
    let mut earliest = None::<(i128, u64)>;
    for numbered in at_deadlines {
        let (seq, _) = *numbered;
        if let Some((low, from)) = earliest {
            let over = ahead(numbered) - low;
            ensure!(
                over < i128::from(period_ns),
                "samples {from} to {seq}: {} numbers of {period_ns} ns periods run {over} ns \
                 ahead of their timestamps, a period or more",
                seq - from
            );
        }
        if on_time(numbered) && earliest.is_none_or(|(low, _)| ahead(numbered) < low) {
            earliest = Some((ahead(numbered), seq));
        }
    }
    let deadlines = span_ns / period_ns + 1;
    ensure!(
        counters.write_seq + counters.deferred <= deadlines,
        "{} samples written and {} deferred in {span_ns} ns: more than its {deadlines} \
         deadlines of {period_ns} ns",
        counters.write_seq,
        counters.deferred
    );
    Ok(())
}

/// A relaxed session with a churning child registered and set going, and the child's
/// minor faults before it went.
fn relaxed_session_over_a_churner() -> Result<(Device, Arc<Area>, RelaxedConsumer, Profiled, u64)> {
    let (dev, area) = start(Mode::Relaxed)?;
    let consumer = RelaxedConsumer::new(area.clone());
    let mut churn = Profiled::spawn(&["churn"])?;
    let before = churn.wait_asleep()?;
    kmod::register(churn.pid)?;
    churn.go()?;
    Ok((dev, area, consumer, churn, before))
}

pub fn relaxed_consumer_sleeping_past_a_wrap_accounts_for_every_sample(env: &Env) -> Result<()> {
    const PERIOD_NS: u64 = 20_000_000;
    let module = kmod::insmod(env, &["period_ms=20", "buffer_pages=2"])?;

    // Kept up with (a drain every 50 ms; the 127 slots last 2.5 s): nothing is lost, so
    // every fault since the registration is in the samples.
    let began = abi::monotonic_ns();
    let (dev, area, mut consumer, mut churn, before) = relaxed_session_over_a_churner()?;
    let mut samples = Vec::new();
    let mut lost = 0;
    let kept_up = Instant::now();
    while kept_up.elapsed() < Duration::from_secs(1) {
        lost += drain_numbered(&mut consumer, &area, &mut samples)?.lost;
        thread::sleep(Duration::from_millis(50));
    }
    churn.go()?;
    let reaped = churn.reap()?;
    lost += drain_until_ended(
        &mut consumer,
        &area,
        &mut samples,
        Duration::from_millis(20),
    )?;
    let counters = area.counters();
    ensure!(
        lost == 0 && samples.len() as u64 == counters.write_seq,
        "a consumer draining every 50 ms lost {lost} samples, received {} of {}",
        samples.len(),
        counters.write_seq
    );
    let received: Vec<Sample> = samples.iter().map(|(_, s)| *s).collect();
    ensure_in_order(&received)?;
    let (got, expected) = (minor_sum(&received), reaped.minflt - before);
    ensure!(
        got == expected,
        "relaxed samples, none lost, sum to {got} minor faults; wait4 says {expected}"
    );
    ensure_numbers_fit_the_time(&samples, &counters, PERIOD_NS, abi::monotonic_ns() - began)?;
    let kept_up = (expected, received.len());
    drop((consumer, area, dev));

    // Lapped three times over: what is lost is counted.
    let began = abi::monotonic_ns();
    let (dev, area, mut consumer, mut churn, before) = relaxed_session_over_a_churner()?;
    let (mut samples, mut lost) = (Vec::new(), 0u64);
    for _ in 0..3 {
        // Sleep until the sampler has lapped us.
        let read = area.counters().read_seq;
        wait_for(&area, |c| c.write_seq > read + area.slot_count() + 8)?;
        lost += drain_numbered(&mut consumer, &area, &mut samples)?.lost;
    }
    churn.go()?;
    let reaped = churn.reap()?;
    lost += drain_until_ended(
        &mut consumer,
        &area,
        &mut samples,
        Duration::from_millis(20),
    )?;

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
    let unnumbered: Vec<Sample> = samples.iter().map(|(_, s)| *s).collect();
    ensure_in_order(&unnumbered)?;
    ensure_numbers_fit_the_time(&samples, &counters, PERIOD_NS, abi::monotonic_ns() - began)?;
    let (got, total) = (minor_sum(&unnumbered), reaped.minflt - before);
    ensure!(
        got <= total,
        "received samples hold {got} minor faults, more than the {total} taken"
    );
    crate::harness::figure(&format!(
        "relaxed: kept up with, {} minor faults all in {} samples; lapped, {received} \
         received and {lost} lost of {} written",
        kept_up.0, kept_up.1, counters.write_seq
    ));
    drop((consumer, area, dev));
    module.unload()
}

/// A period whose sample the consumer's held lock kept out of the ring is deferred, its
/// counts pending: the next sample that gets in carries them, none lost, none twice. The
/// ring is read slot by slot, not through a consumer: the counts alone are judged.
pub fn a_deferred_periods_counts_arrive_in_the_next_sample_exactly(env: &Env) -> Result<()> {
    const PAGES: u64 = 2000;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let mut figures = Vec::new();
    for mode in [Mode::Strict, Mode::Relaxed] {
        let mut child = Profiled::spawn(&["faults", &PAGES.to_string(), "0", "stay"])?;
        let before = child.wait_asleep()?;
        let file = raw_open()?;
        add(&file, child.pid as i32, 0, 0).map_err(|e| anyhow::anyhow!("ADD: errno {e}"))?;
        set_mode(&file, mode.as_raw()).map_err(|e| anyhow::anyhow!("SET_MODE: errno {e}"))?;
        let map = Mapping::new(&file)?;
        map.lock_as_consumer()?;
        let written = map.write_seq();
        child.go()?;
        ensure!(child.read_line()? == "done");
        // Periods after the faults, each refused by the lock.
        let deferred = map.deferred();
        let deadline = Instant::now() + Duration::from_secs(20);
        while map.deferred() < deferred + 3 {
            ensure!(
                Instant::now() < deadline,
                "{mode}: deferred stuck at {}",
                map.deferred()
            );
            thread::sleep(Duration::from_millis(10));
        }
        ensure!(
            map.write_seq() == written,
            "{mode}: samples written while the lock was held"
        );
        let deferred = map.deferred();
        map.unlock_as_consumer();
        let reaped = child.reap()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        while !map.canceled() {
            ensure!(Instant::now() < deadline, "{mode}: the session never ended");
            thread::sleep(Duration::from_millis(10));
        }
        let written = map.write_seq();
        ensure!(
            written <= abi::slots_in(abi::BUFFER_PAGES_DEFAULT.into()),
            "{mode}: {written} samples wrapped the ring"
        );
        let minor: u64 = (0..written).map(|i| map.slot_faults(i).0).sum();
        let expected = reaped.minflt - before;
        ensure!(
            minor == expected,
            "{mode}: after {deferred} deferred periods the samples hold {minor} minor faults, \
             wait4 says {expected}"
        );
        figures.push(format!(
            "{mode}: {deferred} deferred, {minor} minor faults in {written} samples"
        ));
    }
    crate::harness::figure(&format!("deferred: {}", figures.join("; ")));
    module.unload()
}
