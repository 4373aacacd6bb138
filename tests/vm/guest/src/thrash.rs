//! The monitor's memory and pressure columns and its thrashing verdict against a
//! workload whose phases are known: in a memory cgroup whose `memory.max` is below its
//! working set, with swap on zram, it fits (2 s), exceeds (4 s) and fits again (2 s),
//! announcing each change on `CLOCK_MONOTONIC`, and pauses four times to read its own
//! `/proc/self/status`.

pub mod workload;

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use crate::harness::{figure, Env};
use crate::zram::ZramSwap;

const MIB: u64 = 1 << 20;
const PAGE: usize = 4096;
/// The workload: a set that fits, and what it adds to exceed.
const FITS_MIB: u64 = 40;
const EXTRA_MIB: u64 = 56;
/// Below 96 MiB: a third of the pages it touches while it exceeds are out.
const TIGHT_MIB: u64 = 64;
/// Room to spare: the whole working set and more.
const ROOMY_MIB: u64 = 256;
const FITS: Duration = Duration::from_secs(2);
const EXCEEDS: Duration = Duration::from_secs(4);
const FITS_AGAIN: Duration = Duration::from_secs(2);
/// Each pause, in which it reads its own status halfway.
const PAUSE: Duration = Duration::from_millis(400);
/// How close the verdict must date the onset and the end to the announced changes.
const ONSET_WITHIN: Duration = Duration::from_millis(500);
const END_WITHIN: Duration = Duration::from_millis(1000);
/// How long the verdict's rows must not thrash for thrashing to end (the monitor's
/// `RULE.quiet`, docs/monitor.md, "The thrashing verdict").
const VERDICT_QUIET: Duration = Duration::from_millis(1000);
const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Both backends: the module's samples carry memory as the procfs backend's do.
const BACKENDS: &[&str] = &["kernel", "procfs"];
/// A memory cgroup, removed when dropped (once its processes are gone).
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str, memory_max_mib: u64) -> Result<Cgroup> {
        ensure!(
            Path::new(CGROUP_ROOT).join("cgroup.controllers").exists(),
            "no cgroup2 at {CGROUP_ROOT} (the guest's /init mounts it; CONFIG_CGROUPS)"
        );
        let controllers = fs::read_to_string(Path::new(CGROUP_ROOT).join("cgroup.controllers"))?;
        ensure!(
            controllers.split_whitespace().any(|c| c == "memory"),
            "no memory controller ({controllers:?}: CONFIG_MEMCG)"
        );
        fs::write(
            Path::new(CGROUP_ROOT).join("cgroup.subtree_control"),
            "+memory",
        )?;
        let path = Path::new(CGROUP_ROOT).join(name);
        let _ = fs::remove_dir(&path);
        fs::create_dir(&path)?;
        let cgroup = Cgroup(path);
        fs::write(
            cgroup.0.join("memory.max"),
            (memory_max_mib * MIB).to_string(),
        )?;
        Ok(cgroup)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.0);
    }
}

/// What a run brought back.
struct Run {
    /// The announcements: name and time.
    phases: Vec<(String, u64)>,
    /// The workload's own status readings: time, and anon, file, shmem, swap bytes.
    statuses: Vec<(u64, [u64; 4])>,
    rows: Vec<serde_like::Row>,
    events: Vec<serde_like::Event>,
    summary: String,
    /// The last node_exporter textfile the monitor wrote: its final values.
    textfile: String,
}

impl Run {
    fn phase(&self, name: &str) -> Result<u64> {
        self.phases
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .with_context(|| format!("the workload never announced {name}"))
    }
}

/// The few JSON Lines fields the test reads, parsed without a JSON crate: the monitor
/// writes flat objects of numbers, booleans and nulls.
mod serde_like {
    use anyhow::{Context, Result};

    pub struct Row {
        pub mono_ns: u64,
        pub period_ns: u64,
        pub major: u64,
        /// The workload's CPU time in the period.
        pub cpu_ns: u64,
        pub memory: [u64; 4],
        pub stall_some_us: Option<u64>,
        pub stall_full_us: Option<u64>,
        /// The system's refaults, anonymous and file.
        pub refaults: Option<u64>,
    }

