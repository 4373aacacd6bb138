//! Sessions: every open of /dev/pfprof its own, private, several at once, and a
//! profiled process counted with its descendants.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;
use shared_layout::device::{Device, Follow};
use shared_layout::strict::StrictConsumer;
use shared_layout::Mode;

use crate::device::take_until_ended;
use crate::device::{add, follow, raw_open, Mapping};
use crate::kmod::{self, Profiled};
use crate::monitor::{csv_minor, finished, monitor_run, rusage_minor, within};
use crate::users::{nobodys_dir, open_to_all, register_as_nobody, NOBODY};
use crate::{harness::Env, klog};

/// The faults a held command may take between its fork and its exec, before the
/// monitor adds it, at most (measured: a few dozen).
const BEFORE_ADD_MAX: u64 = 200;

pub fn monitors_of_root_and_nobody_at_once_each_count_only_their_own_command(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    let dir = nobodys_dir()?;
    // Nobody keeps a process of its own registered and faulting throughout: it may be
    // in nobody's sessions, never in root's.
    let mut churn = Profiled::spawn_raw(&["churn"], Some(NOBODY))?;
    ensure!(churn.read_line()? == "ready");
    register_as_nobody(churn.pid)?;
    churn.go()?;

    let work = ["work", "4", "R", "3000", "3", "--sleep-ms", "30"];
    let started = Instant::now();
    let runs = [
        (None, "strict"),
        (None, "relaxed"),
        (Some(NOBODY), "strict"),
        (Some(NOBODY), "relaxed"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (uid, mode))| {
        let csv = format!("{dir}/sessions-{i}.csv");
        let child = monitor_run(uid, "kernel", mode, &csv, &[], &work)?;
        Ok((uid, mode, csv, child))
    })
    .collect::<Result<Vec<_>>>()?;
    for (uid, mode, csv, child) in runs {
        let who = format!("{} {mode}", if uid.is_some() { "nobody" } else { "root" });
        // Nobody's churner never ends: a session that took it in would not either.
        let out = within(child, Duration::from_secs(60)).with_context(|| who.clone())?;
        let stderr = finished(&who, out)?;
        let (sum, rows) = csv_minor(&csv)?;
        let rusage = rusage_minor(&stderr)?;
        ensure!(
            sum == rusage,
            "{who}: the samples hold {sum} minor faults, the command's rusage {rusage} \
             ({} rows)",
            rows.len()
        );
        ensure!(sum >= 1024, "{who}: {sum} minor faults for 4 MiB touched");
        crate::harness::figure(&format!(
            "sessions: {who}: {sum} minor faults in {} samples = its command's rusage",
            rows.len()
        ));
    }
    let took = started.elapsed();
    // Four `work`s of ~0.3 s each on two emulated CPUs (20 s on the debug kernel beside
    // a loaded VM): nobody's churner, registered all along, must not have kept any
    // session open, which the monitors' ends above say already.
    ensure!(took < Duration::from_secs(60), "the monitors took {took:?}");
    churn.go()?;
    churn.reap()?;
    fs::remove_dir_all(dir)?;
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child probe-session <root's pid>`, as nobody: what it may do to root's
/// profile. Says one line of verdicts, then tries to pin its own session's area
/// (vmsplice() into a pipe, which would keep its pages after the session) and says
/// "pinned" or "refused <errno>".
pub fn probe_session(root_pid: &str) -> Result<()> {
    let pid: i32 = root_pid.parse()?;
    let file = raw_open()?;
    let errno = |r: std::result::Result<(), i32>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => format!("errno {e}"),
    };
    let added = errno(add(&file, pid, abi::TARGET_INHERIT, 0));
    let followed = errno(follow(
        &file,
        abi::Follow {
            scope: abi::FOLLOW_DESCENDANTS,
            pid,
            ..abi::Follow::default()
        },
    ));
    let listed = kmod::registered()?.contains(&(pid as u32));
    println!("add {added}; follow {followed}; listed {listed}");

    let map = Mapping::new(&file)?;
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe(2) to fill.
    ensure!(unsafe { libc::pipe(fds.as_mut_ptr()) } == 0, "pipe");
    // SAFETY: pipe(2) just gave us both descriptors; each is owned once, here.
    let (_rx, tx) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    let iov = libc::iovec {
        iov_base: map.word64(0).as_ptr().cast(),
        iov_len: 2 * abi::PAGE_SIZE as usize,
    };
    // SAFETY: the iovec covers two pages of our live mapping; the pipe would hold them.
    let spliced = unsafe { libc::vmsplice(tx.as_raw_fd(), &iov, 1, 0) };
    if spliced < 0 {
        println!(
            "refused {}",
            std::io::Error::last_os_error().raw_os_error().unwrap_or(-1)
        );
    } else {
        println!("pinned");
    }
    Ok(())
}

