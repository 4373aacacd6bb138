//! How long the module holds a CPU without a preemption point, at every limit at once
//! (issue 37): 16 sessions, two of them of 4,096 members, the members as deep as a
//! process may lie for a session to take it, the sessions' samplers collecting them, an
//! inheriting ADD absorbing a whole session, and a process as deep, a member of every
//! session, execing again and again. A
//! thread pinned to CPU 0, beside what is measured pinned there too, measures the
//! longest time it is kept off the CPU, under voluntary preemption as Debian boots;
//! the floor is the same thread's beside as many busy loops in user space, which the
//! scheduler preempts anywhere. A benchmark for docs/benchmarks.md, run by name.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;

use crate::clone_chain::{become_subreaper, CloneChain};
use crate::cpu0::{pin_task, pin_to_cpu0, Preemption, Probe};
use crate::depth::own_depth;
use crate::device::{add, raw_open, set_mode};
use crate::harness::{figure, Env};
use crate::kmod::{self, Profiled};

/// Members of each session: the most a session takes.
const MEMBERS: usize = abi::MEMBERS_MAX as usize;
/// Sessions: the most one user may have open (max_sessions' default).
const SESSIONS: usize = 16;
/// Of them, full: the two whose samplers share CPU 0 with the probe. The others take
/// the execer alone, whose exec the probe tells each of them.
const FULL_SESSIONS: usize = 2;
/// Execs of each deep process that execs, each a call of the exec probe.
const EXECS: u32 = 100;
/// Rounds of what can be measured again (the floors, the collections, the execs): a
/// gap the host made (it stops the emulated CPU now and then) shows in one round, the
/// module's in every one.
const ROUNDS: usize = 3;

/// The probe's longest gap over 2 s beside `loops` busy loops in user space pinned to
/// CPU 0 too: what the scheduler alone keeps it waiting with as many beside it.
fn floor_beside(probe: &Probe, loops: usize) -> Result<f64> {
    let done = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..loops)
        .map(|_| {
            let done = done.clone();
            std::thread::spawn(move || -> Result<()> {
                pin_to_cpu0()?;
                while !done.load(Ordering::Relaxed) {}
                Ok(())
            })
        })
        .collect();
    probe.gap_ms();
    std::thread::sleep(Duration::from_secs(2));
    let gap = probe.gap_ms();
    done.store(true, Ordering::Relaxed);
    for thread in busy {
        match thread.join() {
            Ok(r) => r?,
            Err(_) => bail!("a busy loop panicked"),
        }
    }
    Ok(gap)
}

/// The samplers of this process's sessions ("pfprof/<pid>" kthreads).
fn samplers() -> Result<Vec<i32>> {
    let comm = format!("pfprof/{}", std::process::id());
    let mut tids = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let name = entry?.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == comm) {
            tids.push(pid);
        }
    }
    Ok(tids)
}

/// `hardening-child holds`, as root, a child subreaper: a chain of processes down to
/// the depth the bound allows, MEMBERS processes below its last level, then what the
/// module does at every limit, each on CPU 0 beside the probe. Says "floors ...; ADDs
/// ...; collections ...; execs ...".
pub fn holds() -> Result<()> {
    become_subreaper()?;
    let depth = own_depth()?;
    // The members at exactly the bound's depth: the last level one above.
    let levels = abi::DEPTH_MAX as usize - depth - 1;
    let exe = std::env::current_exe()?;
    let exe = exe.to_str().context("this binary's path")?;
    eprintln!("holds: a chain of {levels} levels, {MEMBERS} members below it");
    let chain = CloneChain::hang(
        levels,
        MEMBERS,
        ROUNDS,
        &[exe, "child", "exec-chain", &EXECS.to_string(), "run"],
    )?;
    let said = measure(&chain, depth + levels)?;
    // Every process of the chain killed and reaped, its stacks unmapped.
    drop(chain);
    println!("{said}");
    std::io::stdout().flush()?;
    Ok(())
}

