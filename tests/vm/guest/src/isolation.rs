//! What one user does through /proc/pfprof/status or a session's file cannot
//! change another's session or show it what it may not read: the second
//! hostile review of kmod/ (docs/reliability.md, "A hostile local user"),
//! each finding reproduced here before it was fixed.

use std::fs::{self, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::device::{Device, DeviceWaiter, Follow};
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::{Mode, Sample};

use crate::device::take_until_ended;
use crate::harness::{figure, Env};
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::monitor::{csv_minor, finished, monitor_run, rusage_minor, within};
use crate::users::{nobodys_dir, open_to_all, setuid_copy, NOBODY};

/// Pages the profiled processes touch: one minor fault each.
const PAGES: u64 = 3000;

/// Writes "`op` `pid`" to the status file as nobody.
fn status_as_nobody(op: &str, pid: u32) -> Result<()> {
    let said = Command::new(std::env::current_exe()?)
        .uid(NOBODY)
        .gid(NOBODY)
        .args(["hardening-child", "status", op, &pid.to_string()])
        .output()?;
    ensure!(
        String::from_utf8_lossy(&said.stdout).trim() == "ok",
        "nobody writing {op} {pid}: {said:?}"
    );
    Ok(())
}

fn minor_sum(samples: &[Sample]) -> u64 {
    samples.iter().map(|s| s.minor).sum()
}

/// Takes what is ready for a while; fails if the session ended meanwhile.
fn take_while_running(
    who: &str,
    consumer: &mut StrictConsumer<DeviceWaiter>,
    out: &mut Vec<Sample>,
) -> Result<()> {
    if consumer.take(out, Some(Duration::from_millis(300)))? == Take::Ended {
        bail!("{who}: the session ended, its opener did not end it nor did its own targets");
    }
    Ok(())
}

/// A process that touches `PAGES` fresh pages at go, as `uid`, asleep and ready.
fn faulter(uid: Option<u32>, then: &str) -> Result<(Profiled, u64)> {
    let pages = PAGES.to_string();
    let mut p = Profiled::spawn_raw(&["faults", &pages, "0", then], uid)?;
    ensure!(p.read_line()? == "ready", "the faulting child is not ready");
    let before = p.wait_asleep()?;
    Ok((p, before))
}

/// Nobody registers a process of its own, which faults `PAGES` pages, and
/// unregisters it once it has; the sessions that follow registrations keep
/// running throughout (what `take_while_running` checks).
fn nobodys_registration_comes_and_goes(
    sessions: &mut [(&str, &mut StrictConsumer<DeviceWaiter>, &mut Vec<Sample>)],
) -> Result<()> {
    let (mut theirs, _) = faulter(Some(NOBODY), "stay")?;
    status_as_nobody("R", theirs.pid)?;
    theirs.go()?;
    ensure!(
        theirs.read_line()? == "done",
        "nobody's child did not fault"
    );
    for (who, consumer, samples) in sessions.iter_mut() {
        take_while_running(who, consumer, samples)?;
    }
    status_as_nobody("U", theirs.pid)?;
    theirs.reap()?;
    // Its departure, the only process the sessions had, would end them at once.
    for _ in 0..3 {
        for (who, consumer, samples) in sessions.iter_mut() {
            take_while_running(who, consumer, samples)?;
        }
    }
    Ok(())
}

pub fn another_users_registrations_join_a_session_only_when_asked_and_never_end_it(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    open_to_all()?;
    // Root's session as a bare monitor opens it: its own user's registrations.
    let own = Device::open()?;
    own.follow(Follow::All, false)?;
    let mut own_consumer = StrictConsumer::new(own.start(Mode::Strict)?, own.waiter());
    let mut own_samples = Vec::new();
    nobodys_registration_comes_and_goes(&mut [(
        "root's session",
        &mut own_consumer,
        &mut own_samples,
    )])?;
    let own_theirs = minor_sum(&own_samples);
    ensure!(
        own_theirs == 0,
        "nobody's registration put {own_theirs} minor faults in root's session"
    );

    // One that asks for every user's registrations takes nobody's in, and still
    // does not end when it goes.
    let every = Device::open()?;
    every.follow(Follow::AllUsers, false)?;
    let mut every_consumer = StrictConsumer::new(every.start(Mode::Strict)?, every.waiter());
    let mut every_samples = Vec::new();
    nobodys_registration_comes_and_goes(&mut [
        ("root's session", &mut own_consumer, &mut own_samples),
        (
            "root's every-user session",
            &mut every_consumer,
            &mut every_samples,
        ),
    ])?;
    let (own_theirs, every_theirs) = (minor_sum(&own_samples), minor_sum(&every_samples));
    ensure!(
        own_theirs == 0,
        "nobody's registrations put {own_theirs} minor faults in root's session"
    );
    ensure!(
        every_theirs >= PAGES,
        "a session asking for every user's registrations got {every_theirs} minor faults \
         of nobody's {PAGES}"
    );

    // Root's own registration joins both, and its end ends both: their own target.
    let (mut mine, before) = faulter(None, "exit")?;
    kmod::register(mine.pid)?;
    mine.go()?;
    ensure!(mine.read_line()? == "done", "root's child did not fault");
    mine.wait_exited()?;
    let own_since = mine.reap()?.minflt - before;
    take_until_ended(&mut own_consumer, &mut own_samples)?;
    take_until_ended(&mut every_consumer, &mut every_samples)?;
    let (own_total, every_total) = (minor_sum(&own_samples), minor_sum(&every_samples));
    figure(&format!(
        "isolation: nobody's registrations of {PAGES} pages: 0 faults in root's own-user \
         session, {every_theirs} in its every-user one, neither ended; root's own: \
         {own_total} and {} of its {own_since}, both ended",
        every_total - every_theirs
    ));
    ensure!(
        own_total == own_since && every_total - every_theirs == own_since,
        "root's registration took {own_since} minor faults; its sessions hold {own_total} \
         and {}",
        every_total - every_theirs
    );
    drop((own_consumer, every_consumer, own, every));
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child handed-session <cgroup|follow>` (started as root): opens a
/// session as root, then becomes nobody for good, as a process root's
/// descriptor was handed to would be, and asks through it for every process
/// of the root cgroup (`cgroup`) or every registration (`follow`). Says
/// "ready", starts at a byte on stdin, and at the next says "minor <N>", what
/// its samples held.
pub fn handed_session(what: &str) -> Result<()> {
    let dev = Device::open()?;
    ensure!(
        // SAFETY: plain id syscalls on ourselves.
        unsafe { libc::setresgid(NOBODY, NOBODY, NOBODY) } == 0
            // SAFETY: the same call for the other id.
            && unsafe { libc::setresuid(NOBODY, NOBODY, NOBODY) } == 0,
        "becoming nobody: {}",
        std::io::Error::last_os_error()
    );
    match what {
        "cgroup" => {
            let root = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                .open("/sys/fs/cgroup")
                .context("opening the root cgroup")?;
            dev.add_cgroup(root.as_fd())?;
        }
        "follow" => dev.follow(Follow::All, false)?,
        _ => bail!("handed-session: cgroup or follow, not {what:?}"),
    }
    report_session(&dev, || Ok(()))
}

/// Until a byte on stdin, then to the session's end: says "ready", and at
/// the next byte ends the session and says "minor <N>", what its samples held.
/// `between` runs after the first byte.
fn report_session(dev: &Device, between: impl FnOnce() -> Result<()>) -> Result<()> {
    let mut consumer = StrictConsumer::new(dev.start(Mode::Strict)?, dev.waiter());
    println!("ready");
    std::io::stdout().flush()?;
    let mut byte = [0u8; 1];
    std::io::stdin().read_exact(&mut byte)?;
    between()?;
    std::io::stdin().read_exact(&mut byte)?;
    dev.ender().end()?;
    let mut samples = Vec::new();
    take_until_ended(&mut consumer, &mut samples)?;
    println!("minor {}", minor_sum(&samples));
    Ok(())
}

/// What the pid-namespace session's opener touches in its cgroup.
const OPENERS_PAGES: u64 = PAGES / 2;

/// `hardening-child pidns-cgroup-session CGROUP`, as root in a pid namespace of
/// its own (`in-new-pid-ns`): a session over every process of CGROUP. After
/// the first byte it moves itself into CGROUP, lets a look find it there,
/// touches `OPENERS_PAGES` fresh pages and says "done" (see `report_session`).
pub fn pidns_cgroup_session(cgroup: &str) -> Result<()> {
    let dev = Device::open()?;
    let target = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(cgroup)
        .with_context(|| format!("opening {cgroup}"))?;
    dev.add_cgroup(target.as_fd())?;
    report_session(&dev, || {
        fs::write(format!("{cgroup}/cgroup.procs"), "0")
            .with_context(|| format!("moving into {cgroup}"))?;
        // Counted from the first look that finds it there.
        thread::sleep(Duration::from_secs(1));
        let pages = OPENERS_PAGES as usize;
        crate::anon::Fresh::new(pages)?.touch(0..pages);
        println!("done");
        std::io::stdout().flush()?;
        Ok(())
    })
}

/// Review L5: a session opened in a pid namespace, over a cgroup that holds a
/// process outside that namespace, of the same user: the process is counted
/// only if the opener can name it, as /proc shows it. The opener's own
/// `OPENERS_PAGES` faults, made inside the cgroup, are the control: half as many
/// as the outsider's, so that the sum tells whose were counted.
pub fn a_cgroup_session_in_a_pid_namespace_counts_only_the_processes_it_can_name(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    let cgroup = "/sys/fs/cgroup/pfprof-pidns";
    fs::create_dir_all(cgroup)?;
    let mut session = Profiled::spawn_mode(
        "hardening-child",
        &["in-new-pid-ns", "pidns-cgroup-session", cgroup],
        None,
    )?;
    ensure!(
        session.read_line()? == "ready",
        "the session in its own pid namespace is not ready"
    );
    // A process outside the namespace, in the cgroup, faults while the session runs.
    let (mut outsider, _) = faulter(None, "stay")?;
    fs::write(format!("{cgroup}/cgroup.procs"), outsider.pid.to_string())?;
    // A process is counted in a cgroup from the first look that finds it there,
    // to the last.
    thread::sleep(Duration::from_secs(1));
    outsider.go()?;
    ensure!(
        outsider.read_line()? == "done",
        "the outsider did not fault"
    );
    thread::sleep(Duration::from_millis(500));
    outsider.reap()?;
    session.go()?;
    ensure!(
        session.read_line()? == "done",
        "the session's opener did not fault"
    );
    thread::sleep(Duration::from_millis(200));
    session.go()?;
    let said = session.read_line()?;
    let minor: u64 = said
        .strip_prefix("minor ")
        .with_context(|| format!("the session said {said:?}"))?
        .parse()?;
    session.reap()?;
    fs::remove_dir(cgroup)?;
    figure(&format!(
        "isolation: a cgroup session opened in a pid namespace: {minor} minor faults, its \
         opener's own {OPENERS_PAGES} pages in the cgroup and a {PAGES}-page process outside the \
         namespace in it too"
    ));
    ensure!(
        minor >= OPENERS_PAGES,
        "the session missed its own opener's faults in the cgroup: {minor} of {OPENERS_PAGES}"
    );
    ensure!(
        minor < OPENERS_PAGES + OPENERS_PAGES / 2,
        "the session counted a process outside its pid namespace: {minor} minor faults, \
         {OPENERS_PAGES} of them its opener's"
    );
    module.unload()?;
    mark.ensure_clean()
}

pub fn a_session_handed_to_another_user_counts_only_what_that_user_may_read(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    for what in ["cgroup", "follow"] {
        let mut handed = Profiled::spawn_mode("hardening-child", &["handed-session", what], None)?;
        ensure!(
            handed.read_line()? == "ready",
            "{what}: the handed session is not ready"
        );
        // Root's process faults while the handed session runs.
        let (mut mine, _) = faulter(None, "exit")?;
        handed.go()?;
        if what == "follow" {
            kmod::register(mine.pid)?;
        }
        mine.go()?;
        ensure!(mine.read_line()? == "done", "root's child did not fault");
        mine.reap()?;
        thread::sleep(Duration::from_millis(200));
        handed.go()?;
        let said = handed.read_line()?;
        let minor: u64 = said
            .strip_prefix("minor ")
            .with_context(|| format!("{what}: said {said:?}"))?
            .parse()?;
        figure(&format!(
            "isolation: root's session handed to nobody ({what}): {minor} minor faults of \
             root's {PAGES}-page process"
        ));
        // Nobody's own faults (the handed process in the root cgroup) may be there.
        ensure!(
            minor < PAGES / 4,
            "{what}: nobody, holding root's session, got {minor} minor faults with root's \
             {PAGES}-page process"
        );
        handed.reap()?;
    }
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child session-of <pid>` (as nobody): a session that ADDs `pid`
/// at once and starts at a byte on stdin; says "minor <N> withdrawn <W>".
pub fn session_of(pid: &str) -> Result<()> {
    let dev = Device::open()?;
    dev.add(pid.parse()?, false, false)?;
    println!("added");
    std::io::stdout().flush()?;
    std::io::stdin().read_exact(&mut [0u8; 1])?;
    let area = dev.start(Mode::Strict)?;
    let mut consumer = StrictConsumer::new(area.clone(), dev.waiter());
    let mut samples = Vec::new();
    // Until its process is gone: a chain of execs lasts a while on the debug kernel.
    let deadline = Instant::now() + Duration::from_secs(300);
    while consumer.take(&mut samples, Some(Duration::from_secs(1)))? != Take::Ended {
        ensure!(Instant::now() < deadline, "the session never ended");
    }
    println!(
        "minor {} withdrawn {}",
        minor_sum(&samples),
        area.counters().withdrawn
    );
    Ok(())
}

/// Nobody's session of its process `pid` (`session-of`), the process added.
fn nobodys_session_of(pid: u32) -> Result<Profiled> {
    let mut session = Profiled::spawn_mode(
        "hardening-child",
        &["session-of", &pid.to_string()],
        Some(NOBODY),
    )?;
    ensure!(
        session.read_line()? == "added",
        "nobody's session did not add its process"
    );
    Ok(session)
}

pub fn a_member_that_execs_setuid_and_is_gone_before_the_next_look_is_withdrawn(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=1000"])?;
    open_to_all()?;
    let setuid = setuid_copy()?;
    let pages = PAGES.to_string();
    // Nobody's process execs the setuid program, which touches its pages and exits.
    let mut p = Profiled::spawn_raw(
        &["exec-after-go", "0", setuid, "child", "touch", &pages, "0"],
        Some(NOBODY),
    )?;
    ensure!(p.read_line()? == "ready");
    let mut session = nobodys_session_of(p.pid)?;
    p.go()?;
    ensure!(p.read_line()? == "exec");
    let reaped = p.reap()?;
    ensure!(
        reaped.minflt >= PAGES,
        "the setuid program did not run: {} minor faults",
        reaped.minflt
    );
    // The unstarted session's sampler frees its dead members once a second.
    thread::sleep(Duration::from_millis(1500));
    session.go()?;
    let said = session.read_line()?;
    let fields: Vec<&str> = said.split(' ').collect();
    let (minor, withdrawn): (u64, u32) = match fields.as_slice() {
        ["minor", m, "withdrawn", w] => (m.parse()?, w.parse()?),
        _ => bail!("nobody's session said {said:?}"),
    };
    figure(&format!(
        "isolation: a member that exec'd setuid ({} minor faults) and was reaped before a \
         look: {minor} in nobody's samples, withdrawn {withdrawn}",
        reaped.minflt
    ));
    ensure!(
        minor < PAGES / 4 && withdrawn == 1,
        "nobody's samples hold {minor} minor faults (withdrawn {withdrawn}) of a process \
         that ran a setuid program"
    );
    session.reap()?;
    fs::remove_file(setuid)?;
    module.unload()?;
    mark.ensure_clean()
}

pub fn a_descendant_that_runs_a_setuid_program_between_two_looks_is_not_counted(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    // Periods far longer than the setuid program runs: no walk finds it alive.
    let module = kmod::insmod(env, &["period_ms=3000"])?;
    open_to_all()?;
    let setuid = setuid_copy()?;
    let dir = nobodys_dir()?;
    let touch = format!("{setuid} child touch {PAGES} 0");
    // Its child, and its grandchild through a second shell ("; true": each shell
    // forks rather than exec'ing in its own place).
    let scripts = [
        format!("{touch}; true"),
        format!("sh -c '{touch}; true'; true"),
    ];
    for (depth, script) in scripts.iter().enumerate() {
        let csv = format!("{dir}/setuid-between-looks-{depth}.csv");
        let run = monitor_run(
            Some(NOBODY),
            "kernel",
            "strict",
            &csv,
            &[],
            &["sh", "-c", script],
        )?;
        let stderr = finished(
            "the monitor of the shell",
            within(run, Duration::from_secs(30))?,
        )?;
        let (sum, rows) = csv_minor(&csv)?;
        let rusage = rusage_minor(&stderr)?;
        figure(&format!(
            "isolation: a shell's {} running a setuid program between two looks: {sum} minor \
             faults in {} rows, the shell's rusage {rusage}",
            ["child", "grandchild"][depth],
            rows.len()
        ));
        ensure!(
            rusage >= PAGES,
            "the setuid program did not run: the shell's rusage is {rusage}"
        );
        ensure!(
            sum < PAGES / 4 && stderr.contains("stopped being counted when"),
            "the shell's samples hold {sum} minor faults of a setuid {}: {stderr}",
            ["child", "grandchild"][depth]
        );
    }
    fs::remove_file(setuid)?;
    fs::remove_dir_all(dir)?;
    module.unload()?;
    mark.ensure_clean()
}

/// `hardening-child open-loop`: opens and closes /dev/pfprof until killed.
pub fn open_loop() -> Result<()> {
    println!("ready");
    std::io::stdout().flush()?;
    loop {
        drop(Device::open()?);
    }
}

pub fn opens_killed_while_their_sampler_starts_leave_no_session_to_another_users_recall(
    env: &Env,
) -> Result<()> {
    const STORM: Duration = Duration::from_secs(5);
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    open_to_all()?;
    // Nobody registers and unregisters a process of its own as fast as it can:
    // every "U" is a recall, which visits sessions, while its opens are killed.
    let storm_ms = (STORM + Duration::from_secs(1)).as_millis().to_string();
    let mut storm = Profiled::spawn_mode(
        "hardening-child",
        &["register-loop", &storm_ms],
        Some(NOBODY),
    )?;
    let mut rng = crate::rng::Rng::from_env_or_clock();
    let started = Instant::now();
    let mut kills = 0;
    while started.elapsed() < STORM {
        let mut opener = Profiled::spawn_mode("hardening-child", &["open-loop"], Some(NOBODY))?;
        ensure!(
            opener.read_line()? == "ready",
            "the opening loop did not start"
        );
        thread::sleep(Duration::from_micros(rng.below(3000)));
        opener.kill()?;
        opener.reap()?;
        kills += 1;
    }
    let rounds = storm.read_line()?;
    storm.reap()?;
    figure(&format!(
        "isolation: {kills} opening loops killed at random moments in {STORM:?} while \
         nobody registered and unregistered a process in a loop ({rounds}, seed {})",
        rng.seed()
    ));
    module.unload()?;
    mark.ensure_clean()
}

pub fn a_process_execing_again_and_again_is_never_withdrawn(env: &Env) -> Result<()> {
    const EXECS: &str = "100";
    let mark = klog::Mark::now()?;
    // A look every millisecond: many fall inside an exec.
    let module = kmod::insmod(env, &["period_ms=1"])?;
    open_to_all()?;
    let mut p = Profiled::spawn_raw(&["exec-chain", EXECS, "wait"], Some(NOBODY))?;
    ensure!(p.read_line()? == "ready");
    let mut session = nobodys_session_of(p.pid)?;
    session.go()?;
    p.go()?;
    let reaped = p.reap()?;
    let said = session.read_line()?;
    session.reap()?;
    figure(&format!(
        "isolation: a process that exec'd itself {EXECS} times under a 1 ms period \
         ({} minor faults): {said}",
        reaped.minflt
    ));
    ensure!(
        said.ends_with(" withdrawn 0"),
        "a process exec'ing a program its own user may read was withdrawn: {said}"
    );
    module.unload()?;
    mark.ensure_clean()
}

/// The children of `pid`, as /proc lists them.
fn children_of(pid: u32) -> Result<Vec<u32>> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?;
    text.split_whitespace()
        .map(|c| c.parse().context("a child's pid"))
        .collect()
}

pub fn another_users_registered_parent_neither_takes_in_nor_ends_a_sessions_own_target(
    env: &Env,
) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    open_to_all()?;
    // Nobody's shell and its job.
    let mut shell = Command::new("/bin/busybox")
        .args(["sh", "-c", "sleep 60 & wait"])
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let job = loop {
        if let [job] = children_of(shell.id())?.as_slice() {
            break *job;
        }
        ensure!(Instant::now() < deadline, "nobody's shell started no job");
        thread::sleep(Duration::from_millis(10));
    };
    // Root's session takes every user's registrations with their trees, and is
    // given nobody's job itself: its own target.
    let dev = Device::open()?;
    dev.follow(Follow::AllUsers, true)?;
    dev.add(job, false, false)?;
    let mut consumer = StrictConsumer::new(dev.start(Mode::Strict)?, dev.waiter());
    let mut samples = Vec::new();
    // Nobody registers the job's parent, which would take the job into its tree,
    // and unregisters it.
    status_as_nobody("R", shell.id())?;
    take_while_running("root's session", &mut consumer, &mut samples)?;
    status_as_nobody("U", shell.id())?;
    for _ in 0..3 {
        take_while_running(
            "root's session, its target alive",
            &mut consumer,
            &mut samples,
        )?;
    }
    // The job ends: so does the session, its own target gone.
    // SAFETY: kill(2) of the job, a process of nobody's that root may signal.
    let killed = unsafe { libc::kill(job as i32, libc::SIGKILL) };
    ensure!(killed == 0, "killing the job");
    take_until_ended(&mut consumer, &mut samples)?;
    figure(&format!(
        "isolation: nobody registered and unregistered the parent of root's target in a \
         session taking every user's registrations: the session ran on, and ended with its \
         target ({} samples)",
        samples.len()
    ));
    shell.kill()?;
    shell.wait()?;
    drop((consumer, dev));
    module.unload()?;
    mark.ensure_clean()
}
