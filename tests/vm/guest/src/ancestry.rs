//! A process's ancestry changes under the module: an orphan is reparented to its
//! nearest child subreaper, or to its pid namespace's init. A process added too deep
//! below an inheriting member for the module's walks up the tree (256 parents) to see
//! that member is then brought inside its tree, and the member's join absorbs it.
//! The review of 2026-11-26 (H1) found that join freeing the very member its list
//! walk was to visit next: a use-after-free in the sampler, which any user can set
//! up. Each test builds that state as nobody, one way or another, and checks that
//! the kernel stays silent, the session goes on and ends, and nothing is left behind.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;

use crate::device::{add, follow, ioctl, raw_open, set_mode, Mapping};
use crate::harness::{figure, Env, Skipped};
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::users::{open_to_all, NOBODY};

/// How long the helper lets the sampler run after starting the ring: its first
/// collection, where the join completes, falls well inside.
const FIRST_COLLECTION_WAIT: Duration = Duration::from_millis(1500);
/// Between two members killed while the first collection runs.
const BETWEEN_DEATHS: Duration = Duration::from_millis(3);
/// What an ADD of a member-to-be may not be refused with: the process is nobody's,
/// alive, named right, and the session open and not full. A module that refuses it
/// for its depth (ELOOP, EEXIST...) passes; these would mean the test tests nothing.
const SET_UP_WRONG: [i32; 6] = [
    libc::EPERM,
    libc::ESRCH,
    libc::EINVAL,
    libc::ESHUTDOWN,
    libc::ENOSPC,
    libc::EBUSY,
];

/// Who the chain's orphans are reparented to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reaper {
    /// A process that made itself a child subreaper (prctl(PR_SET_CHILD_SUBREAPER)).
    Subreaper,
    /// Pid 1 of a pid namespace nobody made in a user namespace of its own.
    PidNamespaceInit,
}

impl Reaper {
    fn arg(self) -> &'static str {
        match self {
            Reaper::Subreaper => "subreaper",
            Reaper::PidNamespaceInit => "pid-ns-init",
        }
    }

    fn parse(arg: &str) -> Result<Reaper> {
        match arg {
            "subreaper" => Ok(Reaper::Subreaper),
            "pid-ns-init" => Ok(Reaper::PidNamespaceInit),
            _ => bail!("unknown reaper {arg:?}"),
        }
    }
}

/// One way to bring members inside an inheriting member's tree after they joined:
/// the reaper (registered, so that a session following every registration with
/// inherit takes it in) and a chain of `depth` processes below it, each the child of
/// the one above; the deepest `members` join by PFPROF_IOC_ADD; then the chain's
/// level `killed` (1: the reaper's child) is killed, and what hung below it is the
/// reaper's now, `killed` levels nearer.
struct Scenario {
    reaper: Reaper,
    depth: usize,
    members: usize,
    killed: usize,
    /// Every second member after the first is killed, and reaped at once (the chain
    /// ignores SIGCHLD), while the first collection runs.
    members_die: bool,
    /// The members are ADDed before the reaper registers: its join takes them in
    /// whatever their depth (the other order may refuse them as counted already).
    members_first: bool,
}

impl Scenario {
    /// `hardening-child absorb ...`'s arguments.
    fn args(&self) -> Vec<String> {
        vec![
            "absorb".into(),
            self.reaper.arg().into(),
            self.depth.to_string(),
            self.members.to_string(),
            self.killed.to_string(),
            if self.members_die { "die" } else { "stay" }.into(),
            if self.members_first {
                "members-first"
            } else {
                "reaper-first"
            }
            .into(),
        ]
    }