/// The phases, each measured by the probe: `last` is the last level's depth.
fn measure(chain: &CloneChain, last: usize) -> Result<String> {
    let members = chain.members();
    let last_level = *chain.levels().last().context("no level")?;
    pin_to_cpu0()?;
    let preemption = Preemption::voluntary()?;
    let probe = Probe::start();

    // The floors: busy loops in user space beside the probe, preempted anywhere, as
    // many as the phases below put beside it.
    eprintln!("holds: the chain is made, measuring");
    let mut floor_one = f64::MAX;
    let mut floor_two = f64::MAX;
    for _ in 0..ROUNDS {
        floor_one = floor_one.min(floor_beside(&probe, 1)?);
        floor_two = floor_two.min(floor_beside(&probe, 2)?);
    }

    // Every session full: MEMBERS ADDs each, then one inheriting ADD of the last level,
    // which takes its members into its tree.
    let mut files = Vec::new();
    let mut refused = std::collections::BTreeSet::new();
    let mut added = 0;
    probe.gap_ms();
    for session in 0..SESSIONS {
        let file = raw_open()?;
        let taken = if session < FULL_SESSIONS {
            &members[..]
        } else {
            &members[..ROUNDS]
        };
        for &pid in taken {
            match add(&file, pid, 0, 0) {
                Ok(()) => added += 1,
                Err(e) => {
                    refused.insert(e);
                }
            }
        }
        files.push(file);
    }
    let adds_gap = probe.gap_ms();
    eprintln!("holds: {added} ADDs done");
    let t = Instant::now();
    let inheriting = add(&files[0], last_level, abi::TARGET_INHERIT, 0)
        .err()
        .unwrap_or(0);
    let inheriting_ms = t.elapsed().as_secs_f64() * 1e3;
    let inheriting_gap = probe.gap_ms();

    // Every session's sampler collecting: the first two on CPU 0 (the session with the
    // tree and one with every member; sessions start samplers in order), the others on
    // CPU 1.
    for file in &files {
        set_mode(file, abi::MODE_RELAXED).map_err(|e| anyhow::anyhow!("SET_MODE: errno {e}"))?;
    }
    let mut samplers = samplers()?;
    samplers.sort_unstable();
    for (i, &tid) in samplers.iter().enumerate() {
        pin_task(tid, usize::from(i >= 2))?;
    }
    let mut collections = Vec::new();
    for _ in 0..ROUNDS {
        probe.gap_ms();
        std::thread::sleep(Duration::from_secs(2));
        collections.push(probe.gap_ms());
    }
    eprintln!("holds: collections measured");

    // The first members, as deep, exec EXECS times each on CPU 0, one after the other,
    // every sampler on CPU 1.
    for &tid in &samplers {
        pin_task(tid, 1)?;
    }
    let mut execs = Vec::new();
    let started = Instant::now();
    for (round, &execer) in members[..ROUNDS].iter().enumerate() {
        pin_task(execer, 0)?;
        probe.gap_ms();
        chain.release_execers(round + 1);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{execer}/stat")).unwrap_or_default();
            let state = stat.rfind(')').and_then(|i| stat[i + 2..].chars().next());
            if state == Some('Z') || stat.is_empty() {
                break;
            }
            ensure!(
                started.elapsed() < Duration::from_secs(300),
                "{ROUNDS} x {EXECS} execs not done in 300 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        execs.push(probe.gap_ms());
    }
    let execs_ms = started.elapsed().as_secs_f64() * 1e3;
    drop(files);
    probe.stop()?;
    drop(preemption);
    let range = |gaps: &[f64]| {
        let (min, max) = gaps
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &g| (lo.min(g), hi.max(g)));
        format!("{min:.1} (at most {max:.1})")
    };
    Ok(format!(
        "floors {floor_one:.1} ms beside one busy loop, {floor_two:.1} ms beside two (the \
         least of {ROUNDS}); ADDs: {added} of {FULL_SESSIONS} x {MEMBERS} members {last} deep \
         and {} x {ROUNDS} (refused {refused:?}), gap {adds_gap:.1} ms; an inheriting ADD over \
         a full session: errno {inheriting}, {inheriting_ms:.1} ms, gap {inheriting_gap:.1} ms; \
         collections: 2 of {} samplers on CPU 0, {ROUNDS} rounds of 2 s, gap {} ms; execs: \
         {ROUNDS} x {EXECS} of members {last} deep in {execs_ms:.0} ms, gap {} ms",
        SESSIONS - FULL_SESSIONS,
        samplers.len(),
        range(&collections),
        range(&execs),
        last = last + 1
    ))
}

/// The benchmark: the helper's line, as a figure.
pub fn bench_longest_hold_at_every_limit(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &[])?;
    let mut helper = Profiled::spawn_mode("hardening-child", &["holds"], None)?;
    let line = helper.read_line().context("the holds helper")?;
    let reaped = helper.reap()?;
    ensure!(
        reaped.status == 0,
        "the helper failed ({:#x}) after {line:?}",
        reaped.status
    );
    figure(&format!("longest holds at every limit: {line}"));
    module.unload()
}
