//! The processes the tests profile or kill: `pfprof-guest child <mode> ...`.
//!
//! Profiled modes print `ready`, then block reading one byte from stdin (the
//! parent registers them meanwhile, while they take no fault), then work.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::thread;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi::monotonic_ns;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Mode;

use crate::anon::{Fresh, PAGE};
use crate::device::{raw_session, set_mode, Mapping};
use crate::kmod;

pub fn main(args: &[String]) -> ExitCode {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["faults", pages, threads, then] => faults(pages, threads, then),
        ["churn"] => churn(),
        ["hold-lock"] => hold_lock(),
        ["wait-full"] => wait_full(),
        ["register", pid] => register(pid),
        ["touch", pages, hold_ms] => touch(pages, hold_ms),
        ["touch-after-go", pages, how] => touch_after_go(pages, how),
        ["threads-while-listed", spawners, most, idle, pages] => {
            threads_while_listed(spawners, most, idle, pages)
        }
        ["rounds", pages] => rounds(pages),
        ["swapped", pages] => swapped(pages),
        ["exec-after-go", pages, program @ ..] if !program.is_empty() => {
            exec_after_go(pages, program, false)
        }
        ["thread-exec", program @ ..] if !program.is_empty() => exec_after_go("0", program, true),
        ["exec-chain", left, start] => exec_chain(left, start),
        ["orphan-after-go", pages] => orphan_after_go(pages),
        ["fork-exec-after-go", program @ ..] if !program.is_empty() => fork_exec_after_go(program),
        ["sleepers", per_round] => sleepers(per_round),
        ["setresuid-exec", program @ ..] if !program.is_empty() => setresuid_exec(program),
        ["window", pages] => window(pages),
        ["fail-nth-left"] => fail_nth_left(),
        ["autoreap-tree", child_pages, parent_pages, report] => {
            autoreap_tree(child_pages, parent_pages, report)
        }
        ["thrash", cgroup, fits_mib, extra_mib] => {
            crate::thrash::workload::workload(cgroup, fits_mib, extra_mib)
        }
        _ => Err(anyhow::anyhow!("unknown child mode {args:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("child: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn ready_then_wait_for_go() -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(b"ready\n")?;
    out.flush()?;
    let mut byte = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut byte)
        .context("waiting for go")?;
    Ok(())
}

/// Touches `pages` fresh pages split over the main thread and `threads`
/// threads that exit before it does, says `done`, and then either exits at
/// once (`exit`: its last faults reach only the final sample) or stays,
/// faulting no more, until the next byte or the end of stdin (`stay`).
fn faults(pages: &str, threads: &str, then: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let threads: usize = threads.parse()?;
    let stay = match then {
        "stay" => true,
        "exit" => false,
        _ => bail!("faults: expected exit or stay, got {then:?}"),
    };
    let mem = Fresh::new(pages)?;
    ready_then_wait_for_go()?;
    let share = pages / (threads + 1);
    thread::scope(|s| {
        for t in 0..threads {
            let mem = &mem;
            s.spawn(move || mem.touch(t * share..(t + 1) * share));
        }
    });
    mem.touch(threads * share..pages);
    let mut out = std::io::stdout().lock();
    out.write_all(b"done\n")?;
    out.flush()?;
    if stay {
        let mut byte = [0u8; 1];
        std::io::stdin()
            .read(&mut byte)
            .context("waiting for exit")?;
    }
    Ok(())
}

/// Keeps faulting (256 fresh pages, then a 1 ms nap) until a second byte.
fn churn() -> Result<()> {
    ready_then_wait_for_go()?;
    // SAFETY: setting O_NONBLOCK on our own stdin.
    unsafe { libc::fcntl(0, libc::F_SETFL, libc::O_NONBLOCK) };
    let mut byte = [0u8; 1];
    loop {
        let mem = Fresh::new(256)?;
        mem.touch(0..256);
        drop(mem);
        match std::io::stdin().read(&mut byte) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e.into()),
        }
        thread::sleep(Duration::from_millis(1));
    }
}

