//! What a user's listing and sessions see: never another user's processes, and not
//! its own once they exec a setuid program it may not read. From the hostile review
//! of kmod/ (docs/reliability.md, "A hostile local user").

use std::fs;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::device::Device;
use shared_layout::strict::StrictConsumer;
use shared_layout::Mode;

use crate::device::take_until_ended;
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::monitor::{csv_minor, finished, monitor_run, rusage_minor};
use crate::users::{nobodys_dir, open_to_all, register_as_nobody, setuid_copy, NOBODY};

/// `hardening-child listed <pid>`: whether the caller's listing shows `pid`.
pub fn listed(pid: &str) -> Result<()> {
    let pid: u32 = pid.parse()?;
    println!("listed {}", kmod::registered()?.contains(&pid));
    Ok(())
}

fn listed_as_nobody(pid: u32) -> Result<bool> {
    let out = Command::new(std::env::current_exe()?)
        .uid(NOBODY)
        .gid(NOBODY)
        .args(["hardening-child", "listed", &pid.to_string()])
        .output()?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "listed true" => Ok(true),
        "listed false" => Ok(false),
        said => bail!("listing as nobody: {said:?} {out:?}"),
    }
}

/// The effective uid of process `pid`, from its status.
fn euid(pid: u32) -> Result<u32> {
    let text = fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = text
        .lines()
        .find(|l| l.starts_with("Uid:"))
        .context("no Uid line")?;
    Ok(line
        .split_whitespace()
        .nth(2)
        .context("short Uid line")?
        .parse()?)
}

fn wait_for_euid(pid: u32, uid: u32) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while euid(pid)? != uid {
        ensure!(
            Instant::now() < deadline,
            "process {pid} never became uid {uid}"
        );
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// `hardening-child follow-all <ms>` (as nobody): a session following every
/// registration it may read, started, ended after `ms`; says the minor
/// faults it was given.
pub fn follow_all(ms: &str) -> Result<()> {
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());
    thread::sleep(Duration::from_millis(ms.parse()?));
    dev.ender().end()?;
    let mut samples = Vec::new();
    take_until_ended(&mut consumer, &mut samples)?;
    println!(
        "minor {} withdrawn {}",
        samples.iter().map(|s| s.minor).sum::<u64>(),
        area.counters().withdrawn
    );
    Ok(())
}

fn follow_all_as(uid: u32, ms: u64) -> Result<Profiled> {
    Profiled::spawn_mode(
        "hardening-child",
        &["follow-all", &ms.to_string()],
        Some(uid),
    )
}

/// What a `follow-all` session got: its minor faults, and how many processes it took in
/// and then withdrew (a process its opener may not read is never to be taken in at all).
fn said_counts(p: &mut Profiled) -> Result<(u64, u32)> {
    let line = p.read_line()?;
    let fields: Vec<&str> = line.split(' ').collect();
    match fields.as_slice() {
        ["minor", minor, "withdrawn", withdrawn] => Ok((minor.parse()?, withdrawn.parse()?)),
        _ => bail!("said {line:?}"),
    }
}

