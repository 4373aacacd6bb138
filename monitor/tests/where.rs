//! Where the faults were, end to end on the procfs backend: `work` announces how many
//! faults each of its mappings should take, and the monitor must have put them there.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::*;
use serde_json::Value;

/// What one `work` said one of its mappings should have taken.
#[derive(Debug)]
struct Announced {
    pid: u32,
    /// The file's path; `None`: its anonymous buffer.
    file: Option<PathBuf>,
    minor: u64,
    major: u64,
}

/// Every `work mapping:` line.
fn announced(stderr: &str) -> Vec<Announced> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("work mapping: pid "))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let number_before = |what: &str| -> u64 {
                let at = words.iter().position(|w| w.starts_with(what)).unwrap();
                words[at - 1].parse().unwrap()
            };
            Announced {
                pid: words[0].parse().unwrap(),
                file: (words[1] == "file").then(|| PathBuf::from(words[2])),
                minor: number_before("minor"),
                major: number_before("major"),
            }
        })
        .collect()
}

/// A directory on the build's file system (not a tmpfs /tmp: its pages are never
/// evicted to a file), removed when dropped.
struct OnDisk(PathBuf);

impl OnDisk {
    fn new(name: &str) -> OnDisk {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("where-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        OnDisk(std::fs::canonicalize(&dir).unwrap())
    }
}

impl Drop for OnDisk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The interval records of where the faults were, in JSON Lines rows.
fn where_records(rows: &str) -> Vec<Value> {
    (rows.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["event"] == "where")
        .collect()
}

/// The summary's mapping entry for what `work` announced.
fn entry<'a>(top: &'a [Value], a: &Announced) -> Option<&'a Value> {
    top.iter().find(|m| match &a.file {
        Some(path) => m["name"] == path.to_str().unwrap() && m["kind"] == "shared",
        None => m["kind"] == "anonymous" && m["pid"] == a.pid && m["name"] == "",
    })
}

/// `monitor run` of `sh -c script` on the procfs backend, its rows written to `rows` as
/// JSON Lines, its summary to `summary` as JSON, with `options` (`--plot FILE`...).
fn run_written(rows: &Path, summary: &Path, options: &[&str], script: &str) -> Output {
    let written = [
        "run",
        "--backend",
        "procfs",
        "--format",
        "jsonl",
        "-o",
        rows.to_str().unwrap(),
        "--summary",
        summary.to_str().unwrap(),
    ];
    let command = ["--", "sh", "-c", script];
    monitor(&[&written[..], options, &command].concat())
}

