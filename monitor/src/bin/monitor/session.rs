//! What both backends share: the output, the consumer loop, signals, and the summary.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use anyhow::Context;
use monitor::child;
use monitor::plot;
use monitor::procstat::ProcessCounters;
use monitor::report::{ChildReport, ExitStatus, Format, Row, RowWriter, Summary, Timeline, Totals};
use monitor::source::Source;
use shared_layout::wait::Waiter;
use shared_layout::{Area, Mode};
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;

use crate::UsageContext;

/// How long the consumer waits for samples at most before it looks at signals again.
const POLL: Duration = Duration::from_millis(200);
/// How often the live status line is redrawn.
const STATUS_EVERY: Duration = Duration::from_millis(250);

/// The user's choices that do not depend on the backend, with the output already open.
pub struct Settings {
    pub backend: String,
    pub mode: Mode,
    pub interval: Duration,
    writer: RowWriter<BufWriter<Box<dyn Write>>>,
    plot: Option<PathBuf>,
    /// Draw the live status line: stderr is a terminal the rows do not also go to.
    status_line: bool,
}

impl Settings {
    /// Opens the output and creates the plot file now, so an unwritable path fails before
    /// anything is profiled.
    pub fn open(
        backend: String,
        mode: Mode,
        format: Format,
        output: Option<&Path>,
        plot: Option<&Path>,
        interval: Duration,
    ) -> anyhow::Result<Settings> {
        let out: Box<dyn Write> = match output {
            Some(path) => Box::new(File::create(path).usage_context(|| {
                format!(
                    "cannot write the output file {}: choose another --output",
                    path.display()
                )
            })?),
            None => Box::new(io::stdout()),
        };
        if let Some(path) = plot {
            File::create(path).usage_context(|| {
                format!(
                    "cannot write the plot file {}: choose another --plot",
                    path.display()
                )
            })?;
        }
        let writer = RowWriter::new(BufWriter::new(out), format);
        let rows_on_terminal = output.is_none() && io::stdout().is_terminal();
        Ok(Settings {
            backend,
            mode,
            interval,
            writer,
            plot: plot.map(Path::to_path_buf),
            status_line: io::stderr().is_terminal() && !rows_on_terminal,
        })
    }
}

/// SIGINT and SIGTERM: counted, and forwarded to the command `monitor run` started.
#[derive(Clone)]
pub struct SignalState {
    received: Arc<AtomicUsize>,
    /// The pid to forward to, 0 for nobody. Held while a signal is sent, so that once
    /// `forward_to(0)` returns no signal to the old pid is under way.
    child: Arc<Mutex<u32>>,
}

impl SignalState {
    pub fn install() -> anyhow::Result<SignalState> {
        let received = Arc::new(AtomicUsize::new(0));
        let child = Arc::new(Mutex::new(0));
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM])
            .context("installing the SIGINT/SIGTERM handlers")?;
        let (r, c) = (Arc::clone(&received), Arc::clone(&child));
        thread::Builder::new()
            .name("pfprof-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    let pid = lock(&c);
                    // The first signal goes to the command, which then ends the session
                    // with its exit.
                    if *pid != 0 && r.load(Ordering::Acquire) == 0 && forwards(origin.cause) {
                        let _ = child::signal(*pid, origin.signal);
                    }
                    drop(pid);
                    r.fetch_add(1, Ordering::AcqRel);
                }
            })
            .context("starting the signal thread")?;
        Ok(SignalState { received, child })
    }

    /// Forward the first signal to `pid` from now on (0: nobody).
    pub fn forward_to(&self, pid: u32) {
        *lock(&self.child) = pid;
    }

    fn received(&self) -> usize {
        self.received.load(Ordering::Acquire)
    }

    fn forwarding(&self) -> bool {
        *lock(&self.child) != 0
    }
}

/// The pid to forward to; a thread that panicked holding it left a plain integer.
fn lock(child: &Mutex<u32>) -> MutexGuard<'_, u32> {
    child.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Whether a signal that reached us must be passed on to the command. Not the
/// terminal's (Ctrl-C, sent by the kernel): the command is in our process group and got
/// it already, and a second SIGINT makes many programs quit without cleaning up.
fn forwards(cause: Cause) -> bool {
    cause != Cause::Kernel
}

/// The backend's part in the consumer loop.
pub trait Backend {
    /// The user asked to stop: make the producer write its last sample and end the
    /// session (the loop keeps draining until it ends, for at most `grace`).
    fn stop(&mut self) -> anyhow::Result<()>;
    /// How long, after [`Backend::stop`], the session may take to end before the loop
    /// takes what is ready and quits anyway.
    fn grace(&self) -> Duration;
    /// What the user is told when the ring breaks the protocol.
    fn ring_error(&self) -> &'static str;
}

/// What the consumer loop gathered.
pub struct Outcome {
    pub totals: Totals,
    rows: Vec<Row>,
    /// The user stopped the profile (a signal we did not just forward).
    pub stopped: bool,
}

