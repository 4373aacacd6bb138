//! The monitor and work binaries end to end, on the procfs backend (no module needed).

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::*;
use monitor::system::procstat::ProcessCounters;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// `monitor run` on a short `work` with the given extra options, samples to a file;
/// returns the output and the samples.
fn profile_work(options: &[&str], work: &[&str]) -> (Output, String) {
    let mut command = vec![WORK];
    command.extend_from_slice(work);
    profile(options, &command)
}

/// `monitor run` on `command` with the given extra options, samples to a file; returns
/// the output and the samples.
fn profile(options: &[&str], command: &[&str]) -> (Output, String) {
    static RUNS: AtomicUsize = AtomicUsize::new(0);
    let dir = Scratch::new(&format!(
        "profile-work-{}",
        RUNS.fetch_add(1, Ordering::Relaxed)
    ));
    let samples = dir.join("samples");
    let mut args = vec![
        "run",
        "--backend",
        "procfs",
        "-o",
        samples.to_str().unwrap(),
    ];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(command);
    let out = monitor(&args);
    let text = std::fs::read_to_string(&samples).unwrap_or_default();
    (out, text)
}

fn signal(child: &Child, signal: Signal) {
    kill(Pid::from_raw(child.id() as i32), signal).unwrap();
}

/// Waits for `child` to exit by itself; kills it and fails after a minute, so a monitor
/// that never ends fails the test instead of hanging it.
fn ends_by_itself(mut child: Child, what: &str) -> Output {
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            panic!("{what}: the monitor did not end");
        }
        thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn strict_procfs_run_writes_one_csv_row_per_period_and_a_summary() {
    let (out, csv) = profile_work(
        &["--mode", "strict"],
        &["32", "R", "4000", "4", "--sleep-ms", "100"],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&csv);
    // The first row is a whole period from the start, not the start's instant: time_ms
    // counts from the start, which the sampler marks as it begins (and folds into it).
    assert!(rows[0].time_ms >= 25, "{csv}");
    // The mark's instant, to the millisecond below: time_ms is truncated.
    let start_ns = rows[0].mono_ns - (rows[0].time_ms + 1) * 1_000_000;
    // The sampler's deadlines are start + k * 50 ms: a row is read after its deadline, late
    // by a wake-up's latency, and a deadline missed on a loaded machine is folded into the
    // next row. So the full rows fall one to a period, in the periods after their deadlines:
    // none doubled or early. The command sleeps three pauses of 100 ms, so its last, partial
    // row ends at least six periods in; the full rows keep coming until then (a fast machine
    // does the work itself in a few milliseconds: the pauses are the only floor).
    let period_of = |row: &Row| (row.mono_ns - start_ns) / 50_000_000;
    let (end, full) = rows.split_last().expect("at least the first row");
    let periods: Vec<u64> = full.iter().map(period_of).collect();
    assert!(
        periods.windows(2).all(|w| w[0] < w[1]),
        "two rows in one period: periods {periods:?}: {csv}"
    );
    assert!(
        end.mono_ns - start_ns >= 300_000_000,
        "the command's three pauses of 100 ms ended early: {csv}"
    );
    assert!(
        periods
            .last()
            .is_some_and(|&last| last + 2 >= period_of(end)),
        "the full rows end {periods:?} periods in, before the last one's {}: {csv}",
        period_of(end)
    );
    // time_ms is mono_ns truncated to milliseconds: the last, partial period (read as the
    // command exits) may end within the millisecond the one before it ended in.
    assert!(rows
        .windows(2)
        .all(|w| w[0].mono_ns < w[1].mono_ns && w[0].time_ms <= w[1].time_ms));
    assert!(rows.iter().all(|r| r.cpu_util >= 0.0));
    assert!(
        err.contains("pfprof summary (procfs backend, strict mode)"),
        "{err}"
    );
    assert_eq!(summary_value(&err, "samples "), rows.len() as u64);
    assert_eq!(summary_value(&err, "samples lost"), 0);
}

