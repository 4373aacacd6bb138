//! What attributing faults to mappings costs the program profiled: three workloads, one
//! taking minor faults as fast as one thread can (a fresh anonymous mapping read a byte a
//! page: the zero page mapped, nothing allocated or zeroed), one taking the common minor
//! fault (a byte written a page: a page allocated and zeroed), one bound by major faults
//! (a file dropped from the page cache, then read through a shared mapping a byte a page,
//! read ahead of nothing), each run bare, under `monitor run --no-attribution`, under
//! `monitor run` (attribution on), under `perf record -e page-faults -d`, under `perf
//! record` sampling as the monitor does, and with its call chains (`-g`), in turns, round
//! after round; with BEFORE, another monitor's `monitor run` too (one built without code
//! locations, say: what naming the code costs, in the same run); the medians of the
//! workload's own time and CPU time, and their ratios. A benchmark, not a test:
//!
//!     cargo build --release -p monitor --bin monitor --example where_cost && target/release/examples/where_cost [ROUNDS] [MONITOR] [BEFORE]
//!
//! The workload is this program (`where_cost workload minor|alloc|major FILE`), timing its own
//! loop: the profilers' start and end are not in it. `perf` must be on the PATH.
//! docs/benchmarks.md has a run ("Where the faults were: what attribution costs").

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, ensure, Context};
use memmap2::{Advice, Mmap, MmapMut};
use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};
use nix::sys::resource::{getrusage, UsageWho};

mod common;

/// The minor workload: rounds of 64 MiB mapped, read a byte a page, unmapped.
const MINOR_ROUNDS: u32 = 60;
/// The allocating one: rounds of 64 MiB mapped, written a byte a page, unmapped.
const ALLOC_ROUNDS: u32 = 20;
/// The major workload: rounds over a file of 64 MiB evicted before each.
const MAJOR_ROUNDS: u32 = 3;
const MIB: usize = 64;

/// How a workload is run.
struct Config {
    name: &'static str,
    /// The command before the workload's own; empty: bare.
    prefix: Vec<String>,
}

