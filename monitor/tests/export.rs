//! The exporters' identity and lingering, through the real binary: `--prometheus :PORT`
//! takes IPv4 and IPv6 scrapers, the series name the monitor, and the final values stay
//! until as many scrapers as `--linger-scrapers` asks have had them.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::process::{ChildStderr, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::MONITOR;

/// Reads the monitor's stderr up to a line containing `words`; that line.
fn line_with(stderr: &mut BufReader<ChildStderr>, words: &str) -> String {
    text_to(stderr, words)
        .lines()
        .last()
        .unwrap_or("")
        .to_owned()
}

/// Reads the monitor's stderr up to a line containing `words`; all it read.
fn text_to(stderr: &mut BufReader<ChildStderr>, words: &str) -> String {
    let mut text = String::new();
    loop {
        let at = text.len();
        let n = stderr.read_line(&mut text).expect("the monitor's stderr");
        assert!(n > 0, "the monitor's stderr ended before {words:?}: {text}");
        if text[at..].contains(words) {
            return text;
        }
    }
}

/// `GET /metrics` from `addr`; the body of a 200.
fn scrape(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("the monitor takes the connection");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("the request is sent");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).expect("the answer");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    answer
}

#[test]
fn every_address_serves_ipv4_and_ipv6_and_the_final_values_wait_for_two_scrapers() {
    let mut monitor = Command::new(MONITOR)
        .args(["run", "--backend", "procfs", "--prometheus", ":0"])
        .args([
            "--linger",
            "60s",
            "--linger-scrapers",
            "2",
            "-o",
            "/dev/null",
        ])
        .args(["--", "true"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("monitor runs");
    let mut stderr = BufReader::new(monitor.stderr.take().expect("piped"));
    let serving = line_with(&mut stderr, "serving metrics at");
    assert!(serving.contains("http://[::]:"), "{serving}");
    let port: u16 = serving
        .rsplit(':')
        .next()
        .and_then(|p| p.trim().strip_suffix("/metrics"))
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {serving:?}"));
    // The summary when the command ends, then the wait for the scrapers: a person reads
    // it at once, not after the linger (it was held the whole minute).
    let before_the_linger = text_to(&mut stderr, "keeping the final values");
    assert!(
        before_the_linger
            .lines()
            .any(|l| l == "pfprof summary (procfs backend, strict mode)"),
        "{before_the_linger}"
    );

    // One scraper, twice: still one scraper, the monitor waits.
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let text = scrape(v4);
    scrape(v4);
    let identity = format!(r#"monitor_pid="{}""#, monitor.id());
    let info = text
        .lines()
        .find(|l| l.starts_with("pfprof_build_info{"))
        .unwrap_or_else(|| panic!("no build info in\n{text}"));
    for label in [identity.as_str(), r#"backend="procfs""#, "version=\""] {
        assert!(info.contains(label), "{label} not in {info}");
    }
    thread::sleep(Duration::from_millis(500));
    assert!(
        monitor.try_wait().expect("wait").is_none(),
        "it left after one scraper"
    );

    // A second scraper, over IPv6: the wait ends.
    scrape(SocketAddr::from((Ipv6Addr::LOCALHOST, port)));
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = monitor.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "still lingering after two scrapers"
        );
        thread::sleep(Duration::from_millis(50));
    };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).expect("the summary");
    assert!(status.success(), "{status}:\n{rest}");
    assert!(
        rest.contains("the last ones with the final values, to 2 scrapers"),
        "{rest}"
    );
}

/// The value of the series `name` (any labels) in exposition `text`.
fn value_of(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(&format!("{name}{{")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// Now, Unix time in seconds.
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

/// The children of process `pid`, from every thread's list.
fn children_of(pid: u32) -> Vec<u32> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the monitor's threads");
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect()
}

/// Waits (at most a minute) until `file` holds a `pfprof_last_update_timestamp_seconds`
/// that `wanted` accepts; that value.
fn last_update_in(file: &std::path::Path, wanted: impl Fn(f64) -> bool) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some(v) = value_of(&text, "pfprof_last_update_timestamp_seconds") {
            if wanted(v) {
                return v;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no pfprof_last_update_timestamp_seconds as wanted in {}:\n{text}",
            file.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_textfile_says_when_its_values_were_last_updated_and_a_killed_monitor_stops_saying_it() {
    let dir = common::Scratch::new("export-last-update");
    let started = unix_now();
    let mut monitor = Command::new(MONITOR)
        .args(["run", "--backend", "procfs", "--interval", "100ms"])
        .arg("--textfile")
        .arg(dir.path())
        .args(["-o", "/dev/null", "--", "sleep", "60"])
        .stderr(Stdio::null())
        .spawn()
        .expect("monitor runs");
    let file = dir.join(&format!("pfprof-sleep-{}.prom", monitor.id()));
    // Rewritten every interval, each time with the time of its values.
    let first = last_update_in(&file, |_| true);
    let later = last_update_in(&file, |v| v > first);
    let now = unix_now();
    assert!(
        started - 1.0 <= first && later <= now + 1.0,
        "{first} then {later}, between {started} and {now}"
    );
    let command = children_of(monitor.id());
    monitor.kill().expect("SIGKILL");
    monitor.wait().expect("it ends");
    let killed = unix_now();
    for pid in command {
        let _ = Command::new("kill").arg(pid.to_string()).status();
    }
    // Left behind (nothing can remove it from inside), saying how old it is.
    let frozen = last_update_in(&file, |_| true);
    assert!(
        frozen <= killed + 1.0,
        "{frozen} after the kill at {killed}"
    );
    thread::sleep(Duration::from_millis(500));
    assert_eq!(last_update_in(&file, |_| true), frozen);
}
