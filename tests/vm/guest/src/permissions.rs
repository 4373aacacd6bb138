//! An unprivileged user (nobody, uid 65534) against the module: it may not
//! register or unregister anyone else's process, nor a process of its own
//! that is not dumpable, nor borrow root's authority through a descriptor;
//! it may open the device only if the node's mode allows (udev is not
//! running here: the test sets the mode kmod/99-pfprof.rules sets); and what
//! it is allowed to do, profile its own processes, works.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use shared_layout::abi;
use shared_layout::strict::StrictConsumer;
use shared_layout::Mode;

use crate::device::take_until_ended;
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::monitor::within;

const NOBODY: u32 = 65534;
const RULES: &str = include_str!("../../../../kmod/99-pfprof.rules");

/// The MODE="..." the udev rule gives /dev/pfprof.
fn rule_mode() -> Result<u32> {
    let line = RULES
        .lines()
        .find(|l| !l.trim_start().starts_with('#') && l.contains("KERNEL==\"pfprof\""))
        .context("no rule for pfprof in 99-pfprof.rules")?;
    let mode = line
        .split(',')
        .find_map(|f| f.trim().strip_prefix("MODE=\""))
        .and_then(|m| m.strip_suffix('"'))
        .context("the pfprof rule sets no MODE")?;
    Ok(u32::from_str_radix(mode, 8)?)
}

fn errno_line(r: std::result::Result<(), i32>) -> String {
    match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("errno {e}"),
    }
}

/// `hardening-child status <R|U> <pid|self>`: one command, says ok or its errno.
pub fn status_command(op: &str, pid: &str) -> Result<()> {
    let pid = match pid {
        "self" => std::process::id().to_string(),
        pid => pid.to_string(),
    };
    println!(
        "{}",
        errno_line(kmod::write_status(format!("{op} {pid}\n").as_bytes()))
    );
    Ok(())
}

/// `hardening-child open-device`: says ok or the errno of opening /dev/pfprof.
pub fn open_device() -> Result<()> {
    let r = OpenOptions::new()
        .read(true)
        .write(true)
        .open(abi::DEVICE_PATH)
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap_or(-1));
    println!("{}", errno_line(r));
    Ok(())
}

/// `hardening-child non-dumpable`: a process its own user may not read
/// (as after a setuid exec), waiting for a byte.
pub fn non_dumpable() -> Result<()> {
    ensure!(
        // SAFETY: plain prctl on ourselves.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0,
        "prctl"
    );
    println!("ready");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut [0u8; 1])?;
    Ok(())
}

/// `hardening-child non-dumpable-leaderless`: a process its own user may not
/// read, whose leader thread has exited (pthread_exit: no mm left to say it
/// is not dumpable) while a second thread waits for a byte.
pub fn non_dumpable_leaderless() -> Result<()> {
    ensure!(
        // SAFETY: plain prctl on ourselves.
        unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0) } == 0,
        "prctl"
    );
    std::thread::spawn(|| {
        println!("ready");
        let _ = std::io::stdout().flush();
        let _ = std::io::stdin().read_exact(&mut [0u8; 1]);
        std::process::exit(0);
    });
    // The leader thread alone exits (pthread_exit() would unwind through Rust's
    // main, which aborts): the other one ends the process.
    // SAFETY: exit(2) of this thread only; nothing of it is used after.
    unsafe { libc::syscall(libc::SYS_exit, 0) };
    unreachable!("exit(2) returned")
}

/// `hardening-child deputy <pid>` (started as root): opens the status file
/// as nobody, takes root back (the saved uid) and writes "R <pid>" through
/// that descriptor: a privileged writer on an unprivileged opener's file.
pub fn deputy(pid: &str) -> Result<()> {
    ensure!(
        // SAFETY: plain id syscalls on ourselves.
        unsafe { libc::setresgid(NOBODY, NOBODY, 0) } == 0
            // SAFETY: the same call for the other id.
            && unsafe { libc::setresuid(NOBODY, NOBODY, 0) } == 0,
        "dropping to nobody: {}",
        std::io::Error::last_os_error()
    );
    let mut file = OpenOptions::new().write(true).open(abi::PROC_PATH)?;
    ensure!(
        // SAFETY: as above; the saved uid 0 lets us back.
        unsafe { libc::setresuid(u32::MAX, 0, u32::MAX) } == 0
            // SAFETY: the same call for the other id.
            && unsafe { libc::setresgid(u32::MAX, 0, u32::MAX) } == 0,
        "taking root back: {}",
        std::io::Error::last_os_error()
    );
    let r = file
        .write(format!("R {pid}\n").as_bytes())
        .map(drop)
        .map_err(|e| e.raw_os_error().unwrap_or(-1));
    println!("{}", errno_line(r));
    Ok(())
}

