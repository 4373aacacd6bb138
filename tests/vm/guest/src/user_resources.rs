//! What one user may hold of the module and the kernel: its sessions and
//! registrations capped, no dead processes pinned by sessions it never starts, and
//! its registration loop no burden on root's sampler. From the hostile review of
//! kmod/ (docs/reliability.md, "A hostile local user").

use std::io::{Read, Write};
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::device::{Device, Follow};
use shared_layout::Mode;

use crate::device::{add, errno_of, opened_with_sampler, raw_open};
use crate::harness::Env;
use crate::klog::{self, task_structs};
use crate::kmod::{self, Profiled};
use crate::users::{open_to_all, NOBODY};

/// `hardening-child pin-dead <sessions> <rounds>` (as nobody): opens that
/// many sessions and never starts them; in each, `rounds` times, forks a
/// child, adds it, kills and reaps it. Says "done <added>" and keeps the
/// sessions open until a byte on stdin.
pub fn pin_dead(sessions: &str, rounds: &str) -> Result<()> {
    let (sessions, rounds): (usize, usize) = (sessions.parse()?, rounds.parse()?);
    let files = (0..sessions)
        .map(|_| raw_open())
        .collect::<Result<Vec<_>>>()?;
    let mut added = 0;
    for file in &files {
        for _ in 0..rounds {
            let mut child = Command::new("/bin/busybox")
                .args(["sleep", "60"])
                .spawn()
                .context("spawning a child")?;
            // Asleep: its exec is over (the new program's credentials and
            // dumpability are in place: an ADD in the middle may be refused).
            while kmod::stat(child.id())?.0 != 'S' {
                thread::yield_now();
            }
            if add(file, child.id() as i32, 0, 0).is_ok() {
                added += 1;
            }
            child.kill()?;
            child.wait()?;
        }
    }
    println!("done {added}");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut [0u8])?;
    drop(files);
    Ok(())
}