    pub struct Event {
        pub start_mono_ns: u64,
        pub end_mono_ns: u64,
        /// The profiled processes' share of the band's major faults (`None`: the kernel
        /// counts no major faults system-wide).
        pub target_share: Option<f64>,
        pub line: String,
    }

    /// The value of `key` in a flat JSON object: a number, or `None` for null.
    pub fn field(line: &str, key: &str) -> Result<Option<f64>> {
        let start = line
            .find(&format!("\"{key}\":"))
            .with_context(|| format!("no {key} in {line}"))?
            + key.len()
            + 3;
        let value: String = line[start..]
            .chars()
            .take_while(|c| !matches!(c, ',' | '}'))
            .collect();
        match value.as_str() {
            "null" => Ok(None),
            v => Ok(Some(v.parse().with_context(|| format!("{key}: {v}"))?)),
        }
    }

    fn number(line: &str, key: &str) -> Result<u64> {
        Ok(field(line, key)?.with_context(|| format!("{key} is null"))? as u64)
    }

    pub fn parse(text: &str) -> Result<(Vec<Row>, Vec<Event>)> {
        let (mut rows, mut events) = (Vec::new(), Vec::new());
        let mut previous: Option<u64> = None;
        for line in text.lines() {
            // Each record says what it is, first: the rows and the bands are read, the
            // start (what was profiled) and where the faults were are not.
            if !line.starts_with("{\"event\":\"row\"")
                && !line.starts_with("{\"event\":\"thrashing\"")
            {
                continue;
            }
            if line.starts_with("{\"event\":\"thrashing\"") {
                events.push(Event {
                    start_mono_ns: number(line, "start_mono_ns")?,
                    end_mono_ns: number(line, "end_mono_ns")?,
                    target_share: field(line, "target_share")?,
                    line: line.to_owned(),
                });
                continue;
            }
            let mono_ns = number(line, "mono_ns")?;
            let period_ns = previous.map_or(50_000_000, |p| mono_ns - p);
            previous = Some(mono_ns);
            rows.push(Row {
                mono_ns,
                period_ns,
                major: number(line, "major")?,
                cpu_ns: number(line, "cpu_ns")?,
                memory: [
                    number(line, "rss_anon")?,
                    number(line, "rss_file")?,
                    number(line, "rss_shmem")?,
                    number(line, "swap")?,
                ],
                stall_some_us: field(line, "stall_some_us")?.map(|v| v as u64),
                stall_full_us: field(line, "stall_full_us")?.map(|v| v as u64),
                refaults: field(line, "workingset_refault_anon")?
                    .zip(field(line, "workingset_refault_file")?)
                    .map(|(a, f)| (a + f) as u64),
            });
        }
        Ok((rows, events))
    }
}

/// Profiles the workload with `backend` in a cgroup of `memory_max_mib`.
/// [`run`], with the module loaded (at its default period) for the kernel backend.
fn run_with(env: &Env, backend: &str, memory_max_mib: u64) -> Result<Run> {
    let module = (backend == "kernel")
        .then(|| crate::kmod::insmod(env, &[]))
        .transpose()?;
    let run = run(backend, memory_max_mib)?;
    module.map(crate::kmod::Module::unload).transpose()?;
    Ok(run)
}

