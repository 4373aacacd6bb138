//! What `--prometheus` costs the monitor: two monitors profile the same sleeping process
//! for 20 s at 50 ms in the same run, procfs backend, one plain and one serving its
//! metrics to a scraper (this program) that fetches `/metrics` every second; the ratio
//! of their CPU times is the exporter's cost. A benchmark, not a test:
//!
//!     cargo build --release -p monitor && cargo run --release -p monitor --example export_cost [ROUNDS] [MONITOR]
//!
//! MONITOR defaults to the `monitor` built beside this example. Each monitor is stopped
//! with SIGINT and reaped with wait4(): its CPU time is user + system, to the
//! microsecond. docs/benchmarks.md has a run ("What --prometheus costs").

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::Context;
use common::stop;

mod common;

const PROFILE_FOR: Duration = Duration::from_secs(20);
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

fn start(monitor: &str, pid: &str, extra: &[&str]) -> anyhow::Result<Child> {
    Command::new(monitor)
        .args([
            "--backend",
            "procfs",
            "--period-ms",
            "50",
            "--pid",
            pid,
            "-o",
            "/dev/null",
        ])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting a monitor")
}

/// The address the monitor says it serves, from its first line on stderr.
fn served_at(stderr: &mut BufReader<ChildStderr>) -> anyhow::Result<String> {
    let mut line = String::new();
    stderr.read_line(&mut line)?;
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .with_context(|| format!("no address in {line:?}"))?;
    Ok(url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .to_owned())
}

/// Fetches `/metrics` from `addr` as Prometheus would; whether a whole answer came.
fn scrape(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return false;
    };
    let request = "GET /metrics HTTP/1.1\r\nHost: pfprof\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n\r\n";
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
}

fn main() -> anyhow::Result<()> {
    let (rounds, monitor) = common::rounds_and_monitor()?;
    let monitor = monitor.to_str().context("a monitor path in UTF-8")?;

    println!(
        "| round | plain (ms CPU / 20 s) | --prometheus, scraped every 1 s | scrapes | ratio |"
    );
    println!("|---:|---:|---:|---:|---:|");
    for round in 1..=rounds {
        let mut sleeper = Command::new("sleep").arg("3600").spawn()?;
        let pid = sleeper.id().to_string();
        let plain = start(monitor, &pid, &[])?;
        let mut exporting = start(
            monitor,
            &pid,
            &["--prometheus", "127.0.0.1:0", "--linger", "5s"],
        )?;
        let mut stderr = BufReader::new(exporting.stderr.take().context("its stderr")?);
        let addr = served_at(&mut stderr)?;
        let (done, scrapes) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicU32::new(0)),
        );
        let scraper = {
            let (done, scrapes) = (Arc::clone(&done), Arc::clone(&scrapes));
            thread::spawn(move || {
                let mut next = Instant::now();
                // Until the monitor is gone: its final values are scraped too.
                while !done.load(Ordering::Relaxed) {
                    if scrape(&addr) {
                        scrapes.fetch_add(1, Ordering::Relaxed);
                    }
                    next += SCRAPE_EVERY;
                    thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
        };
        thread::sleep(PROFILE_FOR);
        let plain_ms = stop(&plain)?;
        let exporting_ms = stop(&exporting)?;
        done.store(true, Ordering::Relaxed);
        scraper.join().expect("the scraper panicked");
        sleeper.kill()?;
        sleeper.wait()?;
        println!(
            "| {round} | {plain_ms:.1} | {exporting_ms:.1} | {} | {:.2} |",
            scrapes.load(Ordering::Relaxed),
            exporting_ms / plain_ms
        );
    }
    Ok(())
}
