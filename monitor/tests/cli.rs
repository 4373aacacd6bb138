//! The monitor and work binaries end to end, on the procfs backend (no module needed).

mod common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use common::*;

/// `monitor run` on a short `work` with the given extra options; returns the output.
fn profile_work(options: &[&str], work: &[&str]) -> std::process::Output {
    let mut args = vec!["run", "--backend", "procfs"];
    args.extend_from_slice(options);
    args.push("--");
    args.push(WORK);
    args.extend_from_slice(work);
    monitor(&args)
}

#[test]
fn strict_procfs_run_writes_one_csv_row_per_period_and_a_summary() {
    let out = profile_work(
        &["--mode", "strict"],
        &["32", "R", "4000", "4", "--sleep-ms", "100"],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&String::from_utf8(out.stdout).unwrap());
    assert!(rows.len() >= 5, "{} rows", rows.len());
    assert_eq!(rows[0].time_ms, 0);
    assert!(rows
        .windows(2)
        .all(|w| w[0].mono_ns < w[1].mono_ns && w[0].time_ms < w[1].time_ms));
    assert!(rows.iter().all(|r| r.cpu_util >= 0.0 && r.cpu_util <= 2.0));
    assert!(
        err.contains("pfprof summary (procfs backend, strict mode)"),
        "{err}"
    );
    assert_eq!(summary_value(&err, "samples "), rows.len() as u64);
    assert_eq!(summary_value(&err, "samples lost"), 0);
}

#[test]
fn relaxed_procfs_run_writes_json_lines_with_the_csv_keys() {
    let out = profile_work(
        &[
            "--mode",
            "relaxed",
            "--interval",
            "100ms",
            "--format",
            "jsonl",
        ],
        &["16", "L", "4000", "3", "--sleep-ms", "100"],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut minor = 0;
    let mut lines = 0;
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        for key in ["time_ms", "mono_ns", "minor", "major", "cpu_ns", "cpu_util"] {
            assert!(v.get(key).is_some(), "{key} missing in {line}");
        }
        minor += v["minor"].as_u64().unwrap();
        lines += 1;
    }
    assert!(lines >= 3);
    assert!(
        err.contains("pfprof summary (procfs backend, relaxed mode)"),
        "{err}"
    );
    assert_eq!(summary_value(&err, "minor faults"), minor);
}

#[test]
fn run_exits_with_the_status_of_the_command() {
    let out = monitor(&["run", "--backend", "procfs", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}

#[test]
fn attaching_with_pid_profiles_a_running_process_until_it_exits() {
    let mut work = Command::new(WORK)
        .args(["16", "R", "2000", "5", "--sleep-ms", "100"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = work.id().to_string();
    let out = monitor(&["--backend", "procfs", "--pid", &pid]);
    work.wait().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&String::from_utf8(out.stdout).unwrap());
    assert!(rows.len() >= 3, "{err}");
    assert!(rows.iter().map(|r| r.minor).sum::<u64>() > 0);
}

#[test]
fn sigint_stops_an_attached_profile_with_every_sample_written_and_the_summary() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let monitor = Command::new(MONITOR)
        .args(["--backend", "procfs", "--period-ms", "20", "--pid", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(monitor.id() as libc::pid_t, libc::SIGINT) };
    let out = monitor.wait_with_output().unwrap();
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&String::from_utf8(out.stdout).unwrap());
    assert!(rows.len() >= 5, "{} rows", rows.len());
    assert_eq!(summary_value(&err, "samples "), rows.len() as u64);
    // --period-ms 20: samples 20 ms apart on their CLOCK_MONOTONIC timestamps.
    let mut gaps: Vec<u64> = rows
        .windows(2)
        .map(|w| (w[1].mono_ns - w[0].mono_ns) / 1_000_000)
        .collect();
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2];
    assert!((19..=22).contains(&median), "median gap {median} ms");
}

#[test]
fn sigterm_sent_to_the_monitor_reaches_the_command_it_runs_and_ends_the_profile() {
    let monitor = Command::new(MONITOR)
        .args(["run", "--backend", "procfs", "--", "sleep", "30"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(500));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(monitor.id() as libc::pid_t, libc::SIGTERM) };
    let out = monitor.wait_with_output().unwrap();
    let err = stderr(&out);
    // The command's own status: it got the signal, rather than us giving up on it.
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM), "{err}");
    assert!(err.contains("killed by signal 15"), "{err}");
}

