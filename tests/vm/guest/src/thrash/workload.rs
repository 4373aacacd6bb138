//! The thrash tests' workload, the process they profile (`pfprof-guest child
//! thrash ...`): in its cgroup it fits, exceeds and fits again, announcing each phase
//! and reading its own status in the pauses between.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi::monotonic_ns;

use super::{EXCEEDS, FITS, FITS_AGAIN, PAGE, PAUSE};
use crate::anon::map_anonymous;
use crate::rng::Rng;

/// `pfprof-guest child thrash CGROUP FITS_MIB EXTRA_MIB`: the workload.
pub fn workload(cgroup: &str, fits_mib: &str, extra_mib: &str) -> Result<()> {
    let fits = fits_mib.parse::<usize>()? << 20;
    let extra = extra_mib.parse::<usize>()? << 20;
    // In the cgroup before it touches anything: every page is charged there.
    fs::write(
        Path::new(cgroup).join("cgroup.procs"),
        std::process::id().to_string(),
    )
    .context("joining the cgroup")?;
    let mut status = Vec::with_capacity(4096);
    // Its own stack, heap and code stay in memory: under thrashing the kernel would swap
    // them out too, and the reads of its status then swap them back in, moving its
    // memory around the very moment it is read. Only the region mapped next thrashes.
    // SAFETY: no pointers involved.
    let locked = unsafe { libc::mlockall(libc::MCL_CURRENT) };
    ensure!(locked == 0, "mlockall: {}", std::io::Error::last_os_error());
    let region = map_anonymous(fits + extra)?;
    // One fault per page, not per huge page.
    // SAFETY: the range was just mapped.
    unsafe { libc::madvise(region.as_ptr().cast(), fits + extra, libc::MADV_NOHUGEPAGE) };
    let mut rng = Rng::new(monotonic_ns());
    // Before the phases: every page touched once, what it adds first, so that under a
    // limit the kernel keeps the set that fits and has swapped out the rest (the least
    // recently used) before it fits: exceeding is then swap-ins from its first access,
    // whatever the kernel's speed (first touches of fresh pages took 0.5 s to fill the
    // room under the limit on a loaded host, 3 s on the debug kernel).
    for offset in (fits..fits + extra).chain(0..fits).step_by(PAGE) {
        // SAFETY: within the mapping, which only this thread uses.
        unsafe { region.as_ptr().add(offset).write_volatile(1) };
    }
    // A first reading, which also maps the code the others run.
    pause(&mut status)?;
    let touch = |rng: &mut Rng, len: usize, span: Duration| {
        let until = Instant::now() + span;
        // The clock is read at every access: the phase ends as announced, to within
        // one access. Read once per 64 accesses, the phase once ran 3.7 s past its
        // 4 s on a loaded machine, with no thrashing in the rows of that time.
        while Instant::now() < until {
            let page = rng.index(len / PAGE);
            // SAFETY: within the mapping, which only this thread uses.
            unsafe {
                let byte = region.as_ptr().add(page * PAGE + page % PAGE);
                byte.write_volatile(byte.read_volatile().wrapping_add(1));
            }
        }
    };
    announce("phase fits")?;
    touch(&mut rng, fits, FITS);
    pause(&mut status)?;
    announce("phase exceeds")?;
    touch(&mut rng, fits + extra, EXCEEDS);
    announce("phase fits-again")?;
    pause(&mut status)?;
    // What it added is given back: what remains fits.
    // SAFETY: the tail of our own mapping, not used from here on.
    let unmapped = unsafe { libc::munmap(region.as_ptr().add(fits).cast(), extra) };
    ensure!(unmapped == 0, "munmap: {}", std::io::Error::last_os_error());
    // And the set that fits starts afresh: a third of it is in swap, and reading it back
    // (a major fault and, for PSI, a stall on a refault each) would go on for seconds
    // after the change on a slow kernel, paging that is no thrashing but that the
    // verdict's rule cannot tell from it (docs/monitor.md, "The thrashing verdict", its
    // limits).
    // SAFETY: the head of our own mapping; its contents are not needed any more.
    let dropped = unsafe { libc::madvise(region.as_ptr().cast(), fits, libc::MADV_DONTNEED) };
    ensure!(dropped == 0, "madvise: {}", std::io::Error::last_os_error());
    touch(&mut rng, fits, FITS_AGAIN);
    pause(&mut status)?;
    announce("end")
}

/// `what <CLOCK_MONOTONIC ns>` on stdout, at once.
fn announce(what: &str) -> Result<()> {
    say(&format!("{what} {}", monotonic_ns()))
}

fn say(line: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// Sleeps `PAUSE`, reading its own status halfway: `status <ns> <anon> <file> <shmem>
/// <swap>` in bytes. The buffer is allocated before, so reading touches no new page.
fn pause(buf: &mut Vec<u8>) -> Result<()> {
    thread::sleep(PAUSE / 2);
    let now = monotonic_ns();
    buf.clear();
    let mut file = fs::File::open("/proc/self/status")?;
    std::io::Read::read_to_end(&mut file, buf)?;
    let [anon, file, shmem, swap] = status_memory(std::str::from_utf8(buf)?)?;
    say(&format!("status {now} {anon} {file} {shmem} {swap}"))?;
    thread::sleep(PAUSE / 2);
    Ok(())
}

/// RssAnon, RssFile, RssShmem and VmSwap of a status file, bytes.
fn status_memory(text: &str) -> Result<[u64; 4]> {
    let mut values = [None; 4];
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let i = match key {
            "RssAnon" => 0,
            "RssFile" => 1,
            "RssShmem" => 2,
            "VmSwap" => 3,
            _ => continue,
        };
        let kb: u64 = value.trim().trim_end_matches("kB").trim().parse()?;
        values[i] = Some(kb * 1024);
    }
    let [Some(a), Some(f), Some(s), Some(w)] = values else {
        bail!("status without its memory lines: {text}");
    };
    Ok([a, f, s, w])
}