/// A monitor that takes the shared lock and never lets it go, reporting the
/// area's deferred counter until it is killed.
fn hold_lock() -> Result<()> {
    let file = raw_session()?;
    set_mode(&file, Mode::Strict.as_raw()).map_err(|e| anyhow::anyhow!("SET_MODE: {e}"))?;
    let map = Mapping::new(&file)?;
    map.lock_as_consumer()?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "locked")?;
    loop {
        writeln!(out, "deferred {}", map.deferred())?;
        out.flush()?;
        thread::sleep(Duration::from_millis(20));
    }
}

/// A strict consumer that sleeps in WAIT_FULL without a timeout until the
/// session ends, then says how many samples it took.
fn wait_full() -> Result<()> {
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    println!("waiting");
    std::io::stdout().flush()?;
    let mut out = Vec::new();
    loop {
        match consumer.take(&mut out, None)? {
            Take::Samples(_) => {}
            Take::TimedOut => bail!("an unbounded wait timed out"),
            Take::Ended => break,
        }
    }
    println!("ended {}", out.len());
    Ok(())
}

/// Touches `pages` fresh pages and pushes them out to swap (MADV_PAGEOUT), says ready
/// and waits for go; then reads each back, a swap-in (a major fault) each, says `done`,
/// and exits at the next byte or the end of stdin.
fn swapped(pages: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let mem = Fresh::new(pages)?;
    mem.touch(0..pages);
    // SAFETY: the range is our own mapping.
    let ret = unsafe { libc::madvise(mem.ptr.as_ptr().cast(), mem.len, libc::MADV_PAGEOUT) };
    ensure!(
        ret == 0,
        "madvise(MADV_PAGEOUT): {}",
        std::io::Error::last_os_error()
    );
    ready_then_wait_for_go()?;
    for i in 0..pages {
        // SAFETY: i < pages of the mapping; nobody else uses it.
        std::hint::black_box(unsafe { mem.ptr.as_ptr().add(i * PAGE).read_volatile() });
    }
    let mut out = std::io::stdout().lock();
    out.write_all(b"done\n")?;
    out.flush()?;
    let mut byte = [0u8; 1];
    std::io::stdin()
        .read(&mut byte)
        .context("waiting for exit")?;
    Ok(())
}

/// Says ready; then, per byte read, touches `pages` fresh pages itself (`l`) or
/// through a child it forks and waits for (`f`), and says `done`; exits at
/// the end of stdin. Between rounds it sleeps in its read, faulting nothing.
fn rounds(pages: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    ready_then_wait_for_go_with(|byte| -> Result<()> {
        match byte {
            b'l' => Fresh::new(pages)?.touch(0..pages),
            b'f' => {
                let mem = Fresh::new(pages)?;
                let pid = fork()?;
                if pid == 0 {
                    mem.touch(0..pages);
                    exit_child(Ok(()));
                }
                reap(pid)?;
            }
            other => bail!("rounds: unknown round {other:#x}"),
        }
        let mut out = std::io::stdout().lock();
        out.write_all(b"done\n")?;
        out.flush()?;
        Ok(())
    })
}

/// Says ready, then runs `round` for each byte read from stdin until its end.
fn ready_then_wait_for_go_with(mut round: impl FnMut(u8) -> Result<()>) -> Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(b"ready\n")?;
    out.flush()?;
    drop(out);
    let mut byte = [0u8; 1];
    while std::io::stdin().read(&mut byte)? == 1 {
        round(byte[0])?;
    }
    Ok(())
}

/// Touches `pages` fresh pages, stays `hold_ms` (long enough for samplers to
/// look at it), exits: the program a setuid copy of this binary runs.
/// Says ready, waits for go, then, `undumpable`, makes itself not dumpable (what only
/// CAP_SYS_PTRACE may read then; `readable`: not), and touches `pages` fresh pages.
fn touch_after_go(pages: &str, how: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let mem = Fresh::new(pages)?;
    ready_then_wait_for_go()?;
    if how == "undumpable" {
        ensure!(
            // SAFETY: prctl with integer arguments only.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0,
            "prctl: {}",
            std::io::Error::last_os_error()
        );
    }
    mem.touch(0..pages);
    Ok(())
}

