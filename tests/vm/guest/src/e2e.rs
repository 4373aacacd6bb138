//! The real monitor and work binaries (from the monitor crate) against the
//! real module: what a user runs.

use std::process::Command;

use anyhow::{ensure, Context, Result};

use crate::monitor::csv_minor;

use crate::harness::Env;
use crate::kmod;

pub fn monitor_profiles_work_through_the_module_in_both_modes(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=10"])?;
    for mode in ["strict", "relaxed"] {
        let csv = format!("/tmp/samples-{mode}.csv");
        // 8 MiB, 4000 random accesses 5 times: most of its 2048 pages fault.
        let out = Command::new("/bin/monitor")
            .args([
                "run",
                "--backend",
                "kernel",
                "--mode",
                mode,
                "--interval",
                "100ms",
            ])
            .args([
                "-o",
                &csv,
                "--",
                "work",
                "8",
                "R",
                "4000",
                "5",
                "--sleep-ms",
                "50",
            ])
            .output()
            .context("running /bin/monitor")?;
        ensure!(
            out.status.success(),
            "monitor --mode {mode} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let (minor, rows) = csv_minor(&csv)?;
        let rows = rows.len();
        ensure!(
            rows >= 10,
            "--mode {mode}: only {rows} samples for a half-second run"
        );
        ensure!(
            minor >= 1000,
            "--mode {mode}: only {minor} minor faults for 8 MiB touched"
        );
        ensure!(
            kmod::registered()?.is_empty(),
            "work is still registered after {mode}"
        );
    }
    module.unload()
}
