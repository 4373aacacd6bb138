//! How long the module holds a CPU without a preemption point, at every limit at once
//! (issue 37): 16 sessions, two of them of 4,096 members, the members as deep as a
//! process may lie for a session to take it, the sessions' samplers collecting them, an
//! inheriting ADD absorbing a whole session, and a process as deep, a member of every
//! session, execing again and again. A
//! thread pinned to CPU 0, beside what is measured pinned there too, measures the
//! longest time it is kept off the CPU, under voluntary preemption as Debian boots;
//! the floor is the same thread's beside as many busy loops in user space, which the
//! scheduler preempts anywhere. A benchmark for docs/benchmarks.md, run by name.

use std::ffi::CString;
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;

use crate::depth::{own_depth, pin_to_cpu0, Preemption};
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
/// A process's own stack: it only reports itself, clones or sleeps.
const STACK: usize = 16 << 10;

/// What the chain's processes share (clone(CLONE_VM): our memory).
struct Chain {
    stacks: *mut u8,
    levels: Vec<AtomicI32>,
    made: AtomicUsize,
    members: Vec<AtomicI32>,
    members_made: AtomicUsize,
    /// Member i < ROUNDS execs `exec_argv` once this is above i.
    exec_go: AtomicUsize,
    exec_argv: Vec<*const libc::c_char>,
    exec_envp: [*const libc::c_char; 1],
}

/// Sleeps `ms` milliseconds, or until killed with no timeout, by a raw ppoll(2): the
/// chain's processes share our TLS (errno) and may call nothing else.
fn raw_sleep(ms: Option<i64>) {
    let timeout = ms.map(|ms| libc::timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    });
    let timeout = timeout
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: ppoll(2) of no descriptors; the timeout, if any, lives on this stack.
    unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            std::ptr::null_mut::<libc::pollfd>(),
            0,
            timeout,
            std::ptr::null::<libc::sigset_t>(),
            0,
        )
    };
}

/// A level: reports its pid, clones the next level, or, the last, the members below it.
extern "C" fn level(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the helper's Chain, alive until every process is killed.
    let chain = unsafe { &*(arg as *const Chain) };
    let index = chain.made.fetch_add(1, Ordering::AcqRel);
    // SAFETY: getpid(2), no memory involved.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    chain.levels[index].store(pid, Ordering::Relaxed);
    let (children, next): (usize, extern "C" fn(*mut libc::c_void) -> libc::c_int) =
        if index + 1 < chain.levels.len() {
            (1, level)
        } else {
            (chain.members.len(), member)
        };
    for i in 0..children {
        let slot = if children == 1 {
            index + 1
        } else {
            chain.levels.len() + i
        };
        // SAFETY: the child's stack is its slot of `stacks` alone; it runs `next` only.
        unsafe {
            libc::clone(
                next,
                chain.stacks.add((slot + 1) * STACK).cast(),
                libc::CLONE_VM | libc::SIGCHLD,
                arg,
            )
        };
    }
    loop {
        raw_sleep(None);
    }
}

/// A member below the last level: sleeps until killed, but for the first ROUNDS, each of
/// which execs `exec_argv` once told.
extern "C" fn member(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: as in `level`.
    let chain = unsafe { &*(arg as *const Chain) };
    let index = chain.members_made.fetch_add(1, Ordering::AcqRel);
    // SAFETY: getpid(2), no memory involved.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    chain.members[index].store(pid, Ordering::Relaxed);
    if index < ROUNDS {
        while chain.exec_go.load(Ordering::Acquire) <= index {
            raw_sleep(Some(10));
        }
        // SAFETY: execve(2) of NUL-terminated strings in arrays ending with NULL, all the
        // helper's, alive; on success this process's memory is its own again.
        unsafe {
            libc::syscall(
                libc::SYS_execve,
                chain.exec_argv[0],
                chain.exec_argv.as_ptr(),
                chain.exec_envp.as_ptr(),
            );
            libc::syscall(libc::SYS_exit, 1);
        }
    }
    loop {
        raw_sleep(None);
    }
}

/// A thread pinned to CPU 0 that measures the longest time it is kept off it.
struct Probe {
    done: Arc<AtomicBool>,
    longest_ns: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<Result<()>>>,
}