#[test]
fn each_mappings_faults_are_where_work_put_them_a_childs_too_majors_all_on_their_file() {
    let dir = OnDisk::new("mappings");
    let (a, b) = (dir.0.join("a"), dir.0.join("b"));
    let rows = dir.0.join("rows.jsonl");
    let summary = dir.0.join("run.json");
    let plot = dir.0.join("run.svg");
    // Two works, children of the shell: one whose file is evicted before its second and
    // third sweeps (its majors), one whose file stays cached.
    let script = format!(
        "{WORK} 64 R 30000 3 --sleep-ms 50 --file {} --evict & \
         {WORK} 48 R 30000 2 --sleep-ms 50 --file {}; wait",
        a.display(),
        b.display()
    );
    let out = run_written(
        &rows,
        &summary,
        &["--plot", plot.to_str().unwrap()],
        &script,
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let announced = announced(&err);
    assert_eq!(announced.len(), 4, "{err}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let place = &summary["where"];
    assert_eq!(place["attributed"], true, "{place}");
    let minor_top = place["minor"]["top"].as_array().unwrap();
    let major_top = place["major"]["top"].as_array().unwrap();
    // Sampled minor counts within 5% of what each mapping took, for those over 10,000.
    for a in announced.iter().filter(|a| a.minor >= 10_000) {
        let m = entry(minor_top, a).unwrap_or_else(|| panic!("{a:?} not in {minor_top:?}"));
        let estimate = m["minor_est"].as_u64().unwrap();
        let error = estimate.abs_diff(a.minor) as f64 / a.minor as f64;
        assert!(
            error <= 0.05,
            "{a:?}: estimated {estimate}, {:.1}% off",
            error * 100.0
        );
    }
    // Every major fault recorded, at least 95% of them on the evicted file.
    let evicted = announced
        .iter()
        .find(|x| x.file.as_deref() == Some(&a))
        .unwrap();
    assert!(evicted.major >= 10_000, "{evicted:?}");
    let on_a = entry(major_top, evicted).unwrap_or_else(|| panic!("{major_top:?}"));
    let all = summary["major_faults"].as_u64().unwrap();
    assert!(
        on_a["major"].as_u64().unwrap() as f64 >= 0.95 * all as f64,
        "{on_a} of {all} major faults"
    );
    assert_eq!(major_top[0]["name"], a.to_str().unwrap());
    // Each work is named with its own faults, as its stat counted them until the last
    // pass that read it: what it took after, before its parent reaped it (at most its
    // last period: part of its last sweep, its report, its exit), counts as the other
    // processes'. Its own faults are its announced mappings' and a few hundred more.
    let processes = place["processes"].as_array().unwrap();
    for anon in announced.iter().filter(|a| a.file.is_none()) {
        let file = announced
            .iter()
            .find(|f| f.pid == anon.pid && f.file.is_some())
            .unwrap();
        let p = processes
            .iter()
            .find(|p| p["pid"] == anon.pid)
            .unwrap_or_else(|| panic!("pid {} not in {processes:?}", anon.pid));
        assert_eq!(p["comm"], "work");
        let counted = p["minor"].as_u64().unwrap() + p["major"].as_u64().unwrap();
        let took = anon.minor + file.minor + file.major;
        let last_sweep = 16_384;
        assert!(
            counted + last_sweep >= took && counted <= took + 2_000,
            "pid {}: {counted} faults counted, its mappings took {took}",
            anon.pid
        );
    }
    let listed: u64 = (processes.iter())
        .map(|p| p["minor"].as_u64().unwrap())
        .sum();
    assert_eq!(
        listed + place["other_processes"]["minor"].as_u64().unwrap(),
        summary["minor_faults"].as_u64().unwrap()
    );
    // The interval records add up to the summary's: every major fault of file a in them.
    let text = std::fs::read_to_string(&rows).unwrap();
    let records = where_records(&text);
    assert!(!records.is_empty(), "no where record in {text}");
    let majors_on_a: u64 = (records.iter())
        .flat_map(|r| r["mappings"].as_array().unwrap())
        .filter(|m| m["name"] == a.to_str().unwrap())
        .map(|m| m["major"].as_u64().unwrap())
        .sum();
    assert_eq!(Some(majors_on_a), on_a["major"].as_u64());
    // The plot's lane names file a with its major faults (its path shortened in its
    // middle to fit the legend).
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.contains("major faults/s by mapping, every one recorded"),
        "{svg}"
    );
    let legend = format!("/a (shared): {majors_on_a} (");
    assert!(svg.contains(&legend), "no {legend:?} in {svg}");
}

/// Every `work range:` line: each range of its file (bytes) and the major faults it took.
fn announced_ranges(stderr: &str) -> Vec<(u64, u64, u64)> {
    (stderr.lines())
        .filter_map(|l| l.strip_prefix("work range: pid "))
        .map(|line| {
            let words: Vec<&str> = line.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "offsets").unwrap();
            let range = words[at + 1].trim_end_matches(':');
            let (start, end) = range.split_once('-').unwrap();
            let major = words.iter().position(|w| w.starts_with("major")).unwrap();
            (
                start.parse().unwrap(),
                end.parse().unwrap(),
                words[major - 1].parse().unwrap(),
            )
        })
        .collect()
}

/// `regions` of a mapping in a record or the summary, as (start, end, major), by offset.
fn regions(mapping: &Value) -> Vec<(u64, u64, u64)> {
    let mut all: Vec<(u64, u64, u64)> = (mapping["regions"].as_array())
        .unwrap_or_else(|| panic!("no regions in {mapping}"))
        .iter()
        .map(|r| {
            let n = |key: &str| r[key].as_u64().unwrap();
            (n("start"), n("end"), n("major"))
        })
        .collect();
    all.sort_unstable();
    all
}

