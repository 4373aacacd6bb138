//! The exporters: the profile's running totals served to Prometheus (`--prometheus`,
//! [`prometheus`]), pushed to an OpenTelemetry collector (`--otlp`, [`otlp`]) and written
//! for node_exporter's textfile collector (`--textfile`, [`textfile`]), each in its own
//! place beside the model they share: the metrics ([`metrics`], [`attribution`]), the
//! board they read ([`board`]) and a fleet's hub ([`hub`]).
//!
//! They never slow the profile: the consumer adds each row to a [`Snapshot`] of its own
//! and, once per batch, copies it to a [`Board`] (a memcpy under a lock that readers also
//! hold only to copy). Each exporter runs on a thread of its own, reads the board and does
//! its I/O from there: a slow scraper, a collector that is down or a full disk can only
//! delay that exporter. Memory is fixed: one snapshot, whatever the length of the profile.

pub mod attribution;
mod board;
mod error;
mod hub;
pub mod metrics;
mod otlp;
mod prometheus;
mod textfile;

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant, SystemTime};

pub use error::ExportError;
pub use hub::{FleetExport, Hub};
pub use metrics::{Labels, Snapshot, ThrashingState};
pub use otlp::OtlpOptions;

use crate::attribution::Tally;
use crate::rows::row::Row;
use crate::system::duration::parse_duration_or_zero;
use attribution::AttributedSeries;
use board::Board;

/// The exporters the user asked for (`monitor`'s options).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ExportOptions {
    /// Serve the metrics at http://ADDR/metrics while the profile runs (OpenMetrics, or
    /// Prometheus text 0.0.4 to a scraper that asks for it), e.g. 127.0.0.1:9464, [::1]:9464,
    /// :9464 (every address, IPv6 and IPv4); port 0 takes a free port, said on standard
    /// error.
    #[arg(long, value_name = "ADDR")]
    pub prometheus: Option<String>,
    #[command(flatten)]
    pub otlp: OtlpOptions,
    /// Write the metrics every --interval to DIR/pfprof-TARGET-PID.prom for node_exporter's
    /// textfile collector (classic text, no timestamps, replaced atomically); removed at
    /// the end: once --prometheus and --otlp have the final values, or, alone, once
    /// --linger has passed.
    #[arg(long, value_name = "DIR")]
    pub textfile: Option<PathBuf>,
    /// After the profile ends, how long its final values stay available: until
    /// Prometheus has scraped them and the collector has received them, at most this
    /// long (a textfile alone stays this long: its readers cannot be seen); 0: not at
    /// all. Ctrl-C (or SIGTERM) during the wait ends it.
    #[arg(long, value_name = "DUR", default_value = "60s", value_parser = parse_duration_or_zero)]
    pub linger: Duration,
    /// How many scrapers (told apart by their address) must get the final values before
    /// the wait ends: 2 for an HA pair of Prometheus servers. --linger still bounds it.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub linger_scrapers: u16,
    /// Export the faults by function too.
    ///
    /// Export the major and minor faults by the function whose code took them too
    /// (pfprof_function_faults, pfprof_function_estimated_faults, labelled function
    /// and binary): at most 16 functions named per target at once, the others'
    /// faults as function="[other]", with "[lost]" at most 18 values of the function
    /// label per target and metric.
    #[arg(long)]
    pub export_functions: bool,
}

impl ExportOptions {
    pub fn any(&self) -> bool {
        self.prometheus.is_some() || self.otlp.url.is_some() || self.textfile.is_some()
    }
}

/// The `target` label for what is profiled: the command's name, the pids, the cgroup's
/// path below the cgroup2 mount, or `registered` (a bare monitor follows registrations).
pub fn target_label(command: Option<&[OsString]>, pids: &[u32], cgroup: Option<&str>) -> String {
    if let Some(cgroup) = cgroup {
        return cgroup.to_owned();
    }
    if let Some(name) = command.and_then(|c| c.first()) {
        return Path::new(name)
            .file_name()
            .unwrap_or(name)
            .to_string_lossy()
            .into_owned();
    }
    if pids.is_empty() {
        return "registered".to_owned();
    }
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    format!("pid:{}", pids.join(","))
}

/// What the exporters delivered, once the profile has ended.
pub struct Finished {
    /// One summary note per exporter.
    pub notes: Vec<String>,
    /// `--otlp`: not one push reached the collector during the whole run.
    pub collector_received_nothing: bool,
}

/// The running exporters of one profile.
pub struct Exporters {
    board: Arc<Board>,
    /// What the consumer has added so far; copied to the board once per batch.
    snapshot: Snapshot,
    linger: Duration,
    linger_scrapers: usize,
    prometheus: Option<prometheus::http::Server>,
    otlp: Option<otlp::Pusher>,
    textfile: Option<textfile::Writer>,
    /// Thrashing episodes of the target's earlier profiles (a fleet target that came back).
    episodes_before: u64,
    /// The last row's timestamp: when the faults by mapping last added were counted.
    last_mono_ns: u64,
    /// `--export-functions`: the faults by function exported too.
    functions: bool,
}