pub fn a_registration_answers_to_its_current_leader_after_a_thread_execs_setuid(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    let setuid = setuid_copy()?;
    // Nobody's own process; a second thread of it will exec the setuid program,
    // which touches 500 pages and stays 3 s.
    let mut p = Profiled::spawn_raw(
        &["thread-exec", setuid, "child", "touch", "500", "3000"],
        Some(NOBODY),
    )?;
    ensure!(p.read_line()? == "ready");
    register_as_nobody(p.pid)?;
    let before = listed_as_nobody(p.pid)?;
    p.go()?;
    ensure!(p.read_line()? == "exec");
    wait_for_euid(p.pid, 0)?;
    let after = listed_as_nobody(p.pid)?;
    // A session nobody opens now must not take it either.
    let mut late = follow_all_as(NOBODY, 1000)?;
    let (late_minor, late_withdrawn) = said_counts(&mut late)?;
    late.reap()?;
    crate::harness::figure(&format!(
        "exec: nobody's registered process, once a thread of it exec'd a setuid program: \
         listed to nobody {before} -> {after}; a session nobody opened then got {late_minor} \
         minor faults"
    ));
    ensure!(before, "nobody's listing never showed its own registration");
    ensure!(
        !after,
        "nobody's listing still shows the process after its setuid exec"
    );
    ensure!(
        (late_minor, late_withdrawn) == (0, 0),
        "a session nobody opened after the exec took it in ({late_withdrawn} withdrawn) and \
         {late_minor} of its minor faults"
    );
    p.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

/// The note the monitor's summary gives for withdrawn processes.
fn says_withdrawn(stderr: &str) -> bool {
    stderr.contains("stopped being counted when")
}

pub fn a_process_stops_being_counted_when_it_execs_a_setuid_program(env: &Env) -> Result<()> {
    const PAGES: u64 = 20_000;
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    let setuid = setuid_copy()?;
    let dir = nobodys_dir()?;
    let touch = ["child", "touch", "20000", "300"];

    // A member: nobody profiles its own process, which touches 1000 pages and
    // then execs the setuid program.
    let mut p = Profiled::spawn_raw(
        &[&["exec-after-go", "1000", setuid][..], &touch].concat(),
        Some(NOBODY),
    )?;
    ensure!(p.read_line()? == "ready");
    let csv = format!("{dir}/setuid-member.csv");
    let monitor = Command::new("/bin/monitor")
        .uid(NOBODY)
        .gid(NOBODY)
        .args([
            "--backend",
            "kernel",
            "--pid",
            &p.pid.to_string(),
            "-o",
            &csv,
        ])
        .stderr(Stdio::piped())
        .spawn()?;
    // The monitor's session has it before it runs.
    thread::sleep(Duration::from_millis(500));
    p.go()?;
    ensure!(p.read_line()? == "exec");
    let reaped = p.reap()?;
    let stderr = finished("the monitor of the member", monitor.wait_with_output()?)?;
    let (member_sum, _) = csv_minor(&csv)?;

    // A tree: nobody runs a shell that runs the setuid program.
    let csv = format!("{dir}/setuid-tree.csv");
    // "; true": the shell forks it rather than exec'ing it in its own place.
    let script = format!("{setuid} {}; true", touch.join(" "));
    let cmd = ["sh", "-c", &script];
    let run = monitor_run(Some(NOBODY), "kernel", "strict", &csv, &[], &cmd)?;
    let tree_stderr = finished("the monitor of the shell", run.wait_with_output()?)?;
    let (tree_sum, _) = csv_minor(&csv)?;
    let rusage = rusage_minor(&tree_stderr)?;
    crate::harness::figure(&format!(
        "setuid exec: member: {member_sum} minor faults sampled (its whole life {} with the \
         setuid program's {PAGES} pages); shell: {tree_sum} sampled, its rusage {rusage}",
        reaped.minflt
    ));
    ensure!(
        reaped.minflt >= PAGES && rusage >= PAGES,
        "the setuid program did not run: {} and {rusage} minor faults",
        reaped.minflt
    );
    ensure!(
        member_sum < PAGES / 4 && says_withdrawn(&stderr),
        "the member's samples hold {member_sum} minor faults after its setuid exec: {stderr}"
    );
    ensure!(
        tree_sum < PAGES / 4 && says_withdrawn(&tree_stderr),
        "the shell's samples hold {tree_sum} minor faults of its setuid child: {tree_stderr}"
    );
    fs::remove_dir_all(dir)?;
    module.unload()?;
    mark.ensure_clean()
}

pub fn nobody_following_everything_never_gets_roots_faults_and_root_gets_all_its_own(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    // Nobody follows every registration it may read, for 1.5 s; root's
    // session takes root's process alone.
    let mut nobodys = follow_all_as(NOBODY, 1500)?;
    thread::sleep(Duration::from_millis(200));
    let mut roots = Profiled::spawn(&["faults", "3000", "1", "exit"])?;
    let before = roots.wait_asleep()?;
    let dev = Device::open()?;
    dev.add(roots.pid, false, false)?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    kmod::register(roots.pid)?;
    roots.go()?;
    let reaped = roots.reap()?;
    let mut samples = Vec::new();
    take_until_ended(&mut consumer, &mut samples)?;
    let root_sum: u64 = samples.iter().map(|s| s.minor).sum();
    let (nobody_sum, nobody_withdrawn) = said_counts(&mut nobodys)?;
    nobodys.reap()?;
    crate::harness::figure(&format!(
        "isolation: root's process took {} minor faults since it joined; root's session got \
         {root_sum}, nobody's (following everything) {nobody_sum}",
        reaped.minflt - before
    ));
    ensure!(
        nobody_sum == 0,
        "nobody's session got {nobody_sum} of root's faults"
    );
    // Not even taken in: only then withdrawn at a collection.
    ensure!(
        nobody_withdrawn == 0,
        "nobody's session took root's process in ({nobody_withdrawn} withdrawn)"
    );
    ensure!(
        root_sum == reaped.minflt - before,
        "root's session got {root_sum}, its process took {}",
        reaped.minflt - before
    );
    drop((consumer, dev));
    module.unload()?;
    mark.ensure_clean()
}