/// A file read in two known ranges of its 8 MiB, evicted before each later sweep: the
/// summary's hottest regions of the file are those two ranges with every major fault
/// each took, by its own thread's counts; the interval records' add up to the same.
#[test]
fn a_files_hottest_regions_are_the_ranges_work_read_with_every_major_fault_each_took() {
    let dir = OnDisk::new("regions");
    let file = dir.0.join("data.bin");
    let rows = dir.0.join("rows.jsonl");
    let summary = dir.0.join("run.json");
    let plot = dir.0.join("run.svg");
    let script = format!(
        "{WORK} 1 R 1 3 --sleep-ms 50 --file {} --file-mib 8 --file-range 0-2 \
         --file-range 6-7 --evict",
        file.display()
    );
    let out = run_written(
        &rows,
        &summary,
        &["--plot", plot.to_str().unwrap()],
        &script,
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let ranges = announced_ranges(&err);
    let mib = 1u64 << 20;
    let bounds: Vec<(u64, u64)> = ranges.iter().map(|&(s, e, _)| (s, e)).collect();
    assert_eq!(bounds, [(0, 2 * mib), (6 * mib, 7 * mib)], "{err}");
    // Two sweeps of evicted pages: a major fault a page at most, some at least.
    assert!(ranges[0].2 > 0 && ranges[1].2 > 0, "{ranges:?}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let major = &summary["where"]["major"];
    assert_eq!(major["lost"], 0, "records lost: the counts cannot be exact");
    let top = major["top"].as_array().unwrap();
    let on_file = (top.iter())
        .find(|m| m["name"] == file.to_str().unwrap())
        .unwrap_or_else(|| panic!("{top:?}"));
    // The file's buckets are 128 KiB (8 MiB of offsets in 64): each range's edges are
    // buckets' edges, and its count exact.
    assert_eq!(regions(on_file), ranges, "{on_file}");
    let text = std::fs::read_to_string(&rows).unwrap();
    let mut in_records = [0u64; 2];
    for m in (where_records(&text).iter())
        .flat_map(|r| r["mappings"].as_array().unwrap().clone())
        .filter(|m| m["name"] == file.to_str().unwrap() && m["major"].as_u64() > Some(0))
    {
        for (start, end, n) in regions(&m) {
            let i = ranges.iter().position(|r| r.0 <= start && end <= r.1);
            let i = i.unwrap_or_else(|| panic!("{start}..{end} in neither range: {m}"));
            in_records[i] += n;
        }
    }
    assert_eq!(in_records, [ranges[0].2, ranges[1].2], "{text}");
    // The plot's heat map is of this file, in buckets of 128 KiB, on an axis in MiB.
    let svg = std::fs::read_to_string(&plot).unwrap();
    for text in [
        "major faults by file offset in /",
        "data.bin (shared), a cell a period and 128 KiB:",
        "file offset (MiB)",
    ] {
        assert!(svg.contains(text), "no {text:?} in {svg}");
    }
}

/// A process that maps a file, faults in it, unmaps it and exits long before the monitor
/// first reads its descendants' maps (a period of 5 s, the process done in tens of ms)
/// has its faults on that file all the same, every one: the mappings as the kernel's
/// mmap records said they were at each fault. Read from `/proc` at the period's end, the
/// process gone, they were all "unmapped by then".
#[test]
fn a_process_gone_before_its_maps_are_read_has_its_faults_on_the_file_it_had_mapped() {
    let dir = OnDisk::new("gone");
    let file = dir.0.join("short-lived");
    let rows = dir.0.join("rows.jsonl");
    // Two sweeps of 512 pages, the file evicted before the second: 512 major faults.
    let script = format!(
        "{WORK} 1 R 1 2 --sleep-ms 0 --file {} --file-mib 2 --evict",
        file.display()
    );
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--period",
        "5s",
        "--minor-sampling",
        "1",
        "--format",
        "jsonl",
        "-o",
        rows.to_str().unwrap(),
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let announced = announced(&err);
    let mapped = (announced.iter())
        .find(|a| a.file.is_some())
        .unwrap_or_else(|| panic!("{err}"));
    assert!(mapped.major >= 256, "{mapped:?}");
    let text = std::fs::read_to_string(&rows).unwrap();
    let mappings: Vec<Value> = (where_records(&text).iter())
        .flat_map(|r| r["mappings"].as_array().unwrap().clone())
        .collect();
    let on_file = |what: &str| -> u64 {
        (mappings.iter())
            .filter(|m| m["name"] == file.to_str().unwrap() && m["kind"] == "shared")
            .map(|m| m[what].as_u64().unwrap())
            .sum()
    };
    // Every fault recorded (--minor-sampling 1), each on the file as the sweeps counted
    // them in their own thread.
    assert_eq!(on_file("major"), mapped.major, "{text}");
    assert_eq!(on_file("minor_samples"), mapped.minor, "{text}");
    let unmapped: Vec<&Value> = (mappings.iter())
        .filter(|m| m["kind"] == "unmapped")
        .collect();
    assert!(unmapped.is_empty(), "{unmapped:?}");
}

#[test]
fn without_attribution_the_summary_says_so_and_still_names_the_processes() {
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--no-attribution",
        "--",
        WORK,
        "16",
        "R",
        "20000",
        "1",
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "where the faults were: not attributed to mappings: turned off (--no-attribution)"
        ),
        "{err}"
    );
    assert!(err.contains(" major  work (pid "), "{err}");
}

/// Runs of one program are one line of the summary, their faults summed, as
/// process-exporter groups by name: three `work`s in a loop are `work (3 processes)`,
/// not three lines of a third each.
#[test]
fn the_processes_of_one_program_are_one_line_of_the_summary() {
    let script = format!("for i in 1 2 3; do {WORK} 4 R 2000 2 --sleep-ms 200 >/dev/null; done");
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--format",
        "jsonl",
        "-o",
        "-",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    // Each interval's record names its programs too.
    let records = String::from_utf8_lossy(&out.stdout).into_owned();
    let programs: Vec<Value> = (records.lines())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["event"] == "where")
        .flat_map(|v| v["programs"].as_array().cloned().unwrap_or_default())
        .collect();
    assert!(
        programs
            .iter()
            .any(|p| p["comm"] == "work" && p["processes"].as_u64() >= Some(1)),
        "{records}"
    );
    let works: Vec<&str> = err
        .lines()
        .filter(|l| l.contains(" major  work ("))
        .collect();
    assert_eq!(works.len(), 1, "{err}");
    assert!(works[0].ends_with(" major  work (3 processes)"), "{err}");
    // Their own faults summed: 4,000 random accesses touch ~98% of each one's 1,024
    // pages, besides its start's faults.
    let minor: u64 = works[0].split_whitespace().next().unwrap().parse().unwrap();
    assert!(minor >= 3 * 1000, "{err}");
}