/// The process's minor faults so far, all its threads' (those gone included).
fn process_minflt() -> u64 {
    // SAFETY: rusage is plain old data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a local.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    ru.ru_minflt as u64
}

/// Where the threads of `threads-while-listed` are: 0 waiting, 1 working, 2 leaving.
struct Stage {
    stage: std::sync::Mutex<(u8, usize)>,
    changed: std::sync::Condvar,
}

impl Stage {
    /// Waits for stage `at`.
    fn wait(&self, at: u8) {
        let mut state = self.stage.lock().unwrap_or_else(|e| e.into_inner());
        while state.0 < at {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// One more thread done with its work.
    fn done(&self) {
        self.stage.lock().unwrap_or_else(|e| e.into_inner()).1 += 1;
        self.changed.notify_all();
    }

    fn set(&self, at: u8) {
        self.stage.lock().unwrap_or_else(|e| e.into_inner()).0 = at;
        self.changed.notify_all();
    }

    /// Waits until `n` threads are done.
    fn wait_done(&self, n: usize) {
        let mut state = self.stage.lock().unwrap_or_else(|e| e.into_inner());
        while state.1 < n {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A thread's work once told: `pages` fresh pages, then a thread of its own that
/// touches `pages` more.
fn touch_and_create(pages: usize) -> Result<()> {
    Fresh::new(pages)?.touch(0..pages);
    thread::Builder::new()
        .stack_size(64 << 10)
        .spawn(move || Fresh::new(pages).map(|m| m.touch(0..pages)))?
        .join()
        .map_err(|_| anyhow::anyhow!("a thread panicked"))?
}

/// `spawners` threads, then `idle` threads that only wait (after the spawners in the
/// process's list of threads: the module lists them long after the spawners, which go on
/// creating threads meanwhile); then each spawner creates a thread every millisecond,
/// `most` at most, which waits; says `spawning`, and the spawners go on until a byte on stdin
/// (the parent registers the process meanwhile); then says `ready` when all are there.
/// At go, every spawner and thread spawned does `touch_and_create`; then says `window
/// <t0> <t1> minflt <n> threads <m>`: CLOCK_MONOTONIC (ns) before and after the work,
/// the minor faults the process took between, and how many threads did it.
fn threads_while_listed(spawners: &str, most: &str, idle: &str, pages: &str) -> Result<()> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let (spawners, most, idle, pages): (usize, usize, usize, usize) = (
        spawners.parse()?,
        most.parse()?,
        idle.parse()?,
        pages.parse()?,
    );
    let stage = Arc::new(Stage {
        stage: std::sync::Mutex::new((0, 0)),
        changed: std::sync::Condvar::new(),
    });
    // The spawners' start (once the idle threads are there) and end.
    let (begin, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    // Threads made, and spawners done making them.
    let (spawned, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let worker = move |stage: Arc<Stage>| {
        move || -> Result<()> {
            stage.wait(1);
            let worked = touch_and_create(pages);
            stage.done();
            stage.wait(2);
            worked
        }
    };
    let mut handles = Vec::new();
    for _ in 0..spawners {
        let (stage, begin, stop) = (Arc::clone(&stage), Arc::clone(&begin), Arc::clone(&stop));
        let (spawned, finished) = (Arc::clone(&spawned), Arc::clone(&finished));
        let spawner = move || -> Result<()> {
            let mut made = Vec::new();
            while !begin.load(Ordering::Relaxed) {
                thread::sleep(Duration::from_millis(1));
            }
            while made.len() < most && !stop.load(Ordering::Relaxed) {
                made.push(
                    thread::Builder::new()
                        .stack_size(64 << 10)
                        .spawn(worker(Arc::clone(&stage)))?,
                );
                spawned.fetch_add(1, Ordering::Relaxed);
                thread::sleep(Duration::from_millis(1));
            }
            finished.fetch_add(1, Ordering::Release);
            let worked = worker(stage)();
            for t in made {
                t.join()
                    .map_err(|_| anyhow::anyhow!("a thread panicked"))??;
            }
            worked
        };
        handles.push(thread::Builder::new().stack_size(64 << 10).spawn(spawner)?);
    }
    let mut idlers = Vec::new();
    for _ in 0..idle {
        let stage = Arc::clone(&stage);
        idlers.push(
            thread::Builder::new()
                .stack_size(64 << 10)
                .spawn(move || stage.wait(2))?,
        );
    }
    begin.store(true, Ordering::Relaxed);
    let mut out = std::io::stdout().lock();
    writeln!(out, "spawning")?;
    out.flush()?;
    drop(out);
    let mut byte = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut byte)
        .context("waiting for stop")?;
    stop.store(true, Ordering::Relaxed);
    // Every thread there: every spawner done, and as many threads in /proc.
    while finished.load(Ordering::Acquire) < spawners {
        thread::sleep(Duration::from_millis(10));
    }
    let all = spawners + spawned.load(Ordering::Relaxed);
    while fs_threads()? <= all + idle {
        thread::sleep(Duration::from_millis(10));
    }
    ready_then_wait_for_go()?;
    // Both clocks read once before: the window's reads touch no new page.
    let _ = (monotonic_ns(), process_minflt());
    let before = process_minflt();
    let t0 = monotonic_ns();
    stage.set(1);
    stage.wait_done(all);
    let t1 = monotonic_ns();
    let taken = process_minflt() - before;
    stage.set(2);
    for h in handles {
        h.join()
            .map_err(|_| anyhow::anyhow!("a spawner panicked"))??;
    }
    for h in idlers {
        h.join().map_err(|_| anyhow::anyhow!("a thread panicked"))?;
    }
    println!("window {t0} {t1} minflt {taken} threads {all}");
    Ok(())
}

/// The number of this process's threads.
fn fs_threads() -> Result<usize> {
    Ok(std::fs::read_dir("/proc/self/task")?.count())
}

fn touch(pages: &str, hold_ms: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let mem = Fresh::new(pages)?;
    mem.touch(0..pages);
    thread::sleep(Duration::from_millis(hold_ms.parse()?));
    Ok(())
}

/// Says ready, waits for go, touches `pages` fresh pages, then execs
/// `program` (from a second thread with `from_thread`: a non-leader exec,
/// which makes that thread the group's leader). Says `exec` first.
fn exec_after_go(pages: &str, program: &[&str], from_thread: bool) -> Result<()> {
    use std::ffi::CString;
    let pages: usize = pages.parse()?;
    let argv = program
        .iter()
        .map(|a| CString::new(*a))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let mem = Fresh::new(pages)?;
    ready_then_wait_for_go()?;
    mem.touch(0..pages);
    println!("exec");
    std::io::stdout().flush()?;
    let exec = move || {
        let mut ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
        ptrs.push(std::ptr::null());
        // SAFETY: argv is a null-terminated array of C strings that outlive the call.
        unsafe { libc::execv(ptrs[0], ptrs.as_ptr()) };
        std::io::Error::last_os_error()
    };
    let err = if from_thread {
        let exec = thread::spawn(exec);
        // The exec kills this thread; an error comes back instead.
        exec.join()
            .map_err(|_| anyhow::anyhow!("the exec thread panicked"))?
    } else {
        exec()
    };
    bail!("execv {}: {err}", program[0])
}

/// A fork: the child's 0 or the child's pid.
fn fork() -> Result<libc::pid_t> {
    // SAFETY: the callers' processes are single-threaded, and their children run
    // only this binary's code before they exec or exit.
    let pid = unsafe { libc::fork() };
    ensure!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    Ok(pid)
}

/// Reaps the child `pid`: its wait status.
fn reap(pid: libc::pid_t) -> Result<i32> {
    let mut status = 0;
    ensure!(
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) } == pid,
        "waitpid: {}",
        std::io::Error::last_os_error()
    );
    Ok(status)
}

/// Leaves a forked child with `result`, without the parent's destructors.
fn exit_child(result: Result<()>) -> ! {
    let code = match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("child: {e:#}");
            1
        }
    };
    // SAFETY: ends this process only.
    unsafe { libc::_exit(code) }
}

/// Execs `program`: returns only its failure.
fn exec(program: &[&str]) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let err = std::process::Command::new(program[0])
        .args(&program[1..])
        .exec();
    anyhow::anyhow!("exec {}: {err}", program[0])
}

