//! A cgroup as the profile's target (`monitor --cgroup`), in both backends: a
//! process moved in and out between rounds of work, counted exactly while it
//! is inside, its children forked inside too.

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::device::{samplers, wakeups};
use crate::kmod::{self, Profiled};
use crate::monitor::{csv_minor, finished, within};
use crate::{harness::Env, klog};

const ROOT: &str = "/sys/fs/cgroup";

/// cgroup2 at /sys/fs/cgroup (the initramfs mounts none).
fn mount_cgroup2() -> Result<()> {
    if fs::read_to_string("/proc/self/mounts")?.contains(" /sys/fs/cgroup cgroup2 ") {
        return Ok(());
    }
    fs::create_dir_all(ROOT)?;
    let out = Command::new("/bin/busybox")
        .args(["mount", "-t", "cgroup2", "none", ROOT])
        .output()?;
    ensure!(out.status.success(), "mounting cgroup2: {out:?}");
    Ok(())
}

/// The thread that looks at the target's processes for the monitor `monitor`: the
/// kernel session's sampler (a kthread named after its opener), or the procfs
/// backend's sampling thread; waited for while the monitor starts.
fn sampler_of(backend: &str, monitor: u32) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = if backend == "kernel" {
            samplers()?.into_iter().find(|&pid| {
                fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == format!("pfprof/{monitor}"))
            })
        } else {
            fs::read_dir(format!("/proc/{monitor}/task"))?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|tid| {
                    fs::read_to_string(format!("/proc/{monitor}/task/{tid}/comm"))
                        .is_ok_and(|c| c.trim() == "pfprof-sampler")
                })
        };
        if let Some(sampler) = found {
            return Ok(sampler);
        }
        ensure!(
            Instant::now() < deadline,
            "the {backend} backend's monitor {monitor} has no sampler after 60 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// Waits until `sampler` has gone to sleep `LOOKS` times more: the last of its looks
/// began after the call. A second at least, as many periods on a quiet machine; on a
/// loaded one the sampler may look far less often than its period, and a move it did
/// not see between two looks would count what came between them in the wrong place.
fn after_looks(sampler: u32) -> Result<()> {
    /// Sleeps of the sampler (its period's, and any on a lock) that make sure one
    /// whole look came after the call.
    const LOOKS: u64 = 5;
    let start = Instant::now();
    let slept = wakeups(sampler)?;
    thread::sleep(Duration::from_secs(1));
    while wakeups(sampler)? < slept + LOOKS {
        ensure!(
            start.elapsed() < Duration::from_secs(60),
            "the sampler {sampler} looked fewer than {LOOKS} times in 60 s ({})",
            how_it_ran(sampler)
        );
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// What says whether a sampler that did not sleep was spinning or stuck: its state,
/// its CPU time, its switches and where it waits.
fn how_it_ran(pid: u32) -> String {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the comm: state is the first field, utime and stime the 12th and 13th.
    let fields: Vec<&str> = stat
        .rfind(')')
        .map(|end| stat[end + 2..].split(' ').collect())
        .unwrap_or_default();
    let field = |i: usize| fields.get(i).copied().unwrap_or("?");
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let switches: Vec<&str> = status
        .lines()
        .filter(|l| l.contains("ctxt_switches"))
        .collect();
    let wchan = fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    // Where it runs: its kernel stack whenever it is off the CPU, five looks 100 ms
    // apart (CONFIG_STACKTRACE; a thread on the CPU shows none).
    let mut stacks: Vec<String> = Vec::new();
    for _ in 0..5 {
        let stack = fs::read_to_string(format!("/proc/{pid}/stack")).unwrap_or_default();
        let frames: Vec<&str> = stack
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        let stack = frames.join(" < ");
        if !stack.is_empty() && !stacks.contains(&stack) {
            stacks.push(stack);
        }
        thread::sleep(Duration::from_millis(100));
    }
    format!(
        "state {}, utime {} stime {} ticks, {}, wchan {wchan:?}, stacks: [{}]",
        field(0),
        field(11),
        field(12),
        switches.join(", "),
        stacks.join("] [")
    )
}

/// Moves `pid` (asleep) to `cgroup`, after the sampler has seen its last faults where
/// it was, and lets it see it there: what is missed at a move, what came between the
/// last look and the move, is then zero. (Fixed waits of 100 periods once counted a
/// whole round outside, on a loaded machine: the sampler had not looked between.)
fn move_to(cgroup: &str, pid: u32, sampler: u32) -> Result<()> {
    after_looks(sampler)?;
    fs::write(format!("{cgroup}/cgroup.procs"), pid.to_string())
        .with_context(|| format!("moving {pid} to {cgroup}"))?;
    after_looks(sampler)
}

/// Minor faults of `pid` and of the children it reaped (stat fields 10 and 11).
fn minflt_with_children(pid: u32) -> Result<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &text[text.rfind(')').context("no ) in stat")? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Ok(fields[7].parse::<u64>()? + fields[8].parse::<u64>()?)
}

/// One round of `child rounds` (`l` itself, `f` through a child), and the
/// faults it took, children included.
fn round(p: &mut Profiled, kind: u8) -> Result<u64> {
    let before = minflt_with_children(p.pid)?;
    p.send(kind)?;
    ensure!(p.read_line()? == "done");
    p.wait_asleep()?;
    Ok(minflt_with_children(p.pid)? - before)
}

pub fn a_cgroup_target_counts_exactly_what_its_processes_did_inside_in_both_backends(
    env: &Env,
) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=10"])?;
    mount_cgroup2()?;
    let mut said = Vec::new();
    for backend in ["kernel", "procfs"] {
        let cgroup = format!("{ROOT}/pfprof-{backend}");
        let inner = format!("{cgroup}/inner");
        fs::create_dir_all(&inner)?;
        let csv = format!("/tmp/cgroup-{backend}.csv");
        let mark = klog::Mark::now()?;
        let mut p = Profiled::spawn(&["rounds", "500"])?;
        let monitor = Command::new("/bin/monitor")
            .args([
                "--backend",
                backend,
                "--period-ms",
                "10",
                "--cgroup",
                &cgroup,
            ])
            .args(["--interval", "100ms", "-o", &csv])
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the monitor")?;
        let sampler = sampler_of(backend, monitor.id())?;
        after_looks(sampler)?;
        // Outside, inside (in a cgroup below), outside again, inside through a child.
        let mut inside = 0;
        round(&mut p, b'l')?;
        move_to(&inner, p.pid, sampler)?;
        inside += round(&mut p, b'l')?;
        move_to(ROOT, p.pid, sampler)?;
        round(&mut p, b'l')?;
        move_to(&cgroup, p.pid, sampler)?;
        inside += round(&mut p, b'f')?;
        move_to(ROOT, p.pid, sampler)?;
        fs::remove_dir(&inner)?;
        fs::remove_dir(&cgroup)?;
        let stderr = finished(
            &format!("monitor --cgroup, {backend}"),
            within(monitor, Duration::from_secs(30))
                .with_context(|| format!("{backend} backend"))?,
        )?;
        p.reap()?;
        let (sum, rows) = csv_minor(&csv)?;
        said.push(format!(
            "{backend}: {sum} of {inside} in {} rows",
            rows.len()
        ));
        ensure!(
            sum == inside,
            "{backend} backend: the samples hold {sum} minor faults, the process took {inside} \
             inside the cgroup: {stderr}"
        );
        mark.ensure_clean()?;
    }
    crate::harness::figure(&format!("cgroup target: {}", said.join("; ")));
    module.unload()
}
