//! The procfs backend: a sampler thread reads /proc and produces into a memfd area; the
//! consumer is the same code as with the module.

use std::ffi::OsString;
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use monitor::child;
use monitor::sampler::{Event, Sampler, Target};
use monitor::source::Source;
use shared_layout::wait::FutexWaiter;
use shared_layout::Area;

use crate::session::{self, Backend, Settings, SignalState};
use crate::{cannot_profile, usage, UsageContext};

/// The module's default `period_ms` (kmod/main.c; pfprof.h does not define it): both
/// backends sample 20 times a second unless told otherwise.
const DEFAULT_PERIOD_MS: u32 = 50;
/// The module's default `buffer_pages` (kmod/main.c), which counts the control page:
/// the same ring as the module's, 127 data pages of 16,256 slots, more than 13 minutes
/// of samples at 20 a second.
const AREA_PAGES: u64 = 128;

struct Procfs {
    events: Sender<Event>,
    period: Duration,
}

impl Backend for Procfs {
    fn stop(&mut self) -> anyhow::Result<()> {
        // The sampler may have ended already; then there is nothing to stop.
        let _ = self.events.send(Event::Stop);
        Ok(())
    }

    fn grace(&self) -> Duration {
        self.period + Duration::from_secs(2)
    }

    fn ring_error(&self) -> &'static str {
        "reading samples from the ring failed: the monitor's own sampler broke the protocol \
         (a bug: please report it with this message)"
    }
}

pub fn profile(
    mut settings: Settings,
    pids: &[u32],
    command: Option<Vec<OsString>>,
    period_ms: Option<u32>,
) -> anyhow::Result<u8> {
    if pids.is_empty() && command.is_none() {
        return Err(usage(
            "nothing to profile: give --pid PID, or use `monitor run -- CMD` \
             (processes can register themselves only with the pfprof module loaded)",
        ));
    }
    let mut targets = pids
        .iter()
        .map(|&pid| Target::attach(pid).usage_context(|| cannot_profile(pid)))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let period_ms = period_ms.unwrap_or(DEFAULT_PERIOD_MS);
    let period = Duration::from_millis(period_ms.into());
    let area = Arc::new(
        Area::create_memfd(AREA_PAGES, settings.mode, period)
            .context("creating the shared ring in a memfd")?,
    );
    let source = Source::new(Arc::clone(&area), FutexWaiter, settings.interval);
    let signals = SignalState::install()?;

    let child_pid = match &command {
        Some(argv) => {
            let pid = child::spawn(argv).usage_context(|| {
                "cannot start the command (check its name and permissions)".into()
            })?;
            signals.forward_to(pid);
            targets.push(Target::child(pid).context("reading the command's /proc entry")?);
            Some(pid)
        }
        None => None,
    };
    let sampler =
        Sampler::spawn(Arc::clone(&area), targets, period).context("starting the sampler")?;
    let reaper = child_pid
        .map(|pid| {
            let events = sampler.events();
            // The sampler takes the command's last counts from wait4().
            session::reap(pid, &signals, move |totals| {
                let _ = events.send(Event::Exited { pid, totals });
            })
        })
        .transpose()?;

    let mut backend = Procfs {
        events: sampler.events(),
        period,
    };
    let outcome = session::consume(&mut settings, &area, source, &signals, &mut backend);
    if outcome.is_err() {
        backend.stop()?;
    }
    let outcome = outcome?;
    let report = sampler.join().context("sampling /proc")?;
    if report.unflushed != Default::default() {
        eprintln!(
            "monitor: warning: the consumer stopped before the last sample could be written: \
             {} minor and {} major faults are missing from the output",
            report.unflushed.minor, report.unflushed.major
        );
    }
    let (child, code) = session::child_outcome(reaper, outcome.stopped)?;
    session::finish(&settings, &area, &outcome, child)?;
    Ok(code)
}
