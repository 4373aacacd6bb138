//! Loading, unloading, and the monitors that die badly.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::device::{opened_with_sampler, wakeups};
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};

fn files_exist() -> (bool, bool) {
    (
        Path::new(abi::PROC_PATH).exists(),
        Path::new(abi::DEVICE_PATH).exists(),
    )
}

pub fn module_loads_and_unloads_repeatedly_and_its_files_come_and_go(env: &Env) -> Result<()> {
    for round in 0..5 {
        ensure!(
            files_exist() == (false, false),
            "round {round}: files exist before insmod"
        );
        let module = kmod::insmod(env, &[])?;
        ensure!(kmod::is_loaded());
        ensure!(
            files_exist() == (true, true),
            "round {round}: (proc, dev) after insmod = {:?}",
            files_exist()
        );
        ensure!(
            kmod::registered()?.is_empty(),
            "a fresh module lists registrations"
        );
        module.unload()?;
        ensure!(
            !kmod::is_loaded(),
            "round {round}: still loaded after rmmod"
        );
        ensure!(
            !Path::new("/proc/pfprof").exists(),
            "round {round}: /proc/pfprof survived rmmod"
        );
        ensure!(
            !Path::new(abi::DEVICE_PATH).exists(),
            "round {round}: /dev/pfprof survived rmmod"
        );
    }
    Ok(())
}

pub fn module_refuses_out_of_range_parameters_at_load(env: &Env) -> Result<()> {
    for bad in [
        "period_ms=0",
        "period_ms=10001",
        "buffer_pages=0",
        "buffer_pages=1",
        "buffer_pages=65537",
        "buffer_pages=4294967295",
        "period_ms=-1",
        "period_ms=4294967296",
        "buffer_pages=lots",
        "fault_pages=1",
        "fault_pages=16385",
        "fault_cpu_records=63",
        "fault_cpu_records=65537",
        "max_fault_threads=0",
        "max_fault_threads=65537",
        "attribution=3",
    ] {
        let mark = klog::Mark::now()?;
        if kmod::try_insmod(env, &[bad])?.is_ok() {
            bail!("insmod {bad} succeeded");
        }
        ensure!(!kmod::is_loaded(), "{bad}: module loaded anyway");
        ensure!(files_exist() == (false, false), "{bad}: files left behind");
        // The log says which parameter and why: its range, or that it is no number.
        let (name, value) = bad.split_once('=').context("param")?;
        let said = mark.messages()?;
        ensure!(
            said.iter()
                .any(|m| m.contains(&format!("{bad} out of range"))
                    || m.contains(&format!("`{value}' invalid for parameter `{name}'"))),
            "insmod {bad}: no message naming it in {said:?}"
        );
    }
    for good in [
        ["period_ms=1", "buffer_pages=2"],
        ["period_ms=10000", "buffer_pages=4096"],
    ] {
        let module = kmod::insmod(env, &good)?;
        let dev = kmod::follow_registrations()?;
        let info = dev.info();
        ensure!(
            format!("period_ms={}", info.period_ns / 1_000_000) == good[0]
                && format!("buffer_pages={}", info.area_size / abi::PAGE_SIZE) == good[1],
            "{good:?}: module reports {info:?}"
        );
        drop(dev);
        module.unload()?;
    }
    Ok(())
}

pub fn sigkilled_monitor_holding_the_lock_does_not_stop_the_sampler(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=5"])?;
    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(sleeper.pid)?;

    let mut monitor = Profiled::spawn_raw(&["hold-lock"], None)?;
    let line = monitor.read_line()?;
    ensure!(line == "locked", "hold-lock child said {line:?}");
    // The sampler keeps going: every period's sample is deferred, not waited for.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut deferred = 0;
    while deferred < 10 {
        ensure!(Instant::now() < deadline, "deferred stuck at {deferred}");
        let line = monitor.read_line()?;
        deferred = line
            .strip_prefix("deferred ")
            .with_context(|| format!("hold-lock child said {line:?}"))?
            .parse()?;
    }
    monitor.kill()?;
    monitor.reap()?;

    // The lock dies with its session: a new monitor attaches and gets samples.
    let dev = kmod::follow_registrations().context("attaching after the killed monitor")?;
    let area = dev.start(Mode::Strict)?;
    // Checked before this session ever holds the lock: later, its own holds
    // may defer periods (a vCPU preempted mid-copy on a loaded host does).
    let inherited = area.counters().deferred;
    ensure!(
        inherited == 0,
        "the new session inherited deferred ({inherited})"
    );
    let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());
    let mut samples = Vec::new();
    let took = consumer.take(&mut samples, Some(Duration::from_secs(5)))?;
    ensure!(
        matches!(took, Take::Samples(n) if n > 0),
        "new monitor got {took:?}"
    );
    // Leaving ends the session: the consumer sees the end.
    kmod::unregister(sleeper.pid)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match consumer.take(&mut samples, Some(Duration::from_secs(1)))? {
            Take::Ended => break,
            _ => ensure!(Instant::now() < deadline, "the session never ended"),
        }
    }
    drop((consumer, area, dev));
    sleeper.go()?;
    sleeper.reap()?;
    module.unload()
}

