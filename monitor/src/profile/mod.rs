//! One profile from start to end, whichever backend produces the samples: open the
//! output, start the session and the command, consume every sample, reap the command,
//! then write the plot and the summary.

pub mod error;

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use shared_layout::wait::Waiter;
use shared_layout::{Area, Mode};

use crate::backend::{Backend, Selection};
use crate::command::child::{self, Held, Running};
use crate::command::signals::Signals;
use crate::export::{self, ExportOptions, Exporters, Labels};
use crate::output::plot;
use crate::output::report::{ChildReport, Summary, Thrashing, Totals};
use crate::output::writer::{Destination, Format, Output, PlotFile};
use crate::pressure::verdict::{Band, Verdict, RULE};
use crate::pressure::watch::PressureWatch;
use crate::profile::error::ProfileError;
use crate::rows::row::{Row, Timeline};
use crate::rows::source::{Ending, Source};
use crate::system::cgroup::Cgroup;
use crate::system::exit::ExitStatus;

/// How long the consumer waits for samples at most while nothing else needs it: the
/// producer's cancellation and every signal wake it earlier.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// How often the live status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);
/// How long a stopped profile waits for its command to exit, having sent it the signal.
const EXIT_WAIT: Duration = Duration::from_millis(50);

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
    /// `--prometheus`, `--otlp`, `--textfile`.
    pub export: ExportOptions,
}

/// How the consumer loop ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// The producer ended the session: every process is gone.
    Finished,
    /// A signal stopped it.
    Stopped,
    /// The output's reader went away.
    OutputClosed,
}