pub fn nobody_can_neither_join_prolong_nor_read_roots_session(env: &Env) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    open_to_all()?;
    let mut roots = Profiled::spawn(&["faults", "256", "1", "exit"])?;
    kmod::register(roots.pid)?;

    let mut probe = Profiled::spawn_mode(
        "hardening-child",
        &["probe-session", &roots.pid.to_string()],
        Some(NOBODY),
    )?;
    let verdicts = probe.read_line()?;
    let eperm = format!("errno {}", libc::EPERM);
    ensure!(
        verdicts == format!("add {eperm}; follow {eperm}; listed false"),
        "nobody against root's process: {verdicts}"
    );
    ensure!(
        kmod::registered()?.contains(&roots.pid),
        "root does not see its own registration"
    );
    // What nobody maps of its own session cannot be pinned to outlive it.
    let pinned = probe.read_line()?;
    ensure!(
        pinned == format!("refused {}", libc::EFAULT),
        "nobody pinning its session's pages: {pinned}"
    );
    probe.reap()?;

    // Nobody registers a process of its own too, and leaves it: root's session does not
    // follow it, so it neither adds to nor prolongs root's.
    let mut nobodys = Profiled::spawn_raw(&["churn"], Some(NOBODY))?;
    ensure!(nobodys.read_line()? == "ready");
    register_as_nobody(nobodys.pid)?;
    nobodys.go()?;

    let dev = Device::open()?;
    dev.add(roots.pid, true, false)?;
    dev.follow(Follow::Descendants(roots.pid), true)?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area, dev.waiter());
    roots.go()?;
    let reaped = roots.reap()?;
    let gone = Instant::now();
    let mut samples = Vec::new();
    take_until_ended(&mut consumer, &mut samples)?;
    let ended_after = gone.elapsed();
    let minor: u64 = samples.iter().map(|s| s.minor).sum();
    ensure!(
        (256..=reaped.minflt).contains(&minor),
        "root's session holds {minor} minor faults; its process took {} for 256 pages",
        reaped.minflt
    );
    ensure!(
        ended_after < Duration::from_secs(2),
        "root's session ended {ended_after:?} after its process was reaped"
    );

    drop((consumer, dev));
    crate::harness::figure(&format!(
        "sessions: nobody refused ADD and FOLLOW of root's process, its listing hid it, its \
         own session's pages could not be pinned; root's session: {minor} minor faults, ended \
         {ended_after:?} after the reap with nobody's process still registered"
    ));
    nobodys.go()?;
    nobodys.reap()?;
    module.unload()?;
    mark.ensure_clean()
}

