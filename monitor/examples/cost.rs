//! What the monitor itself costs: its own CPU time while it profiles one sleeping process
//! for 10 s at 50 ms, procfs backend, side by side with `perf stat -I 50 -p` on the same
//! process in the same run, and with the floor of both: a thread of this program that
//! does nothing but wake at the same deadlines. A benchmark, not a test:
//!
//!     cargo build --release -p monitor && cargo run --release -p monitor --example cost [ROUNDS] [MONITOR]
//!
//! MONITOR defaults to the `monitor` built beside this example. Each tool is reaped with
//! wait4(): its CPU time is user + system, to the microsecond. docs/benchmarks.md has a
//! run ("What the monitor costs").

use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::stop;
use nix::time::{clock_gettime, ClockId};

mod common;

const PROFILE_FOR: Duration = Duration::from_secs(10);
const PERIOD_MS: &str = "50";

/// Starts a profiler of `pid`, or `None` when it is not installed.
fn start(program: &str, args: &[&str]) -> anyhow::Result<Option<Child>> {
    match Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => Ok(Some(child)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("starting {program}")),
    }
}

/// The floor: the CPU time, in ms, of a thread that only wakes every `period` for
/// [`PROFILE_FOR`], as any sampler must.
fn wake_only(period: Duration) -> anyhow::Result<f64> {
    let thread_cpu = || -> anyhow::Result<Duration> {
        Ok(clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID)
            .context("reading the thread's CPU clock")?
            .into())
    };
    let before = thread_cpu()?;
    let mut next = Instant::now();
    let end = next + PROFILE_FOR;
    while next + period <= end {
        next += period;
        thread::sleep(next.saturating_duration_since(Instant::now()));
    }
    Ok((thread_cpu()? - before).as_secs_f64() * 1e3)
}

fn main() -> anyhow::Result<()> {
    let (rounds, monitor) = common::rounds_and_monitor()?;

    let period = Duration::from_millis(PERIOD_MS.parse()?);
    println!(
        "| round | mode | monitor (ms CPU / 10 s) | perf stat -I 50 (ms CPU / 10 s) | \
         monitor / perf | a thread that only wakes (ms CPU / 10 s) |"
    );
    println!("|---:|---|---:|---:|---:|---:|");
    for round in 1..=rounds {
        for mode in ["strict", "relaxed"] {
            let mut sleeper = Command::new("sleep").arg("3600").spawn()?;
            let pid = sleeper.id().to_string();
            let monitor = start(
                monitor.to_str().context("a monitor path in UTF-8")?,
                &[
                    "--backend",
                    "procfs",
                    "--mode",
                    mode,
                    "--period-ms",
                    PERIOD_MS,
                    "--pid",
                    &pid,
                    "-o",
                    "/dev/null",
                ],
            )?
            .context("starting the monitor")?;
            let perf = start(
                "perf",
                &["stat", "-I", PERIOD_MS, "-p", &pid, "-o", "/dev/null"],
            )?;
            let floor_ms = thread::spawn(move || wake_only(period))
                .join()
                .expect("the waking thread panicked")?;
            let monitor_ms = stop(&monitor)?;
            let perf_ms = perf.as_ref().map(stop).transpose()?;
            sleeper.kill()?;
            sleeper.wait()?;
            let (perf_cell, ratio) = match perf_ms {
                Some(p) => (format!("{p:.1}"), format!("{:.2}", monitor_ms / p)),
                None => ("(perf not installed)".into(), "".into()),
            };
            println!(
                "| {round} | {mode} | {monitor_ms:.1} | {perf_cell} | {ratio} | {floor_ms:.1} |"
            );
        }
    }
    Ok(())
}
