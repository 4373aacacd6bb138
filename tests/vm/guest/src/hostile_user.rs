//! A hostile local user against the module, and the processes it profiles
//! exec'ing what it may not read: the defects a review of kmod/ found, each
//! reproduced here and kept fixed (docs/reliability.md, "A hostile local
//! user").

use std::fs;
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::device::{Device, Follow};
use shared_layout::strict::StrictConsumer;
use shared_layout::{abi, Mode};

use crate::device::{add, opened_with_sampler, raw_open, set_mode, take_until_ended, Mapping};
use crate::harness::{Env, Skipped};
use crate::klog::{self, task_structs};
use crate::kmod::{self, Profiled};
use crate::monitor::{csv_minor, finished, monitor_run, rusage_minor};
use crate::users::{nobodys_dir, open_to_all, register_as_nobody, setuid_copy, NOBODY};

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

pub fn a_descendant_nobody_waits_for_keeps_its_faults_and_the_trees_later_ones_count(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let report = "/tmp/autoreaped-child-minflt";
    let csv = "/tmp/autoreap.csv";
    let guest = std::env::current_exe()?;
    let guest = guest.to_str().context("guest path")?;
    let cmd = [guest, "child", "autoreap-tree", "30000", "30000", report];
    let run = monitor_run(None, "kernel", "strict", csv, &[], &cmd)?;
    let stderr = finished(
        "monitor run of the autoreaping parent",
        run.wait_with_output()?,
    )?;
    let (sum, rows) = csv_minor(csv)?;
    let parent = rusage_minor(&stderr)?;
    let child: u64 = fs::read_to_string(report)?.trim().parse()?;
    // The child's own few faults after it reported (the report's write, its exit)
    // count too, and may fall before or after its last look.
    let expected = parent + child;
    crate::harness::figure(&format!(
        "departed: the parent's rusage {parent} and its autoreaped child's {child} minor \
         faults; the samples hold {sum} in {} rows",
        rows.len()
    ));
    ensure!(
        sum.abs_diff(expected) <= 64,
        "the samples hold {sum} minor faults; the parent took {parent}, its child {child}"
    );
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child exec-fail-walk <setuid program>` (as nobody): a session
/// of its own counting its tree, in which a child execs the setuid program
/// with its `n`th allocation from then on failing, for n = 1, 2, ... until
/// the exec, the module's probe of it and the program's start all pass; says
/// "exec <n>", how many allocations failed in turn.
pub fn exec_fail_walk(setuid: &str) -> Result<()> {
    use std::ffi::CString;
    let dev = Device::open()?;
    dev.add(std::process::id(), true, false)?;
    let path = CString::new(setuid)?;
    let args = [
        path.clone(),
        CString::new("child")?,
        CString::new("fail-nth-left")?,
    ];
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let fail_nth = CString::new("/proc/thread-self/fail-nth")?;
    for n in 1..20_000u32 {
        let value = CString::new(n.to_string())?;
        // SAFETY: fork(2) in this single-threaded process; the child only makes
        // async-signal-safe calls on data prepared before it.
        let pid = unsafe { libc::fork() };
        ensure!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: open, write, execv and _exit with pointers to live C strings.
            unsafe {
                let fd = libc::open(fail_nth.as_ptr(), libc::O_WRONLY);
                let len = value.as_bytes().len();
                if fd < 0 || libc::write(fd, value.as_ptr().cast(), len) != len as isize {
                    libc::_exit(5);
                }
                libc::execv(path.as_ptr(), argv.as_ptr());
                libc::_exit(4);
            }
        }
        let mut status = 0;
        // SAFETY: waitpid(2) for the child just forked, into a local.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        ensure!(
            waited == pid,
            "waitpid: {}",
            std::io::Error::last_os_error()
        );
        ensure!(
            !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 5),
            "the child could not arm fail-nth"
        );
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            println!("exec {}", n - 1);
            return Ok(());
        }
    }
    bail!("an exec still failed after 20000 allocations")
}

/// `/proc/thread-self/fail-nth`, held open: the `n`th fault-injection point
/// this thread reaches from now on fails. Opened once, so that neither setting
/// it nor asking it allocates anything (an open would take a fault point).
struct FailNth(fs::File);

impl FailNth {
    fn open() -> Result<FailNth> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/thread-self/fail-nth")
            .context("opening fail-nth")?;
        Ok(FailNth(file))
    }

    fn set(&self, n: u32) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.0
            .write_at(n.to_string().as_bytes(), 0)
            .context("writing fail-nth")?;
        Ok(())
    }

    /// Whether the failure set was injected (then the file reads 0).
    fn injected(&self) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 16];
        let n = self.0.read_at(&mut buf, 0).context("reading fail-nth")?;
        Ok(std::str::from_utf8(&buf[..n])?.trim() == "0")
    }
}

/// Runs `op` with its 1st, 2nd, ... fault-injection point failing, until a
/// run goes through without reaching the one set: every allocation it makes
/// fails once. `op` must succeed or fail cleanly each time. Returns how many
/// points it went through.
fn fail_each_allocation(
    fail: &FailNth,
    what: &str,
    mut op: impl FnMut() -> Result<()>,
) -> Result<u32> {
    for n in 1..10_000 {
        fail.set(n)?;
        let result = op();
        let injected = fail.injected()?;
        fail.set(0)?;
        result.with_context(|| format!("{what} with its allocation {n} failing"))?;
        if !injected {
            return Ok(n - 1);
        }
    }
    bail!("{what}: still failing after 10000 allocations")
}

/// Debugfs knobs of a fault-injection capability.
fn fault_knob(capability: &str, knob: &str, value: &str) -> Result<()> {
    let path = format!("/sys/kernel/debug/{capability}/{knob}");
    fs::write(&path, value).with_context(|| format!("writing {path}"))
}

/// Either outcome is clean; anything but ENOMEM (or the op's own refusals) is not.
fn clean(r: std::result::Result<(), i32>, allowed: &[i32]) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e == libc::ENOMEM || allowed.contains(&e) => Ok(()),
        Err(e) => bail!("errno {e}"),
    }
}

pub fn every_allocation_of_the_module_fails_cleanly_under_fault_injection(env: &Env) -> Result<()> {
    if !std::path::Path::new("/proc/thread-self/fail-nth").exists() {
        return Err(Skipped("this kernel has no fault injection (fail-nth)".into()).into());
    }
    // Sleeping allocations too (the module's are), pages of every order.
    for capability in ["failslab", "fail_page_alloc"] {
        fault_knob(capability, "ignore-gfp-wait", "N")?;
        fault_knob(capability, "verbose", "0")?;
    }
    fault_knob("fail_page_alloc", "min-order", "0")?;
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10", "buffer_pages=4"])?;
    // A process with a child: ADD with a tree walks the process list.
    let mut parent = Command::new("/bin/busybox")
        .args(["sh", "-c", "sleep 30 & wait"])
        .spawn()?;
    let pid = parent.id();
    let registered = Profiled::spawn(&["faults", "16", "0", "stay"])?;
    kmod::register(registered.pid)?;
    let fail = FailNth::open()?;
    let mut points = Vec::new();

    points.push((
        "open",
        fail_each_allocation(&fail, "open", || {
            clean(raw_open().map(drop).map_err(|e| errno_of(&e)), &[])
        })?,
    ));
    let file = raw_open()?;
    points.push((
        "mmap",
        fail_each_allocation(&fail, "mmap", || {
            clean(Mapping::new(&file).map(drop).map_err(|e| errno_of(&e)), &[])
        })?,
    ));
    points.push((
        "ADD with a tree",
        fail_each_allocation(&fail, "ADD", || {
            clean(
                add(&file, pid as i32, abi::TARGET_INHERIT, 0),
                &[libc::EEXIST],
            )
        })?,
    ));
    points.push((
        "FOLLOW",
        fail_each_allocation(&fail, "FOLLOW", || {
            clean(
                crate::device::follow(
                    &file,
                    abi::Follow {
                        scope: abi::FOLLOW_ALL,
                        ..abi::Follow::default()
                    },
                ),
                &[],
            )
        })?,
    ));
    points.push((
        "SET_MODE",
        fail_each_allocation(&fail, "SET_MODE", || {
            clean(set_mode(&file, Mode::Strict.as_raw()), &[])
        })?,
    ));
    let other = Profiled::spawn(&["faults", "16", "0", "stay"])?;
    points.push((
        "R",
        fail_each_allocation(&fail, "R", || {
            let r = kmod::write_status(format!("R {}\n", other.pid).as_bytes());
            clean(r, &[libc::EEXIST])
        })?,
    ));
    points.push((
        "U",
        fail_each_allocation(&fail, "U", || {
            let r = kmod::write_status(format!("U {}\n", other.pid).as_bytes());
            clean(r, &[libc::ENOENT])
        })?,
    ));
    // An exec that hides a process of a tree from its session (nobody's): the
    // exec, the module's record of it, the program's start.
    open_to_all()?;
    let setuid = setuid_copy()?;
    let mut walker =
        Profiled::spawn_mode("hardening-child", &["exec-fail-walk", setuid], Some(NOBODY))?;
    let said = walker.read_line()?;
    walker.reap()?;
    let execs: u32 = said
        .strip_prefix("exec ")
        .with_context(|| format!("the exec walk said {said:?}"))?
        .parse()?;
    points.push(("an exec hidden from its session", execs));
    // The session still works: it samples its tree.
    let map = Mapping::new(&file)?;
    drop((map, file));
    parent.kill()?;
    parent.wait()?;
    drop((registered, other));
    crate::harness::figure(&format!(
        "fault injection: every allocation failed once in turn: {}",
        points
            .iter()
            .map(|(what, n)| format!("{what} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    klog::ensure_module_slab_objects(0, "registrations or sessions after the walk")?;
    module.unload()?;
    mark.ensure_clean()
}

fn errno_of(e: &anyhow::Error) -> i32 {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(-1)
}

pub fn the_ring_can_be_neither_pinned_nor_inherited_and_maps_read_only(env: &Env) -> Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    let file = raw_open()?;
    let map = Mapping::new(&file)?;
    let base = map.word64(0).as_ptr().cast::<libc::c_void>();

    // vmsplice() pins pages (get_user_pages()): refused.
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe(2) to fill.
    ensure!(unsafe { libc::pipe(fds.as_mut_ptr()) } == 0, "pipe");
    // SAFETY: pipe(2) just gave us both descriptors; each is owned once, here.
    let (rx, tx) = unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) };
    let iov = libc::iovec {
        iov_base: base,
        iov_len: abi::PAGE_SIZE as usize,
    };
    // SAFETY: the iovec covers a page of our live mapping.
    let spliced = unsafe { libc::vmsplice(tx.as_raw_fd(), &iov, 1, 0) };
    let splice_errno = std::io::Error::last_os_error().raw_os_error();
    drop((rx, tx));
    // MADV_DOFORK would let children inherit it: refused.
    // SAFETY: advice on our own live mapping.
    let dofork = unsafe { libc::madvise(base, map.size(), libc::MADV_DOFORK) };
    let dofork_errno = std::io::Error::last_os_error().raw_os_error();
    drop(map);
    // A read-only shared mapping of a read-only open is a shared mapping.
    let ro = fs::OpenOptions::new().read(true).open(abi::DEVICE_PATH)?;
    let size = abi::area_size(abi::BUFFER_PAGES_DEFAULT.into());
    // SAFETY: a fresh shared read-only mapping of the device, unmapped below.
    let ro_map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            ro.as_raw_fd(),
            0,
        )
    };
    let ro_errno = std::io::Error::last_os_error().raw_os_error();
    if ro_map != libc::MAP_FAILED {
        // SAFETY: we mapped exactly this range.
        unsafe { libc::munmap(ro_map, size as usize) };
    }
    drop((file, ro));
    crate::harness::figure(&format!(
        "ring: vmsplice {spliced} ({splice_errno:?}), MADV_DOFORK {dofork} ({dofork_errno:?}), \
         read-only shared mapping {}",
        if ro_map == libc::MAP_FAILED {
            format!("refused ({ro_errno:?})")
        } else {
            "mapped".into()
        }
    ));
    ensure!(
        spliced < 0 && splice_errno == Some(libc::EFAULT),
        "vmsplice of the ring: {spliced} ({splice_errno:?})"
    );
    ensure!(
        dofork < 0 && dofork_errno == Some(libc::EINVAL),
        "MADV_DOFORK on the ring: {dofork} ({dofork_errno:?})"
    );
    ensure!(
        ro_map != libc::MAP_FAILED,
        "a read-only shared mapping: {ro_errno:?}"
    );
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

/// A bare monitor (every registration, with trees) and a child registered by
/// its parent, which then lets it touch 3000 pages, stay 200 ms and exit,
/// and reaps it: the monitor started before, with, and after the
/// registration. Each CSV holds exactly the child's faults since it was
/// registered, and the monitor ends once it is gone.
pub fn a_bare_monitor_gets_a_registered_childs_faults_however_their_starts_fall(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=50"])?;
    let mut said = Vec::new();
    for (mode, lead_ms) in [
        ("strict", 1000i64),
        ("relaxed", 1000),
        ("strict", 0),
        ("relaxed", 0),
        ("strict", -100),
        ("relaxed", -100),
    ] {
        let csv = format!("/tmp/bare-{mode}-{lead_ms}.csv");
        let mut child = Profiled::spawn(&["faults", "3000", "0", "exit"])?;
        let start_monitor = || {
            Command::new("/bin/monitor")
                .args([
                    "--backend",
                    "kernel",
                    "--mode",
                    mode,
                    "--interval",
                    "100ms",
                    "-o",
                    &csv,
                ])
                .stderr(Stdio::piped())
                .spawn()
                .context("starting a bare monitor")
        };
        let mut monitor = None;
        if lead_ms >= 0 {
            monitor = Some(start_monitor()?);
            thread::sleep(Duration::from_millis(lead_ms as u64));
        }
        let base = child.wait_asleep()?;
        kmod::register(child.pid)?;
        if lead_ms < 0 {
            monitor = Some(start_monitor()?);
        }
        child.go()?;
        ensure!(child.read_line()? == "done");
        thread::sleep(Duration::from_millis(200));
        let reaped = child.reap()?;
        let monitor = monitor.context("no monitor")?;
        let stderr = finished(
            &format!("the bare monitor ({mode}, {lead_ms} ms)"),
            monitor.wait_with_output()?,
        )?;
        let (sum, rows) = csv_minor(&csv)?;
        let expected = reaped.minflt - base;
        said.push(format!(
            "{mode} {lead_ms:+} ms: {sum} of {expected} in {} rows",
            rows.len()
        ));
        ensure!(
            sum == expected,
            "bare monitor {mode}, started {lead_ms} ms before the registration: {sum} minor \
             faults sampled in {} rows, the child took {expected} since it was registered: {stderr}",
            rows.len()
        );
    }
    crate::harness::figure(&format!("bare monitor: {}", said.join("; ")));
    module.unload()?;
    mark.ensure_clean()
}
