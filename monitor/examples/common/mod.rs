//! What the monitor's benchmarks share: their arguments, and stopping a profiler as a user
//! would.

#![allow(dead_code)] // each example uses its own subset

use std::path::PathBuf;
use std::process::Child;

use anyhow::{ensure, Context};
use monitor::command::child;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `[ROUNDS] [MONITOR]`: 3 rounds, and the `monitor` built beside the example, by default.
pub fn rounds_and_monitor() -> anyhow::Result<(u32, PathBuf)> {
    let mut args = std::env::args().skip(1);
    let rounds: u32 = args.next().map_or(Ok(3), |r| r.parse()).context("ROUNDS")?;
    let monitor = match args.next() {
        Some(path) => PathBuf::from(path),
        None => std::env::current_exe()?
            .parent()
            .and_then(|examples| examples.parent())
            .context("no directory beside this example")?
            .join("monitor"),
    };
    ensure!(
        monitor.exists(),
        "{} does not exist: build it first",
        monitor.display()
    );
    Ok((rounds, monitor))
}

/// Stops `child` with SIGINT, as a user would, and returns its CPU time in ms (wait4()'s
/// user + system, to the microsecond).
pub fn stop(child: &Child) -> anyhow::Result<f64> {
    kill(Pid::from_raw(child.id() as i32), Signal::SIGINT).context("stopping a profiler")?;
    let (_, used, _) = child::wait(child.id()).context("reaping a profiler")?;
    Ok(used.cpu_ns as f64 / 1e6)
}
