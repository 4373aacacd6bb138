//! One monitor for many targets (`--cgroups-under`, `--unit`): every cgroup the
//! selectors name is profiled as `--cgroup` profiles one, by a profile of its own on a
//! thread of its own, and every profile exports through one [`Hub`] on one address. The
//! selectors are looked at again every `--interval`: a target that appears (a service
//! started, or restarted: its cgroup re-created) is profiled from then; one whose cgroup
//! is removed ends, as `--cgroup` ends. At most `--max-targets` are exported at once.

mod discover;
pub mod kubepods;
pub mod pattern;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::{raise, Signal};

use crate::backend::procfs::Procfs;
use crate::command::signals::Signals;
use crate::export::{FleetServer, FleetTarget, Hub};
use crate::profile::error::ProfileError;
use crate::profile::{self, Request};
use crate::system::cgroup::{cgroup2_mounts, Cgroup};
pub use discover::Selector;
use kubepods::{classify, KubeCgroup};

/// The default of `--max-targets`.
pub const MAX_TARGETS: u16 = 256;

/// What a fleet monitor is asked for.
pub struct FleetRequest {
    pub selectors: Vec<Selector>,
    pub max_targets: usize,
    /// `--prometheus`: the one address every target is served on.
    pub prometheus: String,
    /// What each target's profile is asked for, but its cgroup.
    pub template: Request,
}

/// The running targets' profiles, by cgroup directory.
type Running = BTreeMap<PathBuf, JoinHandle<Result<u8, ProfileError>>>;

/// Profiles every target the selectors name until SIGINT, SIGTERM or SIGHUP.
pub fn run(request: FleetRequest) -> Result<u8, ProfileError> {
    for selector in &request.selectors {
        if let Selector::Under(dir) = selector {
            Cgroup::open(dir)?;
        }
    }
    let mount = (cgroup2_mounts().into_iter().next()).unwrap_or_else(|| "/sys/fs/cgroup".into());
    let signals = Signals::install()?;
    let linger = request.template.export.linger;
    let hub = Arc::new(Hub::new(linger));
    let server = FleetServer::start(&request.prometheus, Arc::clone(&hub))?;
    let mut running = Running::new();
    let mut refused = BTreeSet::new();
    while signals.received_count() == 0 {
        reap(&mut running);
        let found = discover::discover(&request.selectors, &mount);
        let new: Vec<PathBuf> = (found.into_iter())
            .filter(|dir| !running.contains_key(dir))
            .collect();
        for (dir, profile) in start_new(new, &hub, &request, &mount, &mut refused) {
            running.insert(dir, profile);
        }
        wait_or_signal(&signals, request.template.interval);
    }
    stop_all(running);
    let scrapers = usize::from(request.template.export.linger_scrapers.max(1));
    let signaled = signals.received_count();
    let note = server.finish(linger, scrapers, || signals.received_count() != signaled);
    say(&note);
    Ok(0)
}

/// Starts a profile for each of the cgroups `new` while fewer than `--max-targets` are
/// exported (running, or lingering unless the cgroup is theirs); says once of each it
/// leaves out.
fn start_new(
    new: Vec<PathBuf>,
    hub: &Arc<Hub>,
    request: &FleetRequest,
    mount: &Path,
    refused: &mut BTreeSet<PathBuf>,
) -> Vec<(PathBuf, JoinHandle<Result<u8, ProfileError>>)> {
    let mut exported = hub.prune();
    let mut started = Vec::new();
    for dir in new {
        let target = target_name(&dir);
        let returning = hub.holds(&target);
        if !returning && exported >= request.max_targets {
            if refused.insert(dir) {
                say(&format!(
                    "{target} not profiled: --max-targets {} are exported",
                    request.max_targets
                ));
            }
            continue;
        }
        exported += usize::from(!returning);
        refused.remove(&dir);
        let profile = start_target(&dir, hub, &request.template, mount);
        started.push((dir, profile));
    }
    started
}

/// The target's name, its path below the mount, as `--cgroup` names it.
fn target_name(dir: &Path) -> String {
    Cgroup::open(dir).map_or_else(|_| dir.display().to_string(), |c| c.name().to_owned())
}

fn say(line: &str) {
    let _ = std::io::stderr().write_all(format!("monitor: {line}\n").as_bytes());
}

/// A profile of the cgroup at `dir`, as `--cgroup` makes one, exported through `hub`.
fn start_target(
    dir: &Path,
    hub: &Arc<Hub>,
    template: &Request,
    mount: &Path,
) -> JoinHandle<Result<u8, ProfileError>> {
    let name = dir.strip_prefix(mount).unwrap_or(dir);
    let derived = match classify(&format!("/{}", name.display())) {
        Some(KubeCgroup::Container(labels)) => labels,
        _ => Vec::new(),
    };
    let request = Request {
        cgroup: Some(dir.to_path_buf()),
        fleet: Some(FleetTarget {
            hub: Arc::clone(hub),
            derived,
        }),
        ..template.clone()
    };
    thread::spawn(move || profile::profile::<Procfs>(request))
}

/// Forgets the profiles that ended (their cgroup removed), saying why one failed.
fn reap(running: &mut Running) {
    let ended: Vec<PathBuf> = (running.iter())
        .filter(|(_, profile)| profile.is_finished())
        .map(|(dir, _)| dir.clone())
        .collect();
    for dir in ended {
        let Some(profile) = running.remove(&dir) else {
            continue;
        };
        match profile.join() {
            Ok(Ok(_)) => {}
            // Removed between the look and the profile's start: seen again if it returns.
            Ok(Err(ProfileError::Cgroup(_))) => {}
            Ok(Err(e)) => say(&format!("{}: {:#}", dir.display(), anyhow::Error::new(e))),
            Err(_) => say(&format!("{}: its profile panicked", dir.display())),
        }
    }
}

/// Waits `interval`, or less when a signal comes.
fn wait_or_signal(signals: &Signals, interval: Duration) {
    let until = Instant::now() + interval;
    while signals.received_count() == 0 && Instant::now() < until {
        thread::sleep(Duration::from_millis(20));
    }
}

/// Every profile got the signal that ends the fleet monitor; one that started while it
/// came (its handlers not yet installed) is sent another.
fn stop_all(mut running: Running) {
    let mut next_nudge = Instant::now() + Duration::from_secs(1);
    while !running.is_empty() {
        reap(&mut running);
        if Instant::now() >= next_nudge {
            let _ = raise(Signal::SIGTERM);
            next_nudge += Duration::from_secs(1);
        }
        thread::sleep(Duration::from_millis(20));
    }
}