/// Profiles what `request` names with backend `B`; the exit code `monitor` ends with.
pub fn profile<B: Backend>(request: Request) -> Result<u8, ProfileError> {
    // The output first: an unwritable path fails before anything runs, and nothing
    // replaces an earlier file before the profile is complete.
    let mut output = Output::open(request.output.clone(), request.format)?;
    let plot = request.plot.as_deref().map(PlotFile::create).transpose()?;
    let cgroup = (request.cgroup.as_deref())
        .map(Cgroup::open)
        .transpose()?
        .map(Arc::new);
    let selection = Selection {
        pids: request.pids.clone(),
        command: request.command.is_some(),
        cgroup: cgroup.clone(),
        inherit: request.inherit,
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
    };
    let mut exporters = Exporters::start(&request.export, labels, request.interval)?;
    let signals = Signals::install()?;
    // Dropped on an error below, the held command never runs.
    let held = request
        .command
        .as_deref()
        .map(child::spawn_held)
        .transpose()?;
    if let Some(held) = &held {
        backend.adopt(held.pid())?;
    }
    let (area, waiter) = backend.start(request.mode)?;
    // Its first reading comes before the first sample: the system's pressure, and the
    // selected cgroup's when there is one.
    let pressure = PressureWatch::start(cgroup.as_deref().map(Cgroup::path), area.period())
        .map_err(|source| ProfileError::System {
            what: "starting the memory pressure watcher",
            source,
        })?;
    let source = Source::new(Arc::clone(&area), waiter, request.interval);
    let ending = source.ending();
    let mut command = held.map(Held::release).transpose()?.map(Running::new);
    let pid = command.as_ref().map(Running::pid);
    if let Some(pid) = pid {
        signals.forward_to(pid);
    }
    backend.produce(&area, command.as_mut(), ending.clone())?;
    let reaper = command
        .map(|command| reap(command, &signals, ending.clone()))
        .transpose()?;
    let stop = backend.stopper();
    signals.stop_with(Box::new(move || {
        let stopped = stop();
        ending.announce();
        stopped
    }));

    let status_line = output.leaves_stderr_to_the_status_line();
    let view = View {
        status_line,
        keep_rows: plot.is_some(),
    };
    let consumed = consume(
        &mut output,
        &area,
        source,
        Around {
            pressure: &pressure,
            signals: &signals,
            backend: &backend,
        },
        view,
        exporters.as_mut(),
    )?;
    let (child, code) = command_outcome(reaper, consumed.end)?;
    let mut notes = backend_notes(backend, consumed.end, child.is_some(), pid)?;
    let thrashing = if consumed.judged {
        Thrashing::Judged(&consumed.bands, RULE)
    } else {
        Thrashing::NotJudged
    };
    notes.extend(pressure.finish());
    output.commit()?;
    if let Some(plot) = plot {
        let caption = format!(
            "pfprof: {} backend, {} mode, {} ms period",
            consumed.backend,
            request.mode,
            area.period().as_millis()
        );
        let svg = plot::render(&consumed.rows, &consumed.bands, &caption);
        plot.commit(&svg.map_err(ProfileError::Draw)?)?;
    }
    if let Some(exporters) = exporters {
        // Until the final values are delivered, or a new signal.
        let signaled = signals.received_count();
        notes.extend(exporters.finish(|| signals.received_count() != signaled));
    }
    let counters = area.counters();
    if let Some(note) = withdrawn_note(counters.withdrawn) {
        notes.push(note);
    }
    let summary = Summary {
        backend: consumed.backend,
        mode: request.mode,
        totals: &consumed.totals,
        blocked: Duration::from_nanos(counters.blocked_ns),
        deferred: counters.deferred,
        child,
        thrashing,
        notes: &notes,
    };
    // Formatted first: stderr is unbuffered, and the summary's padding would otherwise
    // reach it a character per write. A closed stderr cannot be told anything.
    let _ = io::stderr().write_all(format!("{summary}\n").as_bytes());
    Ok(code)
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

/// The backend's notes, and what the way the profile ended leaves out.
fn backend_notes<B: Backend>(
    backend: B,
    end: End,
    reaped: bool,
    command: Option<u32>,
) -> Result<Vec<String>, ProfileError> {
    let mut notes = backend.finish()?;
    if end == End::OutputClosed {
        notes.push("the output was closed: the profile ended there".to_owned());
    }
    if let (Some(pid), false) = (command, reaped) {
        notes.push(format!(
            "stopped before the command ended: it is still running (pid {pid})"
        ));
    }
    Ok(notes)
}

/// What the consumer loop gathered.
struct Consumed {
    backend: &'static str,
    totals: Totals,
    /// Every row, when a plot is drawn from them.
    rows: Vec<Row>,
    /// The thrashing the verdict found, and whether it could judge at all.
    bands: Vec<Band>,
    judged: bool,
    end: End,
}

/// What the consumer loop shows and keeps besides the output.
#[derive(Clone, Copy)]
struct View {
    /// Draw the live status line on stderr.
    status_line: bool,
    /// Keep every row for the plot.
    keep_rows: bool,
}

/// What the consumer reads beside the ring: the memory pressure, the signals, and the
/// backend it asks for advice and for a stop.
struct Around<'a, B> {
    pressure: &'a PressureWatch,
    signals: &'a Signals,
    backend: &'a B,
}

