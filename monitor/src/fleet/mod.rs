//! One monitor for many targets (`--cgroups-under`, `--unit`): every cgroup the
//! selectors name is profiled as `--cgroup` profiles one, by a profile of its own on a
//! thread of its own (their samplers share one thread, their pressure watches one
//! watcher thread and one reader of the system-wide counters), and every profile
//! exports through one [`Hub`] on one address. The selectors are looked at again every
//! `--interval`: a target that appears (a service started, or restarted: its cgroup
//! re-created) is profiled from then; one whose cgroup is removed ends, as `--cgroup`
//! ends. At most `--max-targets` are exported at once; those found beyond are said on
//! standard error and counted on `/metrics`. A Kubernetes container is labelled with
//! its names once the node's files say them.

mod discover;
pub mod kubenames;
pub mod kubepods;
pub mod pattern;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use shared_layout::abi;

use crate::backend::procfs::fleet_faults::FleetFaults;
use crate::backend::procfs::sampler::SamplerPool;
use crate::backend::procfs::Procfs;
use crate::command::signals::Signals;
use crate::export::{FleetExport, Hub};
use crate::pressure::watch::PressurePool;
use crate::profile::error::ProfileError;
use crate::profile::{self, Request, Supervised};
use crate::system::cgroup::cgroup2_mounts;
use crate::system::error::SystemError;
use crate::system::exit;
pub use discover::Selector;
use discover::{Discovered, Found};
use kubenames::{KubeNames, LOG_DIR};
use kubepods::{classify, KubeCgroup};

/// The default of `--max-targets`.
pub const MAX_TARGETS: u16 = 256;
/// How often, at most, the fleet says its sampler thread came late.
const LATE_SAID_EVERY: Duration = Duration::from_secs(60);
/// The most names one line about left-out cgroups lists.
const NAMES_SAID: usize = 5;
/// How long a Kubernetes container is held, unexported, while its names are looked for:
/// its cgroup is made before it starts, the kubelet links its log once it has started.
const NAMES_AWAITED: Duration = Duration::from_secs(5);

/// What a fleet monitor is asked for.
pub struct FleetRequest {
    pub selectors: Vec<Selector>,
    pub max_targets: usize,
    /// What each target's profile is asked for, but its cgroup.
    pub template: Request,
}

/// A target's running profile.
struct Profiling {
    dir: PathBuf,
    /// Stops it.
    signals: Signals,
    profile: JoinHandle<Result<u8, ProfileError>>,
}

/// A Kubernetes container held from export until its names are found.
struct Awaited {
    pod_uid: String,
    container_id: Option<String>,
    since: Instant,
}

/// The fleet's targets and what it has said of the cgroups it does not profile. Every
/// set is of what the last look found: none outgrows the cgroups there are.
struct Fleet {
    /// By target name: one profile per name, a returning target's only once the
    /// previous one's has ended and left its final values to go on from.
    running: BTreeMap<String, Profiling>,
    left_out: BTreeSet<String>,
    unnamed: BTreeSet<PathBuf>,
    /// Kubernetes containers' names, from the kubelet's log layout.
    names: KubeNames,
    /// By target name: held targets, each running or just ended.
    awaited: BTreeMap<String, Awaited>,
    /// Every target's pressure watch: one watcher thread, the system-wide counters read
    /// for all targets at once.
    pressure: PressurePool,
    /// Every target's procfs passes, on one thread.
    samplers: SamplerPool,
    /// Every target's faults, attributed from one set of events.
    faults: Option<FleetFaults>,
    /// The sampler thread's late passes already said, and when they were last said.
    late_said: (u64, Option<Instant>),
}

