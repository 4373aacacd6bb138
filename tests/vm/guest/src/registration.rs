//! /proc/pfprof/status: registering, listing, unregistering, refusing.

use std::sync::mpsc;
use std::thread;

use anyhow::{ensure, Context, Result};

use crate::harness::Env;
use crate::kmod::{self, Profiled};

/// A pid nobody has: beyond pid_max.
const NO_SUCH_PID: u32 = 4_194_304 + 1;
/// The unprivileged user the permission check runs as.
const NOBODY: u32 = 65534;

pub fn registration_lists_and_unregisters_a_process(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &[])?;
    let mut a = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    let mut b = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(a.pid)?;
    kmod::register(b.pid)?;
    ensure!(
        kmod::registered()? == [a.pid, b.pid],
        "list after R: {:?}",
        kmod::registered()?
    );
    kmod::unregister(a.pid)?;
    ensure!(
        kmod::registered()? == [b.pid],
        "list after U: {:?}",
        kmod::registered()?
    );
    // Without the trailing newline too.
    kmod::write_status(format!("U {}", b.pid).as_bytes())
        .map_err(|e| anyhow::anyhow!("U without newline: errno {e}"))?;
    ensure!(
        kmod::registered()?.is_empty(),
        "list after both U: {:?}",
        kmod::registered()?
    );
    kmod::register(a.pid).context("registering again after U")?;
    for p in [&mut a, &mut b] {
        p.go()?;
        p.reap()?;
    }
    // Reaped: dropped from the list by the sampler (period 50 ms).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !kmod::registered()?.is_empty() {
        ensure!(
            std::time::Instant::now() < deadline,
            "an exited process stays listed"
        );
        thread::sleep(std::time::Duration::from_millis(20));
    }
    module.unload()
}

pub fn every_malformed_or_refused_command_gets_its_errno_and_the_module_lives_on(
    env: &Env,
) -> Result<()> {
    let module = kmod::insmod(env, &[])?;
    let mut target = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    let pid = target.pid;
    let long = format!("R {pid}{}", " ".repeat(64));
    let cases: Vec<(Vec<u8>, i32)> = vec![
        (b"X 1\n".to_vec(), libc::EINVAL),
        (b"R\n".to_vec(), libc::EINVAL),
        (b"R \n".to_vec(), libc::EINVAL),
        (b"R1\n".to_vec(), libc::EINVAL),
        (format!("R  {pid}\n").into_bytes(), libc::EINVAL),
        (format!("R {pid}x\n").into_bytes(), libc::EINVAL),
        (format!("R {pid} \n").into_bytes(), libc::EINVAL),
        (format!("R +{pid}\n").into_bytes(), libc::EINVAL),
        (format!("R {pid}\n\n").into_bytes(), libc::EINVAL),
        (format!("R {pid}\nU {pid}\n").into_bytes(), libc::EINVAL),
        (format!("R {pid}\0").into_bytes(), libc::EINVAL),
        (format!("r {pid}\n").into_bytes(), libc::EINVAL),
        (b"R -1\n".to_vec(), libc::EINVAL),
        (b"R 0\n".to_vec(), libc::EINVAL),
        (b"R 2147483648\n".to_vec(), libc::EINVAL),
        (b"R 99999999999999999999\n".to_vec(), libc::EINVAL),
        (long.into_bytes(), libc::EINVAL),
        (vec![0xff, 0x00, 0x52, 0x20, 0x31], libc::EINVAL),
        (format!("R {NO_SUCH_PID}\n").into_bytes(), libc::ESRCH),
        (format!("U {NO_SUCH_PID}\n").into_bytes(), libc::ESRCH),
        (format!("U {pid}\n").into_bytes(), libc::ENOENT),
    ];
    for (input, errno) in &cases {
        let got = kmod::write_status(input);
        ensure!(
            got == Err(*errno),
            "{:?}: expected errno {errno}, got {got:?}",
            String::from_utf8_lossy(input)
        );
    }

    kmod::register(pid)?;
    let got = kmod::write_status(format!("R {pid}\n").as_bytes());
    ensure!(got == Err(libc::EEXIST), "second R: {got:?}");

    // A thread's id is not a process.
    let (tx, rx) = mpsc::channel();
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    let t = thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        tx.send(unsafe { libc::gettid() } as u32).ok();
        stop_rx.recv().ok();
    });
    let tid = rx.recv()?;
    let got = kmod::write_status(format!("R {tid}\n").as_bytes());
    stop_tx.send(())?;
    t.join().ok();
    ensure!(got == Err(libc::ESRCH), "R <thread id>: {got:?}");

    // An unprivileged user may not profile root's processes: pid 1, nor ours.
    for victim in [1, pid] {
        let mut nobody = Profiled::spawn_raw(&["register", &victim.to_string()], Some(NOBODY))?;
        let said = nobody.read_line()?;
        nobody.reap()?;
        ensure!(
            said == format!("errno {}", libc::EPERM),
            "nobody registering {victim}: {said}"
        );
    }
    // But its own.
    let mut own = Profiled::spawn_raw(&["register", "self"], Some(NOBODY))?;
    let said = own.read_line()?;
    own.reap()?;
    ensure!(said == "ok", "nobody registering itself: {said}");

    // Still alive and consistent after all that.
    ensure!(
        kmod::registered()?.contains(&pid),
        "lost the good registration"
    );
    kmod::unregister(pid)?;
    target.go()?;
    target.reap()?;
    module.unload()
}
