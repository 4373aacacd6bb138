//! The monitor at a terminal, as `perf stat` users expect it: the summary by default, rows
//! only where asked, a summary file and JSON, endings that keep everything, the metadata
//! and the time words. Drives the real binaries on the procfs backend.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::*;
use monitor::output::writer::CSV_METADATA_PREFIX as CSV_METADATA;
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
    // No live line: standard error is not a terminal.
    assert!(
        stderr(&quiet).starts_with("pfprof summary") && !stderr(&quiet).contains(['\r', '\x1b']),
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

/// `monitor --backend procfs --pid P OPTIONS` on a `sleep 30` that outlives it, run to
/// its end in `dir`.
fn attached_to_a_sleeper(dir: &Scratch, options: &[&str]) -> Output {
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let mut args = vec!["--backend", "procfs", "--pid", &pid];
    args.extend_from_slice(options);
    let out = monitor_in(dir, &args);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    out
}

#[test]
fn duration_ends_an_attached_profile_and_sends_sigterm_to_a_command_as_timeout_does() {
    let dir = Scratch::new("terminal-duration");
    let started = Instant::now();
    let attached = attached_to_a_sleeper(&dir, &["--duration", "500ms", "-o", "/dev/null"]);
    let took = started.elapsed();
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

/// GNU time, whose `-v` report's "Maximum resident set size" is the figure users hold the
/// monitor's peak RSS against.
const TIME: &str = "/usr/bin/time";

/// `/usr/bin/time -v`'s maximum resident set size, bytes.
fn time_v_max_rss(stderr: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.contains("Maximum resident set size (kbytes):"))
        .unwrap_or_else(|| panic!("no time -v report in {stderr}"));
    let kib: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    kib * 1024
}

/// The summary a `--summary` file holds, as JSON.
fn json_summary(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn the_commands_peak_rss_is_the_one_time_v_reports_and_its_cpu_is_split_user_and_system() {
    let dir = Scratch::new("terminal-rusage");
    let summary = dir.join("run.json");
    // time -v is the command; work its child. The command's ru_maxrss is the largest of
    // its own and of the children it waited for: work's, the figure time -v prints.
    let out = monitor_in(
        &dir,
        &[
            "run",
            "--backend",
            "procfs",
            "--summary",
            summary.to_str().unwrap(),
            "--",
            TIME,
            "-v",
            WORK,
            "48",
            "R",
            "100000",
            "1",
        ],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let command = &json_summary(&summary)["command"];
    let max_rss = command["max_rss_bytes"].as_u64().unwrap();
    assert_eq!(max_rss, time_v_max_rss(&err), "{command}");
    // Every page of the 48 MiB is touched, and the whole buffer is resident at once.
    assert!(max_rss >= 48 << 20, "{command}");
    let (user, system) = (command["user_s"].as_f64(), command["system_s"].as_f64());
    let split = user.unwrap() + system.unwrap();
    let cpu = command["cpu_s"].as_f64().unwrap();
    assert!((split - cpu).abs() < 1e-6, "{command}");
    assert!(user.unwrap() > 0.0, "{command}");
}

/// How far two readings of one process's resident set may differ when nothing changed
/// it: the kernel counts resident pages per CPU (6.2 on; per thread before) and folds
/// them into the total by batches, so `ru_maxrss` at exit (the folded total) and VmHWM
/// (the exact sum, on kernels that take it) may differ by what is not folded yet, up to a
/// batch of each of the three counters (anonymous, file, shared) on every CPU.
fn rss_counter_slack() -> u64 {
    let cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
        .unwrap()
        .unwrap() as u64;
    // percpu_counter_batch, and TASK_RSS_EVENTS_THRESH of the per-thread counters.
    let batch = (cpus * 32).max(cpus * cpus * 2).max(64);
    3 * batch * 4096
}

/// A line of `/proc/PID/status`, in kB.
fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix(key))?;
    line.trim().strip_suffix("kB")?.trim().parse().ok()
}

#[test]
fn an_attached_processs_peak_rss_is_its_high_water_mark_as_time_v_reports_it() {
    let dir = Scratch::new("terminal-hwm");
    let summary = dir.join("pid.json");
    let time = Command::new(TIME)
        .args(["-v", WORK, "48", "R", "100000", "1000", "--sleep-ms", "10"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let children = format!("/proc/{}/task/{}/children", time.id(), time.id());
    let started = Instant::now();
    let work = loop {
        let listed = std::fs::read_to_string(&children).unwrap_or_default();
        if let Ok(pid) = listed.trim().parse::<u32>() {
            // Its buffer touched: its peak is reached.
            if status_kib(pid, "VmRSS:").is_some_and(|kib| kib >= 48 << 10) {
                break pid;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "work never grew"
        );
        thread::sleep(Duration::from_millis(10));
    };
    // Stopped, its resident set changes no more: the monitor's reading and the figure
    // time -v gets at its exit are of the same memory.
    let work_pid = Pid::from_raw(work as i32);
    kill(work_pid, Signal::SIGSTOP).unwrap();
    let out = monitor_in(
        &dir,
        &[
            "--backend",
            "procfs",
            "--pid",
            &work.to_string(),
            "--duration",
            "300ms",
            "-o",
            "/dev/null",
            "--summary",
            summary.to_str().unwrap(),
        ],
    );
    kill(work_pid, Signal::SIGKILL).unwrap();
    let timed = time.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let attached = &json_summary(&summary)["attached"][0];
    assert_eq!(attached["pid"], work);
    // Still running at the end: read then, not before an exit.
    assert_eq!(attached["exited_within_s"], serde_json::Value::Null);
    let hwm = attached["max_rss_bytes"].as_u64().unwrap();
    assert!(hwm >= 48 << 20, "{attached}");
    let timed = time_v_max_rss(&stderr(&timed));
    assert!(
        hwm.abs_diff(timed) <= rss_counter_slack(),
        "VmHWM {hwm} against time -v's {timed}"
    );
    // A process that exits during the profile: its mark as last read, and when.
    let mut sleeper = Command::new("sleep").arg("0.5").spawn().unwrap();
    let out = monitor_in(
        &dir,
        &[
            "--backend",
            "procfs",
            "--pid",
            &sleeper.id().to_string(),
            "-o",
            "/dev/null",
        ],
    );
    sleeper.wait().unwrap();
    let err = stderr(&out);
    let line = err.lines().find(|l| l.contains(" peak RSS ")).unwrap();
    assert!(
        line.starts_with(&format!("  pid {} peak RSS ", sleeper.id()))
            && line.contains("(VmHWM: its largest resident set since it started, as last read, ")
            && line.ends_with(" s or less before it exited)"),
        "{err}"
    );
}

#[test]
fn count_ends_the_profile_after_exactly_that_many_samples() {
    let dir = Scratch::new("terminal-count");
    let attached = attached_to_a_sleeper(&dir, &["--period", "20ms", "--count", "7"]);
    let err = stderr(&attached);
    assert!(attached.status.success(), "{err}");
    let rows = parse_csv(&String::from_utf8_lossy(&attached.stdout));
    assert_eq!(rows.len(), 7, "{err}");
    // The summary says who was counted: pidstat -p and perf stat -p count the process
    // alone, this its descendants too.
    let counted = err
        .lines()
        .find(|l| l.starts_with("  counted "))
        .unwrap_or("");
    assert!(
        counted.starts_with("  counted            pid ")
            && counted.ends_with(" and its descendants"),
        "{err}"
    );
    // Seven periods, as `pidstat 0.02 7` would give: no stub of the attach instant first
    // (a row of a few milliseconds, its rates divided by a whole period).
    assert!(rows[0].time_ms >= 10, "{rows:?}");
    assert_eq!(summary_value(&err, "samples"), 7, "{err}");
    // `monitor run`: the command gets SIGTERM, as with --duration; relaxed mode alike.
    let summary = dir.join("run.json");
    let mut args: Vec<&str> = "run --backend procfs --mode relaxed --period 20ms --count 5"
        .split(' ')
        .collect();
    args.extend(["--format", "jsonl", "-o", "-", "--summary"]);
    args.extend([summary.to_str().unwrap(), "--", "sleep", "30"]);
    let run = monitor_in(&dir, &args);
    assert_eq!(run.status.code(), Some(128 + 15), "{}", stderr(&run));
    let records = String::from_utf8_lossy(&run.stdout).into_owned();
    let rows = records
        .lines()
        .filter(|l| l.contains("\"time_ms\""))
        .count();
    assert_eq!(rows, 5, "{records}");
    let summary = json_summary(&summary);
    assert_eq!(summary["samples"], 5);
    assert_eq!(summary["command"]["exit_code"], 128 + 15);
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

#[test]
fn a_full_file_system_keeps_the_earlier_file_and_still_gets_the_summary() {
    let dir = Scratch::new("terminal-tmpfs");
    std::fs::create_dir(dir.join("tiny")).unwrap();
    // An 8 KiB file system of the monitor's own (in a user and mount namespace, so no
    // privilege is needed): 2 s of rows at 10 ms do not fit. What is left in it is
    // listed from inside, before it goes with the namespace.
    let out = Command::new("unshare")
        .args(["--mount", "--map-root-user", "--", "sh", "-c"])
        .arg(
            "mount -t tmpfs -o size=8k none tiny && echo earlier > tiny/prof.csv || exit 99
             \"$0\" \"$@\"; echo \"exit $?\"; ls -A tiny; cat tiny/prof.csv",
        )
        .arg(MONITOR)
        .args(["run", "--backend", "procfs", "--period", "10ms"])
        .args(["-o", "tiny/prof.csv", "--", "sleep", "2"])
        .current_dir(dir.path())
        .output()
        .expect("unshare (util-linux) runs");
    let err = stderr(&out);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "exit 2\nprof.csv\nearlier\n",
        "{err}"
    );
    assert!(err.starts_with("pfprof summary"), "{err}");
    assert!(
        err.contains("cannot write the output file tiny/prof.csv: No space left on device"),
        "{err}"
    );
}

/// `monitor ARGS` with its standard error on a pseudo-terminal, and its standard output
/// too when `stdout_too` (else /dev/null): all the terminal got (its `\r\n`, the
/// terminal's rendering of a newline, back to `\n`), and the exit status.
fn on_a_terminal(args: &[&str], stdout_too: bool) -> (String, std::process::ExitStatus) {
    let pty = nix::pty::openpty(None, None).unwrap();
    let stdout = match stdout_too {
        true => Stdio::from(pty.slave.try_clone().unwrap()),
        false => Stdio::null(),
    };
    // The command, and with it this side's copy of the terminal, is dropped at once: the
    // terminal ends (EIO) once the monitor and its command closed theirs.
    let mut monitor = Command::new(MONITOR)
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::from(pty.slave))
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    let reader = thread::spawn(move || {
        let mut seen = Vec::new();
        let _ = std::io::Read::read_to_end(&mut master, &mut seen);
        seen
    });
    let status = monitor.wait().unwrap();
    let seen = reader.join().unwrap();
    let seen = String::from_utf8_lossy(&seen).replace("\r\n", "\n");
    (seen, status)
}

/// What a real terminal shows of the shell `command` run in `dir` (`script` gives it a
/// pseudo-terminal; the command sets its size with `stty`), its `\r\n` back to `\n`,
/// once it succeeded.
fn on_script(dir: &Scratch, command: &str) -> String {
    let out = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("script(1), from util-linux");
    let text = String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n");
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn the_live_line_redraws_in_place_on_a_terminal_and_leaves_it_clean() {
    // Attached, its rows in a file: the line has standard error to itself.
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = sleeper.id().to_string();
    let attach = [
        "--backend",
        "procfs",
        "-p",
        &pid,
        "-o",
        "/dev/null",
        "--duration",
        "2s",
    ];
    let (seen, status) = on_a_terminal(&attach, false);
    assert!(status.success(), "{seen:?}");
    // Erased before the summary, which is plain text where the line was.
    let (live, summary) = seen
        .split_once("\r\x1b[Kpfprof summary")
        .unwrap_or_else(|| panic!("the line is not erased before the summary: {seen:?}"));
    assert!(!summary.contains(['\r', '\x1b']), "{seen:?}");
    // Each draw goes back to the start of the line and clears the rest of the last one:
    // no newline, no other sequence.
    let draws: Vec<&str> = live.split('\r').filter(|d| !d.is_empty()).collect();
    let mut times = Vec::new();
    for draw in &draws {
        let text = (draw.strip_suffix("\x1b[K")).unwrap_or_else(|| panic!("{seen:?}"));
        assert!(!text.contains(['\n', '\x1b']), "{seen:?}");
        // The time, the totals beside the rates, the CPU and the memory now.
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(
            [words[1], words[4], words[7], words[9]],
            ["minor", "major", "cpu", "rss"],
            "{seen:?}"
        );
        let time = words[0]
            .strip_suffix('s')
            .unwrap_or_else(|| panic!("{seen:?}"));
        times.push(time.parse::<f64>().unwrap());
    }
    // Redrawn as samples come: never earlier, and later by the end.
    assert!(times.len() >= 2, "{seen:?}");
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    assert!(times.first() < times.last(), "{seen:?}");
    // Nothing with --quiet; no line when the rows go to standard output, which may be
    // the same terminal (at a terminal: a table), or a pipe to it.
    let quiet = [
        "-q",
        "--backend",
        "procfs",
        "-p",
        &pid,
        "-o",
        "/dev/null",
        "--count",
        "5",
    ];
    assert_eq!(on_a_terminal(&quiet, false).0, "");
    let rows = ["--backend", "procfs", "-p", &pid, "--count", "5"];
    let (seen, _) = on_a_terminal(&rows, true);
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(!seen.contains(['\r', '\x1b']), "{seen:?}");
    assert!(
        seen.starts_with(&format!("# pid {pid} and its descendants, from ")),
        "{seen:?}"
    );
    assert!(seen.contains("\npfprof summary"), "{seen:?}");
}

/// The live line never lands where others write: not while a command runs (it shares
/// the monitor's standard error: its text would land on the line's row, whatever its
/// standard output is), not when the rows go to standard output (a pipe to `tee` is the
/// same terminal), and not while a full-screen program has the terminal (less, vim and
/// top turn canonical input off: the line would be painted over their screen).
#[test]
fn the_live_line_is_not_drawn_where_others_write_or_a_full_screen_program_runs() {
    let dir = Scratch::new("terminal-no-line");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let attach = format!(
        "{MONITOR} --backend procfs -p {} --duration 1500ms",
        sleeper.id()
    );
    let run = format!("{MONITOR} run --backend procfs -- {WORK} 16 R 20000 6 --sleep-ms 150");
    for (what, command) in [
        ("a command runs", format!("{run} >/dev/null")),
        (
            "the rows go through a pipe",
            format!("{attach} -o - | cat >/dev/null"),
        ),
        (
            "the terminal is a full-screen program's",
            format!("stty -icanon; {attach} -o /dev/null; stty icanon"),
        ),
    ] {
        let text = on_script(&dir, &command);
        assert!(text.contains("pfprof summary"), "{what}: {text:?}");
        assert!(
            !text.contains("\x1b[K"),
            "{what}: a line was drawn: {text:?}"
        );
    }
    // Control: attached, its rows in a file, the terminal line by line: drawn.
    let text = on_script(&dir, &format!("{attach} -o /dev/null"));
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(text.contains("\x1b[K"), "{text:?}");
}

/// Attached at a real terminal of 80 columns, the samples are a table a person reads,
/// as pidstat's: what is counted, labelled columns, a line an --interval whose rates are
/// a second's; piped, the same command writes CSV.
#[test]
fn attached_at_a_terminal_the_samples_are_a_table_of_80_columns() {
    let dir = Scratch::new("terminal-table");
    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let args = format!(
        "--backend procfs --pid {} --period 100ms --interval 500ms --count 10",
        sleeper.id()
    );
    let text = on_script(&dir, &format!("stty cols 80 rows 24; {MONITOR} {args}"));
    let table: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("pfprof summary"))
        .collect();
    assert!(
        table[0].starts_with(&format!(
            "# pid {} and its descendants, from ",
            sleeper.id()
        )),
        "{text}"
    );
    assert_eq!(table[1], monitor::output::table::HEADER, "{text}");
    // Ten periods of 100 ms: lines of about half a second (a late wake-up on a loaded
    // machine moves a row's end, a missed deadline merges two), their rates a second's.
    let times: Vec<f64> = table[2..]
        .iter()
        .map(|l| l.split_whitespace().next().unwrap_or("").parse().unwrap())
        .collect();
    assert!((1..=3).contains(&times.len()), "{text}");
    assert!(
        times[0] >= 0.4 && times.windows(2).all(|w| w[0] < w[1]),
        "{text}"
    );
    assert!(table.iter().all(|l| l.chars().count() <= 79), "{text}");
    // Piped: CSV, for programs.
    let piped = monitor_in(&dir, &args.split(' ').collect::<Vec<_>>());
    sleeper.kill().unwrap();
    sleeper.wait().unwrap();
    assert!(
        String::from_utf8_lossy(&piped.stdout).starts_with(CSV_METADATA),
        "{}",
        stderr(&piped)
    );
}

/// At a real terminal (a pseudo-terminal `script` gives the monitor, its width set by
/// `stty`), every draw of the live line, and every line of the summary, is narrower than
/// the terminal: a line as wide as the terminal wraps, and each redraw leaves a row
/// behind (it was 84 wide). At 80 columns and at 50.
#[test]
fn the_live_line_and_the_summary_fit_the_terminal() {
    let dir = Scratch::new("terminal-live-line");
    let mut work = Command::new(WORK)
        .args(["64", "R", "20000", "8", "--sleep-ms", "150"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for columns in [80, 50] {
        let command = format!(
            "stty cols {columns} rows 24; {MONITOR} --backend procfs -p {} -o /dev/null \
             --duration 1s",
            work.id()
        );
        let text = on_script(&dir, &command);
        // Each draw: a carriage return, the line, then the erase to its end.
        let draws: Vec<&str> = text
            .split('\r')
            .filter_map(|after| after.split("\x1b[K").next())
            .filter(|draw| draw.contains(" minor "))
            .collect();
        assert!(!draws.is_empty(), "no live line drawn: {text:?}");
        let (_, summary) = text.split_once("pfprof summary").expect("the summary");
        for line in draws.iter().copied().chain(summary.lines()) {
            assert!(
                line.chars().count() < columns,
                "{} columns of {columns}: {line:?}",
                line.chars().count()
            );
        }
    }
    work.kill().unwrap();
    work.wait().unwrap();
}