pub fn a_shell_and_its_descendants_count_as_they_run_and_add_up_to_its_rusage(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=20"])?;
    // One `work` a child of the shell, one a grandchild (through a second shell). Each
    // touches about a sixth of its pages not touched yet, every 100 ms for a second:
    // faults in every row while they run.
    let script = "sh -c 'work 8 R 400 10 --sleep-ms 100 & wait' & \
                  work 8 R 400 10 --sleep-ms 100 & wait";
    let cmd = ["sh", "-c", script];
    for backend in ["kernel", "procfs"] {
        for inherit in [true, false] {
            let csv = format!("/tmp/tree-{backend}-{inherit}.csv");
            let extra: &[&str] = if inherit { &[] } else { &["--no-inherit"] };
            let child = monitor_run(None, backend, "strict", &csv, extra, &cmd)?;
            let what = format!("{backend} backend, inherit {inherit}");
            let stderr = finished(&what, child.wait_with_output()?)?;
            let (sum, rows) = csv_minor(&csv)?;
            let rusage = rusage_minor(&stderr)?;
            let busy = rows.iter().filter(|&&m| m > 0).count();
            crate::harness::figure(&format!(
                "tree: {what}: {sum} minor faults in {} rows ({busy} with faults), \
                 command rusage {rusage}",
                rows.len()
            ));
            if !inherit {
                if backend == "kernel" {
                    // The shell, and each `work` from its own registration: the
                    // session follows its command's descendants' registrations.
                    ensure!(
                        rusage / 2 < sum && sum < rusage,
                        "{what}: {sum} of the tree's {rusage} faults, expected the shell's \
                         and the registered works' only"
                    );
                } else {
                    // The shell alone: a few hundred faults of its own.
                    ensure!(
                        sum < rusage / 4,
                        "{what}: {sum} of the tree's {rusage} faults without inherit"
                    );
                }
                continue;
            }
            // The children's faults show while they run, not in one row at the end.
            ensure!(busy >= 4, "{what}: only {busy} rows with faults: {rows:?}");
            // Each `work` while it runs, the grandchild too: not in a burst when a
            // shell reaps it at the end.
            let last = rows.last().copied().unwrap_or(0);
            ensure!(
                last < sum / 4,
                "{what}: the last row holds {last} of {sum} faults"
            );
            if backend == "kernel" {
                ensure!(
                    sum == rusage,
                    "{what}: {sum} minor faults sampled, rusage {rusage}"
                );
            } else {
                ensure!(
                    sum.abs_diff(rusage) <= BEFORE_ADD_MAX,
                    "{what}: {sum} minor faults sampled, rusage {rusage}"
                );
            }
        }
    }
    module.unload()?;
    mark.ensure_clean()
}

/// A shell reaping its children all through the collections (200 short programs, one
/// after another, at a period of 1 ms; 800 took 8.5 minutes on the debug kernel under
/// load): each child is counted once, from its own
/// counters, whenever its parent reaps it, and the sum is the shell's rusage exactly.
/// Before the module followed the forks (`kmod/tree.c`, until 2026-11-29), a child
/// reaped between a collection's read of its parent's reaped counts and the walk that
/// would have found it was counted twice: 10,959 minor faults for a rusage of 7,339 on
/// a loaded 7.3 lane (docs/reliability.md).
pub fn a_shell_reaping_children_all_through_the_collections_counts_each_once(
    env: &Env,
) -> Result<()> {
    const CHILDREN: u32 = 200;
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=1"])?;
    let script =
        format!("i=0; while [ $i -lt {CHILDREN} ]; do /bin/busybox true; i=$((i+1)); done");
    let cmd = ["sh", "-c", script.as_str()];
    let csv = "/tmp/reaping-shell.csv";
    let child = monitor_run(None, "kernel", "strict", csv, &[], &cmd)?;
    let stderr = finished("the reaping shell's monitor", child.wait_with_output()?)?;
    let (sum, rows) = csv_minor(csv)?;
    let rusage = rusage_minor(&stderr)?;
    let figure = format!(
        "reaps: a shell running {CHILDREN} children one after another at a 1 ms period: \
         {sum} minor faults in {} rows, its rusage {rusage}",
        rows.len()
    );
    ensure!(sum == rusage, "{figure}");
    crate::harness::figure(&figure);
    module.unload()?;
    mark.ensure_clean()
}

