//! Orderings that chance rarely produces, forced: the test thread runs as
//! SCHED_FIFO on the sampler's CPU, so the sampler cannot run between two
//! of its steps, and when the thread wakes it preempts the sampler
//! wherever it is.

use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::device::{opened_with_sampler, sampler_pid};
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::rng::Rng;

fn affinity(pid: u32) -> Result<libc::cpu_set_t> {
    // SAFETY: cpu_set_t is plain old data; the kernel fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local of the size given.
    let ret =
        unsafe { libc::sched_getaffinity(pid as i32, size_of::<libc::cpu_set_t>(), &mut set) };
    ensure!(
        ret == 0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    Ok(set)
}

fn set_affinity(pid: u32, set: &libc::cpu_set_t) -> Result<()> {
    // SAFETY: a valid pointer to a set of the size given.
    let ret = unsafe { libc::sched_setaffinity(pid as i32, size_of::<libc::cpu_set_t>(), set) };
    ensure!(
        ret == 0,
        "sched_setaffinity {pid}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

fn only_cpu0() -> libc::cpu_set_t {
    // SAFETY: cpu_set_t is plain old data; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        set
    }
}

fn set_fifo(on: bool) -> Result<()> {
    let param = libc::sched_param {
        sched_priority: i32::from(on),
    };
    let policy = if on {
        libc::SCHED_FIFO
    } else {
        libc::SCHED_OTHER
    };
    // SAFETY: plain syscall on ourselves with a valid parameter.
    let ret = unsafe { libc::sched_setscheduler(0, policy, &param) };
    ensure!(
        ret == 0,
        "sched_setscheduler: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

pub fn a_process_registered_and_unregistered_between_two_sampler_looks_still_ends_the_session(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    // A period longer than the test: only the registration events drive it.
    let module = kmod::insmod(env, &["period_ms=10000"])?;
    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());

    // The sampler is idle (nobody registered) and shares CPU 0 with us.
    let ours = affinity(0)?;
    set_affinity(sampler_pid()?, &only_cpu0())?;
    set_affinity(0, &only_cpu0())?;
    set_fifo(true)?;
    let (r, u) = (kmod::register(sleeper.pid), kmod::unregister(sleeper.pid));
    set_fifo(false)?;
    set_affinity(0, &ours)?;
    r?;
    u?;

    let mut samples = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if consumer.take(&mut samples, Some(Duration::from_millis(500)))? == Take::Ended {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "the session never ended: the sampler missed a registration that came and went"
        );
    }
    ensure!(
        samples.len() == 1,
        "{} samples for one short registration",
        samples.len()
    );
    drop((consumer, dev));
    sleeper.go()?;
    sleeper.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

/// Rounds of "unregister at a random moment of the sampler's tick".
const MID_TICK_ROUNDS: u32 = 200;

pub fn a_process_unregistered_while_the_sampler_is_mid_tick_still_ends_the_session(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=1"])?;
    // Many threads: reading its totals, the sampler's tick is long enough
    // for our wake-ups to land inside it.
    let mut sleeper = Profiled::spawn_mode("hardening-child", &["threads", "1000"], None)?;
    ensure!(
        sleeper.read_line()? == "ready",
        "the threaded child is not ready"
    );
    let (dev, sampler) = opened_with_sampler(kmod::follow_registrations)?;
    let mut rng = Rng::from_env_or_clock();
    let ours = affinity(0)?;
    set_affinity(sampler, &only_cpu0())?;
    set_affinity(0, &only_cpu0())?;
    let mut caught_running = 0;
    let outcome = (|| -> Result<()> {
        for round in 0..MID_TICK_ROUNDS {
            let area = dev.start(Mode::Strict)?;
            let mut consumer = StrictConsumer::new(area, dev.waiter());
            kmod::register(sleeper.pid)?;
            set_fifo(true)?;
            // Waking from this, we preempt the sampler wherever it is.
            thread::sleep(Duration::from_micros(rng.below(8000)));
            caught_running += u32::from(kmod::stat(sampler)?.0 == 'R');
            let u = kmod::unregister(sleeper.pid);
            set_fifo(false)?;
            u?;
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut samples = Vec::new();
            while consumer.take(&mut samples, Some(Duration::from_millis(100)))? != Take::Ended {
                ensure!(
                    Instant::now() < deadline,
                    "round {round}: the session never ended after the last process left \
                     (sampler caught mid-tick {caught_running} times so far, seed {})",
                    rng.seed()
                );
            }
        }
        Ok(())
    })();
    set_fifo(false)?;
    set_affinity(0, &ours)?;
    outcome?;
    // Otherwise every unregistration came between two ticks: the race was never run.
    ensure!(
        caught_running > 0,
        "in {MID_TICK_ROUNDS} rounds the sampler was never caught mid-tick (seed {})",
        rng.seed()
    );
    crate::harness::figure(&format!(
        "races: {MID_TICK_ROUNDS} unregistrations at random moments of a 1 ms tick, \
         {caught_running} with the sampler preempted mid-tick"
    ));
    drop(dev);
    sleeper.go()?;
    sleeper.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child threads <n>`: a process of `n` sleeping threads, until
/// its stdin closes.
pub fn threads(n: &str) -> Result<()> {
    let n: usize = n.parse()?;
    for _ in 0..n {
        thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| loop {
                thread::park();
            })?;
    }
    println!("ready");
    std::io::Write::flush(&mut std::io::stdout())?;
    std::io::Read::read(&mut std::io::stdin(), &mut [0u8; 1])?;
    Ok(())
}