/// A command that exits within the first period has every fault of its own under its
/// program, read from its zombie before the reap: the passes read it last when the
/// period began. Whether it counts with its descendants or alone.
#[test]
fn a_command_that_exits_within_a_period_has_all_its_own_faults_under_its_program() {
    let dir = OnDisk::new("zombie");
    let (rows, summary, file) = (
        dir.0.join("rows.jsonl"),
        dir.0.join("run.json"),
        dir.0.join("file"),
    );
    for inherit in [&[][..], &["--no-inherit"][..]] {
        let work = format!(
            "exec {WORK} 1 R 1 3 --sleep-ms 50 --file {} --file-mib 8 --evict",
            file.display()
        );
        let options = [&["--period", "5s"][..], inherit].concat();
        let out = run_written(&rows, &summary, &options, &work);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        let programs = summary["where"]["programs"].as_array().unwrap();
        let work = (programs.iter())
            .find(|p| p["comm"] == "work")
            .unwrap_or_else(|| panic!("{inherit:?}: {programs:?}"));
        assert!(work["major"].as_u64() >= Some(4096), "{inherit:?}: {work}");
        assert_eq!(
            summary["where"]["other_processes"],
            serde_json::json!({"minor": 0, "major": 0}),
            "{inherit:?}: {summary}"
        );
    }
}

/// The cgroup v2 mount point.
fn cgroup2_mount() -> PathBuf {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    mountinfo
        .lines()
        .find_map(|l| {
            let (before, after) = l.split_once(" - ")?;
            after
                .starts_with("cgroup2 ")
                .then(|| before.split_whitespace().nth(4).map(PathBuf::from))?
        })
        .expect("a cgroup2 mount")
}

#[test]
fn where_the_kernel_refuses_perf_events_the_profile_goes_on_and_the_summary_says_what_would_allow_them(
) {
    // A cgroup's events watch whole CPUs: refused to users without CAP_PERFMON unless
    // kernel.perf_event_paranoid is 0 or less.
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        paranoid >= 1,
        "kernel.perf_event_paranoid is {paranoid}: this test needs a setting that refuses \
         unprivileged CPU-wide events (1 or more; Debian's default is 3)"
    );
    let scratch = Scratch::new("refused");
    let root = nix::unistd::geteuid().is_root();
    let (mut cmd, cgroup, sleeper) = if root {
        // Run as nobody, from a copy nobody can reach, on a cgroup of our own making.
        std::fs::set_permissions(scratch.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let copy = scratch.join("monitor");
        std::fs::copy(MONITOR, &copy).unwrap();
        let cgroup = cgroup2_mount().join(format!("pfprof-where-{}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap();
        let sleeper = Command::new("sleep").arg("30").spawn().unwrap();
        std::fs::write(cgroup.join("cgroup.procs"), sleeper.id().to_string()).unwrap();
        let mut cmd = Command::new(copy);
        cmd.uid(65534).gid(65534);
        (cmd, cgroup, Some(sleeper))
    } else {
        // Our own cgroup.
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .expect("a cgroup v2 line");
        let cgroup = cgroup2_mount().join(path.trim_start_matches('/'));
        (Command::new(MONITOR), cgroup, None)
    };
    let out = cmd
        .args([
            "--backend",
            "procfs",
            "--cgroup",
            cgroup.to_str().unwrap(),
            "--duration",
            "300ms",
            "-o",
            "/dev/null",
        ])
        .output()
        .unwrap();
    if let Some(mut sleeper) = sleeper {
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        std::fs::remove_dir(&cgroup).unwrap();
    }
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "where the faults were: not attributed to mappings: the kernel refused perf events"
        ),
        "{err}"
    );
    assert!(
        err.contains(&format!("at kernel.perf_event_paranoid {paranoid}")),
        "{err}"
    );
    assert!(
        err.contains("`sysctl kernel.perf_event_paranoid=0`, or give the monitor CAP_PERFMON"),
        "{err}"
    );
    // The profile itself went on: samples, and the processes named.
    assert!(summary_value(&err, "samples ") >= 2, "{err}");
}