/// Says ready, waits for go, then forks a child that forks a grandchild and exits at
/// once. The grandchild, reparented once its parent is gone (to init: it is no longer
/// below this process), says `orphan <pid>`, and at a byte on the stdin it shares with
/// this process (which reads nothing more) runs `window <pages>`. This process reaps
/// the child and stays until it is killed.
fn orphan_after_go(pages: &str) -> Result<()> {
    ready_then_wait_for_go()?;
    let child = fork()?;
    if child == 0 {
        // SAFETY: getpid has no failure.
        let parent = unsafe { libc::getpid() };
        match fork() {
            Ok(0) => exit_child(orphan(parent, pages)),
            Ok(_) => exit_child(Ok(())),
            Err(e) => exit_child(Err(e)),
        }
    }
    let status = reap(child)?;
    ensure!(status == 0, "the orphan's parent ended with {status:#x}");
    loop {
        thread::sleep(Duration::from_secs(3600));
    }
}

/// `orphan-after-go`'s grandchild, below `parent` until it is gone.
fn orphan(parent: libc::pid_t, pages: &str) -> Result<()> {
    // SAFETY: getppid has no failure.
    while unsafe { libc::getppid() } == parent {
        thread::sleep(Duration::from_millis(1));
    }
    println!("orphan {}", std::process::id());
    std::io::stdout().flush()?;
    let mut byte = [0u8; 1];
    std::io::stdin()
        .read_exact(&mut byte)
        .context("waiting for go")?;
    window(pages)
}