fn run(backend: &str, memory_max_mib: u64) -> Result<Run> {
    ensure!(
        Path::new("/proc/pressure/memory").exists(),
        "no /proc/pressure/memory: this kernel has no PSI (CONFIG_PSI, psi=1)"
    );
    let cgroup = Cgroup::new("pfprof-thrash", memory_max_mib)?;
    let samples = format!("/tmp/thrash-{backend}-{memory_max_mib}.jsonl");
    let textfiles = PathBuf::from(format!("/tmp/thrash-{backend}-{memory_max_mib}.prom.d"));
    let _ = fs::remove_dir_all(&textfiles);
    fs::create_dir(&textfiles)?;
    let me = std::env::current_exe()?;
    let mut monitor = Command::new("/bin/monitor")
        .args([
            "run",
            "--backend",
            backend,
            "--format",
            "jsonl",
            "-o",
            &samples,
            "--textfile",
        ])
        .arg(&textfiles)
        // The final values stay this long: long enough to be read below.
        .args(["--linger", "2s", "--"])
        .arg(&me)
        .args(["child", "thrash"])
        .arg(&cgroup.0)
        .args([FITS_MIB.to_string(), EXTRA_MIB.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running /bin/monitor")?;
    let stdout = monitor.stdout.take().context("no stdout")?;
    let watcher = TextfileWatcher::start(textfiles);
    let (mut phases, mut statuses) = (Vec::new(), Vec::new());
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["status", t, values @ ..] if values.len() == 4 => {
                let mut memory = [0; 4];
                for (m, v) in memory.iter_mut().zip(values) {
                    *m = v.parse()?;
                }
                if statuses.is_empty() {
                    let charged = fs::read_to_string(cgroup.0.join("memory.current"))?;
                    figure(&format!(
                        "{backend}, {memory_max_mib} MiB: the cgroup holds {:.1} MiB when \
                         the phases begin",
                        charged.trim().parse::<f64>()? / MIB as f64
                    ));
                }
                statuses.push((t.parse()?, memory));
            }
            [name @ .., t] => phases.push((name.join(" "), t.parse()?)),
            [] => {}
        }
    }
    let out = monitor.wait_with_output()?;
    let textfile = watcher.last()?;
    let summary = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        out.status.success(),
        "monitor failed ({}): {summary}",
        out.status
    );
    drop(cgroup);
    let text = fs::read_to_string(&samples)?;
    let (rows, events) = serde_like::parse(&text)?;
    Ok(Run {
        phases,
        statuses,
        rows,
        events,
        summary,
        textfile,
    })
}

/// Reads the one textfile the monitor keeps in a directory every 50 ms while it runs:
/// the monitor writes its final values at the end and keeps them for --linger, so the
/// last text read is the final one.
struct TextfileWatcher {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<Result<String>>,
}

impl TextfileWatcher {
    fn start(dir: PathBuf) -> TextfileWatcher {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            let mut last = String::new();
            while !stopped.load(Ordering::Relaxed) {
                for entry in fs::read_dir(&dir)? {
                    let path = entry?.path();
                    // Replaced by a rename, removed at the end: gone between the two
                    // calls is no error.
                    if path.extension().is_some_and(|e| e == "prom") {
                        if let Ok(text) = fs::read_to_string(&path) {
                            last = text;
                        }
                    }
                }
                thread::sleep(Duration::from_millis(50));
            }
            Ok(last)
        });
        TextfileWatcher { stop, thread }
    }

    /// Once the monitor has ended: the last text read.
    fn last(self) -> Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the textfile watcher panicked"))?
    }
}

/// The value of the first series named `name` in a textfile (its labels: the target's, the monitor's).
fn exported(text: &str, name: &str) -> Result<f64> {
    text.lines()
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            (series == name || series.starts_with(&format!("{name}{{"))).then_some(value)
        })
        .with_context(|| format!("no {name} in the textfile:\n{text}"))?
        .parse()
        .with_context(|| format!("{name} in the textfile"))
}

/// What the monitor exported at the end says the same as its verdict: `bands` thrashing
/// bands, none still going on.
fn check_export_agrees_with_verdict(backend: &str, run: &Run, bands: usize) -> Result<()> {
    let episodes = exported(&run.textfile, "pfprof_thrashing_episodes_total")?;
    let now = exported(&run.textfile, "pfprof_thrashing")?;
    ensure!(
        (episodes, now) == (bands as f64, 0.0),
        "{backend}: the final textfile exports {episodes} thrashing episodes and thrashing \
         {now}, the verdict {bands} bands, ended:\n{}",
        run.textfile
    );
    Ok(())
}