/// `hardening-child own-session <pages>` (as nobody): a whole monitor
/// session over itself: attach, register itself, fault, unregister, take
/// every sample. Says "ok <minor in samples> <pages> <minflt during>".
pub fn own_session(pages: &str) -> Result<()> {
    let pages: usize = pages.parse()?;
    let dev = kmod::follow_registrations()?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    let mem = vec![0u8; pages * 4096 + 4096];
    let minflt = || {
        // SAFETY: rusage is plain old data, written by the kernel.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid pointer to a local.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
        ru.ru_minflt as u64
    };
    let before = minflt();
    kmod::write_status(format!("R {}\n", std::process::id()).as_bytes())
        .map_err(|e| anyhow::anyhow!("R self: errno {e}"))?;
    // vec![0; n] is an mmap'ed calloc: fresh zero pages, one fault per page
    // written, but for the first, where malloc keeps its chunk header.
    let mut mem = mem;
    for i in 1..=pages {
        mem[i * 4096] = 1;
    }
    std::hint::black_box(&mem);
    kmod::write_status(format!("U {}\n", std::process::id()).as_bytes())
        .map_err(|e| anyhow::anyhow!("U self: errno {e}"))?;
    let during = minflt() - before;
    let mut samples = Vec::new();
    take_until_ended(&mut consumer, &mut samples)?;
    let got: u64 = samples.iter().map(|s| s.minor).sum();
    println!("ok {got} {pages} {during}");
    Ok(())
}

/// Runs `hardening-child <args>` as nobody (or root) and returns what it said.
fn ask(uid: Option<u32>, args: &[&str]) -> Result<String> {
    let mut p = Profiled::spawn_mode("hardening-child", args, uid)?;
    let said = p
        .read_line()
        .with_context(|| format!("{args:?} said nothing"))?;
    let reaped = p.reap()?;
    ensure!(reaped.status == 0, "{args:?} failed: {:#x}", reaped.status);
    Ok(said)
}

/// Whether this kernel judges a task by the dumpability it saved at its
/// exit_mm() (6.1's and 6.12's stable updates; 7.x keeps it per task), as the
/// status file must then too. Asked of /proc itself: nobody reading the exe
/// link of a leaderless, non-dumpable process of its own is refused (EACCES)
/// where the kernel does, and finds no mm (ENOENT) where it does not.
fn kernel_saves_dumpability() -> Result<bool> {
    let mut probe = Profiled::spawn_mode(
        "hardening-child",
        &["non-dumpable-leaderless"],
        Some(NOBODY),
    )?;
    ensure!(probe.read_line()? == "ready");
    let out = Command::new("/bin/busybox")
        .uid(NOBODY)
        .gid(NOBODY)
        .args(["ls", "-l", &format!("/proc/{}/exe", probe.pid)])
        .output()?;
    probe.go()?;
    probe.reap()?;
    Ok(String::from_utf8_lossy(&out.stderr).contains("ermission denied"))
}

fn expect(uid: Option<u32>, args: &[&str], want: &str) -> Result<()> {
    let said = ask(uid, args)?;
    ensure!(
        said == want,
        "{args:?} as {uid:?}: expected {want:?}, got {said:?}"
    );
    Ok(())
}