impl Probe {
    fn start() -> Probe {
        let done = Arc::new(AtomicBool::new(false));
        let longest_ns = Arc::new(AtomicU64::new(0));
        let thread = {
            let (done, longest) = (done.clone(), longest_ns.clone());
            std::thread::spawn(move || -> Result<()> {
                pin_to_cpu0()?;
                let mut last = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    longest.fetch_max((now - last).as_nanos() as u64, Ordering::Relaxed);
                    last = now;
                }
                Ok(())
            })
        };
        Probe {
            done,
            longest_ns,
            thread: Some(thread),
        }
    }

    /// The longest gap since the last call, in ms (microsecond precision).
    fn gap_ms(&self) -> f64 {
        self.longest_ns.swap(0, Ordering::Relaxed) as f64 / 1e6
    }

    fn stop(mut self) -> Result<()> {
        self.done.store(true, Ordering::Relaxed);
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => bail!("the probe panicked"),
            None => Ok(()),
        }
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Pins the task `tid` to `cpu`.
fn pin_task(tid: i32, cpu: usize) -> Result<()> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` (0 or 1) is inside the set, which CPU_SET writes alone.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: a valid set of its own size.
    let ret = unsafe { libc::sched_setaffinity(tid, std::mem::size_of_val(&set), &set) };
    ensure!(
        ret == 0,
        "sched_setaffinity of {tid}: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}

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
    // SAFETY: prctl(2) with integer arguments, on this process alone.
    let subreaping = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    ensure!(
        subreaping == 0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
    let depth = own_depth()?;
    // The members at exactly the bound's depth: the last level one above.
    let levels = abi::DEPTH_MAX as usize - depth - 1;
    let bytes = (levels + MEMBERS + 1) * STACK;
    // SAFETY: an anonymous private mapping of our own, unmapped once every process of the
    // chain is killed and reaped (leaked on a failure, with the process about to exit).
    let stacks = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(
        stacks != libc::MAP_FAILED,
        "mmap of the chain's stacks: {}",
        std::io::Error::last_os_error()
    );
    let exe = CString::new(
        std::env::current_exe()?
            .into_os_string()
            .into_encoded_bytes(),
    )?;
    let args: Vec<CString> = ["child", "exec-chain", &EXECS.to_string(), "run"]
        .iter()
        .map(|a| CString::new(*a))
        .collect::<Result<_, _>>()?;
    let mut exec_argv = vec![exe.as_ptr()];
    exec_argv.extend(args.iter().map(|a| a.as_ptr()));
    exec_argv.push(std::ptr::null());
    let chain = Box::new(Chain {
        stacks: stacks.cast(),
        levels: (0..levels).map(|_| AtomicI32::new(0)).collect(),
        made: AtomicUsize::new(0),
        members: (0..MEMBERS).map(|_| AtomicI32::new(0)).collect(),
        members_made: AtomicUsize::new(0),
        exec_go: AtomicUsize::new(0),
        exec_argv,
        exec_envp: [std::ptr::null()],
    });
    // SAFETY: the first level's stack is its alone; it runs `level` only.
    let top = unsafe {
        libc::clone(
            level,
            chain.stacks.add(STACK).cast(),
            libc::CLONE_VM | libc::SIGCHLD,
            &*chain as *const Chain as *mut libc::c_void,
        )
    };
    ensure!(top > 0, "clone: {}", std::io::Error::last_os_error());
    eprintln!("holds: a chain of {levels} levels, {MEMBERS} members below it");
    let started = Instant::now();
    while chain.members.iter().any(|m| m.load(Ordering::Relaxed) == 0) {
        ensure!(
            started.elapsed() < Duration::from_secs(300),
            "the chain made {} of {levels} levels and {} of {MEMBERS} members in 300 s",
            chain.made.load(Ordering::Relaxed),
            chain.members_made.load(Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let result = measure(&chain, depth + levels);
    for pid in chain.members.iter().chain(chain.levels.iter().rev()) {
        // SAFETY: kill(2) of a process of ours (a subreaper's: it stays ours to reap).
        unsafe { libc::kill(pid.load(Ordering::Relaxed), libc::SIGKILL) };
    }
    // SAFETY: waitpid(2) of any child of ours, into no status.
    while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
    // SAFETY: the mapping made above; no process is left to use it.
    unsafe { libc::munmap(stacks, bytes) };
    println!("{}", result?);
    std::io::stdout().flush()?;
    Ok(())
}

/// The phases, each measured by the probe: `last` is the last level's depth.
fn measure(chain: &Chain, last: usize) -> Result<String> {
    let members: Vec<i32> = chain
        .members
        .iter()
        .map(|m| m.load(Ordering::Relaxed))
        .collect();
    let last_level = chain
        .levels
        .last()
        .context("no level")?
        .load(Ordering::Relaxed);
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
        chain.exec_go.store(round + 1, Ordering::Release);
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