/// Takes samples until the producer ends the session, or a stop (a signal, a closed
/// output) and the backend's grace period, writing every row as it arrives with its share
/// of the memory pressure, and the verdict's bands as they end.
fn consume<W: Waiter, B: Backend>(
    output: &mut Output,
    area: &Area,
    mut source: Source<W>,
    around: Around<'_, B>,
    view: View,
    mut exporters: Option<&mut Exporters>,
) -> Result<Consumed, ProfileError> {
    let Around {
        pressure,
        signals,
        backend,
    } = around;
    let status_line = view.status_line;
    let ring_error = |source| ProfileError::Ring {
        advice: backend.ring_advice(),
        source,
    };
    let mut timeline = Timeline::new(area.period());
    let mut totals = Totals::default();
    let mut recent = Totals::default();
    let mut rows = Vec::new();
    let mut batch = Vec::new();
    let mut batch_rows = Vec::new();
    let mut verdict = Verdict::new(RULE);
    let mut last_status = Instant::now();
    let mut give_up: Option<Instant> = None;
    let mut end = End::Finished;
    let idle = if status_line { STATUS_EVERY } else { IDLE_WAIT };
    output.header()?;
    if let Some(e) = exporters.as_deref_mut() {
        e.set_period(area.period());
    }
    loop {
        if give_up.is_none() && signals.stop_requested() {
            give_up = Some(Instant::now() + backend.grace());
            end = if output.is_closed() {
                End::OutputClosed
            } else {
                End::Stopped
            };
        }
        let b = match give_up {
            Some(deadline) if Instant::now() >= deadline => {
                let mut b = source.drain_now(&mut batch).map_err(ring_error)?;
                b.ended = true;
                Ok(b)
            }
            Some(deadline) => source.next(&mut batch, idle.min(deadline - Instant::now())),
            None => source.next(&mut batch, idle),
        }
        .map_err(ring_error)?;
        totals.lost += b.lost;
        batch_rows.extend(batch.drain(..).map(|sample| timeline.row(&sample)));
        pressure.fill(&mut batch_rows);
        for row in batch_rows.drain(..) {
            totals.add(&row);
            recent.add(&row);
            output.write(&row)?;
            if let Some(band) = verdict.feed(&row) {
                output.event(&band)?;
            }
            if view.keep_rows {
                rows.push(row);
            }
            if let Some(e) = exporters.as_deref_mut() {
                e.add(&row);
            }
        }
        if b.ended {
            if let Some(band) = verdict.finish() {
                output.event(&band)?;
            }
        }
        output.flush()?;
        if let Some(e) = exporters.as_deref_mut() {
            e.lost(b.lost);
            e.publish();
        }
        if output.is_closed() && give_up.is_none() {
            // Nobody reads on: end the profile now, whatever it profiles.
            signals.request_stop();
            continue;
        }
        if status_line && last_status.elapsed() >= STATUS_EVERY && recent.samples > 0 {
            let line = format!("\r{}\x1b[K", totals.status_line(&recent));
            let _ = io::stderr().write_all(line.as_bytes());
            recent = Totals::default();
            last_status = Instant::now();
        }
        if b.ended {
            break;
        }
    }
    if status_line {
        let _ = write!(io::stderr(), "\r\x1b[K");
    }
    if let Some(e) = signals.take_stop_error() {
        return Err(e);
    }
    Ok(Consumed {
        backend: backend.name(),
        totals,
        rows,
        bands: verdict.bands().to_vec(),
        judged: verdict.judged(),
        end,
    })
}

type Reaper = JoinHandle<io::Result<ChildReport>>;

/// A thread that reaps the command `monitor run` started, stops forwarding signals to
/// its pid, announces the end, and tells whoever watches the command's exit (the
/// producer that counts it, [`Running::watch_exit`]) before and after the reap.
fn reap(
    mut command: Running,
    signals: &Signals,
    ending: Arc<Ending>,
) -> Result<Reaper, ProfileError> {
    let signals = signals.clone();
    thread::Builder::new()
        .name("pfprof-reaper".into())
        .spawn(move || {
            let pid = command.pid();
            // Stop forwarding while the pid is still the command's, and only then reap
            // it: a reaped pid may be given to someone else.
            let exited = child::wait_exited(pid);
            signals.forward_to(0);
            exited?;
            ending.announce();
            command.exited();
            let (status, totals) = child::wait(pid)?;
            command.reaped(totals);
            Ok(ChildReport {
                minor: totals.minor,
                major: totals.major,
                cpu_ns: totals.cpu_ns,
                status,
            })
        })
        .map_err(|source| ProfileError::System {
            what: "starting the thread that waits for the command",
            source,
        })
}

/// The command's rusage and the exit code `monitor` ends with: the command's own; when
/// the profile ended before the command, 130 (interrupted) after a signal, 141 (as a
/// writer killed by SIGPIPE) after the output was closed.
fn command_outcome(
    reaper: Option<Reaper>,
    end: End,
) -> Result<(Option<ChildReport>, u8), ProfileError> {
    let Some(reaper) = reaper else {
        return Ok((None, 0));
    };
    let waited = Instant::now();
    while end != End::Finished && !reaper.is_finished() {
        if waited.elapsed() >= EXIT_WAIT {
            let signal = match end {
                End::OutputClosed => Signal::SIGPIPE,
                _ => Signal::SIGINT,
            };
            return Ok((None, ExitStatus::Signaled(signal as i32).code()));
        }
        thread::sleep(Duration::from_millis(5));
    }
    let report = reaper
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .map_err(ProfileError::Reap)?;
    Ok((Some(report), report.status.code()))
}
