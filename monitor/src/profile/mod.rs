//! One profile from start to end, whichever backend produces the samples: open the
//! outputs and the backend ([`open`]), start the ring and the command ([`start`]),
//! consume every sample ([`consume`]), then reap the command and write the plot and the
//! summary ([`finish`]).

mod consume;
mod consumers;
pub mod error;
mod reap;

use std::ffi::OsString;
use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use shared_layout::{abi, Area, Mode};

use crate::backend::procfs::fleet_faults::FleetFaults;
use crate::backend::procfs::sampler::SamplerPool;
use crate::backend::{Backend, Selection};
use crate::command::child::{self, Held, Running};
use crate::command::signals::Signals;
use crate::export::{self, ExportOptions, Exporters, Hub, Labels};
use crate::output::attribution::AttributionSummary;
use crate::output::error::OutputError;
use crate::output::metadata::{Metadata, Profiled};
use crate::output::plot::{self, ByMapping};
use crate::output::summary::{fold, SummaryRequest, SummarySink};
use crate::output::summary::{Summary, Thrashing};
use crate::output::writer::{Destination, Format, Output, PlotFile};
use crate::pressure::verdict::{Band, RULE};
use crate::pressure::watch::{PressurePool, PressureWatch};
use crate::rows::row::Row;
use crate::rows::source::Source;
use crate::system::cgroup::{Cgroup, FaultCheck};
use crate::system::error::SystemError;
use crate::system::exit;
use crate::system::peak::PeakRss;
use crate::system::terminal;
use consume::{consume, End};
use consumers::{Consumed, Consumers};
use error::ProfileError;
use reap::{command_outcome, Reaper};

/// What the user asked for.
#[derive(Clone, Debug)]
pub struct Request {
    pub mode: Mode,
    /// Relaxed mode: how often to drain the ring.
    pub interval: Duration,
    pub format: Format,
    pub output: Destination,
    pub plot: Option<PathBuf>,
    /// `monitor run`'s command and arguments.
    pub command: Option<Vec<OsString>>,
    pub pids: Vec<u32>,
    /// `--cgroup`: a cgroup v2 directory.
    pub cgroup: Option<PathBuf>,
    pub period_ms: Option<u32>,
    /// Processes count with their descendants (not with `--no-inherit`).
    pub inherit: bool,
    /// Faults attributed to mappings, one minor fault recorded in this many
    /// (`--minor-sampling`); `None` with `--no-attribution`.
    pub attribution: Option<u64>,
    /// `--prometheus`, `--otlp`, `--textfile`.
    pub export: ExportOptions,
    /// `--summary`, `--summary-format`, `--quiet`.
    pub summary: SummaryRequest,
    /// `--duration`: the profile ends after this long, as after a SIGTERM.
    pub duration: Option<Duration>,
    /// `--count`: the profile ends after this many rows, as after a SIGTERM, and holds
    /// exactly them.
    pub count: Option<u64>,
    /// One of many profiles a supervisor runs; `None`: the process's only one.
    pub supervised: Option<Supervised>,
}

/// What a supervisor running many profiles gives each: the hub it exports through, the
/// labels the supervisor derived of its target, the signals it stops it with, a ring
/// of `ring_pages` (many profiles, each drained every interval, need small ones), and the
/// pressure pool every profile's pressure watch is in, the sampler pool that samples
/// every profile's cgroup, and the fleet's fault events every profile's faults are
/// attributed from, where they could be opened.
#[derive(Clone)]
pub struct Supervised {
    pub hub: Arc<Hub>,
    pub derived: Vec<(&'static str, String)>,
    pub signals: Signals,
    pub ring_pages: u64,
    pub pressure: PressurePool,
    pub samplers: SamplerPool,
    pub faults: Option<FleetFaults>,
}

impl std::fmt::Debug for Supervised {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervised")
            .field("derived", &self.derived)
            .field("ring_pages", &self.ring_pages)
            .finish_non_exhaustive()
    }
}

