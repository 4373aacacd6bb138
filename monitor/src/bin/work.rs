//! `work`: the workload generator of the original assignment. Allocates MiB of memory and
//! makes random (R) or local (L) accesses to it, iteration after iteration.

use std::io::Write;
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use anyhow::Context;
use clap::FromArgMatches;
use monitor::cli::{self, WorkArgs};
use monitor::system::procstat;
use monitor::work::filemap::FileMap;
use monitor::work::registration::{self, RegistrationError};
use monitor::work::workload::Workload;

fn main() -> ExitCode {
    let command_line = || cli::work_command(monitor::program_name());
    let args = WorkArgs::from_arg_matches(&command_line().get_matches())
        .unwrap_or_else(|e| e.format(&mut command_line()).exit());
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A closed stderr cannot be told anything: no panic over it.
            let _ = writeln!(std::io::stderr(), "work: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &WorkArgs) -> anyhow::Result<()> {
    let pid = std::process::id();
    let registered = register_if_loaded(pid);
    let mut workload = Workload::new(usize::from(args.mib))
        .with_context(|| format!("mapping {} MiB to work on", args.mib))?;
    let mut file = (args.file.as_deref())
        .map(|path| {
            let mib = args.file_mib.unwrap_or(args.mib);
            let map = FileMap::create(path, usize::from(mib), args.evict)
                .with_context(|| format!("creating and mapping {} ({mib} MiB)", path.display()))?;
            if args.file_range.is_empty() {
                return anyhow::Ok(map);
            }
            let bytes: Vec<std::ops::Range<usize>> = (args.file_range.iter())
                .map(|r| usize::from(r.start) << 20..usize::from(r.end) << 20)
                .collect();
            let map = map
                .only(&bytes)
                .with_context(|| format!("sweeping ranges of {} ({mib} MiB)", path.display()))?;
            Ok(if args.by_function {
                map.by_function()
            } else {
                map
            })
        })
        .transpose()?;
    let mut checksum = 0;
    for i in 0..args.iterations {
        if i > 0 {
            thread::sleep(Duration::from_millis(args.sleep_ms));
        }
        checksum ^= workload.iterate(args.pattern, args.accesses);
        if let Some(file) = file.as_mut() {
            checksum ^= file
                .sweep()
                .with_context(|| format!("sweeping {}", file.path().display()))?;
        }
    }
    if let Some(file) = &file {
        announce_mappings(pid, &workload, file, !args.file_range.is_empty())?;
        if file.stayed_cached() > 0 {
            let line = format!(
                "work: warning: {} page reads of {} found the page cached though evicted \
                 (the kernel held them): minor faults, not major\n",
                file.stayed_cached(),
                file.path().display()
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
    drop(file);
    let counters = procstat::read_self().context("reading this process's fault counters")?;
    if registered {
        registration::unregister(pid)
            .with_context(|| format!("unregistering process {pid} from pfprof"))?;
    }
    let line = format!(
        "work: {} iterations of {} accesses to {} MiB done (checksum {checksum}): \
         {} minor faults, {} major faults, {} ms CPU\n",
        args.iterations,
        args.accesses,
        args.mib,
        counters.minor,
        counters.major,
        counters.cpu_ns / 1_000_000
    );
    // One write, so that the lines of `work`s sharing a pipe never interleave
    // (eprintln! writes piece by piece; a pipe keeps a write of at most PIPE_BUF whole).
    // The work is done: a stderr closed by now (`work ... 2>&1 | true`) changes nothing.
    let _ = std::io::stderr().write_all(line.as_bytes());
    Ok(())
}

/// Says how many faults each mapping should have taken, one line each (one write each,
/// as the report below): the anonymous buffer's, by the pages its accesses touched, and
/// the file's, by what its sweeps took; with `ranges`, each range of the file's too.
fn announce_mappings(
    pid: u32,
    workload: &Workload,
    file: &FileMap,
    ranges: bool,
) -> anyhow::Result<()> {
    let (start, end) = workload.range();
    let touched = workload
        .touched_pages()
        .context("counting the buffer's pages touched")?;
    let anonymous = format!(
        "work mapping: pid {pid} anonymous {start:#x}-{end:#x}: {touched} pages touched, \
         {} minor faults, 0 major faults\n",
        2 * touched
    );
    let (start, end) = file.range();
    let expected = file.expected();
    let mapped = format!(
        "work mapping: pid {pid} file {} {start:#x}-{end:#x}: {} pages, {} minor faults, \
         {} major faults\n",
        file.path().display(),
        file.pages(),
        expected.minor,
        expected.major
    );
    let _ = std::io::stderr().write_all(anonymous.as_bytes());
    let _ = std::io::stderr().write_all(mapped.as_bytes());
    if ranges {
        for (i, range) in file.ranges().iter().enumerate() {
            let line = format!(
                "work range: pid {pid} file {} offsets {}-{}: {} pages, {} minor faults, \
                 {} major faults, read by {}\n",
                file.path().display(),
                range.bytes.start,
                range.bytes.end,
                range.bytes.len().div_ceil(monitor::system::page_size()),
                range.expected.minor,
                range.expected.major,
                file.reader(i).function()
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
    }
    Ok(())
}

/// Registers with the pfprof module when it is loaded. Returns whether this process must
/// unregister itself: not when someone else (`monitor run`) registered it already.
fn register_if_loaded(pid: u32) -> bool {
    if !registration::available() {
        return false;
    }
    match registration::register(pid) {
        Ok(()) => true,
        Err(RegistrationError::AlreadyRegistered(_)) => false,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "work: warning: running unprofiled, registration failed: {e}"
            );
            false
        }
    }
}
