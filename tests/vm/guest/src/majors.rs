//! Major faults, for real: pages pushed out to swap on zram and read back, each a
//! swap-in the kernel counts as a major fault, sampled by either backend and held
//! against what wait4() says.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context, Result};

use crate::harness::Env;
use crate::kmod::{self, Profiled};
use crate::monitor::csv_column;
use crate::zram::ZramSwap;

/// Pages each process pushes out and reads back.
const PAGES: u64 = 2000;

pub fn major_faults_of_pages_swapped_in_sum_to_wait4_in_both_backends(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=20"])?;
    let _swap = ZramSwap::on(64)?;
    let mut figures = Vec::new();
    for backend in ["kernel", "procfs"] {
        let mut child = Profiled::spawn(&["swapped", &PAGES.to_string()])?;
        // Asleep in its read: these are its counts until it is released.
        let before = kmod::faults(child.pid)?;
        let mut monitor = Command::new("/bin/monitor")
            .args(["--backend", backend, "--pid", &child.pid.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running /bin/monitor")?;
        let mut rows = BufReader::new(monitor.stdout.take().context("no stdout")?);
        // The first lines (the metadata and the header) come once the monitor holds the
        // process: it counts from here.
        let mut csv = String::new();
        rows.read_line(&mut csv)?;
        child.go()?;
        ensure!(child.read_line()? == "done");
        child.go()?;
        child.wait_exited()?;
        // The module sees the end at the reap; the procfs backend reads the zombie, and
        // ends, before it.
        let reaped = if backend == "kernel" {
            Some(child.reap()?)
        } else {
            None
        };
        rows.read_to_string(&mut csv)?;
        let out = monitor.wait_with_output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.success(),
            "{backend}: the monitor failed: {stderr}"
        );
        let reaped = match reaped {
            Some(reaped) => reaped,
            None => child.reap()?,
        };
        let expected = (reaped.minflt - before.0, reaped.majflt - before.1);
        let sampled = (
            csv_column(&csv, "minor")?.iter().sum::<u64>(),
            csv_column(&csv, "major")?.iter().sum::<u64>(),
        );
        figures.push(format!(
            "{backend}: {} major and {} minor faults sampled",
            sampled.1, sampled.0
        ));
        ensure!(
            expected.1 >= PAGES / 2,
            "{backend}: reading {PAGES} pages back from swap took {} major faults",
            expected.1
        );
        ensure!(
            sampled == expected,
            "{backend}: the samples hold {sampled:?} (minor, major) faults, wait4 says \
             {expected:?}: {stderr}"
        );
    }
    crate::harness::figure(&format!(
        "majors: {PAGES} pages swapped out to zram and read back: {}, each = wait4",
        figures.join("; ")
    ));
    module.unload()
}