    fn parse(args: &[String]) -> Result<Scenario> {
        let [reaper, depth, members, killed, fate, order] = args else {
            bail!(
                "absorb takes <reaper> <depth> <members> <killed> <stay|die> \
                 <reaper-first|members-first>: {args:?}"
            );
        };
        let scenario = Scenario {
            reaper: Reaper::parse(reaper)?,
            depth: depth.parse().context("depth")?,
            members: members.parse().context("members")?,
            killed: killed.parse().context("killed")?,
            members_die: match fate.as_str() {
                "stay" => false,
                "die" => true,
                _ => bail!("members stay or die, not {fate:?}"),
            },
            members_first: match order.as_str() {
                "reaper-first" => false,
                "members-first" => true,
                _ => bail!("reaper-first or members-first, not {order:?}"),
            },
        };
        ensure!(
            (1..=scenario.depth).contains(&scenario.members)
                && (1..=scenario.depth - scenario.members).contains(&scenario.killed),
            "the killed level and the members must be in the chain, the members below: \
             {args:?}"
        );
        Ok(scenario)
    }
}

/// Leaves a forked child without the helper's destructors and buffers.
fn exit_child(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process at once; nothing of the helper's runs in it.
    unsafe { libc::_exit(code) }
}

/// This process's pid as the guest's /proc names it, in the root pid namespace:
/// inside a pid namespace of its own getpid() says another number.
fn pid_in_proc() -> Option<i32> {
    let mut buf = [0u8; 16];
    // SAFETY: readlink(2) of a NUL-terminated path into a live buffer of that length.
    let n = unsafe { libc::readlink(c"/proc/self".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.parse().ok()
}

/// Writes `value` to the pipe the helper reads the chain's pids from.
fn report(pipe: RawFd, value: i32) -> bool {
    let bytes = value.to_ne_bytes();
    // SAFETY: writes 4 bytes of a live array; a pipe write under PIPE_BUF is atomic.
    let written = unsafe { libc::write(pipe, bytes.as_ptr().cast(), bytes.len()) };
    written == bytes.len() as isize
}

/// The first process forked: its stdin and stdout (pipes to the test, which must see
/// the helper's end, not the chain's) become /dev/null, and it closes what it
/// inherited of the helper's besides the pipe it reports on (the device: the session
/// must not outlive the helper in its chain).
fn detach_from_helper(inherited: &[RawFd]) {
    // SAFETY: open(2) of a NUL-terminated path.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
    if null < 0 {
        exit_child(1);
    }
    for fd in [0, 1] {
        // SAFETY: dup2(2) of a descriptor we just opened onto a standard one.
        if unsafe { libc::dup2(null, fd) } < 0 {
            exit_child(1);
        }
    }
    for &fd in inherited.iter().chain([&null]).filter(|&&fd| fd > 1) {
        // SAFETY: closing this process's copy of a descriptor it does not use.
        unsafe { libc::close(fd) };
    }
}

/// Lets the kernel reap this process's children, and its descendants' (a disposition
/// forks inherit), as soon as they die.
fn reap_children_at_once() {
    // SAFETY: setting SIGCHLD's disposition to SIG_IGN, no handler involved.
    if unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) } == libc::SIG_ERR {
        exit_child(1);
    }
}

/// Sleeps until a signal ends it.
fn sleep_forever() -> ! {
    loop {
        // SAFETY: pause(2) only sleeps; SIGKILL ends the process.
        unsafe { libc::pause() };
    }
}

/// In the reaper, which has reported itself: forks the chain's `levels` processes,
/// each from the one above, each reporting itself before forking the next, then
/// sleeps. Every process closes its end of the pipe once its child holds one, so
/// the helper sees the pipe end when the chain is complete or broken.
fn hang_chain(pipe: RawFd, levels: usize) -> ! {
    for _ in 0..levels {
        // SAFETY: fork(2) in a process with one thread (a copy of the helper's one);
        // the child only reports itself, forks on and sleeps.
        match unsafe { libc::fork() } {
            0 => {
                if !pid_in_proc().is_some_and(|pid| report(pipe, pid)) {
                    exit_child(1);
                }
            }
            -1 => exit_child(1),
            _ => break,
        }
    }
    // SAFETY: closing this process's copy of the pipe's write end.
    unsafe { libc::close(pipe) };
    sleep_forever()
}