/// Profiles every target the selectors name until SIGINT, SIGTERM or SIGHUP.
pub fn run(mut request: FleetRequest) -> Result<u8, ProfileError> {
    let mount = (cgroup2_mounts().into_iter().next()).unwrap_or_else(|| "/sys/fs/cgroup".into());
    let roots = discover::roots(&request.selectors, &mount)?;
    let signals = Signals::install()?;
    let faults = open_faults(&mut request.template, request.max_targets);
    let linger = request.template.export.linger;
    let hub = Arc::new(Hub::new(linger));
    let template = &request.template;
    let export = FleetExport::start(&template.export, Arc::clone(&hub), template.interval)?;
    let mut fleet = Fleet {
        running: BTreeMap::new(),
        left_out: BTreeSet::new(),
        unnamed: BTreeSet::new(),
        names: KubeNames::new(Path::new(LOG_DIR), template.interval),
        awaited: BTreeMap::new(),
        pressure: PressurePool::new(system_fresh_for(template))
            .map_err(SystemError::doing("starting the memory pressure watcher"))?,
        samplers: SamplerPool::new().map_err(SystemError::doing("starting the sampler"))?,
        faults,
        late_said: (0, None),
    };
    while signals.received_count() == 0 {
        fleet.reap();
        fleet.show_awaited(&hub);
        fleet.say_late();
        let discovered = discover::discover(&roots);
        fleet.start_new(discovered, &hub, &request);
        wait_or_signal(&signals, fleet.next_look(request.template.interval));
    }
    fleet.stop_all();
    let scrapers = usize::from(request.template.export.linger_scrapers.max(1));
    let signaled = signals.received_count();
    let (notes, received_nothing) =
        export.finish(linger, scrapers, || signals.received_count() != signaled);
    for note in notes {
        say(&note);
    }
    if received_nothing {
        say(&format!(
            "exit status {}: the OTLP collector received none of the pushes",
            exit::NOTHING_PUSHED
        ));
        return Ok(exit::NOTHING_PUSHED);
    }
    Ok(0)
}

impl Fleet {
    /// Starts a profile for each cgroup found that has none while fewer than
    /// `--max-targets` are exported (running, or lingering unless the cgroup is theirs);
    /// says which it leaves out, each once while it stays left out.
    fn start_new(&mut self, discovered: Discovered, hub: &Arc<Hub>, request: &FleetRequest) {
        let mut exported = hub.prune();
        let mut left_out = BTreeSet::new();
        for found in discovered.found {
            if self.running.contains_key(&found.name) {
                continue;
            }
            let returning = hub.exports(&found.name);
            if !returning && exported >= request.max_targets {
                left_out.insert(found.name);
                continue;
            }
            let pools = (&self.pressure, &self.samplers, self.faults.as_ref());
            match start_target(&found, hub, &request.template, &mut self.names, pools) {
                Ok((profiling, awaited)) => {
                    say(&format!("profiling {}", found.name));
                    exported += usize::from(!returning);
                    if let Some(awaited) = awaited {
                        self.awaited.insert(found.name.clone(), awaited);
                    }
                    self.running.insert(found.name, profiling);
                }
                // Out of threads (a ulimit): the others go on, this one is tried again.
                Err(e) => say(&format!("{}: {:#}", found.name, anyhow::Error::new(e))),
            }
        }
        let newly: Vec<&String> = left_out.difference(&self.left_out).collect();
        if !newly.is_empty() {
            say(&format!(
                "{} not profiled: --max-targets {} are exported (give a larger --max-targets, \
                 or narrower --cgroups-under or --unit): {}",
                cgroups(newly.len()),
                request.max_targets,
                listed(&newly)
            ));
        }
        hub.set_left_out(left_out.len());
        self.left_out = left_out;
        let unnamed: BTreeSet<PathBuf> = discovered.unnamed.into_iter().collect();
        let newly: Vec<String> = (unnamed.difference(&self.unnamed))
            .map(|dir| dir.display().to_string())
            .collect();
        if !newly.is_empty() {
            say(&format!(
                "{} not profiled: a name that is not UTF-8 cannot be a label's value: {}",
                cgroups(newly.len()),
                listed(&newly)
            ));
        }
        self.unnamed = unnamed;
    }