pub fn consumer_blocked_in_wait_full_is_released_by_sigkill_and_the_module_unloads(
    env: &Env,
) -> Result<()> {
    let module = kmod::insmod(env, &[])?;
    let mut waiter = Profiled::spawn_raw(&["wait-full"], None)?;
    let line = waiter.read_line()?;
    ensure!(line == "waiting", "wait-full child said {line:?}");
    thread::sleep(Duration::from_millis(200));
    // While it is open, the module is pinned.
    ensure!(
        kmod::try_rmmod()?.is_err(),
        "rmmod succeeded with the device open"
    );
    let (state, _) = kmod::stat(waiter.pid)?;
    ensure!(
        state == 'S',
        "the consumer is not asleep in WAIT_FULL (state {state})"
    );
    waiter.kill()?;
    let reaped = waiter.reap()?;
    ensure!(
        libc::WIFSIGNALED(reaped.status) && libc::WTERMSIG(reaped.status) == libc::SIGKILL,
        "consumer status {:#x}",
        reaped.status
    );
    module.unload()
}

pub fn module_unloads_with_processes_registered_and_the_sampler_blocked(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=1", "buffer_pages=2"])?;
    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(sleeper.pid)?;
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    // Nobody consumes: the ring fills and the sampler blocks on empty.
    let deadline = Instant::now() + Duration::from_secs(20);
    while area.counters().write_seq < area.slot_count() || area.counters().blocked_ns == 0 {
        ensure!(
            Instant::now() < deadline,
            "the ring never filled: {:?}",
            area.counters()
        );
        thread::sleep(Duration::from_millis(20));
    }
    ensure!(
        area.counters().write_seq == area.slot_count(),
        "wrote past a full ring"
    );
    drop((area, dev));
    ensure!(kmod::registered()? == [sleeper.pid], "registration lost");
    module.unload()?;
    sleeper.go()?;
    let reaped = sleeper.reap()?;
    ensure!(
        reaped.status == 0,
        "the profiled child failed: {:#x}",
        reaped.status
    );
    Ok(())
}

pub fn consumer_sleeping_in_wait_full_wakes_when_the_last_process_leaves(env: &Env) -> Result<()> {
    // A period far longer than the test: only the unregistration can end it.
    let module = kmod::insmod(env, &["period_ms=10000"])?;
    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(sleeper.pid)?;
    let mut consumer = Profiled::spawn_raw(&["wait-full"], None)?;
    let line = consumer.read_line()?;
    ensure!(line == "waiting", "wait-full child said {line:?}");
    thread::sleep(Duration::from_millis(200));
    let (state, _) = kmod::stat(consumer.pid)?;
    ensure!(
        state == 'S',
        "the consumer is not asleep in WAIT_FULL (state {state})"
    );

    let left = Instant::now();
    kmod::unregister(sleeper.pid)?;
    let line = consumer.read_line()?;
    ensure!(
        left.elapsed() < Duration::from_secs(5),
        "the consumer woke only after {:?}",
        left.elapsed()
    );
    // One sample: the last process's final change, then the end.
    ensure!(line == "ended 1", "consumer said {line:?}");
    let reaped = consumer.reap()?;
    ensure!(reaped.status == 0, "consumer status {:#x}", reaped.status);
    sleeper.reap()?;
    module.unload()
}

pub fn sampler_sleeps_without_a_timer_while_nobody_is_registered(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=1"])?;
    let (dev, sampler) = opened_with_sampler(kmod::follow_registrations)?;
    // Relaxed: the ring never makes the sampler wait for us.
    let area = dev.start(Mode::Relaxed)?;
    // The start wakes it once, to find nobody to sample: let it go back to sleep.
    thread::sleep(Duration::from_millis(100));
    let quiet = |when: &str| -> Result<()> {
        let before = wakeups(sampler)?;
        thread::sleep(Duration::from_millis(500));
        let after = wakeups(sampler)?;
        ensure!(
            after == before,
            "{when}: the sampler woke {} times",
            after - before
        );
        Ok(())
    };
    quiet("after the session opened")?;

    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(sleeper.pid)?;
    let before = wakeups(sampler)?;
    thread::sleep(Duration::from_millis(500));
    let ticks = wakeups(sampler)? - before;
    ensure!(
        ticks >= 20,
        "only {ticks} sampler wake-ups in 500 ms at a 1 ms period"
    );

    kmod::unregister(sleeper.pid)?;
    thread::sleep(Duration::from_millis(100));
    quiet("after the last process left")?;
    sleeper.reap()?;
    drop((area, dev));
    module.unload()
}

