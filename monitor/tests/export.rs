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

/// Reads the monitor's stderr up to the line saying where it serves its metrics; that
/// address.
fn served_address(stderr: &mut BufReader<ChildStderr>) -> SocketAddr {
    let serving = line_with(stderr, "serving metrics at http://");
    serving
        .trim()
        .rsplit("http://")
        .next()
        .and_then(|a| a.strip_suffix("/metrics"))
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {serving:?}"))
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

/// A monitor the test started, killed when the test ends (a failed assertion too), so
/// that none is left waiting out a long linger.
struct Spawned(std::process::Child);

impl std::ops::Deref for Spawned {
    type Target = std::process::Child;
    fn deref(&self) -> &std::process::Child {
        &self.0
    }
}

impl std::ops::DerefMut for Spawned {
    fn deref_mut(&mut self) -> &mut std::process::Child {
        &mut self.0
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
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
    let mut monitor = Spawned(
        Command::new(MONITOR)
            .args(["run", "--backend", "procfs", "--interval", "100ms"])
            .arg("--textfile")
            .arg(dir.path())
            .args(["-o", "/dev/null", "--", "sleep", "60"])
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("monitor runs"),
    );
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

/// Waits for the monitor to exit, at most `within` (a tenth of its linger or less: an
/// exit that came from the linger's end fails it); its status and the rest of stderr.
fn exits_within(
    monitor: &mut std::process::Child,
    stderr: &mut BufReader<ChildStderr>,
    within: Duration,
    what: &str,
) -> (std::process::ExitStatus, String) {
    let deadline = Instant::now() + within;
    let status = loop {
        if let Some(status) = monitor.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = monitor.kill();
            panic!("still lingering {within:?} after {what}");
        }
        thread::sleep(Duration::from_millis(50));
    };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).expect("the summary");
    (status, rest)
}

/// The one file `dir` holds, once the monitor has written it.
fn the_textfile(dir: &common::Scratch) -> std::path::PathBuf {
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("the textfile directory")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".prom"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    dir.join(&names[0])
}

#[test]
fn a_short_job_scraped_after_its_end_exits_at_once_its_textfile_kept_until_then() {
    let dir = common::Scratch::new("export-scraped-exit");
    let mut monitor = Spawned(
        Command::new(MONITOR)
            .args(["run", "--backend", "procfs", "--prometheus", "127.0.0.1:0"])
            .arg("--textfile")
            .arg(dir.path())
            .args(["--linger", "600s", "-o", "/dev/null", "--", "true"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("monitor runs"),
    );
    let mut stderr = BufReader::new(monitor.stderr.take().expect("piped"));
    let addr = served_address(&mut stderr);
    text_to(&mut stderr, "keeping the final values");
    // Not scraped yet: it waits, and the textfile holds the final values meanwhile.
    let file = the_textfile(&dir);
    assert!(
        monitor.try_wait().expect("wait").is_none(),
        "it left before the final values were scraped"
    );
    assert!(scrape(addr).contains("pfprof_last_update_timestamp_seconds{"));
    let (status, rest) = exits_within(
        &mut monitor,
        &mut stderr,
        Duration::from_secs(60),
        "the scrape of the final values",
    );
    assert!(status.success(), "{status}:\n{rest}");
    assert!(
        rest.contains("the last ones with the final values, to 1 scraper")
            && rest.contains("removed at the end"),
        "{rest}"
    );
    assert!(!file.exists(), "{} left behind", file.display());
}

/// A collector on 127.0.0.1 that takes OTLP pushes, each answered 200 once the test
/// says so: the pushes' count goes to `received` as each arrives.
fn collector(
    received: std::sync::mpsc::Sender<usize>,
    answer: std::sync::mpsc::Receiver<()>,
) -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = listener.local_addr().expect("its address");
    thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream);
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(value) = lower.strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                if line == "\r\n" {
                    break;
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_err() || received.send(n + 1).is_err() {
                return;
            }
            if answer.recv().is_err() {
                return;
            }
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    addr
}

#[test]
fn a_short_job_whose_final_values_were_pushed_exits_at_once_its_textfile_kept_until_then() {
    let dir = common::Scratch::new("export-pushed-exit");
    let (received_tx, received) = std::sync::mpsc::channel();
    let (answer, answer_rx) = std::sync::mpsc::channel();
    let addr = collector(received_tx, answer_rx);
    // An interval longer than the test: the first push is the final values'.
    let mut monitor = Spawned(
        Command::new(MONITOR)
            .args(["run", "--backend", "procfs", "--interval", "10m"])
            .args(["--otlp", &format!("http://{addr}/v1/metrics")])
            .arg("--textfile")
            .arg(dir.path())
            .args(["--linger", "600s", "-o", "/dev/null", "--", "true"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("monitor runs"),
    );
    let mut stderr = BufReader::new(monitor.stderr.take().expect("piped"));
    let first = received
        .recv_timeout(Duration::from_secs(60))
        .expect("the final values pushed");
    assert_eq!(first, 1);
    // Not delivered yet (unanswered): it waits, the textfile meanwhile.
    let file = the_textfile(&dir);
    assert!(
        monitor.try_wait().expect("wait").is_none(),
        "it left before the final values were delivered"
    );
    answer.send(()).expect("the collector answers");
    let (status, rest) = exits_within(
        &mut monitor,
        &mut stderr,
        Duration::from_secs(60),
        "the collector took the final values",
    );
    assert!(status.success(), "{status}:\n{rest}");
    assert!(
        rest.contains("1 pushes to") && rest.contains("the last with the final values"),
        "{rest}"
    );
    assert!(rest.contains("removed at the end"), "{rest}");
    assert!(!file.exists(), "{} left behind", file.display());
}

#[test]
fn a_textfile_alone_keeps_the_final_values_the_whole_linger() {
    let dir = common::Scratch::new("export-textfile-linger");
    let linger = Duration::from_secs(3);
    let mut monitor = Spawned(
        Command::new(MONITOR)
            .args(["run", "--backend", "procfs", "--textfile"])
            .arg(dir.path())
            .args(["--linger", "3s", "-o", "/dev/null", "--", "true"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("monitor runs"),
    );
    let mut stderr = BufReader::new(monitor.stderr.take().expect("piped"));
    text_to(&mut stderr, "keeping the final values");
    let waiting = Instant::now();
    let file = the_textfile(&dir);
    // Its readers cannot be seen: nothing but the linger's end ends the wait.
    let (status, rest) = exits_within(&mut monitor, &mut stderr, Duration::from_secs(120), "");
    assert!(status.success(), "{status}:\n{rest}");
    assert!(
        waiting.elapsed() >= linger,
        "left after {:?}",
        waiting.elapsed()
    );
    assert!(rest.contains("removed at the end"), "{rest}");
    assert!(!file.exists(), "{} left behind", file.display());
}

#[test]
fn a_fleet_monitor_scraped_after_its_sigterm_exits_at_once_its_textfile_kept_until_then() {
    let dir = common::Scratch::new("export-fleet-exit");
    // No unit of that name: a fleet of none, whose exporters end as any other's.
    let mut monitor = Spawned(
        Command::new(MONITOR)
            .args(["--unit", "pfprof-no-such-unit-*.service"])
            .args(["--prometheus", "127.0.0.1:0", "--interval", "100ms"])
            .arg("--textfile")
            .arg(dir.path())
            .args(["--linger", "600s"])
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .expect("monitor runs"),
    );
    let mut stderr = BufReader::new(monitor.stderr.take().expect("piped"));
    let addr = served_address(&mut stderr);
    // Written once the directory is checked, after the address is bound.
    let file = dir.join(&format!("pfprof-fleet-{}.prom", monitor.id()));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !file.exists() {
        assert!(Instant::now() < deadline, "no {}", file.display());
        thread::sleep(Duration::from_millis(20));
    }
    let status = Command::new("kill")
        .args(["-TERM", &monitor.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    // Scraped until it goes: the first scrape after the SIGTERM has the final values.
    let signaled = Instant::now();
    let status = loop {
        if let Some(status) = monitor.try_wait().expect("wait") {
            break status;
        }
        assert!(
            signaled.elapsed() < Duration::from_secs(60),
            "still lingering a minute after its SIGTERM, scraped all along"
        );
        if let Ok(mut stream) = TcpStream::connect(addr) {
            let _ = stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
            let _ = stream.read_to_end(&mut Vec::new());
        }
        thread::sleep(Duration::from_millis(100));
    };
    let mut rest = String::new();
    stderr.read_to_string(&mut rest).expect("the notes");
    assert!(status.success(), "{status}:\n{rest}");
    assert!(
        rest.contains("the last ones with the final values") && rest.contains("removed at the end"),
        "{rest}"
    );
    assert!(!file.exists(), "{} left behind", file.display());
}