    /// Forgets the profiles that ended (their cgroup removed), saying so, and why one
    /// failed.
    fn reap(&mut self) {
        let ended: Vec<String> = (self.running.iter())
            .filter(|(_, p)| p.profile.is_finished())
            .map(|(name, _)| name.clone())
            .collect();
        for name in ended {
            let Some(profiling) = self.running.remove(&name) else {
                continue;
            };
            match profiling.profile.join() {
                Ok(Ok(_)) => say(&format!("{name} ended: its cgroup was removed")),
                // Removed between the look and the profile's start: seen again if it returns.
                Ok(Err(ProfileError::Cgroup(_))) => {}
                Ok(Err(e)) => say(&format!(
                    "{}: {:#}",
                    profiling.dir.display(),
                    anyhow::Error::new(e)
                )),
                Err(_) => say(&format!(
                    "{}: its profile panicked",
                    profiling.dir.display()
                )),
            }
        }
    }

    /// Shows each held target with the names found, once they all are, or once
    /// [`NAMES_AWAITED`] has passed or its profile ended without them.
    fn show_awaited(&mut self, hub: &Hub) {
        let now = Instant::now();
        let (running, names) = (&self.running, &mut self.names);
        self.awaited.retain(|target, awaited| {
            let found = names.lookup(&awaited.pod_uid, awaited.container_id.as_deref(), now);
            let ended = !running.contains_key(target);
            if !(found.settled || ended || now.duration_since(awaited.since) >= NAMES_AWAITED) {
                return true;
            }
            if hub.show(target, &found.labels) {
                return false;
            }
            if ended {
                hub.unhold(target);
            }
            // Still running and not attached yet: shown at a later look.
            !ended
        });
    }

    /// How long until the next look: an `interval`, or less when a held target's wait
    /// for its names ends sooner.
    fn next_look(&self, interval: Duration) -> Duration {
        let now = Instant::now();
        (self.awaited.values())
            .map(|awaited| (awaited.since + NAMES_AWAITED).saturating_duration_since(now))
            .fold(interval, Duration::min)
    }

    /// Stops every profile and waits for their ends.
    /// The sampler thread's passes that came late since it was last said (at most once
    /// every [`LATE_SAID_EVERY`]): a round of the targets' passes outlasted a period, as
    /// many targets at a short `--period` make it. Each target's summary counts its own,
    /// but a fleet's targets' summaries are shown nowhere.
    fn say_late(&mut self) {
        let late = self.samplers.late_passes();
        let (said, said_at) = self.late_said;
        if late == said || said_at.is_some_and(|at| at.elapsed() < LATE_SAID_EVERY) {
            return;
        }
        say(&format!(
            "the sampler thread came late {} times{}: its round of {} targets' passes \
             outlasted their --period, whose counts went into their next rows (a longer \
             --period or fewer targets keeps it on time)",
            late - said,
            if said_at.is_some() { " more" } else { "" },
            self.running.len(),
        ));
        self.late_said = (late, Some(Instant::now()));
    }

    fn stop_all(mut self) {
        for profiling in self.running.values() {
            profiling.signals.request_stop();
        }
        while !self.running.is_empty() {
            self.reap();
            thread::sleep(Duration::from_millis(20));
        }
        // Their last tables made: what the drain thread may never say (held up).
        if let Some(faults) = &self.faults {
            faults.say_at_end();
        }
    }
}

/// "1 cgroup", "3 cgroups".
fn cgroups(n: usize) -> String {
    format!("{n} cgroup{}", if n == 1 { "" } else { "s" })
}

/// The first few of `names`, and how many more.
fn listed(names: &[impl AsRef<str>]) -> String {
    let shown: Vec<&str> = names.iter().take(NAMES_SAID).map(AsRef::as_ref).collect();
    let more = names.len().saturating_sub(NAMES_SAID);
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{}{more}", shown.join(", "))
}

fn say(line: &str) {
    let name = crate::program_name();
    let _ = std::io::stderr().write_all(format!("{name}: {line}\n").as_bytes());
}

/// A target's procfs ring: 32 KiB, its control page and 448 samples. Targets are many and
/// drained every interval: a ring of 22 s at 50 ms each, not the 512 KiB that stays
/// resident once it has wrapped.
const TARGET_RING_PAGES: u64 = 8;