/// Over the rows between two moments: memory stall (some, full: % of the time), the
/// workload's major faults and the system's refaults a second, and the least and most
/// full stall of a row (%).
fn phase_rates(rows: &[serde_like::Row], from: u64, to: u64) -> String {
    let inside: Vec<&serde_like::Row> = rows
        .iter()
        .filter(|r| r.mono_ns > from && r.mono_ns <= to)
        .collect();
    let sum = |f: &dyn Fn(&serde_like::Row) -> u64| inside.iter().map(|r| f(r)).sum::<u64>();
    let secs = sum(&|r| r.period_ns).max(1) as f64 / 1e9;
    let pct = |us: u64| us as f64 / 1e4 / secs;
    let row_full =
        |r: &serde_like::Row| r.stall_full_us.unwrap_or(0) as f64 * 1e5 / r.period_ns.max(1) as f64;
    let (least, most) = inside
        .iter()
        .map(|r| row_full(r))
        .fold((f64::MAX, 0.0_f64), |(l, m), v| (l.min(v), m.max(v)));
    format!(
        "memory stall some {:.1}%, full {:.1}% of the time (a row's full: {:.0}-{:.0}%), \
         {:.0} major faults/s, {:.0} refaults/s ({} rows)",
        pct(sum(&|r| r.stall_some_us.unwrap_or(0))),
        pct(sum(&|r| r.stall_full_us.unwrap_or(0))),
        if inside.is_empty() { 0.0 } else { least },
        most,
        sum(&|r| r.major) as f64 / secs,
        sum(&|r| r.refaults.unwrap_or(0)) as f64 / secs,
        inside.len()
    )
}

/// Between two moments, a quarter second at a time: memory full stall (%), the
/// workload's major faults a second and its share of a CPU (%): whether it still
/// thrashed, or could not run.
fn quarters(rows: &[serde_like::Row], from: u64, to: u64) -> String {
    const QUARTER: u64 = 250_000_000;
    let mut out = Vec::new();
    let mut start = from;
    while start < to {
        let end = (start + QUARTER).min(to);
        let inside: Vec<&serde_like::Row> = rows
            .iter()
            .filter(|r| r.mono_ns > start && r.mono_ns <= end)
            .collect();
        let ns = inside.iter().map(|r| r.period_ns).sum::<u64>().max(1) as f64;
        let full = inside
            .iter()
            .map(|r| r.stall_full_us.unwrap_or(0))
            .sum::<u64>() as f64;
        let major = inside.iter().map(|r| r.major).sum::<u64>() as f64;
        let cpu = inside.iter().map(|r| r.cpu_ns).sum::<u64>() as f64;
        out.push(format!(
            "{:.0}%/{:.0}/{:.0}%",
            full * 1e5 / ns,
            major * 1e9 / ns,
            cpu * 100.0 / ns
        ));
        start = end;
    }
    format!("full stall/major faults a second/CPU {}", out.join(" "))
}

/// What the rows inside a band and outside it had: the evidence for the verdict's
/// thresholds (docs/monitor.md, "The thrashing verdict").
/// A row's memory full stall, in percent of its period.
fn full_stall_pct(r: &serde_like::Row) -> f64 {
    r.stall_full_us.unwrap_or(0) as f64 * 1e5 / r.period_ns.max(1) as f64
}

/// A row's major faults or refaults, whichever more, per second.
fn fault_rate(r: &serde_like::Row) -> f64 {
    r.major.max(r.refaults.unwrap_or(0)) as f64 * 1e9 / r.period_ns.max(1) as f64
}

/// The longest stretch of rows after `from` up to `to` without pages coming back at the
/// verdict's rate (50 faults/s), ns: the verdict's quiet, when it lasts a second.
fn pageless_ns(rows: &[serde_like::Row], from: u64, to: u64) -> u64 {
    let (mut longest, mut run) = (0, 0);
    for r in rows.iter().filter(|r| r.mono_ns > from && r.mono_ns <= to) {
        run = if fault_rate(r) < 50.0 {
            run + r.period_ns
        } else {
            0
        };
        longest = longest.max(run);
    }
    longest
}

/// When the rows stop showing thrashing after `from`: the end of the last row with a
/// full stall of 10% or more and 50 faults/s or more, the verdict's thresholds
/// (`from` itself if none has).
fn evidence_ends(rows: &[serde_like::Row], from: u64) -> u64 {
    rows.iter()
        .filter(|r| r.mono_ns > from && full_stall_pct(r) >= 10.0 && fault_rate(r) >= 50.0)
        .map(|r| r.mono_ns)
        .max()
        .unwrap_or(from)
}