impl Exporters {
    /// Starts what `options` asks for, or nothing: binds the address, checks the URL and
    /// the directory, so that a mistake fails before anything is profiled.
    pub fn start(
        options: &ExportOptions,
        labels: Labels,
        interval: Duration,
    ) -> Result<Option<Exporters>, ExportError> {
        if !options.any() {
            return Ok(None);
        }
        // Zero counts as of now: the textfile's first write already says when.
        let now = SystemTime::now();
        let mut snapshot = Snapshot {
            started_unix_ns: otlp::unix_ns(now),
            ..Snapshot::default()
        };
        snapshot.stamp(now);
        let board = Arc::new(Board::new(snapshot.clone()));
        let labels = Arc::new(labels);
        let one = Arc::new(prometheus::http::OneTarget {
            board: Arc::clone(&board),
            labels: Arc::clone(&labels),
        });
        let shown: Arc<dyn prometheus::http::Shown> =
            Arc::clone(&one) as Arc<dyn prometheus::http::Shown>;
        let prometheus = options
            .prometheus
            .as_deref()
            .map(|addr| prometheus::http::Server::start(addr, Arc::clone(&shown)))
            .transpose()?;
        let env = |name: &str| std::env::var(name).ok();
        let otlp = (options.otlp.url.is_some())
            .then(|| otlp::Pusher::start(&options.otlp, &env, one, interval))
            .transpose()?;
        let textfile = options
            .textfile
            .as_deref()
            .map(|dir| {
                // Written at every post: the hour only bounds the wait.
                let every = Duration::from_secs(3600);
                textfile::Writer::start(dir, &textfile::file_name(&labels), shown, every)
            })
            .transpose()?;
        Ok(Some(Exporters {
            board,
            snapshot,
            linger: options.linger,
            linger_scrapers: usize::from(options.linger_scrapers.max(1)),
            prometheus,
            otlp,
            textfile,
            episodes_before: 0,
            last_mono_ns: 0,
            functions: options.export_functions,
        }))
    }

    /// Exports through a fleet monitor's `hub` instead of exporters of its own, going on
    /// from the target's earlier values when it comes back within `--linger`.
    pub fn attach(hub: &Hub, labels: Labels, options: &ExportOptions) -> Exporters {
        let board = Arc::new(Board::new(Snapshot::default()));
        let resumed = hub.attach(Arc::new(labels), Arc::clone(&board));
        let now = SystemTime::now();
        // A target back within --linger goes on counting from its first start.
        let mut snapshot = resumed.unwrap_or_else(|| Snapshot {
            started_unix_ns: otlp::unix_ns(now),
            ..Snapshot::default()
        });
        snapshot.done = false;
        snapshot.stamp(now);
        board.post(&snapshot);
        Exporters {
            board,
            episodes_before: snapshot.thrashing.episodes,
            snapshot,
            linger: Duration::ZERO,
            linger_scrapers: 1,
            prometheus: None,
            otlp: None,
            textfile: None,
            last_mono_ns: 0,
            functions: options.export_functions,
        }
    }

    /// The sampling period, exported as a gauge.
    pub fn set_period(&mut self, period: Duration) {
        self.snapshot.period_ns = u64::try_from(period.as_nanos()).unwrap_or(u64::MAX);
    }

    /// Adds one row; nothing leaves the consumer until [`Exporters::publish`].
    pub fn add(&mut self, row: &Row) {
        self.snapshot.add(row);
        self.last_mono_ns = row.mono_ns;
    }

    /// Adds the faults by mapping and by program of the rows added since the last call
    /// (`interval`), one minor fault recorded in `minor_sampling`.
    pub fn add_attributed(&mut self, interval: &Tally, minor_sampling: u64) {
        let functions = self.functions;
        (self.snapshot.attributed)
            .get_or_insert_with(|| {
                let series = AttributedSeries::new(minor_sampling);
                if functions {
                    series.with_functions()
                } else {
                    series
                }
            })
            .add_interval(interval, self.last_mono_ns);
    }

    /// What the thrashing verdict says after the rows added so far.
    pub fn set_thrashing(&mut self, thrashing: ThrashingState) {
        self.snapshot.thrashing = ThrashingState {
            episodes: self.episodes_before + thrashing.episodes,
            ..thrashing
        };
    }

    /// Samples the producer overwrote.
    pub fn lost(&mut self, lost: u64) {
        self.snapshot.lost = self.snapshot.lost.saturating_add(lost);
    }

    /// Makes what was added so far visible to the exporters, as the values of now.
    pub fn publish(&mut self) {
        self.snapshot.stamp(SystemTime::now());
        self.board.post(&self.snapshot);
    }