#[test]
fn the_rows_hold_the_commands_memory_while_it_runs_nothing_once_it_is_gone_and_the_pressure() {
    // 160,000 random accesses over 8,192 pages: every page of the 32 MiB is touched.
    let (out, csv) = profile_work(&[], &["32", "R", "40000", "4", "--sleep-ms", "100"]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&csv);
    let peak = rows.iter().map(|r| r.rss_anon).max().unwrap();
    // The buffer, and what the rest of `work` (stack, heap, libc) holds: a few MiB.
    assert!(
        (32 << 20..40 << 20).contains(&peak),
        "peak anonymous {peak}"
    );
    assert!(rows.iter().any(|r| r.rss_file > 0));
    let last = rows.last().unwrap();
    assert_eq!((last.rss_anon, last.rss_file, last.swap), (0, 0, 0));
    // Every counter this kernel has is in every row.
    let psi = std::path::Path::new("/proc/pressure/memory").exists();
    assert!(rows.iter().all(|r| r.pressure[0].is_some() == psi));
    assert!(rows.iter().all(|r| r.pressure[4].is_some()), "pswpin");
    assert!(err.contains("memory peak"), "{err}");
}

#[test]
fn relaxed_procfs_run_writes_json_lines_with_the_csv_keys() {
    let (out, text) = profile_work(
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
    let mut minor = 0;
    let mut lines = 0;
    let mut records = text.lines();
    let start: serde_json::Value = serde_json::from_str(records.next().unwrap()).unwrap();
    assert_eq!(
        (&start["event"], &start["backend"], &start["mode"]),
        (&"start".into(), &"procfs".into(), &"relaxed".into()),
        "the metadata record comes first"
    );
    for line in records {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        // A record among the rows (where each interval's faults were) is told by its event.
        if v["event"] == "where" {
            continue;
        }
        for key in monitor::output::writer::csv_header().split(',') {
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
    assert!(!err.contains("producer blocked"), "strict-only line: {err}");
}

/// A shell running two `work`s at once and waiting for them (`$0` is the `work` binary).
const TWO_WORKS: &str =
    "\"$0\" 32 R 10000 3 --sleep-ms 50 & \"$0\" 32 R 10000 3 --sleep-ms 50 & wait";

#[test]
fn a_command_counts_with_its_children_while_they_run_and_sums_to_its_rusage() {
    let (out, csv) = profile(&[], &["sh", "-c", TWO_WORKS, WORK]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&csv);
    // Counted only once reaped, the children's faults would all be in the last row.
    let busy = rows.iter().filter(|r| r.minor > 1000).count();
    assert!(busy >= 2, "the children's faults are in {busy} rows: {csv}");
    let minor: u64 = rows.iter().map(|r| r.minor).sum();
    assert_eq!(minor, summary_value(&err, "command rusage"), "{err}");
    let works = work_self_reports(&err);
    assert_eq!(works.len(), 2, "{err}");
    let children: u64 = works.iter().map(|(minor, _)| minor).sum();
    assert!(minor > children, "{minor} <= {children}: {err}");
}

#[test]
fn no_inherit_counts_the_command_alone_without_the_children_it_reaped() {
    let (out, csv) = profile(&["--no-inherit"], &["sh", "-c", TWO_WORKS, WORK]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let minor: u64 = parse_csv(&csv).iter().map(|r| r.minor).sum();
    // wait4()'s rusage holds the shell's own faults and its children's.
    let rusage = summary_value(&err, "command rusage");
    let children: u64 = work_self_reports(&err).iter().map(|(minor, _)| minor).sum();
    assert!(children > 10_000, "{err}");
    assert!(minor > 0, "{err}");
    assert!(
        minor + children <= rusage,
        "the children are in the profile: {minor} + {children} > {rusage}: {err}"
    );
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
    signal(&monitor, Signal::SIGINT);
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
    signal(&monitor, Signal::SIGTERM);
    let out = monitor.wait_with_output().unwrap();
    let err = stderr(&out);
    // The command's own status: it got the signal, rather than us giving up on it.
    assert_eq!(
        out.status.code(),
        Some(128 + Signal::SIGTERM as i32),
        "{err}"
    );
    assert!(err.contains("killed by signal 15"), "{err}");
}

#[test]
fn a_closed_output_pipe_ends_the_profile_of_a_process_that_keeps_running() {
    let mut sleeper = Command::new("sleep").arg("300").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let mut monitor = Command::new(MONITOR)
        .args(["--backend", "procfs", "--period-ms", "10", "--pid", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    let mut rows = BufReader::new(monitor.stdout.take().unwrap());
    rows.read_line(&mut first).unwrap();
    rows.read_line(&mut first).unwrap();
    drop(rows);
    // The reader is gone now, as with `monitor --pid P | head -1`; P goes on sleeping.
    let out = ends_by_itself(monitor, "closed pipe");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let err = stderr(&out);
    assert_eq!(
        first.lines().nth(1),
        Some(monitor::output::writer::csv_header().as_str())
    );
    assert!(out.status.success(), "{err}");
    assert!(!err.contains("error"), "{err}");
    assert!(err.contains("pfprof summary"), "{err}");
    assert!(err.contains("the output was closed"), "{err}");
}

#[test]
fn run_leaves_the_standard_output_to_its_command_and_prints_only_the_summary_on_stderr() {
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--period-ms",
        "10",
        "--",
        "sh",
        "-c",
        "echo MARK; sleep 0.2; echo MARK2",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "MARK\nMARK2\n");
    // No rows unless asked, and no live line off a terminal: the summary alone.
    assert!(err.starts_with("pfprof summary"), "{err}");
}

/// Two earlier result files in a scratch directory; checks they are untouched and alone.
struct EarlierResults {
    dir: Scratch,
}

impl EarlierResults {
    fn new(name: &str) -> EarlierResults {
        let dir = Scratch::new(name);
        std::fs::write(dir.join("keep.csv"), "earlier csv").unwrap();
        std::fs::write(dir.join("keep.svg"), "earlier svg").unwrap();
        EarlierResults { dir }
    }

    fn options(&self) -> [String; 4] {
        let path = |name| self.dir.join(name).to_str().unwrap().to_owned();
        [
            "-o".into(),
            path("keep.csv"),
            "--plot".into(),
            path("keep.svg"),
        ]
    }

    fn assert_untouched(&self, what: &str) {
        let read = |name| std::fs::read_to_string(self.dir.join(name)).unwrap();
        assert_eq!(read("keep.csv"), "earlier csv", "{what}");
        assert_eq!(read("keep.svg"), "earlier svg", "{what}");
        let left = std::fs::read_dir(self.dir.path()).unwrap().count();
        assert_eq!(left, 2, "{what}: temporary files left behind");
    }
}

#[test]
fn a_run_that_fails_to_start_leaves_earlier_results_untouched() {
    let earlier = EarlierResults::new("failed-start");
    let options = earlier.options();
    let options: Vec<&str> = options.iter().map(String::as_str).collect();
    let runs: [(&[&str], i32); 2] = [
        (
            &["run", "--backend", "procfs", "--", "/nonexistent/command"],
            127,
        ),
        (&["--backend", "procfs", "--pid", "4194305"], 2),
    ];
    for (args, code) in runs {
        let mut args = args.to_vec();
        args.splice(1..1, options.iter().copied());
        let out = monitor(&args);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
        earlier.assert_untouched(&format!("{args:?}"));
    }
}

#[test]
fn a_complete_profile_replaces_earlier_results() {
    let earlier = EarlierResults::new("replaced");
    let options = earlier.options();
    let mut args: Vec<&str> = vec!["run", "--backend", "procfs"];
    args.extend(options.iter().map(String::as_str));
    args.extend(["--", "true"]);
    let out = monitor(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = std::fs::read_to_string(earlier.dir.join("keep.csv")).unwrap();
    parse_csv(&csv);
    let svg = std::fs::read_to_string(earlier.dir.join("keep.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{svg}");
    assert_eq!(std::fs::read_dir(earlier.dir.path()).unwrap().count(), 2);
}

#[test]
fn a_plot_not_named_svg_is_refused_before_anything_runs() {
    let dir = Scratch::new("png");
    let marker = dir.join("ran");
    let png = dir.join("out.png");
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--plot",
        png.to_str().unwrap(),
        "--",
        "touch",
        marker.to_str().unwrap(),
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("must end in .svg"), "{err}");
    assert!(
        !marker.exists() && !png.exists(),
        "something ran or was written"
    );
}

#[test]
fn a_command_that_exists_but_cannot_be_executed_exits_126() {
    let out = monitor(&["run", "--backend", "procfs", "--", "/dev/null"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(126), "{err}");
    assert!(err.contains("cannot run \"/dev/null\""), "{err}");
}

/// A `work` stopped before it runs (its shell stops itself, then execs it once
/// continued), not a child of the monitor, and its minor fault count then.
fn stopped_work(args: &[&str]) -> (Child, u64) {
    let (work, counts) = stopped_program(WORK, args);
    (work, counts.minor)
}

/// `program` stopped before it runs, as [`stopped_work`], and its fault counts then.
fn stopped_program(program: &str, args: &[&str]) -> (Child, ProcessCounters) {
    let work = Command::new("sh")
        .args(["-c", "kill -STOP $$; exec \"$0\" \"$@\"", program])
        .args(args)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stat = || std::fs::read_to_string(format!("/proc/{}/stat", work.id())).unwrap();
    while !stat().contains(") T ") {
        thread::sleep(Duration::from_millis(5));
    }
    // Stopped, it takes no fault: the monitor attaches at exactly these counts.
    let counts = monitor::system::procstat::read(work.id()).unwrap().counters;
    (work, counts)
}

/// `monitor --pid` on a stopped `work`, continued once the monitor has attached; the
/// monitor's output and the sum of the minor column.
fn profile_pid(work: &Child, reap_at_once: bool) -> (Output, u64, Option<u64>) {
    let (out, rows, reaped) = profile_pid_rows(work, reap_at_once);
    let minor = rows.iter().map(|r| r.minor).sum();
    (out, minor, reaped.map(|counts| counts.minor))
}

/// [`profile_pid`], with every row and, when reaped at once, every count of wait4().
fn profile_pid_rows(
    work: &Child,
    reap_at_once: bool,
) -> (Output, Vec<Row>, Option<ProcessCounters>) {
    let pid = work.id().to_string();
    let mut monitor = Command::new(MONITOR)
        .args(["--backend", "procfs", "--period-ms", "20", "--pid", &pid])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(monitor.stdout.take().unwrap());
    let mut header = String::new();
    stdout.read_line(&mut header).unwrap();
    kill(Pid::from_raw(work.id() as i32), Signal::SIGCONT).unwrap();
    let reaped = reap_at_once.then(|| rusage_of(work.id()));
    let mut csv = header;
    stdout.read_to_string(&mut csv).unwrap();
    let out = monitor.wait_with_output().unwrap();
    (out, parse_csv(&csv), reaped)
}

/// Reaps `pid` (our child) with wait4(): its counts.
fn rusage_of(pid: u32) -> ProcessCounters {
    monitor::command::child::wait(pid).unwrap().1
}

/// Reaps `pid` (our child) with wait4(): its minor faults.
fn rusage_minor_of(pid: u32) -> u64 {
    rusage_of(pid).minor
}

#[test]
fn the_last_partial_period_of_an_attached_process_is_read_when_it_exits() {
    let (work, before) = stopped_work(&["16", "R", "3000", "3", "--sleep-ms", "30"]);
    // Its parent (this test) reaps it only after the monitor ended: the monitor can
    // read its last counts, and must.
    let (out, minor, _) = profile_pid(&work, false);
    let total = rusage_minor_of(work.id());
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert_eq!(minor, total - before, "{err}");
    // Nothing of it is missing (other notes, on memory pressure, may be there).
    assert!(!err.contains("is missing"), "{err}");
}

/// A copy of `work` on this machine's disk (beside the build's own files), dropped from
/// the page cache: the pages of its program are read from the disk as it first runs them,
/// and each read is a major fault. On a tmpfs nothing is read from a disk: its pages never
/// major-fault.
struct EvictedWork(std::path::PathBuf);

impl EvictedWork {
    fn new() -> EvictedWork {
        use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
        use nix::sys::statfs::{statfs, TMPFS_MAGIC};

        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
        assert_ne!(
            statfs(dir).unwrap().filesystem_type(),
            TMPFS_MAGIC,
            "{dir:?} is a tmpfs: a program there is never read from a disk, no major fault"
        );
        let path = dir.join(format!("work-evicted-{}", std::process::id()));
        std::fs::copy(WORK, &path).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // Clean pages only are dropped: written back first.
        file.sync_all().unwrap();
        posix_fadvise(&file, 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).unwrap();
        EvictedWork(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for EvictedWork {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_major_faults_of_an_attached_process_sum_to_what_its_parent_reaps() {
    let program = EvictedWork::new();
    let (work, before) =
        stopped_program(program.path(), &["4", "R", "2000", "2", "--sleep-ms", "20"]);
    // The monitor reads its zombie; this test, its parent, reaps it afterwards.
    let (out, rows, _) = profile_pid_rows(&work, false);
    let total = rusage_of(work.id());
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        total.major > before.major,
        "running the evicted copy took no major fault ({before:?}, then {total:?})"
    );
    let sum = |count: fn(&Row) -> u64| rows.iter().map(count).sum::<u64>();
    assert_eq!(
        (sum(|r| r.minor), sum(|r| r.major)),
        (total.minor - before.minor, total.major - before.major),
        "{err}"
    );
    assert_eq!(
        summary_value(&err, "major faults"),
        total.major - before.major
    );
}

#[test]
fn an_attached_process_reaped_before_its_last_counts_are_read_is_reported_not_dropped() {
    let (work, before) = stopped_work(&["16", "R", "3000", "3", "--sleep-ms", "30"]);
    // Reaped the moment it exits: the monitor reads the zombie first, or says what it
    // missed.
    let (out, minor, total) = profile_pid(&work, true);
    let total = total.unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    if minor != total - before {
        assert!(
            minor < total - before,
            "{minor} > {total} - {before}: {err}"
        );
        assert!(
            err.contains("exited and its parent reaped it before its last counts"),
            "{minor} of {total} - {before} faults without a word: {err}"
        );
    }
}

#[test]
fn cpu_time_is_in_nanoseconds_and_one_busy_thread_uses_at_most_one_cpu() {
    // One thread, accessing memory without a pause.
    let (out, csv) = profile_work(
        &["--period-ms", "100"],
        &["4", "L", "3000000", "3", "--sleep-ms", "0"],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let rows = parse_csv(&csv);
    // Clock ticks (10 ms) would make every cpu_ns a multiple of 10^7.
    assert!(rows.iter().any(|r| r.cpu_ns % 10_000_000 != 0), "{csv}");
    // The kernel brings another process's running threads' CPU time up to date at its
    // own ticks (1 to 10 ms): a period may read up to one tick of the previous one, which
    // the sampler carries into the next. The last row takes what is left and is shorter
    // than a period: it is left out.
    let (_, full_periods) = rows.split_last().unwrap();
    let max = full_periods.iter().map(|r| r.cpu_util).fold(0.0, f64::max);
    assert!(max <= 1.0, "cpu_util {max} for a single thread: {csv}");
    assert!(max > 0.5, "the thread was not busy: {csv}");
}

#[test]
fn ctrl_c_ends_every_mode_at_once_whatever_the_period_or_interval() {
    let mut sleeper = Command::new("sleep").arg("300").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let longest = shared_layout::abi::PERIOD_MS_MAX.to_string();
    let modes: [&[&str]; 3] = [
        &["--mode", "strict", "--period-ms", &longest, "--pid", &pid],
        &["--mode", "relaxed", "--interval", "3600s", "--pid", &pid],
        &[
            "--mode",
            "relaxed",
            "--interval",
            "3600s",
            "--",
            "sleep",
            "300",
        ],
    ];
    for args in modes {
        let run = args.contains(&"--");
        let monitor = Command::new(MONITOR)
            .args(if run { &["run"][..] } else { &[] })
            .args(["--backend", "procfs"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        thread::sleep(Duration::from_millis(300));
        signal(&monitor, Signal::SIGINT);
        let signaled = Instant::now();
        // Ending takes milliseconds, not the interval nor the period.
        let out = ends_by_itself(monitor, &format!("{args:?}"));
        let took = signaled.elapsed();
        let err = stderr(&out);
        assert!(err.contains("pfprof summary"), "{args:?}: {err}");
        assert!(
            took < Duration::from_secs(2),
            "{args:?}: ended {took:?} after SIGINT"
        );
    }
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
}

#[test]
fn help_describes_each_binary_and_its_examples_run_from_anywhere() {
    let work = Command::new(WORK).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&work.stdout);
    assert!(text.contains("random (R) or local (L) accesses"), "{text}");
    assert!(!text.contains("monitor"), "{text}");
    let help = Command::new(MONITOR).arg("--help").output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(text.contains("Examples:"), "{text}");
    // `work` is built beside the monitor, not installed on PATH.
    assert!(!text.contains("-- work "), "{text}");
}

#[test]
fn the_plot_is_a_well_formed_svg_naming_backend_mode_and_axes() {
    let dir = Scratch::new("plot");
    let svg = dir.join("profile.svg");
    let (out, _) = profile_work(
        &["--plot", svg.to_str().unwrap()],
        &["16", "R", "3000", "3", "--sleep-ms", "50"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&text).expect("the plot is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
    for wanted in [
        // What was profiled, where and when, and how.
        " 16 R 3000 3 --sleep-ms 50 on ",
        ": procfs backend, strict mode, 50 ms period",
        "time (s)",
        "minor faults/s",
        "major faults/s",
        "memory (MiB)",
        "memory stall (%)",
        "CPU (%)",
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

/// The monitor as on a machine without the module: where it is loaded, in a mount
/// namespace of its own (and a user namespace, unprivileged) whose /dev is empty.
fn monitor_without_the_module(args: &[&str]) -> Output {
    if !std::path::Path::new(shared_layout::abi::DEVICE_PATH).exists() {
        return monitor(args);
    }
    let out = Command::new("unshare")
        .args(["--mount", "--map-root-user", "--", "sh", "-c"])
        .arg("mount -t tmpfs none /dev && exec \"$0\" \"$@\"")
        .arg(MONITOR)
        .args(args)
        .output()
        .expect("unshare (util-linux) runs");
    let err = stderr(&out);
    assert!(
        !err.starts_with("unshare:") && !err.starts_with("mount:"),
        "the module is loaded here, and it cannot be hidden from the monitor: {err}"
    );
    out
}

#[test]
fn kernel_backend_without_the_module_says_how_to_load_it_and_exits_2() {
    let out = monitor_without_the_module(&["--backend", "kernel"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/dev/pfprof does not exist: the pfprof module is not loaded"),
        "{err}"
    );
    // This machine's fix: load it, or install it with DKMS (and the headers first).
    assert!(
        err.contains("sudo modprobe pfprof") && err.contains("dkms-src")
            || err.contains("load the module: sudo modprobe pfprof"),
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
    let root = nix::unistd::geteuid().is_root();
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
fn a_command_that_does_not_exist_exits_127_as_in_a_shell() {
    let out = monitor(&["run", "--backend", "procfs", "--", "/nonexistent/command"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(127), "{err}");
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
fn bad_options_are_usage_errors_that_name_what_was_expected() {
    for (args, message) in [
        (
            &["--format", "xml"][..],
            "invalid value 'xml' for '--format <csv|jsonl|table>': format must be csv, \
             jsonl or table, not \"xml\"",
        ),
        (
            &["--mode", "lazy"],
            "unknown mode \"lazy\": expected \"strict\" or \"relaxed\"",
        ),
        (&["--interval", "0s"], "\"0s\" is not a positive duration"),
        (
            &["--interval", "soon"],
            "\"soon\" is not a duration (a number with its unit: 250ms, 10s, 1m, 1h30m)",
        ),
        (
            &["--interval", "100"],
            "\"100\" has no unit: write e.g. 100s or 100ms",
        ),
        // One rule for every duration: a number needs its unit.
        (&["--linger", "5"], "\"5\" has no unit"),
        (&["--duration", "100"], "\"100\" has no unit"),
        (&["--period", "100"], "\"100\" has no unit"),
        (&["--duration", "0"], "\"0\" is not a positive duration"),
        (
            &["--count", "0"],
            "invalid value '0' for '--count <N>': 0 is not in 1..",
        ),
        (
            &["--period", "1.5ms"],
            "\"1.5ms\" is not a whole number of milliseconds from 1ms to 10000ms",
        ),
        (
            &["run", "--pid", "1", "--", "true"],
            "--pid attaches to running processes and `run` profiles the command it starts",
        ),
        (
            &["--backend", "ebpf"],
            "invalid value 'ebpf' for '--backend <BACKEND>'",
        ),
        (
            &["--period-ms", "0"],
            "invalid value '0' for '--period-ms <N>': 0 is not in 1..=10000",
        ),
        (
            &["--period-ms", "10001"],
            "invalid value '10001' for '--period-ms <N>': 10001 is not in 1..=10000",
        ),
        (&["--period-ms", "-5"], "unexpected argument '-5' found"),
        (
            &["run"],
            "the following required arguments were not provided:\n  <CMD>...",
        ),
    ] {
        let out = monitor(args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(message), "{args:?}: {err}");
    }
}

/// `monitor run` of `command` with these OTLP options and environment, samples to
/// /dev/null; the output.
fn run_with_otlp(options: &[&str], env: &[(&str, &str)], command: &[&str]) -> Output {
    let mut args = vec!["run", "--backend", "procfs", "-o", "/dev/null"];
    args.extend_from_slice(options);
    args.push("--");
    args.extend_from_slice(command);
    Command::new(MONITOR)
        .args(&args)
        .envs(env.iter().copied())
        .output()
        .expect("monitor runs")
}

#[test]
fn a_bad_otlp_url_header_or_variable_is_refused_before_the_command_runs_saying_what_to_give() {
    let marker = Scratch::new("otlp-refused");
    let ran = marker.join("ran");
    let touch = format!("touch {}", ran.display());
    for (options, env, message) in [
        (
            &["--otlp", "http://127.0.0.1:4318/v1/traces"][..],
            &[][..],
            "its path does not end in /v1/metrics",
        ),
        (
            &["--otlp", "collector:4318"],
            &[],
            "not an http:// or https:// URL",
        ),
        (
            &["--otlp", "http://h:4318", "--otlp-header", "Authorization"],
            &[],
            "--otlp-header \"Authorization\": not KEY=VALUE",
        ),
        (
            &["--otlp"],
            &[("OTEL_EXPORTER_OTLP_HEADERS", "a=1,b")],
            "OTEL_EXPORTER_OTLP_HEADERS \"b\": not key=value",
        ),
        (
            &["--otlp"],
            &[("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd")],
            "OTEL_EXPORTER_OTLP_COMPRESSION=\"zstd\": gzip or none",
        ),
        (
            &["--otlp"],
            &[("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent.pem")],
            "OTEL_EXPORTER_OTLP_CERTIFICATE=/nonexistent.pem: No such file",
        ),
        (
            &["--otlp-header", "a=b"],
            &[],
            "the following required arguments were not provided:\n  --otlp",
        ),
    ] {
        let out = run_with_otlp(options, env, &["sh", "-c", &touch]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{options:?} {env:?}: {err}");
        assert!(err.contains(message), "{options:?} {env:?}: {err}");
        assert!(!ran.exists(), "{options:?} {env:?}: the command ran");
    }
}

#[test]
fn a_collector_that_received_nothing_makes_the_exit_status_3_unless_the_command_failed() {
    // A port nobody listens on: every push is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let out = run_with_otlp(&["--otlp", &url, "--linger", "1s"], &[], &["true"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains(&format!("not delivered to {url}/v1/metrics"))
            && err.contains("the collector has received nothing of this profile")
            && err.contains("exit status 3: the OTLP collector received none of the pushes"),
        "{err}"
    );
    let out = run_with_otlp(&["--otlp", &url, "--linger", "1s"], &[], &["false"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
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

/// Fetches `/metrics` from `addr`: the body of a 200 answer.
fn scrape(addr: &str) -> String {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{answer}");
    body.to_owned()
}

#[test]
fn an_attached_profile_serves_its_metrics_and_keeps_the_final_values_until_scraped() {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let mut monitor = Command::new(MONITOR)
        .args(["--backend", "procfs", "--pid", &pid])
        .args(["--prometheus", "127.0.0.1:0", "--linger", "30s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(monitor.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .trim()
        .strip_prefix("monitor: serving metrics at http://")
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    thread::sleep(Duration::from_millis(300));
    let running = scrape(&addr);
    let label = format!(
        "target=\"pid:{pid}\",backend=\"procfs\",mode=\"strict\",monitor_pid=\"{}\"",
        monitor.id()
    );
    assert!(running.contains(&label), "{running}");
    signal(&monitor, Signal::SIGINT);
    // Ended, it waits for a scrape of its final values.
    thread::sleep(Duration::from_millis(500));
    assert!(
        monitor.try_wait().unwrap().is_none(),
        "it left before a scrape"
    );
    let last = scrape(&addr);
    let out = ends_by_itself(monitor, "the lingering monitor");
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    let mut summary = String::new();
    err.read_to_string(&mut summary).unwrap();
    assert!(out.status.success(), "{summary}");
    assert!(
        summary.contains("the last ones with the final values"),
        "{summary}"
    );
    let rows = parse_csv(&String::from_utf8(out.stdout).unwrap()).len();
    let count = format!(
        "pfprof_period_faults_count{{{label},system_paging_fault_type=\"minor\"}} {rows}\n"
    );
    assert!(last.contains(&count), "not {count:?} in\n{last}");
}

#[test]
fn a_cgroup_is_profiled_without_run_and_with_the_kernel_backend_only_with_the_module() {
    let out = monitor(&["run", "--cgroup", "/sys/fs/cgroup", "--", "true"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("use it without `run`"),
        "{}",
        stderr(&out)
    );
    let out = monitor(&["--cgroup", "/tmp", "--backend", "procfs"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("/tmp is not a cgroup v2 directory"),
        "{}",
        stderr(&out)
    );
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let cgroup2 = mountinfo
        .lines()
        .find_map(|l| {
            let (before, after) = l.split_once(" - ")?;
            after
                .starts_with("cgroup2 ")
                .then(|| before.split_whitespace().nth(4))?
        })
        .expect("a cgroup2 mount");
    let out = monitor_without_the_module(&["--cgroup", cgroup2, "--backend", "kernel"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("the pfprof module is not loaded"),
        "{}",
        stderr(&out)
    );
}