/// Profiles what `request` names with backend `B`; the exit code `monitor` ends with.
pub fn profile<B: Backend>(request: Request) -> Result<u8, ProfileError> {
    let (sinks, opened) = open::<B>(&request)?;
    let mut started = start(opened, &request)?;
    // A command shares the monitor's standard error, and may write to the terminal
    // whatever its standard output is: its text would land on the line's row. So `run`
    // shows none, as perf stat and time show nothing while their command runs; an attached
    // profile writing its rows to a file does.
    let live_line = sinks.summary.leaves_stderr_to_the_live_line() && request.command.is_none();
    let keep_rows = sinks.plot.is_some();
    let attribution = started.backend.attribution();
    let consumers = Consumers::new(
        sinks.output,
        sinks.exporters,
        live_line,
        keep_rows,
        attribution,
        request.count,
    );
    let (consumed, end) = consume(&mut started, consumers)?;
    let reports = Reports {
        plot: sinks.plot,
        summary: sinks.summary,
    };
    finish(started, consumed, end, reports, &request)
}

/// Where the profile goes, open before anything runs: an unwritable path fails first.
struct Sinks {
    output: Output,
    plot: Option<PlotFile>,
    summary: SummarySink,
    exporters: Option<Exporters>,
}

/// What is written once the profile ended.
struct Reports {
    plot: Option<PlotFile>,
    summary: SummarySink,
}

/// The backend and what surrounds it, before anything is sampled: a selection that
/// cannot be profiled fails here, before the command runs.
struct Opened<B> {
    backend: B,
    fault_check: Option<FaultCheck>,
    signals: Signals,
    /// Dropped on an error, the held command never runs.
    held: Option<Held>,
}

fn open<B: Backend>(request: &Request) -> Result<(Sinks, Opened<B>), ProfileError> {
    // The output first: nothing replaces an earlier file before the profile is complete.
    let output = Output::open(request.output.clone(), request.format, request.interval)?;
    let plot = request.plot.as_deref().map(PlotFile::create).transpose()?;
    let summary = SummarySink::open(request.summary.clone())?;
    let cgroup = (request.cgroup.as_deref())
        .map(Cgroup::open)
        .transpose()?
        .map(Arc::new);
    // Its memory.stat before anything is sampled, for the summary's cross-check.
    let fault_check = cgroup.clone().map(FaultCheck::start);
    let selection = Selection {
        pids: request.pids.clone(),
        command: request.command.is_some(),
        cgroup: cgroup.clone(),
        inherit: request.inherit,
        attribution: request.attribution,
        ring_pages: (request.supervised.as_ref())
            .map_or(abi::BUFFER_PAGES_DEFAULT.into(), |s| s.ring_pages),
        sampler_pool: (request.supervised.as_ref()).map(|s| s.samplers.clone()),
        fleet_faults: (request.supervised.as_ref()).and_then(|s| s.faults.clone()),
    };
    let mut backend = B::open(&selection, request.period_ms)?;
    let labels = Labels {
        target: export::target_label(
            request.command.as_deref(),
            &request.pids,
            cgroup.as_deref().map(Cgroup::name),
        ),
        backend: backend.name().to_owned(),
        mode: request.mode.to_string(),
        monitor_pid: std::process::id().to_string(),
        derived: (request.supervised.as_ref()).map_or_else(Vec::new, |s| s.derived.clone()),
    };
    let exporters = match &request.supervised {
        Some(supervised) => Some(Exporters::attach(&supervised.hub, labels, &request.export)),
        None => Exporters::start(&request.export, labels, request.interval)?,
    };
    let signals = match &request.supervised {
        Some(supervised) => supervised.signals.clone(),
        None => Signals::install()?,
    };
    let held = (request.command.as_deref())
        .map(child::spawn_held)
        .transpose()?;
    if let Some(held) = &held {
        backend.adopt(held.pid())?;
    }
    let sinks = Sinks {
        output,
        plot,
        summary,
        exporters,
    };
    let opened = Opened {
        backend,
        fault_check,
        signals,
        held,
    };
    Ok((sinks, opened))
}

/// The profile once samples flow and the command runs.
struct Started<B: Backend> {
    backend: B,
    fault_check: Option<FaultCheck>,
    signals: Signals,
    area: Arc<Area>,
    pressure: PressureWatch,
    source: Source<B::Waiter>,
    reaper: Option<Reaper>,
    /// The command's pid, while it may still be running.
    command: Option<u32>,
    metadata: Metadata,
    /// The `--pid` processes' own peak resident sets, read at every wake-up.
    peaks: Vec<PeakRss>,
}

