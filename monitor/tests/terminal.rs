//! The monitor at a terminal, as `perf stat` users expect it: the summary by default, rows
//! only where asked, a summary file and JSON, endings that keep everything, the metadata
//! and the time words. Drives the real binaries on the procfs backend.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `monitor ARGS` started in `dir`, its standard streams piped.
fn spawn_monitor(dir: &Scratch, args: &[&str]) -> Child {
    Command::new(MONITOR)
        .args(args)
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `monitor ARGS` run to its end in `dir`.
fn monitor_in(dir: &Scratch, args: &[&str]) -> Output {
    spawn_monitor(dir, args).wait_with_output().unwrap()
}

fn send(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
}

/// The names in `dir`, sorted.
fn names(dir: &Scratch) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Waits until `path` exists (the monitor has started), at most 10 s.
fn wait_for(path: &std::path::Path) {
    let started = Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < Duration::from_secs(10), "{path:?}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn run_prints_the_summary_without_rows_and_dash_means_standard_output_not_a_file() {
    let dir = Scratch::new("terminal-default");
    let quiet = monitor_in(&dir, &["run", "--backend", "procfs", "--", "true"]);
    assert!(quiet.status.success(), "{}", stderr(&quiet));
    assert!(
        stderr(&quiet).starts_with("pfprof summary"),
        "{}",
        stderr(&quiet)
    );
    assert!(quiet.stdout.is_empty());
    let dash = monitor_in(
        &dir,
        &["run", "--backend", "procfs", "-o", "-", "--", "true"],
    );
    assert!(dash.status.success(), "{}", stderr(&dash));
    let rows = parse_csv(&String::from_utf8_lossy(&dash.stdout));
    assert!(!rows.is_empty());
    assert!(names(&dir).is_empty(), "files made: {:?}", names(&dir));
}

#[test]
fn rows_go_to_standard_error_when_asked() {
    let dir = Scratch::new("terminal-stderr");
    let out = monitor_in(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "-o",
            "/dev/stderr",
            "--",
            "true",
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let (rows, summary) = err.split_at(err.find("pfprof summary").unwrap());
    assert!(!parse_csv(rows).is_empty());
    assert!(summary.contains("minor faults"), "{err}");
}

#[test]
fn the_summary_goes_to_a_file_as_json_and_quiet_leaves_standard_error_empty() {
    let dir = Scratch::new("terminal-summary");
    let json = dir.join("run.json");
    let out = monitor_in(
        &dir,
        &[
            "run",
            "-q",
            "--backend",
            "procfs",
            "--summary",
            json.to_str().unwrap(),
            "--",
            WORK,
            "16",
            "R",
            "2000",
            "2",
            "--sleep-ms",
            "50",
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.starts_with("work: ") && err.lines().count() == 1,
        "{err}"
    );
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(summary["profile"]["backend"], "procfs");
    assert_eq!(summary["profile"]["command"][0], WORK);
    assert!(
        summary["minor_faults"].as_u64().unwrap() > 4096,
        "{summary}"
    );
    assert_eq!(summary["command"]["exit_code"], 0);
    let text = dir.join("run.txt");
    let out = monitor_in(
        &dir,
        &[
            "run",
            "-q",
            "--backend",
            "procfs",
            "--summary",
            text.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert!(out.stderr.is_empty(), "{}", stderr(&out));
    let text = std::fs::read_to_string(text).unwrap();
    assert!(text.starts_with("pfprof summary (procfs backend"), "{text}");
}

#[test]
fn sighup_ends_a_profile_as_sigterm_does_with_the_rows_and_the_summary_in_place() {
    let dir = Scratch::new("terminal-hup");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let summary = dir.join("hup.txt");
    let monitor = spawn_monitor(
        &dir,
        &[
            "--backend",
            "procfs",
            "--pid",
            &pid,
            "-o",
            "hup.csv",
            "--summary",
            summary.to_str().unwrap(),
        ],
    );
    thread::sleep(Duration::from_millis(700));
    send(&monitor, Signal::SIGHUP);
    let out = monitor.wait_with_output().unwrap();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(out.status.success(), "{:?}: {}", out.status, stderr(&out));
    assert_eq!(names(&dir), ["hup.csv", "hup.txt"]);
    assert!(!parse_csv(&std::fs::read_to_string(dir.join("hup.csv")).unwrap()).is_empty());
    assert!(std::fs::read_to_string(summary)
        .unwrap()
        .contains("samples lost"));
}

#[test]
fn a_killed_monitor_leaves_its_partial_rows_in_plain_sight_named_as_partial() {
    let dir = Scratch::new("terminal-kill");
    let mut monitor = spawn_monitor(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "-o",
            "prof.csv",
            "--",
            "sleep",
            "30",
        ],
    );
    let partial = format!("prof.csv.pfprof-{}.partial", monitor.id());
    wait_for(&dir.join(&partial));
    monitor.kill().unwrap();
    monitor.wait().unwrap();
    assert_eq!(names(&dir), [partial]);
}

#[test]
fn the_metadata_comes_first_and_dates_every_row_on_the_wall_clock() {
    let now = || {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos() as i128
    };
    let dir = Scratch::new("terminal-metadata");
    let before = now();
    let out = monitor_in(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "-o",
            "-",
            "--",
            "sleep",
            "0.2",
        ],
    );
    let after = now();
    let csv = String::from_utf8_lossy(&out.stdout).into_owned();
    let metadata = csv_metadata(&csv);
    assert_eq!(metadata["command"], serde_json::json!(["sleep", "0.2"]));
    assert_eq!(metadata["period_ms"], 50);
    assert_eq!(metadata["mode"], "strict");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(metadata["kernel"], release.trim());
    assert!(!metadata["host"].as_str().unwrap().is_empty());
    let offset = i128::from(metadata["clock_offset_ns"].as_i64().unwrap());
    for row in parse_csv(&csv) {
        let wall = i128::from(row.mono_ns) + offset;
        assert!(
            (before..=after).contains(&wall),
            "{before} <= {wall} <= {after}"
        );
    }
}

#[test]
fn duration_ends_an_attached_profile_and_sends_sigterm_to_a_command_as_timeout_does() {
    let dir = Scratch::new("terminal-duration");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let started = Instant::now();
    let attached = monitor_in(
        &dir,
        &[
            "--backend",
            "procfs",
            "--pid",
            &pid,
            "--duration",
            "500ms",
            "-o",
            "/dev/null",
        ],
    );
    let took = started.elapsed();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(attached.status.success(), "{}", stderr(&attached));
    assert!(took < Duration::from_secs(5), "{took:?}");
    let run = monitor_in(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "--duration",
            "300ms",
            "--",
            "sleep",
            "30",
        ],
    );
    assert_eq!(run.status.code(), Some(128 + 15), "{}", stderr(&run));
}

#[test]
fn linger_zero_delivers_nothing_more_after_the_end_and_takes_no_time() {
    let dir = Scratch::new("terminal-linger");
    let started = Instant::now();
    let out = monitor_in(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "--prometheus",
            "127.0.0.1:0",
            "--linger",
            "0",
            "--",
            "true",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn the_commands_peak_rss_is_its_maximum_resident_set_and_its_cpu_is_split_user_and_system() {
    let dir = Scratch::new("terminal-rusage");
    let out = monitor_in(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "--",
            WORK,
            "48",
            "R",
            "100000",
            "1",
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("command peak RSS"))
        .unwrap();
    let mib: f64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    // Every page of the 48 MiB is touched, and the whole buffer is resident at once.
    assert!((48.0..64.0).contains(&mib), "{line}");
    let rusage = err.lines().find(|l| l.contains("command rusage")).unwrap();
    assert!(
        rusage.contains(" s user, ") && rusage.contains(" s system); "),
        "{rusage}"
    );
}

#[test]
fn work_exits_cleanly_when_its_stderr_is_closed() {
    let mut work = Command::new(WORK)
        .args(["1", "R", "10", "1"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(work.stderr.take());
    assert_eq!(work.wait().unwrap().code(), Some(0));
}

#[test]
fn a_closed_output_before_the_command_ends_exits_141_as_the_readme_promises() {
    let dir = Scratch::new("terminal-141");
    let mut monitor = spawn_monitor(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "-o",
            "/dev/stdout",
            "--",
            "sleep",
            "2",
        ],
    );
    let mut first = String::new();
    BufReader::new(monitor.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // Gone, as `head -1` in `monitor run -o /dev/stdout -- sleep 2 | head -1`: the
    // metadata line comes at once, the next write (a second in) finds no reader.
    let out = monitor.wait_with_output().unwrap();
    assert!(first.starts_with("# pfprof "), "{first}");
    assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
}

#[test]
fn a_full_disk_still_gets_the_summary_written_on_standard_error() {
    let dir = Scratch::new("terminal-full");
    for args in [&["-o", "/dev/full"][..], &["--summary", "/dev/full"]] {
        let mut all = vec!["run", "--backend", "procfs"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "true"]);
        let out = monitor_in(&dir, &all);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("pfprof summary"), "{args:?}: {err}");
        assert!(err.contains("No space left on device"), "{args:?}: {err}");
    }
}