/// How old a reading of the system-wide pressure counters may be served to a target: a
/// tenth of the period, so that a thousand targets read them at most ten times a period,
/// not each at each of its drains (a thousand times an interval), and a row's share of
/// them is placed at most a tenth of a period late.
fn system_fresh_for(template: &Request) -> Duration {
    let period_ms = template.period_ms.unwrap_or(abi::PERIOD_MS_DEFAULT);
    Duration::from_millis(period_ms.into()) / 10
}

/// A profile of the cgroup `found`, as `--cgroup` makes one, exported through `hub`; a
/// Kubernetes container whose names the node does not say yet is held, and awaited.
fn start_target(
    found: &Found,
    hub: &Arc<Hub>,
    template: &Request,
    names: &mut KubeNames,
    (pressure, samplers, faults): (&PressurePool, &SamplerPool, Option<&FleetFaults>),
) -> Result<(Profiling, Option<Awaited>), ProfileError> {
    let mut derived = match classify(&found.name) {
        Some(KubeCgroup::Container(labels)) => labels,
        _ => Vec::new(),
    };
    let awaited = with_names(&mut derived, names);
    if awaited.is_some() {
        hub.hold(&found.name);
    }
    let signals = Signals::unhooked();
    let request = Request {
        cgroup: Some(found.dir.clone()),
        supervised: Some(Supervised {
            hub: Arc::clone(hub),
            derived,
            signals: signals.clone(),
            ring_pages: TARGET_RING_PAGES,
            pressure: pressure.clone(),
            samplers: samplers.clone(),
            faults: faults.cloned(),
        }),
        ..template.clone()
    };
    let profile = thread::Builder::new()
        .name("pfprof-target".into())
        .spawn(move || profile::profile::<Procfs>(request))
        .map_err(|e| {
            hub.unhold(&found.name);
            SystemError::doing("starting a target's profile")(e)
        })?;
    let profiling = Profiling {
        dir: found.dir.clone(),
        signals,
        profile,
    };
    Ok((profiling, awaited))
}

/// Adds a Kubernetes container's names to its `derived` labels when the node says them
/// all now; what to look for again later when it does not yet.
fn with_names(derived: &mut Vec<(&'static str, String)>, names: &mut KubeNames) -> Option<Awaited> {
    let label = |key: &str| {
        (derived.iter())
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v.clone())
    };
    let pod_uid = label("pod_uid")?;
    let container_id = label("container_id");
    let now = Instant::now();
    let found = names.lookup(&pod_uid, container_id.as_deref(), now);
    if found.settled {
        derived.extend(found.labels);
        return None;
    }
    Some(Awaited {
        pod_uid,
        container_id,
        since: now,
    })
}

/// The events every target's faults are attributed from, unless `--no-attribution`;
/// where they cannot be opened, no target's are attributed, said once here. At most
/// `max_targets` at once.
fn open_faults(template: &mut Request, max_targets: usize) -> Option<FleetFaults> {
    let minor_sampling = template.attribution?;
    match FleetFaults::open(minor_sampling, max_targets) {
        Ok(faults) => Some(faults),
        Err(e) => {
            say(&format!(
                "faults are not attributed to mappings: {e}; {}",
                e.advice()
            ));
            template.attribution = None;
            None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_of_names_is_cut_and_counted() {
        let names: Vec<String> = (0..8).map(|i| format!("/c{i}")).collect();
        assert_eq!(listed(&names[..2]), "/c0, /c1");
        assert_eq!(listed(&names), "/c0, /c1, /c2, /c3, /c4 and 3 more");
        assert_eq!(cgroups(1), "1 cgroup");
        assert_eq!(cgroups(3), "3 cgroups");
    }

    #[test]
    fn a_targets_ring_holds_many_intervals_of_samples() {
        // 20 samples a second at the default period, drained every second by default.
        assert_eq!(shared_layout::abi::slots_in(TARGET_RING_PAGES), 448);
    }
}