/// The forked reaper: a child subreaper with the chain below it.
fn subreaper(pipe: RawFd, depth: usize, reap_at_once: bool) -> ! {
    // SAFETY: prctl(2) with integer arguments, on this process alone.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        exit_child(1);
    }
    if !pid_in_proc().is_some_and(|pid| report(pipe, pid)) {
        exit_child(1);
    }
    if reap_at_once {
        reap_children_at_once();
    }
    hang_chain(pipe, depth)
}

/// The forked maker of a pid namespace: as nobody it needs a user namespace of its
/// own first (CAP_SYS_ADMIN there), then the next child it forks is pid 1 of the new
/// pid namespace, the reaper of its orphans, with the chain below it. Reports a
/// refused unshare(2) as its negated errno.
fn pid_namespace_maker(pipe: RawFd, depth: usize, reap_at_once: bool) -> ! {
    // SAFETY: unshare(2) in a process with one thread (CLONE_NEWUSER wants that); the
    // new pid namespace is only its children's.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        report(pipe, -errno.max(1));
        exit_child(0);
    }
    // SAFETY: fork(2) in a process with one thread; the child is the namespace's init.
    match unsafe { libc::fork() } {
        0 => {
            if !pid_in_proc().is_some_and(|pid| report(pipe, pid)) {
                exit_child(1);
            }
            if reap_at_once {
                reap_children_at_once();
            }
            hang_chain(pipe, depth)
        }
        -1 => exit_child(1),
        _ => {
            // SAFETY: closing this process's copy of the pipe's write end.
            unsafe { libc::close(pipe) };
            sleep_forever()
        }
    }
}

/// The reaper and the chain below it, asleep; killed and reaped when dropped. The
/// helper is a child subreaper itself, so everything of it ends up its child.
struct Chain {
    /// The process the helper forked: the subreaper, or the pid namespace's maker
    /// (the init's parent).
    forked: i32,
    /// The reaper, then the chain's levels: `pids[level]`, level 0 the reaper.
    pids: Vec<i32>,
}

/// Why a chain could not be made here: the kernel refuses what it needs.
struct Refused(String);