fn start<B: Backend>(opened: Opened<B>, request: &Request) -> Result<Started<B>, ProfileError> {
    let Opened {
        mut backend,
        fault_check,
        signals,
        held,
    } = opened;
    let (area, waiter) = backend.start(request.mode)?;
    let metadata = metadata(request, backend.name(), area.period());
    // Its first reading comes before the first sample: the system's pressure, and the
    // selected cgroup's when there is one.
    let pool = match &request.supervised {
        Some(supervised) => supervised.pressure.clone(),
        // Fresh for no time: a single profile reads the system's counters every time.
        None => PressurePool::new(Duration::ZERO)
            .map_err(SystemError::doing("starting the memory pressure watcher"))?,
    };
    let pressure = PressureWatch::start(&pool, request.cgroup.as_deref(), area.period())
        .map_err(SystemError::doing("starting the memory pressure watcher"))?;
    let source = Source::new(Arc::clone(&area), waiter, request.interval);
    let ending = source.ending();
    let mut command = held.map(Held::release).transpose()?.map(Running::new);
    let pid = command.as_ref().map(Running::pid);
    if let Some(pid) = pid {
        signals.forward_to(pid);
    }
    let on_end = Arc::clone(&ending);
    let watch = backend.produce(&area, pid, Box::new(move || on_end.announce()))?;
    if let (Some(command), Some(watch)) = (command.as_mut(), watch) {
        command.watch_exit(watch);
    }
    let reaper = command
        .map(|command| reap::spawn(command, &signals, Arc::clone(&ending)))
        .transpose()?;
    let stop = backend.stopper();
    signals.stop_with(Box::new(move || {
        let stopped = stop();
        ending.announce();
        stopped
    }));
    if let Some(duration) = request.duration {
        signals.end_after(duration)?;
    }
    let peaks = request.pids.iter().filter_map(|&pid| PeakRss::open(pid));
    Ok(Started {
        backend,
        fault_check,
        signals,
        area,
        pressure,
        source,
        reaper,
        command: pid,
        metadata,
        peaks: peaks.collect(),
    })
}

/// What is profiled, by which backend, from now.
fn metadata(request: &Request, backend: &str, period: Duration) -> Metadata {
    let cgroup = (request.cgroup.as_deref()).map(|path| path.to_string_lossy().into_owned());
    Metadata::now(Profiled {
        command: request.command.as_deref(),
        pids: &request.pids,
        cgroup: cgroup.as_deref(),
        inherit: request.inherit,
        backend,
        mode: request.mode.to_string(),
        period,
    })
}

