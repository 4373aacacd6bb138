//! A process's ancestry changes under the module: an orphan is reparented to its
//! nearest child subreaper, or to its pid namespace's init. A process added too deep
//! below an inheriting member for the module's walks up the tree (256 parents) to see
//! that member is then brought inside its tree, and the member's join absorbs it.
//! The review of 2026-11-26 (H1) found that join freeing the very member its list
//! walk was to visit next: a use-after-free in the sampler, which any user can set
//! up. Each test builds that state as nobody, one way or another, and checks that
//! the kernel stays silent, the session goes on and ends, and nothing is left behind.

mod chain;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;

use crate::device::{add, follow, ioctl, raw_open, set_mode, Mapping};
use crate::harness::{figure, Env, Skipped};
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::users::{open_to_all, NOBODY};

use chain::{Chain, Reaper, Refused};

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
/// `must_join`: the members lie within the depth a session takes, and must join.
fn absorbed_without_harm(
    env: &Env,
    period_ms: u32,
    scenario: &Scenario,
    must_join: bool,
) -> Result<()> {
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
    // Members the session takes (within the depth bound) must have joined: else the
    // test tested nothing.
    if must_join {
        let added: usize = collected
            .strip_prefix("collected: ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no count of members added in {collected:?}"))?;
        ensure!(
            added == scenario.members,
            "members within the depth bound were refused: {collected}"
        );
    }
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
        false,
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
        false,
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
        false,
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
        false,
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
        false,
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
        false,
    )
}

/// Forty members within the depth a session takes (211 to 250 levels below the
/// reaper, 171 to 210 once level 40 is killed), ADDed before the reaper registers (the
/// other order refuses them, EEXIST: its tree counts them already), then every second
/// one after the first dies while the reaper's join absorbs the rest: the review's H1
/// path, which the deeper scenarios above, their members refused since the depth
/// bound (ELOOP), no longer reach.
pub fn an_inheriting_join_absorbing_members_within_the_depth_bound_added_before_it_as_they_die_leaves_the_session_working(
    env: &Env,
) -> Result<()> {
    absorbed_without_harm(
        env,
        20,
        &Scenario {
            reaper: Reaper::Subreaper,
            depth: 250,
            members: 40,
            killed: 40,
            members_die: true,
            members_first: true,
        },
        true,
    )
}
