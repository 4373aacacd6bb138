//! A fleet monitor's targets on one `/metrics`: each target's profile posts to a board of
//! its own, registered here under its `target` label, and one server encodes them all.
//! A target that ended keeps its final values for `--linger`; one that comes back within
//! it (a restarted service's re-created cgroup) resumes them, so its counters go on.
//! A target whose labels are still being learnt (a Kubernetes container's names) is held:
//! counted from its start, shown only once its labels are complete, so that its series
//! never changes its labels.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::board::Board;
use super::error::ExportError;
use super::metrics::{Labels, Snapshot};
use super::otlp::{Pushed, Pusher, Values};
use super::prometheus::exposition::{encode_targets, FleetGauges, TextFormat};
use super::prometheus::http::{Server, Shown};
use super::textfile::Writer;
use super::ExportOptions;

pub struct Hub {
    targets: Mutex<Targets>,
    /// How long an ended target's final values stay.
    linger: Duration,
    /// The fleet monitor is ending: what is shown now is final.
    ending: AtomicBool,
    final_scrapers: AtomicUsize,
    closed: AtomicBool,
    /// Cgroups found but not profiled, at the last look.
    left_out: AtomicUsize,
    /// The OTLP pusher delivered the final values.
    pushed: AtomicBool,
    monitor_pid: String,
}

#[derive(Default)]
struct Targets {
    entries: BTreeMap<String, Entry>,
    /// Targets to hold when their profiles attach.
    to_hold: BTreeSet<String>,
}

struct Entry {
    labels: Arc<Labels>,
    board: Arc<Board>,
    /// When its profile was first seen ended.
    ended: Option<Instant>,
    /// Not shown until [`Hub::show`] completes its labels.
    held: bool,
}

impl Hub {
    pub fn new(linger: Duration) -> Hub {
        Hub {
            targets: Mutex::new(Targets::default()),
            linger,
            ending: AtomicBool::new(false),
            final_scrapers: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            left_out: AtomicUsize::new(0),
            pushed: AtomicBool::new(false),
            monitor_pid: std::process::id().to_string(),
        }
    }