/// Says ready; at each byte `f` from stdin forks `per_round` children that sleep until
/// killed and says `forked <children so far>`; at the end of stdin kills and reaps them.
fn sleepers(per_round: &str) -> Result<()> {
    let per_round: usize = per_round.parse()?;
    let mut children = Vec::new();
    println!("ready");
    std::io::stdout().flush()?;
    let mut byte = [0u8; 1];
    let outcome = (|| -> Result<()> {
        while std::io::stdin().read(&mut byte)? == 1 {
            ensure!(byte[0] == b'f', "sleepers: unknown byte {:#x}", byte[0]);
            for _ in 0..per_round {
                let child = fork()?;
                if child == 0 {
                    loop {
                        // SAFETY: pause(3) only sleeps; SIGKILL ends the child.
                        unsafe { libc::pause() };
                    }
                }
                children.push(child);
            }
            println!("forked {}", children.len());
            std::io::stdout().flush()?;
        }
        Ok(())
    })();
    for &child in &children {
        // SAFETY: kill(2) of our own unreaped child.
        unsafe { libc::kill(child, libc::SIGKILL) };
    }
    for &child in &children {
        reap(child)?;
    }
    outcome
}

/// Says ready, waits for go, then forks a child that execs `program`, reaps it and says
/// `child <pid> status <wait status>`; exits at the end of stdin.
fn fork_exec_after_go(program: &[&str]) -> Result<()> {
    ready_then_wait_for_go()?;
    let child = fork()?;
    if child == 0 {
        exit_child(Err(exec(program)));
    }
    let status = reap(child)?;
    println!("child {child} status {status}");
    std::io::stdout().flush()?;
    let mut byte = [0u8; 1];
    while std::io::stdin().read(&mut byte)? == 1 {}
    Ok(())
}

