//! Orderings that chance rarely produces, forced: the test thread runs as
//! SCHED_FIFO on the sampler's CPU, so the sampler cannot run between two
//! of its steps.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use shared_layout::device::Device;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::klog;
use crate::kmod::{self, Profiled};
use crate::lifecycle::sampler_pid;
use crate::Env;

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
    let dev = Device::open()?;
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