pub fn nobody_may_profile_its_own_processes_only_and_open_the_device_as_udev_allows(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=5"])?;
    let eperm = format!("errno {}", libc::EPERM);
    let eacces = format!("errno {}", libc::EACCES);

    // Root's process, registered by root: nobody can neither add nor remove it.
    let mut roots = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    let root_pid = roots.pid.to_string();
    expect(Some(NOBODY), &["status", "R", &root_pid], &eperm)?;
    kmod::register(roots.pid)?;
    expect(Some(NOBODY), &["status", "U", &root_pid], &eperm)?;
    // Nor through a descriptor it opened and root writes to.
    kmod::unregister(roots.pid)?;
    expect(None, &["deputy", &root_pid], &eperm)?;
    ensure!(
        kmod::registered()?.is_empty(),
        "root's process got registered"
    );

    // Its own processes: yes, unless one is not dumpable.
    let mut own = Profiled::spawn_raw(&["faults", "0", "0", "stay"], Some(NOBODY))?;
    ensure!(own.read_line()? == "ready");
    let own_pid = own.pid.to_string();
    expect(Some(NOBODY), &["status", "R", &own_pid], "ok")?;
    expect(
        Some(NOBODY),
        &["status", "R", &own_pid],
        &format!("errno {}", libc::EEXIST),
    )?;
    expect(Some(NOBODY), &["status", "U", &own_pid], "ok")?;
    let mut sealed = Profiled::spawn_mode("hardening-child", &["non-dumpable"], Some(NOBODY))?;
    ensure!(sealed.read_line()? == "ready");
    expect(
        Some(NOBODY),
        &["status", "R", &sealed.pid.to_string()],
        &eperm,
    )?;
    // The same once its leader thread has exited, as the kernel judges it (the
    // dumpability saved at its exit_mm(), where the kernel keeps one).
    let mut leaderless = Profiled::spawn_mode(
        "hardening-child",
        &["non-dumpable-leaderless"],
        Some(NOBODY),
    )?;
    ensure!(leaderless.read_line()? == "ready");
    let saved = kernel_saves_dumpability()?;
    let leaderless_pid = leaderless.pid.to_string();
    expect(
        Some(NOBODY),
        &["status", "R", &leaderless_pid],
        if saved { &eperm } else { "ok" },
    )?;
    if !saved {
        expect(Some(NOBODY), &["status", "U", &leaderless_pid], "ok")?;
    }
    crate::harness::figure(&format!(
        "permissions: a non-dumpable process whose leader exited is {} by /proc and by \
         the status file alike",
        if saved { "refused" } else { "readable" }
    ));
    leaderless.go()?;
    leaderless.reap()?;

    // The device: as the node's mode says. devtmpfs made it root's, 0600.
    let node = fs::metadata(abi::DEVICE_PATH)?;
    ensure!(
        node.uid() == 0 && node.mode() & 0o777 == 0o600,
        "/dev/pfprof is {:o} owned by {}, expected 0600 root's before udev",
        node.mode() & 0o777,
        node.uid()
    );
    expect(Some(NOBODY), &["open-device"], &eacces)?;
    let mode = rule_mode()?;
    fs::set_permissions(abi::DEVICE_PATH, fs::Permissions::from_mode(mode))?;
    let said = ask(Some(NOBODY), &["own-session", "500"])?;
    let f: Vec<&str> = said.split(' ').collect();
    ensure!(f.len() == 4 && f[0] == "ok", "nobody's own session: {said}");
    let (got, pages, during): (u64, u64, u64) = (f[1].parse()?, f[2].parse()?, f[3].parse()?);
    ensure!(
        got >= pages && got <= during,
        "nobody's samples hold {got} minor faults for {pages} pages touched, {during} taken"
    );
    crate::harness::figure(&format!(
        "permissions: nobody refused 5 ways (R, U, via root writing its descriptor, \
         non-dumpable, device at 0600); at the rule's mode {mode:o} it profiled itself: \
         {got} minor faults sampled for {pages} pages"
    ));

    for p in [&mut roots, &mut own, &mut sealed] {
        p.go()?;
        p.reap()?;
    }
    module.unload()?;
    mark.ensure_clean()
}

/// `/bin/monitor ARGS...` as nobody: its exit code and standard error, within 10 s (a
/// monitor the module did not refuse would stream on).
fn monitor_as_nobody(args: &[&str]) -> Result<(Option<i32>, String)> {
    let monitor = Command::new("/bin/monitor")
        .uid(NOBODY)
        .gid(NOBODY)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("running /bin/monitor as nobody")?;
    let out = within(monitor, Duration::from_secs(10))
        .with_context(|| format!("monitor {args:?} as nobody"))?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// What the monitor, run by nobody, says when the module refuses it, each refusal the
/// module's own (errno) and each message the user's next step.
pub fn the_monitor_tells_a_user_the_module_refuses_what_to_do(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["max_sessions=1"])?;
    let refused = |args: &[&str], said: &[&str]| -> Result<()> {
        let (code, err) = monitor_as_nobody(args)?;
        ensure!(
            code == Some(2),
            "monitor {args:?} as nobody exited {code:?}: {err}"
        );
        for line in said {
            ensure!(
                err.contains(line),
                "monitor {args:?} as nobody: no {line:?} in {err}"
            );
        }
        Ok(())
    };
    let no_module = "monitor: --backend procfs works without the module";
    // EACCES: the node as devtmpfs made it, 0600, before udev's rule.
    refused(
        &["--backend", "kernel"],
        &[
            "monitor: error: cannot use the pfprof module: permission denied opening \
             /dev/pfprof: install the udev rule /usr/share/pfprof/udev/99-pfprof.rules \
             (kmod/99-pfprof.rules in the source) or run as root",
            no_module,
        ],
    )?;
    fs::set_permissions(abi::DEVICE_PATH, fs::Permissions::from_mode(rule_mode()?))?;
    // EPERM: root's process.
    let mut roots = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    let pid = roots.pid.to_string();
    refused(
        &["--backend", "kernel", "--pid", &pid],
        &[
            &format!(
                "monitor: error: cannot use the pfprof module: not allowed to profile process \
                 {pid}: it belongs to another user (profile it as that user or as root)"
            ),
            &format!("monitor: check the pid with `ps -p {pid}` and that it is yours"),
        ],
    )?;
    // EMFILE: nobody's one session (max_sessions=1) is open already.
    let mut session =
        Profiled::spawn_mode("hardening-child", &["open-sessions", "1"], Some(NOBODY))?;
    let opened = session.read_line()?;
    ensure!(opened == "opened 1 0", "nobody's first session: {opened}");
    refused(
        &["--backend", "kernel"],
        &[
            "monitor: error: cannot use the pfprof module: too many sessions open on \
             /dev/pfprof: close another monitor of this user, or raise the module's \
             max_sessions",
            no_module,
        ],
    )?;
    session.go()?;
    session.reap()?;
    roots.go()?;
    roots.reap()?;
    module.unload()
}