#[test]
fn an_unprivileged_command_is_attributed_as_far_as_the_paranoia_setting_allows_and_told_so() {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let scratch = Scratch::new("unprivileged");
    let mut cmd = if nix::unistd::geteuid().is_root() {
        // As nobody, from copies nobody can reach.
        std::fs::set_permissions(scratch.path(), PermissionsExt::from_mode(0o755)).unwrap();
        for binary in [MONITOR, WORK] {
            let name = Path::new(binary).file_name().unwrap();
            std::fs::copy(binary, scratch.path().join(name)).unwrap();
        }
        let mut cmd = Command::new(scratch.join("monitor"));
        cmd.uid(65534).gid(65534);
        cmd.args(["run", "--backend", "procfs", "--"]);
        cmd.arg(scratch.join("work"));
        cmd
    } else {
        let mut cmd = Command::new(MONITOR);
        cmd.args(["run", "--backend", "procfs", "--", WORK]);
        cmd
    };
    // Over several periods: a process gone before any period read its maps has its
    // faults unmapped.
    let out = cmd
        .args(["16", "R", "20000", "3", "--sleep-ms", "60"])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let system_calls = "not recorded: faults taken in system calls on a process's behalf \
                        (kernel.perf_event_paranoid 2 allows user-space events only";
    match paranoid {
        // Per-process events, the kernel's faults too.
        ..=1 => {
            assert!(err.contains("where the faults were (perf events"), "{err}");
            assert!(!err.contains(system_calls), "{err}");
        }
        // Per-process events of user space only.
        2 => {
            assert!(err.contains("where the faults were (perf events"), "{err}");
            assert!(err.contains(system_calls), "{err}");
            assert!(err.contains("anonymous memory of pid"), "{err}");
        }
        // Debian's 3: none at all.
        _ => assert!(
            err.contains("allows no perf events to unprivileged users: `sysctl kernel.perf_event_paranoid=2`"),
            "{err}"
        ),
    }
}

#[test]
fn a_user_profiling_another_users_process_learns_none_of_its_mappings() {
    let scratch = Scratch::new("hostile");
    // Another user's process: as root, a sleep run as root with the monitor as nobody;
    // otherwise init, root's.
    let (mut cmd, target) = if nix::unistd::geteuid().is_root() {
        std::fs::set_permissions(scratch.path(), PermissionsExt::from_mode(0o755)).unwrap();
        let copy = scratch.join("monitor");
        std::fs::copy(MONITOR, &copy).unwrap();
        let mut cmd = Command::new(copy);
        cmd.uid(65534).gid(65534);
        (cmd, Some(Command::new("sleep").arg("30").spawn().unwrap()))
    } else {
        (Command::new(MONITOR), None)
    };
    let pid = target.as_ref().map_or(1, std::process::Child::id);
    let out = cmd
        .args([
            "--backend",
            "procfs",
            "--duration",
            "300ms",
            "-o",
            "/dev/null",
        ])
        .args(["--pid", &pid.to_string()])
        .output()
        .unwrap();
    if let Some(mut target) = target {
        target.kill().unwrap();
        target.wait().unwrap();
    }
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("not attributed to mappings: the kernel refused perf events")
            && err.contains("perf events on a process need the right to trace it"),
        "{err}"
    );
    assert!(
        !err.contains("/usr/"),
        "a mapping of process {pid} named: {err}"
    );
}

#[test]
fn a_profiled_process_that_exits_before_the_others_leaves_the_monitor_asleep() {
    // Its events hang up once it is gone (poll says so at once, forever): a monitor that
    // kept polling them would spin for the rest of the profile.
    for order in [["short", "long"], ["long", "short"]] {
        let mut short = Command::new("sleep").arg("0.2").spawn().unwrap();
        let mut long = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = |which: &str| match which {
            "short" => short.id().to_string(),
            _ => long.id().to_string(),
        };
        // Reaped by child::wait, which takes its rusage.
        #[allow(clippy::zombie_processes)]
        let child = Command::new(MONITOR)
            .args([
                "--backend",
                "procfs",
                "--duration",
                "1500ms",
                "-o",
                "/dev/null",
            ])
            .args(["--pid", &pid(order[0]), "--pid", &pid(order[1])])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let monitor_pid = child.id();
        short.wait().unwrap();
        let (status, used, _) = monitor::command::child::wait(monitor_pid).unwrap();
        long.kill().unwrap();
        long.wait().unwrap();
        assert_eq!(status.code(), 0, "{order:?}: {status}");
        assert!(
            used.cpu_ns < 400_000_000,
            "{order:?}: the monitor used {} ms of CPU in 1.5 s",
            used.cpu_ns / 1_000_000
        );
    }
}

#[test]
fn every_fault_recorded_or_counted_lost_when_each_minor_fault_is_recorded() {
    // One record a minor fault: the kernel may fill a ring before the sampler drains it
    // (a release build of this workload, a million faults a second, loses ~1% here), and
    // says how many records it dropped. Recorded and lost add up to the rows' minor
    // faults, less the few of the exec before the events count (the kernel's own,
    // without user registers, which the events never see).
    let dir = OnDisk::new("lost");
    let summary = dir.0.join("run.json");
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--minor-sampling",
        "1",
        "--summary",
        summary.to_str().unwrap(),
        "--",
        WORK,
        "256",
        "L",
        "2000000",
        "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let minor = &summary["where"]["minor"];
    let (recorded, lost) = (
        minor["recorded"].as_u64().unwrap(),
        minor["lost"].as_u64().unwrap(),
    );
    let total = summary["minor_faults"].as_u64().unwrap();
    assert!(
        recorded + lost <= total && recorded + lost + 100 >= total,
        "{recorded} recorded and {lost} lost of {total} minor faults"
    );
    assert_eq!(minor["estimated"], recorded);
}