pub fn registrations_and_sessions_churning_at_once_leave_the_kernel_clean(env: &Env) -> Result<()> {
    use std::sync::atomic::{AtomicU32, Ordering};
    const ROUNDS: u32 = 5;
    let module = kmod::insmod(env, &["period_ms=1", "buffer_pages=2"])?;
    let started = Instant::now();
    let (processes, sessions) = (&AtomicU32::new(0), &AtomicU32::new(0));
    // At least 4 s and 5 rounds of each (a loaded host may slow either side), at most 60 s.
    let churning = || {
        let elapsed = started.elapsed();
        elapsed < Duration::from_secs(60)
            && (elapsed < Duration::from_secs(4)
                || processes.load(Ordering::Relaxed) < ROUNDS
                || sessions.load(Ordering::Relaxed) < ROUNDS)
    };
    thread::scope(|s| -> Result<()> {
        // Processes come, fault, register, leave by U or by exiting.
        let registrar = s.spawn(|| -> Result<()> {
            let mut round = 0u32;
            while churning() {
                let mut p = Profiled::spawn(&["faults", "64", "2", "exit"])?;
                kmod::register(p.pid)?;
                p.go()?;
                if round.is_multiple_of(2) {
                    // Racing its exit: either errno is fine, nothing else is.
                    match kmod::write_status(format!("U {}\n", p.pid).as_bytes()) {
                        Ok(()) | Err(libc::ENOENT) | Err(libc::ESRCH) => {}
                        Err(e) => bail!("U racing exit: errno {e}"),
                    }
                }
                p.reap()?;
                round += 1;
                processes.store(round, Ordering::Relaxed);
            }
            Ok(())
        });
        // Monitors come, pick a mode, read a little, and go.
        let mut round = 0u32;
        while churning() {
            let dev = kmod::follow_registrations()?;
            let mode = if round.is_multiple_of(2) {
                Mode::Strict
            } else {
                Mode::Relaxed
            };
            let area = dev.start(mode)?;
            if mode == Mode::Strict {
                let mut c = StrictConsumer::new(area, dev.waiter());
                c.take(&mut Vec::new(), Some(Duration::from_millis(20)))?;
            } else {
                thread::sleep(Duration::from_millis(20));
                shared_layout::relaxed::RelaxedConsumer::new(area).drain(&mut Vec::new())?;
            }
            round += 1;
            sessions.store(round, Ordering::Relaxed);
        }
        registrar
            .join()
            .map_err(|_| anyhow::anyhow!("registrar panicked"))??;
        let (registered, opened) = (
            processes.load(Ordering::Relaxed),
            sessions.load(Ordering::Relaxed),
        );
        ensure!(
            registered >= ROUNDS && opened >= ROUNDS,
            "too little churn in {:?}: {registered} processes, {opened} sessions",
            started.elapsed()
        );
        crate::harness::figure(&format!(
            "churn: {registered} processes and {opened} sessions in {:.1} s",
            started.elapsed().as_secs_f64()
        ));
        Ok(())
    })?;
    module.unload()
}

/// The last process leaves while the strict ring of the session it was in is
/// full, so the last sample waits; that session closes and the next one
/// starts with nobody registered. The waiting sample belonged to the closed
/// session: the new one must get neither it nor its end.
pub fn a_last_sample_left_by_a_closed_session_neither_reaches_nor_ends_the_next(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=5", "buffer_pages=2"])?;
    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(sleeper.pid)?;
    let first = kmod::follow_registrations()?;
    let area = first.start(Mode::Strict)?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while area.counters().write_seq < area.slot_count() {
        ensure!(
            Instant::now() < deadline,
            "the ring never filled: {:?}",
            area.counters()
        );
        thread::sleep(Duration::from_millis(10));
    }
    // Its last sample is collected now and finds the ring full.
    kmod::unregister(sleeper.pid)?;
    thread::sleep(Duration::from_millis(50));
    ensure!(
        !area.counters().canceled,
        "a full ring took the last sample"
    );
    drop((area, first));

    let next = kmod::follow_registrations()?;
    let area = next.start(Mode::Strict)?;
    // Many periods: the sampler offers what it holds at every deadline.
    thread::sleep(Duration::from_millis(200));
    let counters = area.counters();
    ensure!(
        !counters.canceled && counters.write_seq == 0,
        "the closed session's last sample reached the next one: {counters:?}"
    );
    // The new session still works: a registration brings samples.
    kmod::register(sleeper.pid)?;
    let mut consumer = StrictConsumer::new(area.clone(), next.waiter());
    let mut samples = Vec::new();
    while samples.is_empty() {
        ensure!(Instant::now() < deadline, "no sample in the new session");
        consumer.take(&mut samples, Some(Duration::from_millis(100)))?;
    }
    kmod::unregister(sleeper.pid)?;
    crate::device::take_until_ended(&mut consumer, &mut samples)?;
    drop((consumer, area, next));
    sleeper.go()?;
    sleeper.reap()?;
    module.unload()?;
    mark.ensure_clean()
}