fn band_rows(rows: &[serde_like::Row], start: u64, end: u64) -> String {
    let inside = |r: &&serde_like::Row| r.mono_ns - r.period_ns >= start && r.mono_ns <= end;
    let mut fulls: Vec<f64> = rows.iter().filter(inside).map(full_stall_pct).collect();
    fulls.sort_by(f64::total_cmp);
    let least_faults = rows
        .iter()
        .filter(inside)
        .map(fault_rate)
        .fold(f64::MAX, f64::min);
    let outside: Vec<&serde_like::Row> = rows.iter().filter(|r| !inside(r)).collect();
    let most_full = outside
        .iter()
        .map(|r| full_stall_pct(r))
        .fold(0.0, f64::max);
    let faulting = outside.iter().filter(|r| fault_rate(r) >= 100.0);
    let most_full_faulting = faulting.map(|r| full_stall_pct(r)).fold(0.0, f64::max);
    let pct = |q: usize| fulls.get(fulls.len() * q / 100).copied().unwrap_or(0.0);
    format!(
        "rows in the band: full stall least {:.0}%, 10th percentile {:.0}%, median {:.0}%, \
         major faults or refaults at least {least_faults:.0}/s ({} rows); outside: full \
         stall at most {most_full:.0}%, at most {most_full_faulting:.0}% in rows with \
         >= 100 faults/s",
        pct(0),
        pct(10),
        pct(50),
        fulls.len()
    )
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// The verdict judges the system (docs/monitor.md, "The thrashing verdict"), and on a
/// loaded machine another process that rewrites more memory than there is (`run.sh
/// --load`: the kernel's command line says `pfprof_load=1`) may make it thrash too: seen
/// once, a 0.5 s band in which the workload took 2 of the system's 43 major faults. On
/// such a run, and only there, a band is another's when the system's own major faults
/// in it reach the rule's rate and the workload took under half of them; every other
/// band is the workload's.
fn the_workloads_bands(run: &Run) -> Result<(Vec<&serde_like::Event>, Vec<&serde_like::Event>)> {
    let loaded = fs::read_to_string("/proc/cmdline")?
        .split_whitespace()
        .any(|word| word == "pfprof_load=1");
    let mut ours = Vec::new();
    let mut others = Vec::new();
    for event in &run.events {
        let secs = event.end_mono_ns.saturating_sub(event.start_mono_ns) as f64 / 1e9;
        let system = serde_like::field(&event.line, "system_major_faults")?.unwrap_or(0.0);
        let anothers = loaded
            && event.target_share.is_some_and(|share| share < 0.5)
            && system >= RULE_FAULT_RATE * secs;
        if anothers {
            others.push(event);
        } else {
            ours.push(event);
        }
    }
    Ok((ours, others))
}

/// The verdict's least rate of pages coming back, a second (monitor's `RULE.fault_rate`).
const RULE_FAULT_RATE: f64 = 50.0;

/// What the bands of another's doing were, for the figures.
fn others_bands(backend: &str, others: &[&serde_like::Event]) {
    if !others.is_empty() {
        let shares: Vec<String> = others
            .iter()
            .map(|e| format!("{:.0}%", e.target_share.unwrap_or(0.0) * 100.0))
            .collect();
        figure(&format!(
            "{backend}: {} band(s) of the system thrashing by another's doing, the \
             workload's share of their major faults {}",
            others.len(),
            shares.join(", ")
        ));
    }
}

pub fn a_workload_exceeding_its_memory_cgroup_is_found_thrashing_from_its_announced_phases(
    env: &Env,
) -> Result<()> {
    let _swap = ZramSwap::on(256)?;
    for &backend in BACKENDS {
        let run = run_with(env, backend, TIGHT_MIB)?;
        let (fits, exceeds, again, end) = (
            run.phase("phase fits")?,
            run.phase("phase exceeds")?,
            run.phase("phase fits-again")?,
            run.phase("end")?,
        );
        for (name, from, to) in [
            ("fits", fits, exceeds),
            ("exceeds", exceeds, again),
            ("fits again", again, end),
        ] {
            figure(&format!(
                "{backend}, {TIGHT_MIB} MiB, {name}: {}",
                phase_rates(&run.rows, from, to)
            ));
        }
        check_memory_agrees_with_status(backend, &run)?;
        let (ours, others) = the_workloads_bands(&run)?;
        others_bands(backend, &others);
        let [event] = &ours[..] else {
            bail!(
                "{backend}: {} thrashing events of the workload's, not one: {}\n{}",
                ours.len(),
                ours.iter()
                    .map(|e| e.line.as_str())
                    .collect::<Vec<_>>()
                    .join("\n"),
                run.summary
            );
        };
        figure(&format!(
            "{backend}: {}",
            band_rows(&run.rows, event.start_mono_ns, event.end_mono_ns)
        ));
        // What came between the announced change and the onset.
        let after = |what: &dyn Fn(&serde_like::Row) -> bool| {
            run.rows
                .iter()
                .find(|r| r.mono_ns > exceeds && what(r))
                .map_or(f64::NAN, |r| ms(r.mono_ns) - ms(exceeds))
        };
        figure(&format!(
            "{backend}: after the announced exceeding, the first row with: memory swapped \
             {:+.0} ms, full stall >= 10% {:+.0} ms, a major fault {:+.0} ms (rows end then)",
            after(&|r| r.memory[3] > 0),
            after(&|r| r.stall_full_us.unwrap_or(0) * 10_000 >= r.period_ns),
            after(&|r| r.major > 0),
        ));
        // The end is dated from the announced fitting again, or, on a loaded machine
        // whose workload takes longer to fault its pages back, from the last row that
        // still shows thrashing: the verdict follows the rows, not the announcement.
        let recovered = evidence_ends(&run.rows, again);
        let onset = event.start_mono_ns.abs_diff(exceeds);
        let early = again.saturating_sub(event.end_mono_ns);
        let late = event.end_mono_ns.saturating_sub(recovered);
        figure(&format!(
            "{backend}: thrashing dated {:+.0} ms from the announced exceeding, its end \
             {:+.0} ms from the announced fitting again and {:+.0} ms from the last row \
             still thrashing after it: {}",
            ms(event.start_mono_ns) - ms(exceeds),
            ms(event.end_mono_ns) - ms(again),
            ms(event.end_mono_ns) - ms(recovered),
            event.line
        ));
        let within = |ns: u64, limit: Duration| ns <= limit.as_nanos() as u64;
        // An end before the announced one follows the rows when they brought no pages
        // back for the verdict's quiet second: on a loaded machine the workload's faults
        // can wait that long in reclaim, stalled, none completing (CI, 2026-11-29).
        let pageless = pageless_ns(&run.rows, event.end_mono_ns, again);
        let early_by_the_rows = pageless >= VERDICT_QUIET.as_nanos() as u64;
        if !within(early, END_WITHIN) {
            figure(&format!(
                "{backend}: from the verdict's end to the announced fitting again, a quarter \
                 second each: {}; {:.0} ms without pages coming back",
                quarters(&run.rows, event.end_mono_ns, again),
                ms(pageless)
            ));
        }
        ensure!(
            within(onset, ONSET_WITHIN)
                && (within(early, END_WITHIN) || early_by_the_rows)
                && within(late, END_WITHIN),
            "{backend}: the verdict's onset is {:.0} ms from the announced exceeding (at most \
             {ONSET_WITHIN:?}), its end {:+.0} ms from the announced fitting again and \
             {:+.0} ms from the last row still thrashing (at most {END_WITHIN:?} before the \
             one unless the rows brought no pages back for a second before it, after the \
             other)",
            ms(onset),
            ms(event.end_mono_ns) - ms(again),
            ms(event.end_mono_ns) - ms(recovered)
        );
        ensure!(
            run.summary.contains("thrashing          from t="),
            "{backend}: the summary does not say it: {}",
            run.summary
        );
        check_export_agrees_with_verdict(backend, &run, run.events.len())?;
    }
    Ok(())
}

pub fn the_same_workload_with_room_to_spare_is_not_found_thrashing(env: &Env) -> Result<()> {
    let _swap = ZramSwap::on(256)?;
    for &backend in BACKENDS {
        let run = run_with(env, backend, ROOMY_MIB)?;
        let (from, to) = (run.phase("phase fits")?, run.phase("end")?);
        figure(&format!(
            "{backend}, {ROOMY_MIB} MiB, the whole run: {}",
            phase_rates(&run.rows, from, to)
        ));
        check_memory_agrees_with_status(backend, &run)?;
        let (ours, others) = the_workloads_bands(&run)?;
        others_bands(backend, &others);
        ensure!(
            ours.is_empty(),
            "{backend}: thrashing found with room to spare: {}",
            ours[0].line
        );
        ensure!(
            run.summary.contains(if others.is_empty() {
                "thrashing          none"
            } else {
                "thrashing          from t="
            }),
            "{backend}: {}",
            run.summary
        );
        check_export_agrees_with_verdict(backend, &run, run.events.len())?;
    }
    Ok(())
}

/// Each status the workload read in a pause agrees with the row that ends just before
/// it or the one just after: in the pause the workload sleeps and nothing else runs in
/// its cgroup, so its memory changes only by what the workload itself does to read and
/// print the reading: at the cgroup's limit, the kernel memory that takes (a seq_file
/// buffer, a pipe page, both charged to the cgroup) makes the kernel reclaim a batch of
/// its pages, once, before or after the reading (its own stack, heap and code are locked
/// in memory: no page of them comes back from swap as it reads). Besides, 4 pages of
/// anonymous memory (its heap and stack, printing) and 16 of file and shared memory
/// (code it runs for the first time, which the kernel maps 64 KiB at a time); swapped
/// memory exactly. Before 6.2 status itself lags: it reads the mm's counters without
/// what each thread has cached (up to 64 changes, TASK_RSS_EVENTS_THRESH), which the
/// module adds: there each counter may differ by that much more. (User space cannot
/// ask the kernel which it does: its version says.)
fn check_memory_agrees_with_status(backend: &str, run: &Run) -> Result<()> {
    ensure!(
        run.statuses.len() == 4,
        "{} status readings",
        run.statuses.len()
    );
    let lag = if backend == "kernel" && status_lags()? {
        64 * PAGE as u64
    } else {
        0
    };
    let tolerance = [4, 16, 16, 0].map(|pages| pages * PAGE as u64 + lag);
    let agrees = |row: &serde_like::Row, status: &[u64; 4]| {
        row.memory
            .iter()
            .zip(status)
            .zip(tolerance)
            .all(|((r, s), tol)| r.abs_diff(*s) <= tol)
    };
    for (t, status) in &run.statuses {
        let after = run.rows.iter().position(|r| r.mono_ns > *t);
        let before = after.map_or(run.rows.len(), |a| a).checked_sub(1);
        // And the row after that: a row's levels are read during its collection, its
        // timestamp after it, so a sampler preempted in between (on a host running other
        // VMs, 6.12 once) stamps after the read levels it read before.
        let next = after.map(|a| a + 1);
        let around: Vec<&serde_like::Row> = [before, after, next]
            .into_iter()
            .flatten()
            .filter_map(|i| run.rows.get(i))
            // Rows that end within the pause: a slow sampler (the procfs backend under
            // KASAN) may end the one before more than a period before the read.
            .filter(|r| u128::from(r.mono_ns.abs_diff(*t)) <= PAUSE.as_nanos() / 2)
            .collect();
        ensure!(
            !around.is_empty(),
            "{backend}: no row ends within the pause around the status read at {t}"
        );
        let matched = around.iter().find(|r| agrees(r, status));
        figure(&format!(
            "{backend}: status {:?} KiB (anon, file, shmem, swap); the rows around it {}",
            status.map(|b| b >> 10),
            around
                .iter()
                .map(|r| format!(
                    "{:+.0} ms {:?}",
                    ms(r.mono_ns) - ms(*t),
                    r.memory.map(|b| b >> 10)
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        ensure!(
            matched.is_some(),
            "{backend}: neither row around the status read agrees with it: {status:?}"
        );
    }
    Ok(())
}

/// This kernel is older than 6.2: its /proc/PID/status leaves out the threads' cached
/// memory counts.
fn status_lags() -> Result<bool> {
    let release = fs::read_to_string("/proc/sys/kernel/osrelease")?;
    let mut parts = release.trim().split(['.', '-']);
    let major: u32 = parts.next().context("no major version")?.parse()?;
    let minor: u32 = parts.next().context("no minor version")?.parse()?;
    Ok((major, minor) < (6, 2))
}