#[test]
fn with_count_the_where_records_and_the_summary_cover_exactly_the_counted_rows() {
    // `work` faults on well past the 5th row: no fault of a later period may reach the
    // where records or the summary's section.
    let dir = OnDisk::new("count");
    let summary = dir.0.join("run.json");
    let out = monitor(&[
        "run",
        "--backend",
        "procfs",
        "--period",
        "20ms",
        "--interval",
        "40ms",
        "--count",
        "5",
        "--minor-sampling",
        "1",
        "--format",
        "jsonl",
        "-o",
        "-",
        "--summary",
        summary.to_str().unwrap(),
        "--",
        WORK,
        "64",
        "L",
        "2000000",
        "1",
    ]);
    assert_eq!(out.status.code(), Some(128 + 15), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<Value> = (text.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    let rows: Vec<&Value> = lines.iter().filter(|v| v["time_ms"].is_u64()).collect();
    assert_eq!(rows.len(), 5, "{text}");
    let records: Vec<&Value> = lines.iter().filter(|v| v["event"] == "where").collect();
    assert!(!records.is_empty(), "no where record in {text}");
    let rows_minor: u64 = rows.iter().map(|r| r["minor"].as_u64().unwrap()).sum();
    let records_minor: u64 = (records.iter())
        .map(|r| {
            let listed: u64 = (r["processes"].as_array().unwrap().iter())
                .map(|p| p["minor"].as_u64().unwrap())
                .sum();
            listed + r["other_processes"]["minor"].as_u64().unwrap()
        })
        .sum();
    assert_eq!(records_minor, rows_minor, "{text}");
    let last_row_end = rows[4]["time_ms"].as_u64().unwrap();
    let last_record_end = records.last().unwrap()["end_ms"].as_u64().unwrap();
    assert_eq!(last_record_end, last_row_end, "{text}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    assert_eq!(summary["samples"], 5);
    assert_eq!(summary["minor_faults"], rows_minor);
    let minor = &summary["where"]["minor"];
    let recorded = minor["recorded"].as_u64().unwrap();
    assert!(
        recorded <= rows_minor,
        "{recorded} minor faults recorded for rows that took {rows_minor}"
    );
}

/// The exposition's label value for `value`: `\`, `"` and newlines escaped.
fn escaped(value: &str) -> String {
    value
        .replace('\\', r"\\")
        .replace('"', r#"\""#)
        .replace('\n', r"\n")
}

#[test]
fn the_exporters_count_each_major_fault_under_its_mapping_program_and_function_a_hostile_files_escaped(
) {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = OnDisk::new("exported");
    // A file named to break out of its label: a quote, a backslash, a newline.
    let file = dir.0.join("db \"x\\y\nz");
    let summary = dir.0.join("run.json");
    let mut monitor = Command::new(MONITOR)
        .args(["run", "--backend", "procfs", "-o", "/dev/null", "-q"])
        .args([
            "--interval",
            "200ms",
            "--summary",
            summary.to_str().unwrap(),
        ])
        .args([
            "--prometheus",
            "127.0.0.1:0",
            "--linger",
            "60s",
            "--export-functions",
        ])
        .arg("--")
        .args([WORK, "48", "R", "30000", "3", "--sleep-ms", "50", "--evict"])
        .arg("--file")
        .arg(&file)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = BufReader::new(monitor.stderr.take().unwrap());
    let mut line_with = |words: &str| loop {
        let mut line = String::new();
        assert!(err.read_line(&mut line).unwrap() > 0, "no {words:?}");
        if line.contains(words) {
            return line;
        }
    };
    let serving = line_with("serving metrics at http://");
    let addr = serving
        .trim()
        .rsplit("http://")
        .next()
        .and_then(|a| a.strip_suffix("/metrics"))
        .unwrap()
        .to_owned();
    line_with("keeping the final values");
    let mut stream = std::net::TcpStream::connect(&addr).unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: test\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).unwrap();
    let status = monitor.wait().unwrap();
    let mut rest = String::new();
    err.read_to_string(&mut rest).unwrap();
    assert!(status.success(), "{rest}");
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
    let major = &summary["where"]["major"];
    let top = &major["top"][0];
    // As maps shows the file: its newline as \012.
    let name = top["name"].as_str().unwrap();
    assert!(name.ends_with("db \"x\\y\\012z"), "{top}");
    let took = top["major"].as_u64().unwrap();
    assert!(took >= 10_000, "{top}");
    // Each series of `family` whose labels hold `labels`: its value.
    let series = |family: &str, labels: &str| -> Vec<u64> {
        (text.lines())
            .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(labels))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect()
    };
    let by_mapping = |labels: &str| series("pfprof_mapping_faults_total", labels);
    let on_file = by_mapping(&format!(
        r#"mapping="{}",mapping_kind="shared"}}"#,
        escaped(name)
    ));
    // Named with its first faults: every one of them is its own series'.
    assert_eq!(on_file, [took], "{on_file:?} of its {took} exported");
    // Every major fault recorded or lost is under one mapping label or another.
    let all: u64 = by_mapping("").iter().sum();
    let recorded = major["recorded"].as_u64().unwrap() + major["lost"].as_u64().unwrap();
    assert_eq!(all, recorded, "{text}");
    // And by program: the same faults, work's under its name.
    let by_program = |labels: &str| series("pfprof_program_faults_total", labels);
    assert_eq!(by_program("").iter().sum::<u64>(), recorded, "{text}");
    let work = by_program(r#"program="work""#);
    assert!(
        work.len() == 1 && work[0] >= took,
        "work's {work:?}, {took} on the file alone"
    );
    // And by function (--export-functions): the same faults, the file's on work's sweep.
    let by_function = |labels: &str| series("pfprof_function_faults_total", labels);
    assert_eq!(by_function("").iter().sum::<u64>(), recorded, "{text}");
    let sweep = by_function(&format!(
        r#"function="{SWEEP}",binary="{}"}}"#,
        escaped(WORK)
    ));
    assert!(
        sweep.len() == 1 && sweep[0] as f64 >= 0.95 * took as f64,
        "the sweep's {sweep:?}, {took} on the file"
    );
}

/// Every `work range:` line of `--by-function`: each range's offsets (bytes), its major
/// faults, and the function that read it.
fn ranges_read_by(stderr: &str) -> Vec<((u64, u64, u64), String)> {
    let readers = (stderr.lines())
        .filter(|l| l.starts_with("work range: pid "))
        .map(|l| l.rsplit_once(", read by ").unwrap().1.to_string());
    announced_ranges(stderr).into_iter().zip(readers).collect()
}

/// The function entries of the JSON summary's major faults, as (binary, name, major).
fn major_functions(summary: &Value) -> Vec<(String, String, u64)> {
    (summary["where"]["major"]["functions"].as_array())
        .unwrap_or_else(|| panic!("no functions in {summary}"))
        .iter()
        .map(|f| {
            let text = |key: &str| f[key].as_str().unwrap().to_string();
            (text("binary"), text("name"), f["major"].as_u64().unwrap())
        })
        .collect()
}

/// A copy of `work` as a distribution ships a binary: with `--strip-all`, its symbols
/// gone; with a debug file beside it too, named by its `.gnu_debuglink`.
fn stripped_work(dir: &Path, debug_file: bool) -> PathBuf {
    let objcopy = |args: &[&str]| {
        let status = Command::new("objcopy")
            .args(args)
            .status()
            .unwrap_or_else(|e| panic!("objcopy (binutils: apt-get install binutils): {e}"));
        assert!(status.success(), "objcopy {args:?}");
    };
    let name = if debug_file {
        "work-linked"
    } else {
        "work-stripped"
    };
    let stripped = dir.join(name);
    let out = stripped.to_str().unwrap();
    if debug_file {
        let debug = dir.join("work.debug");
        objcopy(&["--only-keep-debug", WORK, debug.to_str().unwrap()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        objcopy(&["--strip-all", &link, WORK, out]);
    } else {
        objcopy(&["--strip-all", WORK, out]);
    }
    stripped
}

/// A btrfs filesystem in a file of `dir`, mounted through a loop device, with a
/// subvolume: where stat says another device than the kernel names the files' mappings
/// with. Unmounted when dropped.
struct Btrfs {
    mount: PathBuf,
}

impl Btrfs {
    /// Made and mounted, or why not (not root, no mkfs.btrfs, a kernel without btrfs).
    fn mount(dir: &Path) -> Result<Btrfs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("not root".into());
        }
        let run = |program: &str, args: &[&std::ffi::OsStr]| -> Result<(), String> {
            let out = Command::new(program)
                .args(args)
                .output()
                .map_err(|e| format!("{program}: {e}"))?;
            out.status
                .success()
                .then_some(())
                .ok_or_else(|| format!("{program} {args:?}: {}", stderr(&out)))
        };
        let (image, mount) = (dir.join("btrfs.img"), dir.join("btrfs"));
        std::fs::create_dir_all(&mount).unwrap();
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(256 << 20))
            .map_err(|e| format!("{}: {e}", image.display()))?;
        run("mkfs.btrfs", &["-q".as_ref(), image.as_os_str()])?;
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mount.as_os_str(),
            ],
        )?;
        let btrfs = Btrfs { mount };
        run(
            "btrfs",
            &[
                "subvolume".as_ref(),
                "create".as_ref(),
                btrfs.sub().as_os_str(),
            ],
        )?;
        Ok(btrfs)
    }

    fn sub(&self) -> PathBuf {
        self.mount.join("sub")
    }
}

