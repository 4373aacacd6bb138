//! The real monitor and work binaries (from the monitor crate) against the
//! real module: what a user runs.

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use anyhow::{ensure, Context, Result};

use crate::monitor::{csv_minor, finished, monitor_run, rusage_minor};

use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};

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

pub fn a_descendant_nobody_waits_for_keeps_its_faults_and_the_trees_later_ones_count(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let report = "/tmp/autoreaped-child-minflt";
    let csv = "/tmp/autoreap.csv";
    let guest = std::env::current_exe()?;
    let guest = guest.to_str().context("guest path")?;
    let cmd = [guest, "child", "autoreap-tree", "30000", "30000", report];
    let run = monitor_run(None, "kernel", "strict", csv, &[], &cmd)?;
    let stderr = finished(
        "monitor run of the autoreaping parent",
        run.wait_with_output()?,
    )?;
    let (sum, rows) = csv_minor(csv)?;
    let parent = rusage_minor(&stderr)?;
    let child: u64 = fs::read_to_string(report)?.trim().parse()?;
    // The child's own few faults after it reported (the report's write, its exit)
    // count too, and may fall before or after its last look.
    let expected = parent + child;
    crate::harness::figure(&format!(
        "departed: the parent's rusage {parent} and its autoreaped child's {child} minor \
         faults; the samples hold {sum} in {} rows",
        rows.len()
    ));
    ensure!(
        sum.abs_diff(expected) <= 64,
        "the samples hold {sum} minor faults; the parent took {parent}, its child {child}"
    );
    module.unload()?;
    mark.ensure_clean()
}

/// A bare monitor (every registration, with trees) and a child registered by
/// its parent, which then lets it touch 3000 pages, stay 200 ms and exit,
/// and reaps it: the monitor started before, with, and after the
/// registration. Each CSV holds exactly the child's faults since it was
/// registered, and the monitor ends once it is gone.
pub fn a_bare_monitor_gets_a_registered_childs_faults_however_their_starts_fall(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=50"])?;
    let mut said = Vec::new();
    for (mode, lead_ms) in [
        ("strict", 1000i64),
        ("relaxed", 1000),
        ("strict", 0),
        ("relaxed", 0),
        ("strict", -100),
        ("relaxed", -100),
    ] {
        let csv = format!("/tmp/bare-{mode}-{lead_ms}.csv");
        let mut child = Profiled::spawn(&["faults", "3000", "0", "exit"])?;
        let start_monitor = || {
            Command::new("/bin/monitor")
                .args([
                    "--backend",
                    "kernel",
                    "--mode",
                    mode,
                    "--interval",
                    "100ms",
                    "-o",
                    &csv,
                ])
                .stderr(Stdio::piped())
                .spawn()
                .context("starting a bare monitor")
        };
        let mut monitor = None;
        if lead_ms >= 0 {
            monitor = Some(start_monitor()?);
            thread::sleep(Duration::from_millis(lead_ms as u64));
        }
        let base = child.wait_asleep()?;
        kmod::register(child.pid)?;
        if lead_ms < 0 {
            monitor = Some(start_monitor()?);
        }
        child.go()?;
        ensure!(child.read_line()? == "done");
        thread::sleep(Duration::from_millis(200));
        let reaped = child.reap()?;
        let monitor = monitor.context("no monitor")?;
        let stderr = finished(
            &format!("the bare monitor ({mode}, {lead_ms} ms)"),
            monitor.wait_with_output()?,
        )?;
        let (sum, rows) = csv_minor(&csv)?;
        let expected = reaped.minflt - base;
        said.push(format!(
            "{mode} {lead_ms:+} ms: {sum} of {expected} in {} rows",
            rows.len()
        ));
        ensure!(
            sum == expected,
            "bare monitor {mode}, started {lead_ms} ms before the registration: {sum} minor \
             faults sampled in {} rows, the child took {expected} since it was registered: {stderr}",
            rows.len()
        );
    }
    crate::harness::figure(&format!("bare monitor: {}", said.join("; ")));
    module.unload()?;
    mark.ensure_clean()
}