/// Drops back to its real user and group, as a setuid program does before it runs the
/// user's own (`sg`, `newgrp`, `sudo -u $USER`), then execs `program`.
fn setresuid_exec(program: &[&str]) -> Result<()> {
    // SAFETY: getuid and getgid have no failure.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    // SAFETY: plain syscalls with integer arguments.
    let dropped =
        unsafe { libc::setresgid(gid, gid, gid) == 0 && libc::setresuid(uid, uid, uid) == 0 };
    ensure!(
        dropped,
        "setresuid {uid}: {}",
        std::io::Error::last_os_error()
    );
    Err(exec(program))
}

/// Touches `pages` fresh pages and says `window <pid> <t0> <t1> minflt <n>`:
/// CLOCK_MONOTONIC (ns) before and after, and the minor faults it took between.
fn window(pages: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let mem = Fresh::new(pages)?;
    // Both clocks read once before: the window's reads touch no new page.
    let _ = (monotonic_ns(), process_minflt());
    let before = process_minflt();
    let t0 = monotonic_ns();
    mem.touch(0..pages);
    let t1 = monotonic_ns();
    let taken = process_minflt() - before;
    println!("window {} {t0} {t1} minflt {taken}", std::process::id());
    Ok(())
}

/// Execs itself `left` more times, touching a page each time, then exits; the
/// first (`start` "wait") says ready and waits for go.
fn exec_chain(left: &str, start: &str) -> Result<()> {
    use std::os::unix::process::CommandExt;
    let left: u32 = left.parse()?;
    if start == "wait" {
        ready_then_wait_for_go()?;
    }
    Fresh::new(1)?.touch(0..1);
    if left == 0 {
        return Ok(());
    }
    let err = std::process::Command::new(std::env::current_exe()?)
        .args(["child", "exec-chain", &(left - 1).to_string(), "run"])
        .exec();
    bail!("exec: {err}")
}

/// Exits 0 when fault injection has not fired yet in this task (its fail-nth
/// still counting down, or firing at this very open), 3 when it fired before.
fn fail_nth_left() -> Result<()> {
    let left = match std::fs::read_to_string("/proc/thread-self/fail-nth") {
        Err(_) => return Ok(()),
        Ok(text) => text.trim().parse::<u32>().unwrap_or(0),
    };
    if left == 0 {
        std::process::exit(3);
    }
    Ok(())
}

/// A parent that does not wait for its children (SIGCHLD ignored: they are
/// reaped by the kernel, their counts reach nobody) forks a child that
/// touches `child_pages`, writes its own minor faults to `report`, stays
/// 300 ms and exits; once it is gone, and 200 ms more, the parent touches
/// `parent_pages`.
fn autoreap_tree(child_pages: &str, parent_pages: &str, report: &str) -> Result<()> {
    let child_pages: usize = child_pages.parse()?;
    let parent_pages: usize = parent_pages.parse()?;
    ensure!(
        // SAFETY: setting a signal's disposition to SIG_IGN.
        unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) } != libc::SIG_ERR,
        "ignoring SIGCHLD"
    );
    // SAFETY: the child only touches memory, writes a file and exits.
    let pid = unsafe { libc::fork() };
    ensure!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        let mem = Fresh::new(child_pages)?;
        mem.touch(0..child_pages);
        // SAFETY: rusage is plain old data; getrusage fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a local.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        std::fs::write(report, ru.ru_minflt.to_string())?;
        thread::sleep(Duration::from_millis(300));
        // SAFETY: leaving the forked child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    while std::path::Path::new(&format!("/proc/{pid}")).exists() {
        thread::sleep(Duration::from_millis(10));
    }
    thread::sleep(Duration::from_millis(200));
    let mem = Fresh::new(parent_pages)?;
    mem.touch(0..parent_pages);
    Ok(())
}

/// Tries to register `pid` (the test runs this as an unprivileged user).
fn register(pid: &str) -> Result<()> {
    let pid = match pid {
        "self" => std::process::id().to_string(),
        pid => pid.to_string(),
    };
    match kmod::write_status(format!("R {pid}\n").as_bytes()) {
        Ok(()) => println!("ok"),
        Err(errno) => println!("errno {errno}"),
    }
    Ok(())
}
