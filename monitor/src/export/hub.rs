//! A fleet monitor's targets on one `/metrics`: each target's profile posts to a board of
//! its own, registered here under its `target` label, and one server encodes them all.
//! A target that ended keeps its final values for `--linger`; one that comes back within
//! it (a restarted service's re-created cgroup) resumes them, so its counters go on.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::board::Board;
use super::exposition::{encode_targets, FleetGauges, Format};
use super::http::Shown;
use super::metrics::{Labels, Snapshot};

pub struct Hub {
    targets: Mutex<BTreeMap<String, Entry>>,
    /// How long an ended target's final values stay.
    linger: Duration,
    /// The fleet monitor is ending: what is shown now is final.
    ending: AtomicBool,
    final_scrapers: AtomicUsize,
    closed: AtomicBool,
    /// Cgroups found but not profiled, at the last look.
    left_out: AtomicUsize,
    monitor_pid: String,
}

struct Entry {
    labels: Arc<Labels>,
    board: Arc<Board>,
    /// When its profile was first seen ended.
    ended: Option<Instant>,
}

impl Hub {
    pub fn new(linger: Duration) -> Hub {
        Hub {
            targets: Mutex::new(BTreeMap::new()),
            linger,
            ending: AtomicBool::new(false),
            final_scrapers: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            left_out: AtomicUsize::new(0),
            monitor_pid: std::process::id().to_string(),
        }
    }

    /// How many cgroups the last look found and left out (`--max-targets`).
    pub fn set_left_out(&self, left_out: usize) {
        self.left_out.store(left_out, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        // Entries are replaced whole: a panic elsewhere leaves none half-made.
        self.targets.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a target's board; the final values of its previous profile when it had
    /// one (it went away and came back within `--linger`), to go on from.
    pub(super) fn attach(&self, labels: Arc<Labels>, board: Arc<Board>) -> Option<Snapshot> {
        let entry = Entry {
            labels: Arc::clone(&labels),
            board,
            ended: None,
        };
        let previous = self.lock().insert(labels.target.clone(), entry)?;
        Some(previous.board.latest().0)
    }

    /// Forgets the targets that ended longer than `--linger` ago; how many are left.
    pub fn prune(&self) -> usize {
        let now = Instant::now();
        let mut targets = self.lock();
        targets.retain(|_, entry| {
            if entry.ended.is_none() && entry.board.latest().0.done {
                entry.ended = Some(now);
            }
            !matches!(entry.ended, Some(ended) if now.duration_since(ended) >= self.linger)
        });
        targets.len()
    }

    /// Whether `target` is exported now (running, or its final values lingering).
    pub fn holds(&self, target: &str) -> bool {
        self.lock().contains_key(target)
    }

    /// The fleet monitor is ending: every target's values are final from now.
    pub fn end(&self) {
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
            .field("targets", &self.lock().keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Shown for Hub {
    fn text(&self, format: Format) -> (String, bool) {
        let targets: Vec<(Snapshot, Labels)> = (self.lock().values())
            .map(|entry| (entry.board.latest().0, Labels::clone(&entry.labels)))
            .collect();
        let done = self.ending.load(Ordering::SeqCst);
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
}

/// `--prometheus` of a fleet monitor: every target of `hub` on one address.
pub struct FleetServer {
    hub: Arc<Hub>,
    server: super::http::Server,
}

impl FleetServer {
    /// Binds `addr` now: an address in use fails before anything is profiled.
    pub fn start(addr: &str, hub: Arc<Hub>) -> Result<FleetServer, super::ExportError> {
        let shown: Arc<dyn Shown> = Arc::clone(&hub) as Arc<dyn Shown>;
        let server = super::http::Server::start(addr, shown)?;
        Ok(FleetServer { hub, server })
    }

    /// Every target ended: their final values are served until `scrapers` scrapers got
    /// them, `linger` passed or `interrupted()`; the summary's note.
    pub fn finish(
        self,
        linger: Duration,
        scrapers: usize,
        interrupted: impl Fn() -> bool,
    ) -> String {
        self.hub.end();
        let deadline = Instant::now() + linger;
        while self.hub.final_scrapers() < scrapers && Instant::now() < deadline && !interrupted() {
            std::thread::sleep(Duration::from_millis(50));
        }
        self.hub.close();
        self.server.finish(self.hub.final_scrapers(), linger)
    }
}