impl Drop for Btrfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.mount).status();
    }
}

/// The function whose code touches `work`'s file without `--by-function`.
const SWEEP: &str = "monitor::work::filemap::Reader::touch";

/// The known answer of code locations: `work --by-function` reads three ranges of an
/// evicted file, each in its own code (two functions of its own, the C library's
/// memchr), beside a short-lived `work` that maps a file, faults it in and exits within
/// the one period of 5 s. For `work` as built, stripped with its debug file beside it,
/// and stripped bare: at least 95% of each range's major faults on the function that
/// read it (in the bare copy, on `[unknown]` in its binary: counted, not dropped), the
/// file's regions those ranges, and the short-lived process's faults on its sweep. Also
/// for a copy on btrfs, whose files stat with another device than their mappings name
/// (as root, where a btrfs filesystem can be mounted).
#[test]
fn each_ranges_major_faults_are_on_the_function_that_read_it_stripped_or_not() {
    let dir = OnDisk::new("functions");
    let mut variants = vec![
        (PathBuf::from(WORK), true),
        (stripped_work(&dir.0, true), true),
        (stripped_work(&dir.0, false), false),
    ];
    let btrfs = Btrfs::mount(&dir.0);
    match &btrfs {
        Ok(btrfs) => {
            let copy = btrfs.sub().join("work");
            std::fs::copy(WORK, &copy).unwrap();
            variants.push((copy, true));
        }
        Err(why) => eprintln!("a work on btrfs: not checked: {why}"),
    }
    for (work, named) in &variants {
        let (work, named) = (work, *named);
        let (file, short) = (dir.0.join("index.bin"), dir.0.join("short.bin"));
        let rows = dir.0.join("rows.jsonl");
        let summary = dir.0.join("run.json");
        let script = format!(
            "{} 1 R 1 3 --sleep-ms 50 --file {} --file-mib 8 --file-range 0-2 \
             --file-range 3-4 --file-range 6-7 --evict --by-function & \
             {WORK} 1 R 1 2 --sleep-ms 0 --file {} --file-mib 2 --evict; wait",
            work.display(),
            file.display(),
            short.display()
        );
        let out = run_written(&rows, &summary, &["--period", "5s"], &script);
        let err = stderr(&out);
        assert!(out.status.success(), "{err}");
        let ranges = ranges_read_by(&err);
        assert_eq!(ranges.len(), 3, "{err}");
        let summary: Value =
            serde_json::from_str(&std::fs::read_to_string(&summary).unwrap()).unwrap();
        assert_eq!(summary["where"]["major"]["lost"], 0, "{summary}");
        let functions = major_functions(&summary);
        let work_path = work.to_str().unwrap();
        let on = |binary: &dyn Fn(&str) -> bool, name: &dyn Fn(&str) -> bool| -> u64 {
            (functions.iter())
                .filter(|(b, n, _)| binary(b) && name(n))
                .map(|f| f.2)
                .sum()
        };
        let mut own_code = 0;
        for ((_, _, major), reader) in &ranges {
            assert!(*major >= 256, "{reader}: {major} major faults: {err}");
            let took = if reader == "memchr" {
                // The C library's variant for the CPU (__memchr_evex) is a local symbol:
                // named where its debug file is installed (libc6-dbg, which valgrind
                // brings), else [unknown] in libc: the right library either way.
                let variant = |n: &str| n.contains("memchr") || n == "[unknown]";
                on(&|b| b.ends_with("/libc.so.6"), &variant)
            } else if named {
                on(&|b| b == work_path, &|n| n == reader)
            } else {
                own_code += major;
                continue;
            };
            assert!(
                took as f64 >= 0.95 * *major as f64 && took <= *major,
                "{reader} read {major}, {took} on it: {functions:?}"
            );
        }
        if !named {
            let unknown = on(&|b| b == work_path, &|n| n == "[unknown]");
            assert!(
                unknown as f64 >= 0.95 * own_code as f64,
                "{own_code} major faults in the stripped work's code, {unknown} [unknown]: \
                 {functions:?}"
            );
        }
        // The right ranges of the file: its regions are the three, each with its count.
        let top = summary["where"]["major"]["top"].as_array().unwrap();
        let on_file = (top.iter())
            .find(|m| m["name"] == file.to_str().unwrap())
            .unwrap_or_else(|| panic!("{top:?}"));
        let expected: Vec<(u64, u64, u64)> = ranges.iter().map(|r| r.0).collect();
        assert_eq!(regions(on_file), expected, "{on_file}");
        // The short-lived process's faults: on its file, and on its sweep's code.
        let gone = (announced(&err).into_iter())
            .find(|a| a.file.as_deref() == Some(&short))
            .unwrap_or_else(|| panic!("{err}"));
        let sweep = on(&|b| b == WORK, &|n| n == SWEEP);
        assert!(
            sweep as f64 >= 0.95 * gone.major as f64 && gone.major >= 256,
            "the short-lived work took {} major faults, {sweep} on its sweep: {functions:?}",
            gone.major
        );
        // The interval records carry the functions, adding up to the summary's.
        let text = std::fs::read_to_string(&rows).unwrap();
        let in_records: u64 = (where_records(&text).iter())
            .flat_map(|r| r["functions"].as_array().unwrap().clone())
            .filter(|f| f["binary"] == WORK && f["name"] == SWEEP)
            .map(|f| f["major"].as_u64().unwrap())
            .sum();
        assert_eq!(in_records, sweep, "{text}");
    }
}