    /// The profile has ended: posts the final values and waits until Prometheus has
    /// scraped them and the collector has received them (a textfile alone: until
    /// `--linger` has passed), `--linger` passing first, or `interrupted()` saying to stop
    /// waiting.
    /// Returns what each exporter delivered, one summary note each.
    pub fn finish(mut self, interrupted: impl Fn() -> bool) -> Finished {
        self.snapshot.done = true;
        self.publish();
        let deadline = Instant::now() + self.linger;
        let waits_for_scrape = self.prometheus.is_some();
        let waits_for_push = self.otlp.is_some();
        // The textfile's readers cannot be seen: alone, it stays the whole linger; beside
        // a scraper or a collector, as long as they are waited for.
        let whole_linger = self.textfile.is_some() && !waits_for_scrape && !waits_for_push;
        if waits_for_scrape || whole_linger {
            let addr = self.prometheus.as_ref().map(prometheus::http::Server::url);
            let _ = io::Write::write_all(
                &mut io::stderr(),
                format!(
                    "{}: keeping the final values{} for up to {:?} (Ctrl-C ends the wait)\n",
                    crate::program_name(),
                    addr.map(|a| format!(" at {a}")).unwrap_or_default(),
                    self.linger
                )
                .as_bytes(),
            );
        }
        let mut state = self.board.lock();
        loop {
            let scraped = state.final_scrapers >= self.linger_scrapers;
            let delivered = (!waits_for_scrape || scraped)
                && (!waits_for_push || state.pushed)
                && !whole_linger;
            let left = deadline.saturating_duration_since(Instant::now());
            if delivered || left.is_zero() || interrupted() {
                break;
            }
            state = self
                .board
                .changed
                .wait_timeout(state, left.min(Duration::from_millis(100)))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.closed = true;
        let final_scrapers = state.final_scrapers;
        drop(state);
        self.board.changed.notify_all();
        let mut notes = Vec::new();
        notes.extend(
            self.prometheus
                .take()
                .map(|s| s.finish(final_scrapers, self.linger)),
        );
        let otlp = self.otlp.take().map(|p| p.finish(self.linger));
        let collector_received_nothing = otlp.as_ref().is_some_and(|(_, nothing)| *nothing);
        notes.extend(otlp.map(|(note, _)| note));
        notes.extend(self.textfile.take().map(|w| w.finish()));
        Finished {
            notes,
            collector_received_nothing,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_label_names_the_command_the_pids_or_the_cgroup() {
        let command = [OsString::from("/usr/bin/work"), OsString::from("64")];
        assert_eq!(target_label(Some(&command), &[], None), "work");
        assert_eq!(target_label(None, &[12, 34], None), "pid:12,34");
        assert_eq!(target_label(None, &[], Some("/a/b")), "/a/b");
        assert_eq!(target_label(None, &[], None), "registered");
    }

    #[test]
    fn every_post_says_when_it_was_made() {
        let unix_ms = || {
            let mut now = Snapshot::default();
            now.stamp(SystemTime::now());
            now.updated_unix_ms
        };
        let hub = Hub::new(Duration::ZERO);
        let labels = Labels {
            target: "/a".into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived: Vec::new(),
        };
        let before = unix_ms();
        let mut exporters = Exporters::attach(&hub, labels, &ExportOptions::default());
        let attached = exporters.board.latest().0.updated_unix_ms;
        // A clock that moves: the next post's time is after the first's.
        while unix_ms() == attached {
            std::thread::sleep(Duration::from_millis(1));
        }
        exporters.publish();
        let published = exporters.board.latest().0.updated_unix_ms;
        assert!(
            before <= attached && attached < published && published <= unix_ms(),
            "{before} {attached} {published}"
        );
    }

    #[test]
    fn a_target_back_within_the_linger_counts_from_its_first_start() {
        let hub = Hub::new(Duration::from_secs(60));
        let labels = |target: &str| Labels {
            target: target.into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived: Vec::new(),
        };
        let options = ExportOptions::default();
        let started = |e: &Exporters| e.board.latest().0.started_unix_ns;
        let first = Exporters::attach(&hub, labels("/a"), &options);
        let first_start = started(&first);
        assert!(first_start > 0);
        let _ = first.finish(|| false);
        std::thread::sleep(Duration::from_millis(2));
        let back = Exporters::attach(&hub, labels("/a"), &options);
        let other = Exporters::attach(&hub, labels("/b"), &options);
        assert_eq!(started(&back), first_start);
        assert!(started(&other) > first_start);
    }

    #[test]
    fn a_reader_waiting_for_a_new_snapshot_is_woken_by_a_post_and_ends_when_closed() {
        let board = Arc::new(Board::new(Snapshot::default()));
        let reader = {
            let board = Arc::clone(&board);
            std::thread::spawn(move || {
                board.wait_newer(0, Instant::now() + Duration::from_secs(60))
            })
        };
        let posted = Snapshot {
            lost: 3,
            ..Snapshot::default()
        };
        board.post(&posted);
        assert_eq!(reader.join().unwrap(), Some((posted, 1)));
        board.set(|s| s.closed = true);
        assert_eq!(
            board.wait_newer(0, Instant::now() + Duration::from_secs(60)),
            None
        );
    }
}