/// What one run of a workload measured of itself.
#[derive(Clone, Copy, Debug)]
struct Measured {
    elapsed_s: f64,
    cpu_s: f64,
    faults: u64,
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("workload") {
        let kind = args.get(2).context("workload minor|major FILE")?;
        let measured = match kind.as_str() {
            "minor" => minor(false)?,
            "alloc" => minor(true)?,
            "major" => major(Path::new(args.get(3).context("the major workload's FILE")?))?,
            other => bail!("no workload {other:?}"),
        };
        println!(
            "{} {} {}",
            measured.elapsed_s, measured.cpu_s, measured.faults
        );
        return Ok(());
    }
    let (rounds, monitor) = common::rounds_and_monitor()?;
    let exe = std::env::current_exe()?;
    // Beside the example, on the build's file system (not a tmpfs).
    let file = exe.with_file_name(format!("where-cost-{}", std::process::id()));
    make_file(&file)?;
    let perf_data = exe.with_file_name(format!("where-cost-{}.perf", std::process::id()));
    let monitor = monitor.display().to_string();
    let before = std::env::args().nth(3);
    let run_of = |monitor: &str, extra: &[&str]| -> Vec<String> {
        [
            monitor,
            "run",
            "--backend",
            "procfs",
            "-q",
            "-o",
            "/dev/null",
        ]
        .iter()
        .chain(extra)
        .chain(&["--"])
        .map(|s| s.to_string())
        .collect()
    };
    let run = |extra: &[&str]| run_of(&monitor, extra);
    let sampling = monitor::attribution::DEFAULT_MINOR_SAMPLING.to_string();
    let as_the_monitor = [
        "-e",
        "major-faults",
        "-c",
        "1",
        "-e",
        "minor-faults",
        "-c",
        &sampling,
    ];
    let mut configs = vec![
        Config {
            name: "bare",
            prefix: Vec::new(),
        },
        Config {
            name: "monitor --no-attribution",
            prefix: run(&["--no-attribution"]),
        },
        Config {
            name: "monitor (attribution)",
            prefix: run(&[]),
        },
        Config {
            name: "perf record -e page-faults -d",
            prefix: perf(&["-e", "page-faults"], &perf_data),
        },
        Config {
            name: "perf record, sampling as the monitor",
            prefix: perf(&as_the_monitor, &perf_data),
        },
        Config {
            name: "perf record -g, sampling as the monitor",
            prefix: perf(&[&as_the_monitor[..], &["-g"]].concat(), &perf_data),
        },
    ];
    if let Some(before) = &before {
        configs.push(Config {
            name: "BEFORE monitor (attribution)",
            prefix: run_of(before, &[]),
        });
    }
    let workloads = ["minor", "alloc", "major"];
    let mut results = vec![vec![Vec::new(); configs.len()]; workloads.len()];
    for round in 0..rounds as usize {
        for (w, workload) in workloads.into_iter().enumerate() {
            // Each round in another order: drift over the run falls on every config.
            for i in 0..configs.len() {
                let c = (i + round) % configs.len();
                let measured = run_once(&configs[c], &exe, workload, &file)?;
                results[w][c].push(measured);
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    let _ = std::fs::remove_file(&file);
    let _ = std::fs::remove_file(&perf_data);
    let mut out = std::io::stdout().lock();
    for (w, workload) in workloads.into_iter().enumerate() {
        let time = |c: usize| median(&results[w][c], |m| m.elapsed_s);
        let cpu = |c: usize| median(&results[w][c], |m| m.cpu_s);
        writeln!(out, "\n{workload}, {rounds} rounds, medians:")?;
        writeln!(
            out,
            "| run | workload time, s | its CPU, s | faults/s | time / bare | CPU / bare \
             | time / --no-attribution | CPU / --no-attribution |"
        )?;
        writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|")?;
        for (c, config) in configs.iter().enumerate() {
            let rate = median(&results[w][c], |m| m.faults as f64 / m.elapsed_s);
            writeln!(
                out,
                "| {} | {:.3} | {:.3} | {rate:.0} | {:.3} | {:.3} | {:.3} | {:.3} |",
                config.name,
                time(c),
                cpu(c),
                time(c) / time(0),
                cpu(c) / cpu(0),
                time(c) / time(1),
                cpu(c) / cpu(1)
            )?;
        }
    }
    Ok(())
}

/// `perf record -q EVENTS -d -o DATA --`.
fn perf(events: &[&str], data: &Path) -> Vec<String> {
    ["perf", "record", "-q"]
        .iter()
        .chain(events)
        .chain(&["-d", "-o"])
        .map(|s| s.to_string())
        .chain([data.display().to_string(), "--".into()])
        .collect()
}

/// Runs `workload` once under `config`; what it measured of itself.
fn run_once(config: &Config, exe: &Path, workload: &str, file: &Path) -> anyhow::Result<Measured> {
    let mut argv: Vec<String> = config.prefix.clone();
    argv.extend([
        exe.display().to_string(),
        "workload".into(),
        workload.into(),
    ]);
    argv.push(file.display().to_string());
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {argv:?}"))?;
    ensure!(out.status.success(), "{argv:?}: {}", out.status);
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<f64> = (text.split_whitespace())
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("{argv:?} said {text:?}"))?;
    let [elapsed_s, cpu_s, faults] = fields[..] else {
        bail!("{argv:?} said {text:?}");
    };
    Ok(Measured {
        elapsed_s,
        cpu_s,
        faults: faults as u64,
    })
}

fn median(runs: &[Measured], value: impl Fn(&Measured) -> f64) -> f64 {
    let mut values: Vec<f64> = runs.iter().map(value).collect();
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// This process's CPU time so far, s.
fn cpu_s() -> anyhow::Result<f64> {
    let usage = getrusage(UsageWho::RUSAGE_SELF)?;
    let s = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
    Ok(s(usage.user_time()) + s(usage.system_time()))
}

/// Minor faults as fast as one thread takes them (reads: the zero page mapped), or
/// the common ones (`write`: a page allocated and zeroed).
fn minor(write: bool) -> anyhow::Result<Measured> {
    let page = monitor::system::page_size();
    let (start, cpu) = (Instant::now(), cpu_s()?);
    let mut faults = 0u64;
    let mut sum = 0u8;
    for _ in 0..if write { ALLOC_ROUNDS } else { MINOR_ROUNDS } {
        let mut map = MmapMut::map_anon(MIB << 20)?;
        map.advise(Advice::NoHugePage)?;
        for offset in (0..map.len()).step_by(page) {
            if write {
                map[offset] = 1;
            } else {
                sum = sum.wrapping_add(map[offset]);
            }
            faults += 1;
        }
        std::hint::black_box(&mut map[..]);
    }
    std::hint::black_box(sum);
    Ok(Measured {
        elapsed_s: start.elapsed().as_secs_f64(),
        cpu_s: cpu_s()? - cpu,
        faults,
    })
}

/// Major faults: the file dropped from the page cache, then read a byte a page.
fn major(path: &Path) -> anyhow::Result<Measured> {
    let page = monitor::system::page_size();
    let file = File::open(path)?;
    let (start, cpu) = (Instant::now(), cpu_s()?);
    let mut faults = 0u64;
    let mut sum = 0u8;
    for _ in 0..MAJOR_ROUNDS {
        // Clean and unmapped since the last round: all dropped.
        posix_fadvise(file.as_fd(), 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED)?;
        // SAFETY: the file is this benchmark's own, written before and not after.
        let map = unsafe { Mmap::map(&file)? };
        map.advise(Advice::Random)?;
        for offset in (0..map.len()).step_by(page) {
            sum = sum.wrapping_add(map[offset]);
            faults += 1;
        }
    }
    std::hint::black_box(sum);
    Ok(Measured {
        elapsed_s: start.elapsed().as_secs_f64(),
        cpu_s: cpu_s()? - cpu,
        faults,
    })
}

fn make_file(path: &PathBuf) -> anyhow::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    let chunk = vec![0x5au8; 1 << 20];
    for _ in 0..MIB {
        file.write_all(&chunk)?;
    }
    file.sync_all()?;
    Ok(())
}
