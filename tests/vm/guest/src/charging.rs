//! A session's cost is its opener's: the CPU time of its sampler and the
//! memory of its trees' maps go to the opener's cgroups, and the maps shrink
//! once the processes in them are gone (the second hostile review, M1).

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::device::Device;
use shared_layout::Mode;

use crate::device::samplers;
use crate::harness::{figure, Env, Skipped};
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::users::{open_to_all, NOBODY};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Processes in the tree the session maps: its maps grow to 8192 slots.
const TREE: usize = 1000;
const KIB: u64 = 1024;

/// `hardening-child tree-of <n>` (as nobody): `n` sleeping children; says
/// "ready", kills and reaps them at a byte on stdin and says "gone", then
/// ends at the next.
pub fn tree_of(n: &str) -> Result<()> {
    let n: usize = n.parse()?;
    let mut children = (0..n)
        .map(|_| {
            Command::new("/bin/busybox")
                .args(["sleep", "600"])
                .stdin(Stdio::null())
                .spawn()
                .context("spawning a sleeping child")
        })
        .collect::<Result<Vec<Child>>>()?;
    println!("ready");
    std::io::stdout().flush()?;
    let mut byte = [0u8; 1];
    std::io::stdin().read_exact(&mut byte)?;
    for child in &mut children {
        child.kill()?;
        child.wait()?;
    }
    println!("gone");
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read(&mut byte)?;
    Ok(())
}

/// `hardening-child costly-session <pid>` (as nobody): at a byte on stdin,
/// opens a session, says "opened"; at the next ADDs `pid` with its descendants, says
/// "added"; at the next starts a relaxed ring, says "started"; at the next ends.
pub fn costly_session(pid: &str) -> Result<()> {
    let mut byte = [0u8; 1];
    println!("waiting");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut byte)?;
    let dev = Device::open()?;
    println!("opened");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut byte)?;
    dev.add(pid.parse()?, true, false)?;
    println!("added");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut byte)?;
    let _area = dev.start(Mode::Relaxed)?;
    println!("started");
    std::io::stdout().flush()?;
    let _ = std::io::stdin().read(&mut byte)?;
    dev.ender().end()?;
    Ok(())
}

/// A cgroup with the memory and cpu controllers, removed when dropped.
struct Cgroup(PathBuf);

impl Cgroup {
    fn new(name: &str) -> Result<Cgroup> {
        let root = Path::new(CGROUP_ROOT);
        let controllers = fs::read_to_string(root.join("cgroup.controllers"))
            .context("no cgroup2 (the guest's /init mounts it)")?;
        for needed in ["memory", "cpu"] {
            if !controllers.split_whitespace().any(|c| c == needed) {
                return Err(Skipped(format!(
                    "this kernel has no {needed} controller ({controllers:?})"
                ))
                .into());
            }
        }
        fs::write(root.join("cgroup.subtree_control"), "+memory +cpu")?;
        let path = root.join(name);
        let _ = fs::remove_dir(&path);
        fs::create_dir(&path)?;
        Ok(Cgroup(path))
    }

    /// Bytes of slab objects charged to it (`memory.stat`'s `slab`): counted
    /// per object. `memory.current` counts pages, and moves in per-CPU charge
    /// batches of 64 pages that a freed object returns to, not to the counter:
    /// a thousand freed kin leave it 256 KiB up. The statistics are flushed
    /// every 2 s (sooner on a read past a threshold), so readers poll.
    fn slab_bytes(&self) -> Result<u64> {
        let stat = fs::read_to_string(self.0.join("memory.stat"))?;
        stat.lines()
            .find_map(|l| l.strip_prefix("slab "))
            .context("no slab in memory.stat")?
            .trim()
            .parse()
            .context("slab in memory.stat")
    }

    /// `slab_bytes()` once `done` holds of it, or at the deadline's read.
    fn slab_bytes_once(&self, done: impl Fn(u64) -> bool) -> Result<u64> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.slab_bytes()?;
            if done(now) || Instant::now() >= deadline {
                return Ok(now);
            }
            thread::sleep(Duration::from_millis(250));
        }
    }

    fn cpu_usage_us(&self) -> Result<u64> {
        let stat = fs::read_to_string(self.0.join("cpu.stat"))?;
        stat.lines()
            .find_map(|l| l.strip_prefix("usage_usec "))
            .context("no usage_usec in cpu.stat")?
            .trim()
            .parse()
            .context("usage_usec")
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // The sampler leaves it as its session closes: a moment after.
        let deadline = Instant::now() + Duration::from_secs(5);
        while fs::remove_dir(&self.0).is_err() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
    }
}