/// Once the consumer ended: reaps the command, puts the output and the plot in place,
/// delivers the exporters' last values, and writes the summary; the exit code. An output
/// that cannot be written (a full disk) fails the run after the summary, not instead.
fn finish<B: Backend>(
    started: Started<B>,
    consumed: Consumed,
    end: End,
    reports: Reports,
    request: &Request,
) -> Result<u8, ProfileError> {
    let backend = started.backend.name();
    let (child, code) = command_outcome(started.reaper, end)?;
    let mut notes = started.backend.finish()?;
    notes.extend(started.fault_check.as_ref().map(FaultCheck::note));
    notes.extend(end_notes(end, child.is_some(), started.command));
    let stalled = (consumed.totals.stall_some_us).is_some_and(|us| us > 0);
    notes.extend(started.pressure.finish(stalled));
    let written = (consumed.output.commit()).and_then(|()| {
        draw(
            reports.plot,
            &consumed.rows,
            &consumed.bands,
            consumed.attributed.as_ref(),
            backend,
            &started.metadata,
        )
    });
    let signals = &started.signals;
    signals.profile_over();
    let counters = started.area.counters();
    notes.extend(withdrawn_note(counters.withdrawn));
    let peaks: Vec<_> = started.peaks.iter().filter_map(PeakRss::report).collect();
    let counted = started.metadata.counted();
    let thrashing = if consumed.judged {
        Thrashing::Judged(&consumed.bands, RULE)
    } else {
        Thrashing::NotJudged
    };
    let summary = |notes| Summary {
        backend,
        mode: request.mode,
        counted: &counted,
        totals: &consumed.totals,
        blocked: Duration::from_nanos(counters.blocked_ns),
        deferred: counters.deferred,
        child,
        peaks: &peaks,
        thrashing,
        attributed: consumed.attributed.as_ref(),
        notes,
    };
    let (code, delivered) = match consumed.exporters {
        // What a person at the terminal came for comes first, not after the linger
        // (`run --prometheus` held it a minute): the exporters' notes follow it.
        Some(exporters) if reports.summary.is_text_on_stderr() => {
            let delivered = reports.summary.deliver(&summary(&notes), &started.metadata);
            let mut exported = Vec::new();
            let code = deliver(exporters, signals, code, &mut exported);
            let mut text: String = exported.iter().map(|n| format!("  note: {n}\n")).collect();
            if io::stderr().is_terminal() {
                text = fold(&text, terminal::stderr_line_width());
            }
            // A closed stderr cannot be told anything.
            let _ = io::Write::write_all(&mut io::stderr(), text.as_bytes());
            (code, delivered)
        }
        Some(exporters) => {
            let code = deliver(exporters, signals, code, &mut notes);
            (
                code,
                reports.summary.deliver(&summary(&notes), &started.metadata),
            )
        }
        None => (
            code,
            reports.summary.deliver(&summary(&notes), &started.metadata),
        ),
    };
    written.and(delivered)?;
    Ok(code)
}

/// Delivers the exporters' final values (until they are, `--linger` has passed or a new
/// signal comes) and adds their notes; the exit code, `code` unless it is 0 and the OTLP
/// collector received nothing at all.
fn deliver(exporters: Exporters, signals: &Signals, code: u8, notes: &mut Vec<String>) -> u8 {
    let signaled = signals.received_count();
    let finished = exporters.finish(|| signals.received_count() != signaled);
    notes.extend(finished.notes);
    if !(finished.collector_received_nothing && code == 0) {
        return code;
    }
    notes.push(format!(
        "exit status {}: the OTLP collector received none of the pushes",
        exit::NOTHING_PUSHED
    ));
    exit::NOTHING_PUSHED
}

/// The plot, titled with what was profiled and when, with the major faults by mapping
/// where `backend` attributed them.
fn draw(
    plot: Option<PlotFile>,
    rows: &[Row],
    bands: &[Band],
    attributed: Option<&AttributionSummary>,
    backend: &str,
    metadata: &Metadata,
) -> Result<(), OutputError> {
    let Some(plot) = plot else {
        return Ok(());
    };
    let unattributed = format!("the {backend} backend does not attribute them");
    let by_mapping = match attributed {
        None => ByMapping::NotAttributed(&unattributed),
        // Without attribution, the summary says why.
        Some(w) => match &w.lane {
            Some(lane) => ByMapping::Lane(lane),
            None => ByMapping::NotAttributed("the summary says why"),
        },
    };
    let svg =
        plot::render(rows, bands, &metadata.title(), by_mapping).map_err(OutputError::Draw)?;
    plot.commit(&svg)
}

/// What the producer stopped counting: processes that exec'd a program the user may not
/// read (a setuid one), as perf stops counting a task at such an exec.
fn withdrawn_note(withdrawn: u32) -> Option<String> {
    let (what, it, them) = match withdrawn {
        0 => return None,
        1 => ("1 process".to_owned(), "it", "it"),
        n => (format!("{n} processes"), "they", "them"),
    };
    Some(format!(
        "{what} stopped being counted when {it} exec'd a program you may not read (setuid), \
         from the period that found {them} so; what {it} did before stays counted"
    ))
}

/// What the way the profile ended leaves out.
fn end_notes(end: End, reaped: bool, command: Option<u32>) -> Vec<String> {
    let mut notes = Vec::new();
    if end == End::OutputClosed {
        notes.push("the output was closed: the profile ended there".to_owned());
    }
    if let (Some(pid), false) = (command, reaped) {
        notes.push(format!(
            "stopped before the command ended: it is still running (pid {pid})"
        ));
    }
    notes
}