impl Chain {
    /// Forks the reaper, which forks the chain; `inherited` are the helper's
    /// descriptors the chain must not keep.
    fn hang(
        reaper: Reaper,
        depth: usize,
        reap_at_once: bool,
        inherited: &[RawFd],
    ) -> Result<std::result::Result<Chain, Refused>> {
        let mut fds = [0; 2];
        // SAFETY: a two-int array for pipe(2) to fill.
        let piped = unsafe { libc::pipe(fds.as_mut_ptr()) };
        ensure!(piped == 0, "pipe: {}", std::io::Error::last_os_error());
        // SAFETY: pipe(2) just gave us both descriptors; each is owned once, here.
        let (mut rx, tx) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        // SAFETY: fork(2) in the helper, which has one thread; the child runs
        // `subreaper` or `pid_namespace_maker`, which never return.
        let forked = unsafe { libc::fork() };
        ensure!(forked >= 0, "fork: {}", std::io::Error::last_os_error());
        if forked == 0 {
            let mut close = inherited.to_vec();
            close.push(rx.as_raw_fd());
            detach_from_helper(&close);
            match reaper {
                Reaper::Subreaper => subreaper(tx.as_raw_fd(), depth, reap_at_once),
                Reaper::PidNamespaceInit => {
                    pid_namespace_maker(tx.as_raw_fd(), depth, reap_at_once)
                }
            }
        }
        drop(tx);
        let mut chain = Chain {
            forked,
            pids: Vec::with_capacity(depth + 1),
        };
        while chain.pids.len() <= depth {
            let mut bytes = [0u8; 4];
            match rx.read_exact(&mut bytes) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => bail!(
                    "the chain stopped after {} of its {depth} levels",
                    chain.pids.len().saturating_sub(1)
                ),
                Err(e) => return Err(e).context("reading the chain's pids"),
            }
            let pid = i32::from_ne_bytes(bytes);
            if pid < 0 {
                return Ok(Err(Refused(format!(
                    "unshare(CLONE_NEWUSER | CLONE_NEWPID) as nobody: {}",
                    std::io::Error::from_raw_os_error(-pid)
                ))));
            }
            chain.pids.push(pid);
        }
        ensure!(
            reaper == Reaper::PidNamespaceInit || chain.reaper() == forked,
            "the subreaper {forked} reported itself as {}",
            chain.reaper()
        );
        Ok(Ok(chain))
    }

    fn reaper(&self) -> i32 {
        self.pids[0]
    }

    /// SIGKILLs level `level`; what hung below it goes to the reaper, which it
    /// waits for.
    fn kill_level(&self, level: usize) -> Result<()> {
        let (victim, orphan) = (self.pids[level], self.pids[level + 1]);
        // SAFETY: kill(2) of a process of ours.
        let ret = unsafe { libc::kill(victim, libc::SIGKILL) };
        ensure!(
            ret == 0,
            "kill level {level} ({victim}): {}",
            std::io::Error::last_os_error()
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let parent = parent_of(orphan)?;
            if parent == self.reaper() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "level {} ({orphan}) has parent {parent}, not the reaper {}, after its \
                 parent was killed",
                level + 1,
                self.reaper()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills every process of the chain, and reaps them all: they are this
    /// subreaper's children by then, or the reaped children of a namespace's init.
    fn tear_down(&mut self) -> Result<()> {
        if self.forked == 0 {
            return Ok(());
        }
        let all: Vec<i32> = [self.forked].iter().chain(&self.pids).copied().collect();
        self.forked = 0;
        self.pids.clear();
        for &pid in &all {
            // SAFETY: kill(2) of a process of ours (ESRCH once gone: fine).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // Hundreds of processes, killed and reaped under KASAN: tens of seconds.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            loop {
                // SAFETY: waitpid(2) for any child, without blocking, status unwanted.
                let reaped = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
                if reaped <= 0 {
                    break;
                }
            }
            // SAFETY: kill(2) with signal 0 only asks whether the process exists.
            let left = all
                .iter()
                .filter(|&&pid| unsafe { libc::kill(pid, 0) } == 0);
            let left = left.count();
            if left == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{left} processes of the chain are still there after SIGKILL"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Chain {
    fn drop(&mut self) {
        let _ = self.tear_down();
    }
}

/// The parent of `pid`, as /proc/<pid>/stat says (in the root pid namespace).
fn parent_of(pid: i32) -> Result<i32> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let rest = &text[text.rfind(')').context("no ) in stat")? + 2..];
    rest.split(' ')
        .nth(1)
        .context("no ppid in stat")?
        .parse()
        .with_context(|| format!("ppid in {text:?}"))
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !done() {
        ensure!(Instant::now() < deadline, "{what} within {limit:?}");
        thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// `hardening-child absorb <reaper> <depth> <members> <killed> <stay|die> <order>`, as
/// nobody: the scenario, up to its first collection; says "collected ..." and
/// waits for a byte on stdin before touching the session again (a sampler that
/// died holding its lock would hang it), then checks that a further sample comes,
/// ends the session, sees the end, tears the chain down and says "ended ...".
pub fn absorb(args: &[String]) -> Result<()> {
    let scenario = Scenario::parse(args)?;
    let file = raw_open()?;
    follow(
        &file,
        abi::Follow {
            scope: abi::FOLLOW_ALL,
            flags: abi::TARGET_INHERIT,
            ..abi::Follow::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("FOLLOW all with inherit: errno {e}"))?;
    // Whatever the chain leaves, orphaned, is ours to reap at the end.
    // SAFETY: prctl(2) with integer arguments, on this process alone.
    let subreaping = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    ensure!(
        subreaping == 0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
    let mut chain = match Chain::hang(
        scenario.reaper,
        scenario.depth,
        scenario.members_die,
        &[file.as_raw_fd()],
    )? {
        Ok(chain) => chain,
        Err(Refused(why)) => {
            println!("refused {why}");
            return Ok(());
        }
    };
    // Inherit: the reaper joins (its join completes at the first collection),
    // before the members or after them.
    let reaper = chain.reaper();
    let register = || {
        kmod::write_status(format!("R {reaper}\n").as_bytes())
            .map_err(|e| anyhow::anyhow!("R {reaper}: errno {e}"))
    };
    if !scenario.members_first {
        register()?;
    }
    // Deeper below it than the module looks: each joins, after it in the list, or is
    // refused for its depth; not for anything that says the set-up is wrong.
    let first_member = scenario.depth + 1 - scenario.members;
    let mut added = Vec::new();
    let mut refused = BTreeSet::new();
    for &pid in &chain.pids[first_member..] {
        match add(&file, pid, 0, 0) {
            Ok(()) => added.push(pid),
            Err(errno) => {
                ensure!(
                    !SET_UP_WRONG.contains(&errno),
                    "ADD of {pid}, a member-to-be: errno {errno}"
                );
                refused.insert(errno);
            }
        }
    }
    if scenario.members_first {
        register()?;
    }
    chain.kill_level(scenario.killed)?;
    set_mode(&file, abi::MODE_RELAXED).map_err(|e| anyhow::anyhow!("SET_MODE relaxed: {e}"))?;
    let map = Mapping::new(&file)?;
    let mut died = 0;
    if scenario.members_die {
        // The first member, right after the reaper in the session's list, stays.
        for &pid in added.iter().skip(1).step_by(2) {
            // SAFETY: kill(2) of a process of ours; its parent ignores SIGCHLD, so
            // the kernel reaps it as it dies.
            let killed = unsafe { libc::kill(pid, libc::SIGKILL) };
            ensure!(
                killed == 0,
                "kill member {pid}: {}",
                std::io::Error::last_os_error()
            );
            died += 1;
            thread::sleep(BETWEEN_DEATHS);
        }
    }
    thread::sleep(FIRST_COLLECTION_WAIT);
    let samples = map.write_seq();
    println!(
        "collected: {} of {} members added{}, {died} killed during the first collection; \
         {samples} samples",
        added.len(),
        scenario.members,
        if refused.is_empty() {
            String::new()
        } else {
            format!(" (the others refused: errno {refused:?})")
        },
    );
    std::io::stdout().flush()?;
    std::io::stdin()
        .read_exact(&mut [0u8])
        .context("waiting for the test's go")?;

    // The session goes on: the reaper is alive, so samples keep coming.
    wait_until(
        "no sample after the first collection's",
        Duration::from_secs(20),
        || map.write_seq() > samples,
    )?;
    ioctl(&file, abi::IOC_END, std::ptr::null_mut::<u8>())
        .map_err(|e| anyhow::anyhow!("END: errno {e}"))?;
    wait_until(
        "the consumer saw no end of the session",
        Duration::from_secs(20),
        || map.canceled(),
    )?;
    let total = map.write_seq();
    chain.tear_down()?;
    drop((map, file));
    println!("ended after {total} samples");
    Ok(())
}

/// The test's side of a scenario: the module loaded, nobody's helper run; the
/// kernel's log checked right after the first collection, before anything takes the
/// session's lock again; then the session must go on, end, and leave the module
/// nothing to hold and free to unload.
fn absorbed_without_harm(env: &Env, period_ms: u32, scenario: &Scenario) -> Result<()> {
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[&format!("period_ms={period_ms}")])?;
    open_to_all()?;
    let args = scenario.args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut helper = Profiled::spawn_mode("hardening-child", &args, Some(NOBODY))?;
    let collected = helper.read_line().context("nobody's helper")?;
    if let Some(why) = collected.strip_prefix("refused ") {
        helper.reap()?;
        module.unload()?;
        return Err(Skipped(why.to_string()).into());
    }
    ensure!(
        collected.starts_with("collected: "),
        "nobody's helper said {collected:?}"
    );
    if let Err(e) = mark.ensure_clean() {
        // A sampler that oopsed holding the session's lock would hang the helper's
        // exit, and our reap of it: leave it be (the module cannot unload either).
        std::mem::forget(helper);
        return Err(e.context(format!("after the first collection ({collected})")));
    }
    helper.go()?;
    let ended = helper
        .read_line()
        .context("nobody's helper, after the go")?;
    let reaped = helper.reap()?;
    ensure!(
        reaped.status == 0,
        "nobody's helper failed (status {:#x}) after saying {ended:?}",
        reaped.status
    );
    figure(&format!(
        "absorb: {:?}, {} levels, {} members, level {} killed: {collected}; {ended}",
        scenario.reaper, scenario.depth, scenario.members, scenario.killed
    ));
    // The chain is gone: the reaper's registration is forgotten within a second, and
    // the session's members went with it.
    klog::ensure_module_slab_objects(0, "registrations or members once all is gone")?;
    module.unload()?;
    mark.ensure_clean()
}

/// The review's recipe: a member 258 levels below a registered subreaper (two past
/// the module's walks), 248 once level 10 is killed.
pub fn a_member_reparented_into_an_inheriting_members_tree_is_absorbed_without_harm(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        50,
        &Scenario {
            reaper: Reaper::Subreaper,
            depth: 258,
            members: 1,
            killed: 10,
            members_die: false,
            members_first: false,
        },
    )
}

/// Far past the walks (300 levels), brought well inside (250).
pub fn a_member_added_300_levels_down_and_reparented_to_250_is_absorbed_without_harm(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        50,
        &Scenario {
            reaper: Reaper::Subreaper,
            depth: 300,
            members: 1,
            killed: 50,
            members_die: false,
            members_first: false,
        },
    )
}

/// One level past the walks (257), brought onto their very limit (256) by killing
/// the subreaper's child.
pub fn a_member_one_level_past_the_walks_reparented_onto_their_limit_is_absorbed_without_harm(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        50,
        &Scenario {
            reaper: Reaper::Subreaper,
            depth: 257,
            members: 1,
            killed: 1,
            members_die: false,
            members_first: false,
        },
    )
}

/// The reaper is the init of a pid namespace nobody made (in a user namespace of its
/// own); the session's opener, in the root namespace, names every pid.
pub fn a_member_reparented_to_an_inheriting_pid_namespace_init_is_absorbed_without_harm(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        50,
        &Scenario {
            reaper: Reaper::PidNamespaceInit,
            depth: 258,
            members: 1,
            killed: 10,
            members_die: false,
            members_first: false,
        },
    )
}

/// Forty members, 257 to 296 levels down, brought to 217-256 by killing level 40;
/// every second one after the first is killed (and reaped) while the first
/// collection absorbs the rest.
pub fn an_inheriting_join_absorbing_members_as_others_die_leaves_the_session_working(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        20,
        &Scenario {
            reaper: Reaper::Subreaper,
            depth: 296,
            members: 40,
            killed: 40,
            members_die: true,
            members_first: false,
        },
    )
}

/// As above, with the members ADDed before the reaper registers: whatever the depth,
/// its join then takes them in, as they die.
pub fn an_inheriting_join_absorbing_members_added_before_it_as_they_die_leaves_the_session_working(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        20,
        &Scenario {
            reaper: Reaper::Subreaper,
            depth: 296,
            members: 40,
            killed: 40,
            members_die: true,
            members_first: true,
        },
    )
}