    /// How many cgroups the last look found and left out (`--max-targets`).
    pub fn set_left_out(&self, left_out: usize) {
        self.left_out.store(left_out, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, Targets> {
        // Entries are replaced whole: a panic elsewhere leaves none half-made.
        self.targets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a target's board; the final values of its previous profile when it had
    /// one (it went away and came back within `--linger`), to go on from.
    pub(super) fn attach(&self, labels: Arc<Labels>, board: Arc<Board>) -> Option<Snapshot> {
        let mut targets = self.lock();
        let entry = Entry {
            labels: Arc::clone(&labels),
            board,
            ended: None,
            held: targets.to_hold.remove(&labels.target),
        };
        let previous = targets.entries.insert(labels.target.clone(), entry)?;
        Some(previous.board.latest().0)
    }

    /// Holds `target`'s profile when it attaches (call before starting it): counted, not
    /// shown, until [`Hub::show`] or [`Hub::unhold`].
    pub fn hold(&self, target: &str) {
        self.lock().to_hold.insert(target.to_owned());
    }

    /// Shows the held `target` with `labels` added to those its profile attached with;
    /// false while its profile has not attached yet.
    pub fn show(&self, target: &str, labels: &[(&'static str, String)]) -> bool {
        let mut targets = self.lock();
        let Some(entry) = targets.entries.get_mut(target).filter(|entry| entry.held) else {
            return false;
        };
        let mut completed = Labels::clone(&entry.labels);
        completed.derived.extend_from_slice(labels);
        entry.labels = Arc::new(completed);
        entry.held = false;
        // One that ended while held lingers from now: its final values were never shown.
        entry.ended = entry.ended.map(|_| Instant::now());
        true
    }

    /// Forgets to hold `target`: its profile ended, or failed to start, before attaching.
    pub fn unhold(&self, target: &str) {
        self.lock().to_hold.remove(target);
    }

    /// Forgets the targets that ended longer than `--linger` ago; how many are left.
    pub fn prune(&self) -> usize {
        let now = Instant::now();
        let mut targets = self.lock();
        targets.entries.retain(|_, entry| {
            if entry.ended.is_none() && entry.board.latest().0.done {
                entry.ended = Some(now);
            }
            !matches!(entry.ended, Some(ended) if now.duration_since(ended) >= self.linger)
        });
        targets.entries.len()
    }

    /// Whether `target` is exported now (running, or its final values lingering).
    pub fn exports(&self, target: &str) -> bool {
        self.lock().entries.contains_key(target)
    }

    /// The fleet monitor is ending: every target's values are final from now, and shown
    /// with the labels they have.
    pub fn end(&self) {
        let mut targets = self.lock();
        for entry in targets.entries.values_mut() {
            entry.held = false;
        }
        targets.to_hold.clear();
        self.ending.store(true, Ordering::SeqCst);
    }

    pub fn final_scrapers(&self) -> usize {
        self.final_scrapers.load(Ordering::SeqCst)
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }
}

impl fmt::Debug for Hub {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Hub")
            .field("targets", &self.lock().entries.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Hub {
    /// Every shown target's latest snapshot, with its labels.
    fn targets(&self) -> Vec<(Snapshot, Arc<Labels>)> {
        (self.lock().entries.values())
            .filter(|entry| !entry.held)
            .map(|entry| (entry.board.latest().0, Arc::clone(&entry.labels)))
            .collect()
    }

    /// Waits until `until`, or `ready()`, or the close; whether still open.
    fn wait_open(&self, until: Instant, ready: impl Fn() -> bool) -> bool {
        while !self.is_closed() && !ready() && Instant::now() < until {
            std::thread::sleep(CLOSE_LOOK.min(until.saturating_duration_since(Instant::now())));
        }
        !self.is_closed()
    }
}

impl Pushed for Hub {
    fn wait_values(&self, until: Instant, urgent: bool) -> Option<Values> {
        let ending = || self.ending.load(Ordering::SeqCst);
        self.wait_open(until, || urgent && ending())
            .then(|| Values {
                // Read ending first: the targets read after it are final if it was.
                done: ending(),
                targets: self.targets(),
            })
    }

    fn final_pushed(&self) {
        self.pushed.store(true, Ordering::SeqCst);
    }
}

impl Shown for Hub {
    fn text(&self, format: TextFormat) -> (String, bool) {
        let done = self.ending.load(Ordering::SeqCst);
        let targets: Vec<(Snapshot, Labels)> = (self.targets().into_iter())
            .map(|(snapshot, labels)| (snapshot, Labels::clone(&labels)))
            .collect();
        let gauges = FleetGauges {
            left_out: self.left_out.load(Ordering::SeqCst),
            monitor_pid: &self.monitor_pid,
        };
        (encode_targets(&targets, Some(gauges), format), done)
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn scraped_final(&self, scrapers: usize) {
        self.final_scrapers.store(scrapers, Ordering::SeqCst);
    }

    /// Every target posts on a board of its own: a reader looks again at `until`.
    fn wait_newer(&self, seen: u64, until: Instant) -> Option<u64> {
        self.wait_open(until, || false).then_some(seen + 1)
    }
}

/// How soon a reader waiting on the hub sees it closed.
const CLOSE_LOOK: Duration = Duration::from_millis(50);

/// A fleet monitor's exporters: every target of `hub` on one `--prometheus` address, in
/// one `--textfile` file and in one `--otlp` push each interval (a resource per target).
pub struct FleetExport {
    hub: Arc<Hub>,
    server: Option<Server>,
    textfile: Option<Writer>,
    otlp: Option<Pusher>,
}

impl FleetExport {
    /// Binds the address and checks the directory now: a mistake fails before anything
    /// is profiled. The file is written every `interval`.
    pub fn start(
        options: &ExportOptions,
        hub: Arc<Hub>,
        interval: Duration,
    ) -> Result<FleetExport, ExportError> {
        let shown: Arc<dyn Shown> = Arc::clone(&hub) as Arc<dyn Shown>;
        let server = (options.prometheus.as_deref())
            .map(|addr| Server::start(addr, Arc::clone(&shown)))
            .transpose()?;
        let name = format!("pfprof-fleet-{}.prom", hub.monitor_pid);
        let textfile = (options.textfile.as_deref())
            .map(|dir| Writer::start(dir, &name, shown, interval))
            .transpose()?;
        let env = |name: &str| std::env::var(name).ok();
        let pushed: Arc<dyn Pushed> = Arc::clone(&hub) as Arc<dyn Pushed>;
        let otlp = (options.otlp.url.is_some())
            .then(|| Pusher::start(&options.otlp, &env, pushed, interval))
            .transpose()?;
        Ok(FleetExport {
            hub,
            server,
            textfile,
            otlp,
        })
    }

    /// Every target ended: their final values are served until `scrapers` scrapers got
    /// them, pushed until the collector has them, and the file kept meanwhile (alone,
    /// the whole linger: its readers cannot be seen), `linger` passing first, or
    /// `interrupted()`. One summary note per exporter, and whether the OTLP collector
    /// received nothing at all.
    pub fn finish(
        self,
        linger: Duration,
        scrapers: usize,
        interrupted: impl Fn() -> bool,
    ) -> (Vec<String>, bool) {
        self.hub.end();
        let deadline = Instant::now() + linger;
        let textfile_alone =
            self.textfile.is_some() && self.server.is_none() && self.otlp.is_none();
        let waiting = || {
            let scraped = self.server.is_none() || self.hub.final_scrapers() >= scrapers;
            let pushed = self.otlp.is_none() || self.hub.pushed.load(Ordering::SeqCst);
            !(scraped && pushed && !textfile_alone)
        };
        while waiting() && Instant::now() < deadline && !interrupted() {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.hub.close();
        let final_scrapers = self.hub.final_scrapers();
        let mut notes = Vec::new();
        notes.extend(self.server.map(|s| s.finish(final_scrapers, linger)));
        let otlp = self.otlp.map(|p| p.finish(linger));
        let received_nothing = otlp.as_ref().is_some_and(|(_, nothing)| *nothing);
        notes.extend(otlp.map(|(note, _)| note));
        notes.extend(self.textfile.map(Writer::finish));
        (notes, received_nothing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(target: &str) -> Arc<Labels> {
        Arc::new(Labels {
            target: target.into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived: vec![("pod_uid", "u".into())],
        })
    }

    fn shown(hub: &Hub) -> Vec<Vec<(&'static str, String)>> {
        (hub.targets().iter())
            .map(|(_, labels)| labels.derived.clone())
            .collect()
    }

    #[test]
    fn a_held_target_is_shown_only_once_its_labels_are_complete() {
        let hub = Hub::new(Duration::ZERO);
        hub.hold("/a");
        assert!(!hub.show("/a", &[]), "shown before its profile attached");
        let board = Arc::new(Board::new(Snapshot::default()));
        hub.attach(labels("/a"), Arc::clone(&board));
        assert!(hub.exports("/a"));
        assert_eq!(shown(&hub), Vec::<Vec<_>>::new());
        assert!(hub.show("/a", &[("pod", "web-0".into())]));
        let named = vec![("pod_uid", "u".into()), ("pod", "web-0".into())];
        assert_eq!(shown(&hub), vec![named.clone()]);
        // Shown once: a second completion adds nothing.
        assert!(!hub.show("/a", &[("pod", "other".into())]));
        assert_eq!(shown(&hub), vec![named]);
    }

    #[test]
    fn a_target_that_ended_while_held_lingers_from_when_it_is_shown() {
        let linger = Duration::from_millis(300);
        let hub = Hub::new(linger);
        hub.hold("/a");
        let ended = Snapshot {
            done: true,
            ..Snapshot::default()
        };
        hub.attach(labels("/a"), Arc::new(Board::new(ended)));
        hub.prune();
        std::thread::sleep(linger);
        assert!(hub.show("/a", &[]));
        assert_eq!(hub.prune(), 1, "its final values gone as they were shown");
        assert_eq!(shown(&hub).len(), 1);
        std::thread::sleep(linger);
        assert_eq!(hub.prune(), 0);
    }

    #[test]
    fn the_end_shows_every_held_target_and_forgets_those_not_attached() {
        let hub = Hub::new(Duration::ZERO);
        hub.hold("/a");
        hub.hold("/b");
        hub.attach(labels("/a"), Arc::new(Board::new(Snapshot::default())));
        hub.end();
        hub.attach(labels("/b"), Arc::new(Board::new(Snapshot::default())));
        assert_eq!(shown(&hub).len(), 2);
    }

    #[test]
    fn an_unheld_target_attaches_shown() {
        let hub = Hub::new(Duration::ZERO);
        hub.hold("/a");
        hub.unhold("/a");
        hub.attach(labels("/a"), Arc::new(Board::new(Snapshot::default())));
        assert_eq!(shown(&hub).len(), 1);
    }
}