/// Takes samples from `source` until the producer ends the session (or the user stops
/// it), writing every row as it arrives.
pub fn consume<W: Waiter>(
    settings: &mut Settings,
    area: &Area,
    mut source: Source<W>,
    signals: &SignalState,
    backend: &mut dyn Backend,
) -> anyhow::Result<Outcome> {
    let mut timeline = Timeline::new(area.period());
    let mut totals = Totals::default();
    let mut rows = Vec::new();
    let mut batch = Vec::new();
    let status = settings.status_line;
    let mut last_status = Instant::now();
    let mut handled_signals = 0;
    let mut give_up: Option<Instant> = None;
    settings.writer.header().context("writing the output")?;
    loop {
        let b = match give_up {
            Some(deadline) if Instant::now() >= deadline => {
                let mut b = source.drain_now(&mut batch).context(backend.ring_error())?;
                b.ended = true;
                b
            }
            _ => source
                .next(&mut batch, POLL)
                .context(backend.ring_error())?,
        };
        totals.lost += b.lost;
        for sample in batch.drain(..) {
            let row = timeline.row(&sample);
            totals.add(&row);
            settings.writer.write(&row).context("writing a sample")?;
            if settings.plot.is_some() {
                rows.push(row);
            }
        }
        settings.writer.flush().context("writing the samples")?;
        if status && last_status.elapsed() >= STATUS_EVERY {
            eprint!("\r{}\x1b[K", totals.status_line());
            last_status = Instant::now();
        }
        if b.ended {
            break;
        }
        let received = signals.received();
        if received > handled_signals {
            handled_signals = received;
            // A command we started got the first signal (from the terminal or from
            // us): its exit ends the session.
            // Otherwise, or at the second signal, end it ourselves.
            if give_up.is_none() && !(signals.forwarding() && received == 1) {
                backend.stop()?;
                give_up = Some(Instant::now() + backend.grace());
            }
        }
    }
    if status {
        eprint!("\r\x1b[K");
    }
    Ok(Outcome {
        totals,
        rows,
        stopped: give_up.is_some(),
    })
}

/// Writes the plot and prints the summary on stderr.
pub fn finish(
    settings: &Settings,
    area: &Area,
    outcome: &Outcome,
    child: Option<ChildReport>,
) -> anyhow::Result<()> {
    let caption = format!(
        "pfprof: {} backend, {} mode, {} ms period",
        settings.backend,
        settings.mode,
        area.period().as_millis()
    );
    if let Some(path) = &settings.plot {
        plot::write(path, &outcome.rows, &caption)
            .with_context(|| format!("writing the plot to {}", path.display()))?;
    }
    let counters = area.counters();
    let mode = settings.mode.to_string();
    let summary = Summary {
        backend: &settings.backend,
        mode: &mode,
        totals: &outcome.totals,
        blocked: Duration::from_nanos(counters.blocked_ns),
        deferred: counters.deferred,
        child,
    };
    eprintln!("{summary}");
    Ok(())
}

/// A thread that reaps the command `monitor run` started with wait4(), stops forwarding
/// signals to its pid, and hands its final counts to `on_exit`.
pub fn reap(
    pid: u32,
    signals: &SignalState,
    on_exit: impl FnOnce(ProcessCounters) + Send + 'static,
) -> anyhow::Result<JoinHandle<io::Result<ChildReport>>> {
    let signals = signals.clone();
    thread::Builder::new()
        .name("pfprof-reaper".into())
        .spawn(move || {
            // Stop forwarding while the pid is still the command's, and only then reap
            // it: a reaped pid may be given to someone else.
            let exited = child::wait_exited(pid);
            signals.forward_to(0);
            exited?;
            let (status, totals) = child::wait(pid)?;
            on_exit(totals);
            Ok(ChildReport {
                minor: totals.minor,
                major: totals.major,
                cpu_ns: totals.cpu_ns,
                status,
            })
        })
        .context("starting the thread that waits for the command")
}

/// How long a stopped profile waits for the command to exit after the signal.
const EXIT_WAIT: Duration = Duration::from_secs(1);

/// The command's rusage and the exit code `monitor` ends with: the command's own, or
/// 130 (interrupted) when the user stopped the profile and the command kept running.
pub fn child_outcome(
    reaper: Option<JoinHandle<io::Result<ChildReport>>>,
    stopped: bool,
) -> anyhow::Result<(Option<ChildReport>, u8)> {
    let Some(reaper) = reaper else {
        return Ok((None, 0));
    };
    let waited = Instant::now();
    while stopped && !reaper.is_finished() {
        if waited.elapsed() >= EXIT_WAIT {
            eprintln!("monitor: warning: stopped before the command ended; it is still running");
            return Ok((None, ExitStatus::Signaled(libc::SIGINT).code()));
        }
        thread::sleep(Duration::from_millis(10));
    }
    let report = reaper
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        .context("waiting for the command")?;
    Ok((Some(report), report.status.code()))
}

#[cfg(test)]
mod tests {
    use signal_hook::low_level::siginfo::Sent;

    use super::*;

    #[test]
    fn signals_from_the_terminal_are_not_forwarded_twice_but_those_from_kill_are() {
        assert!(!forwards(Cause::Kernel));
        assert!(forwards(Cause::Sent(Sent::User)));
        assert!(forwards(Cause::Sent(Sent::Queue)));
        assert!(forwards(Cause::Unknown));
    }
}