pub fn sessions_never_started_pin_no_dead_processes(env: &Env) -> Result<()> {
    const SESSIONS: usize = 4;
    const ROUNDS: usize = 150;
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    open_to_all()?;
    let before = task_structs()?;
    let mut pinner = Profiled::spawn_mode(
        "hardening-child",
        &["pin-dead", &SESSIONS.to_string(), &ROUNDS.to_string()],
        Some(NOBODY),
    )?;
    let done = pinner.read_line()?;
    ensure!(
        done == format!("done {}", SESSIONS * ROUNDS),
        "nobody's adds: {done}"
    );
    // Dead members of sessions that never start are freed at the next join
    // and by the sampler within a second.
    thread::sleep(Duration::from_millis(1500));
    let held = task_structs()?.saturating_sub(before);
    crate::harness::figure(&format!(
        "dead processes: nobody added and killed {} processes in {SESSIONS} sessions it never \
         started; the kernel holds {held} more task_structs with the sessions open",
        SESSIONS * ROUNDS
    ));
    // The pinner itself and stragglers of the kernel's own, not hundreds.
    ensure!(
        held < 20,
        "{held} more task_structs while nobody's {SESSIONS} sessions stay open"
    );
    pinner.go()?;
    pinner.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child open-sessions <n>`: opens up to `n` sessions, says
/// "opened <k> <errno of the first refusal, or 0>", keeps them until a byte.
pub fn open_sessions(n: &str) -> Result<()> {
    let n: usize = n.parse()?;
    let mut files = Vec::new();
    let mut refused = 0;
    for _ in 0..n {
        match raw_open() {
            Ok(f) => files.push(f),
            Err(e) => {
                refused = errno_of(&e);
                break;
            }
        }
    }
    println!("opened {} {refused}", files.len());
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut [0u8])?;
    Ok(())
}

/// `hardening-child register-many <n>`: registers up to `n` children of its
/// own, says "registered <k> <errno of the first refusal, or 0>", keeps them
/// until a byte.
pub fn register_many(n: &str) -> Result<()> {
    let n: usize = n.parse()?;
    let mut children = Vec::new();
    let mut refused = 0;
    for _ in 0..n {
        let child = Command::new("/bin/busybox").args(["sleep", "60"]).spawn()?;
        let r = kmod::write_status(format!("R {}\n", child.id()).as_bytes());
        children.push(child);
        if let Err(e) = r {
            refused = e;
            break;
        }
    }
    let registered = children.len() - usize::from(refused != 0);
    println!("registered {registered} {refused}");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut [0u8])?;
    for mut child in children {
        child.kill()?;
        child.wait()?;
    }
    Ok(())
}

fn opened_and_refused(line: &str, what: &str) -> Result<(usize, i32)> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    match fields.as_slice() {
        [word, k, e] if *word == what => Ok((k.parse()?, e.parse()?)),
        _ => bail!("said {line:?}"),
    }
}

pub fn one_user_neither_exceeds_its_sessions_and_registrations_nor_takes_others(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["max_sessions=4", "max_registrations=8"])?;
    open_to_all()?;
    let mut sessions =
        Profiled::spawn_mode("hardening-child", &["open-sessions", "5"], Some(NOBODY))?;
    let (opened, refused) = opened_and_refused(&sessions.read_line()?, "opened")?;
    // Root still opens its own.
    let roots = raw_open().context("root opening a session while nobody has all of its")?;
    let mut regs = Profiled::spawn_mode("hardening-child", &["register-many", "9"], Some(NOBODY))?;
    let (registered, reg_refused) = opened_and_refused(&regs.read_line()?, "registered")?;
    let root_child = Profiled::spawn(&["faults", "1", "0", "stay"])?;
    let root_reg = kmod::write_status(format!("R {}\n", root_child.pid).as_bytes());
    crate::harness::figure(&format!(
        "limits: nobody opened {opened} sessions (then errno {refused}) and registered \
         {registered} processes (then errno {reg_refused}); root then opened a session and \
         registered: {root_reg:?}"
    ));
    ensure!(
        (opened, refused) == (4, libc::EMFILE),
        "nobody's sessions at max_sessions=4: {opened}, errno {refused}"
    );
    ensure!(
        (registered, reg_refused) == (8, libc::ENOSPC),
        "nobody's registrations at max_registrations=8: {registered}, errno {reg_refused}"
    );
    ensure!(root_reg.is_ok(), "root's registration: {root_reg:?}");
    drop((roots, root_child));
    sessions.go()?;
    sessions.reap()?;
    regs.go()?;
    regs.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child register-loop <ms>`: registers and unregisters a child of
/// its own for `ms`; says how many rounds.
pub fn register_loop(ms: &str) -> Result<()> {
    let until = Instant::now() + Duration::from_millis(ms.parse()?);
    let mut child = Command::new("/bin/busybox").args(["sleep", "60"]).spawn()?;
    let (r, u) = (format!("R {}\n", child.id()), format!("U {}\n", child.id()));
    let mut rounds = 0;
    while Instant::now() < until {
        kmod::write_status(r.as_bytes()).map_err(|e| anyhow::anyhow!("R: errno {e}"))?;
        kmod::write_status(u.as_bytes()).map_err(|e| anyhow::anyhow!("U: errno {e}"))?;
        rounds += 1;
    }
    child.kill()?;
    child.wait()?;
    println!("rounds {rounds}");
    Ok(())
}

/// CPU time of a task, ns (schedstat).
fn cpu_ns(pid: u32) -> Result<u64> {
    kmod::main_thread_cpu_ns(pid)
}

/// Root's bare-monitor session (every registration, with trees) while `loop_ms`
/// of another user's register/unregister loop runs or not: its sampler's CPU
/// over 2 s, and how long opening and closing another session took at most.
fn roots_session_under(loop_ms: Option<u64>) -> Result<(u64, Duration, Option<String>)> {
    let (dev, sampler) = opened_with_sampler(|| {
        let dev = Device::open()?;
        dev.follow(Follow::All, true)?;
        Ok(dev)
    })?;
    let area = dev.start(Mode::Relaxed)?;
    let mut roots = Profiled::spawn(&["churn"])?;
    kmod::register(roots.pid)?;
    roots.go()?;
    thread::sleep(Duration::from_millis(200));
    let mut looper = loop_ms
        .map(|ms| {
            Profiled::spawn_mode(
                "hardening-child",
                &["register-loop", &ms.to_string()],
                Some(NOBODY),
            )
        })
        .transpose()?;
    let before = cpu_ns(sampler)?;
    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    while started.elapsed() < Duration::from_secs(2) {
        let t = Instant::now();
        drop(raw_open()?);
        slowest = slowest.max(t.elapsed());
        thread::sleep(Duration::from_millis(20));
    }
    let cpu = cpu_ns(sampler)? - before;
    let rounds = looper.as_mut().map(|l| l.read_line()).transpose()?;
    if let Some(mut l) = looper {
        l.reap()?;
    }
    roots.go()?;
    roots.reap()?;
    drop((area, dev));
    Ok((cpu, slowest, rounds))
}

pub fn bench_another_users_registration_loop_and_roots_sampler(env: &Env) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    // Processes for every inheriting join's walk to visit.
    let idle = (0..100)
        .map(|_| Command::new("/bin/busybox").args(["sleep", "60"]).spawn())
        .collect::<std::io::Result<Vec<_>>>()?;
    let (quiet_cpu, quiet_open, _) = roots_session_under(None)?;
    let (busy_cpu, busy_open, rounds) = roots_session_under(Some(2000))?;
    for mut p in idle {
        p.kill()?;
        p.wait()?;
    }
    let ratio = busy_cpu as f64 / quiet_cpu.max(1) as f64;
    crate::harness::figure(&format!(
        "registration loop: root's sampler used {:.1} ms in 2 s alone, {:.1} ms with nobody's \
         loop ({}): {ratio:.2}x; the slowest open+close of a session {quiet_open:?} alone, \
         {busy_open:?} with the loop",
        quiet_cpu as f64 / 1e6,
        busy_cpu as f64 / 1e6,
        rounds.unwrap_or_default()
    ));
    ensure!(
        ratio <= 1.5,
        "root's sampler used {ratio:.2}x its CPU while nobody registered in a loop"
    );
    module.unload()?;
    mark.ensure_clean()
}
