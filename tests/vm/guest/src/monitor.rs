//! The real monitor (`/bin/monitor`) run by the tests, and what it wrote: its CSV's
//! columns, its summary's rusage.

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Output};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// The `minor` column of a monitor CSV: its sum, and the column row by row.
pub fn csv_minor(path: &str) -> Result<(u64, Vec<u64>)> {
    let text = fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
    let rows = csv_column(&text, "minor")?;
    Ok((rows.iter().sum(), rows))
}

/// The column `name` of a monitor CSV, row by row (after its `#` metadata line).
pub fn csv_column(text: &str, name: &str) -> Result<Vec<u64>> {
    let mut lines = text.lines().filter(|line| !line.starts_with('#'));
    let header: Vec<&str> = lines.next().context("empty CSV")?.split(',').collect();
    let col = header
        .iter()
        .position(|h| *h == name)
        .with_context(|| format!("no {name} column in {header:?}"))?;
    lines
        .map(|line| {
            line.split(',')
                .nth(col)
                .with_context(|| format!("short row {line:?}"))?
                .parse::<u64>()
                .with_context(|| format!("row {line:?}"))
        })
        .collect()
}

/// The command's minor faults as the monitor's summary reports its wait4() rusage.
pub(crate) fn rusage_minor(stderr: &str) -> Result<u64> {
    let line = stderr
        .lines()
        .find(|l| l.trim_start().starts_with("command rusage"))
        .with_context(|| format!("no command rusage in the summary:\n{stderr}"))?;
    line.split_whitespace()
        .nth(2)
        .context("short rusage line")?
        .parse()
        .with_context(|| format!("{line:?}"))
}

/// `monitor run --backend BACKEND --mode MODE -o CSV [EXTRA...] -- CMD...`, as `uid`.
pub(crate) fn monitor_run(
    uid: Option<u32>,
    backend: &str,
    mode: &str,
    csv: &str,
    extra: &[&str],
    cmd: &[&str],
) -> Result<std::process::Child> {
    let mut c = Command::new("/bin/monitor");
    if let Some(uid) = uid {
        c.uid(uid).gid(uid);
    }
    c.args([
        "run",
        "--backend",
        backend,
        "--mode",
        mode,
        "--interval",
        "100ms",
    ])
    .args(["-o", csv])
    .args(extra)
    .arg("--")
    .args(cmd)
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .context("running /bin/monitor")
}

pub(crate) fn finished(what: &str, out: Output) -> Result<String> {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        out.status.success(),
        "{what} failed ({}): {stderr}",
        out.status
    );
    Ok(stderr)
}

/// The monitor's output once it has ended, which it must within `limit`: else it is
/// killed, and its stderr says where it was (a monitor that waits for what never ends
/// fails its test instead of the whole run's time limit).
pub(crate) fn within(mut monitor: std::process::Child, limit: Duration) -> Result<Output> {
    let deadline = Instant::now() + limit;
    while monitor.try_wait()?.is_none() {
        if Instant::now() >= deadline {
            monitor.kill()?;
            let out = monitor.wait_with_output()?;
            bail!(
                "the monitor did not end within {limit:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(50));
    }
    Ok(monitor.wait_with_output()?)
}