/// A session whose ring never starts still lets go of its tree's released processes: a
/// kin holds its task until a look reads its final counts, and before the ring starts
/// the sampler looks once a second (the review of the fork-tracked module, 2026-11-29:
/// it held every child a member forked, a task_struct each, until the ring started).
/// An inheriting member runs 1,000 short children in a loop; a second after, the
/// kernel's task_struct objects are about what they were before.
pub fn a_tree_whose_ring_never_starts_pins_none_of_its_dead(env: &Env) -> Result<()> {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};

    const CHILDREN: u64 = 1000;
    let module = kmod::insmod(env, &[])?;
    let mut shell = Command::new("sh")
        .args([
            "-c",
            &format!(
                "read go; i=0; while [ $i -lt {CHILDREN} ]; do /bin/busybox true; \
                 i=$((i+1)); done; echo done; read end"
            ),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("spawning the shell")?;
    let dev = Device::open()?;
    dev.add(shell.id(), true, false)?;
    let Some(before) = crate::klog::slab_active_objects("task_struct")? else {
        drop(dev);
        shell.kill()?;
        shell.wait()?;
        module.unload()?;
        return Err(
            crate::harness::Skipped("task_struct's slab is merged with another".into()).into(),
        );
    };
    let mut stdin = shell.stdin.take().context("the shell's stdin")?;
    writeln!(stdin, "go")?;
    let mut line = String::new();
    BufReader::new(shell.stdout.take().context("the shell's stdout")?).read_line(&mut line)?;
    ensure!(line.trim() == "done", "the shell said {line:?}");
    // The sampler's look before the start comes once a second.
    std::thread::sleep(Duration::from_millis(2500));
    let after = crate::klog::slab_active_objects("task_struct")?.unwrap_or(0);
    let figure = format!(
        "a tree whose ring never started ran {CHILDREN} children: task_struct objects \
         {before}, then {after}"
    );
    ensure!(after < before + CHILDREN / 10, "{figure}");
    crate::harness::figure(&figure);
    writeln!(stdin, "end")?;
    shell.wait()?;
    drop(dev);
    module.unload()
}

/// Two sessions count the same process, each from when it joined: the second joins after
/// the first has counted a round of its faults, and each sum is exactly its own share.
pub fn a_process_in_two_sessions_is_counted_in_each_from_its_joining(env: &Env) -> Result<()> {
    const PAGES: u64 = 300;
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let mut p = Profiled::spawn(&["rounds", &PAGES.to_string()])?;
    // Asleep between rounds: its count is what each session starts from.
    let first_joined = p.wait_asleep()?;
    let first = Device::open()?;
    first.add(p.pid, false, false)?;
    let a = first.start(Mode::Strict)?;
    let mut ca = StrictConsumer::new(a, first.waiter());
    p.send(b'l')?;
    ensure!(p.read_line()? == "done");
    let second_joined = p.wait_asleep()?;
    let second = Device::open()?;
    second.add(p.pid, false, false)?;
    let b = second.start(Mode::Relaxed)?;
    let mut cb = shared_layout::relaxed::RelaxedConsumer::new(b);
    p.send(b'l')?;
    ensure!(p.read_line()? == "done");
    let reaped = p.reap()?;
    let mut sa = Vec::new();
    take_until_ended(&mut ca, &mut sa)?;
    let mut sb = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let drained = cb.drain(&mut sb)?;
        ensure!(
            drained.lost == 0,
            "the relaxed session lost {} samples",
            drained.lost
        );
        if drained.ended {
            break;
        }
        if Instant::now() > deadline {
            bail!("the relaxed session never ended");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ma, mb): (u64, u64) = (
        sa.iter().map(|s| s.minor).sum(),
        sb.iter().map(|s| s.minor).sum(),
    );
    let (wa, wb) = (reaped.minflt - first_joined, reaped.minflt - second_joined);
    crate::harness::figure(&format!(
        "two sessions: the first holds {ma} minor faults (since its join: {wa}), the second, \
         joined after a round of {PAGES} pages, {mb} (since its join: {wb})"
    ));
    ensure!(
        (ma, mb) == (wa, wb),
        "the sessions hold {ma} and {mb} minor faults; since each joined, wait4 says {wa} and {wb}"
    );
    ensure!(wa - wb >= PAGES, "the first round took {} faults", wa - wb);
    drop((ca, cb, first, second));
    module.unload()
}