#[test]
fn a_closed_stdout_pipe_is_not_an_error() {
    let mut monitor = Command::new(MONITOR)
        .args(["run", "--backend", "procfs", "--period-ms", "10", "--"])
        .args([WORK, "8", "R", "1000", "5", "--sleep-ms", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(monitor.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is gone now, as with `monitor | head -1`.
    let out = monitor.wait_with_output().unwrap();
    let err = stderr(&out);
    assert_eq!(
        first.trim_end(),
        "time_ms,mono_ns,minor,major,cpu_ns,cpu_util"
    );
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("error"), "{err}");
    assert!(err.contains("pfprof summary"), "{err}");
}

#[test]
fn the_plot_is_a_well_formed_svg_naming_backend_mode_and_axes() {
    let dir = Scratch::new("plot");
    let svg = dir.join("profile.svg");
    let csv = dir.join("profile.csv");
    let out = profile_work(
        &[
            "--output",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        &["16", "R", "3000", "3", "--sleep-ms", "50"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for wanted in [
        "pfprof: procfs backend, strict mode, 50 ms period",
        "time (s)",
        "accumulated minor faults",
        "accumulated major faults",
        "CPU utilization (% of one CPU)",
    ] {
        assert!(
            texts.iter().any(|t| t.contains(wanted)),
            "no {wanted:?} in the plot"
        );
    }
    assert!(doc
        .descendants()
        .any(|n| n.has_tag_name("polyline") || n.has_tag_name("path")));
}

#[test]
fn kernel_backend_without_the_module_says_how_to_load_it_and_exits_2() {
    if std::path::Path::new("/dev/pfprof").exists() {
        eprintln!("skipped: the module is loaded here");
        return;
    }
    let out = monitor(&["--backend", "kernel"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/dev/pfprof does not exist: load the module first"),
        "{err}"
    );
    assert!(err.contains("--backend procfs"), "{err}");
}

#[test]
fn an_unknown_pid_is_reported_with_exit_code_2() {
    // Above the kernel's pid_max limit (4194304): never a live process.
    let out = monitor(&["--backend", "procfs", "--pid", "4194305"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no such process: 4194305"), "{err}");
}

#[test]
fn an_unwritable_output_fails_before_the_command_runs() {
    let dir = Scratch::new("unwritable");
    let marker = dir.join("ran");
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--output",
        "/nonexistent-dir/prof.csv",
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cannot write the output file /nonexistent-dir/prof.csv"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
}

#[test]
fn permission_denied_on_the_output_is_reported_with_exit_code_2() {
    use std::os::unix::fs::PermissionsExt;

    let dir = Scratch::new("readonly");
    let readonly = dir.join("readonly");
    std::fs::create_dir(&readonly).unwrap();
    std::fs::set_permissions(&readonly, PermissionsExt::from_mode(0o555)).unwrap();
    let path = readonly.join("prof.csv");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        // root writes anywhere: run as nobody, from a copy nobody can reach wherever
        // the build directory is.
        std::fs::set_permissions(dir.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let copy = dir.join("monitor");
        std::fs::copy(MONITOR, &copy).unwrap();
        let mut cmd = Command::new(copy);
        cmd.uid(65534).gid(65534);
        cmd
    } else {
        Command::new(MONITOR)
    };
    cmd.args([
        "run",
        "--backend",
        "procfs",
        "--output",
        path.to_str().unwrap(),
        "--",
        "true",
    ]);
    let out = cmd.output().unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot write the output file"), "{err}");
    assert!(err.contains("Permission denied"), "{err}");
}

#[test]
fn procfs_backend_without_anything_to_profile_is_a_usage_error() {
    let out = monitor(&["--backend", "procfs"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("nothing to profile: give --pid PID"), "{err}");
}

#[test]
fn a_command_that_cannot_start_is_a_usage_error() {
    let out = monitor(&["run", "--backend", "procfs", "--", "/nonexistent/command"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("cannot run \"/nonexistent/command\""), "{err}");
}

#[test]
fn pids_outside_1_to_i32_max_are_refused_before_anything_runs() {
    for pid in ["0", "2147483648"] {
        let out = monitor(&["--backend", "procfs", "--pid", pid]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{pid}: {err}");
        assert!(err.contains("invalid value"), "{pid}: {err}");
    }
}

#[test]
fn bad_options_are_usage_errors() {
    for args in [
        &["--format", "xml"][..],
        &["--mode", "lazy"],
        &["--interval", "0s"],
        &["--backend", "ebpf"],
        &["run"],
    ] {
        let out = monitor(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn work_rejects_bad_arguments_with_exit_code_2() {
    for (args, message) in [
        (&["2000", "R", "10"][..], "2000 is not in 1..=1024"),
        (&["0", "R", "10"], "0 is not in 1..=1024"),
        (
            &["10", "X", "10"],
            "access pattern must be R (random) or L (locality)",
        ),
        (&["10", "R"], "required"),
        (&["10", "R", "many"], "invalid value 'many'"),
    ] {
        let out = Command::new(WORK).args(args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

#[test]
fn work_touches_memory_for_real_and_reports_its_faults() {
    let out = Command::new(WORK)
        .args(["64", "R", "20000", "2", "--sleep-ms", "0"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let (minor, _) = work_self_report(&err);
    // 40,000 random accesses over 16,384 pages touch nearly all of them (each first
    // read maps the zero page, the write then copies it: up to two faults per page).
    assert!(minor > 14_000, "{err}");
}

#[test]
fn sleep_ms_sets_the_pause_between_iterations() {
    let started = std::time::Instant::now();
    let out = Command::new(WORK)
        .args(["1", "L", "10", "3", "--sleep-ms", "300"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(started.elapsed() >= Duration::from_millis(600));
}