/// CPU time of a thread so far, ns (schedstat's first field).
fn cpu_ns(pid: u32) -> Result<u64> {
    kmod::main_thread_cpu_ns(pid)
}

pub fn a_sessions_sampling_and_maps_are_charged_to_its_openers_cgroups(env: &Env) -> Result<()> {
    let cgroup = Cgroup::new("pfprof-opener")?;
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    let mut tree = Profiled::spawn_mode(
        "hardening-child",
        &["tree-of", &TREE.to_string()],
        Some(NOBODY),
    )?;
    ensure!(tree.read_line()? == "ready", "nobody's tree is not ready");
    let mut opener = Profiled::spawn_mode(
        "hardening-child",
        &["costly-session", &tree.pid.to_string()],
        Some(NOBODY),
    )?;
    ensure!(opener.read_line()? == "waiting");
    fs::write(cgroup.0.join("cgroup.procs"), opener.pid.to_string())
        .context("moving the opener into its cgroup")?;
    let before = samplers()?;
    opener.go()?;
    ensure!(
        opener.read_line()? == "opened",
        "the opener opened no session"
    );
    let slab_opened = cgroup.slab_bytes()?;
    opener.go()?;
    ensure!(
        opener.read_line()? == "added",
        "the opener did not add its tree"
    );
    let sampler = match samplers()?
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect::<Vec<_>>()
        .as_slice()
    {
        [one] => *one,
        other => bail!("opening a session started samplers {other:?}"),
    };
    let in_cgroup = fs::read_to_string(format!("/proc/{sampler}/cgroup"))?;
    // The join made a kin of each process of the tree: some 190 bytes each.
    let grown_enough = |now: u64| now.saturating_sub(slab_opened) >= TREE as u64 * 128;
    let slab_added = cgroup.slab_bytes_once(grown_enough)?;

    opener.go()?;
    ensure!(opener.read_line()? == "started");
    // It reads the tree's processes every period.
    thread::sleep(Duration::from_millis(500));
    let (usage0, sampler0) = (cgroup.cpu_usage_us()?, cpu_ns(sampler)?);
    thread::sleep(Duration::from_secs(2));
    let (usage1, sampler1) = (cgroup.cpu_usage_us()?, cpu_ns(sampler)?);

    // The tree goes: its kin go with the next collection, freed after an RCU grace
    // period, which a loaded host may take seconds over.
    tree.go()?;
    ensure!(tree.read_line()? == "gone");
    let grown = slab_added.saturating_sub(slab_opened);
    let slab_gone = cgroup.slab_bytes_once(|now| now.saturating_sub(slab_opened) * 4 <= grown)?;

    let sampler_us = (sampler1 - sampler0) / 1000;
    let usage_us = usage1 - usage0;
    let kept = slab_gone.saturating_sub(slab_opened);
    figure(&format!(
        "charging: the sampler of a session over {TREE} processes used {sampler_us} us of \
         CPU in 2 s, its opener's cgroup {usage_us} us; the cgroup's slab grew by {} KiB \
         as the join made their kin, {} KiB above the open once the processes were gone",
        grown / KIB,
        kept / KIB
    ));
    ensure!(
        in_cgroup.trim_end().ends_with("/pfprof-opener"),
        "the sampler is in cgroup {in_cgroup:?}, not its opener's"
    );
    ensure!(
        sampler_us >= 10_000 && usage_us * 10 >= sampler_us * 8,
        "the sampler used {sampler_us} us, its opener's cgroup was charged {usage_us} us"
    );
    ensure!(
        grown >= TREE as u64 * 128,
        "the opener's cgroup's slab grew by {grown} bytes while its session made kin of {TREE} \
         processes"
    );
    // Every kin gone, beside noise.
    ensure!(
        kept * 4 <= grown,
        "the opener's cgroup's slab keeps {kept} bytes more once the {TREE} processes are gone, \
         of {grown} their kin took"
    );
    opener.go()?;
    opener.reap()?;
    tree.reap()?;
    drop(cgroup);
    module.unload()?;
    mark.ensure_clean()
}
