//! The seam between the profile's flow ([`crate::session`]) and where samples come from:
//! the pfprof module ([`kernel::Kernel`]) or the monitor's own /proc sampler
//! ([`procfs::Procfs`]).

pub mod kernel;
pub mod procfs;

use std::sync::Arc;
use std::time::Duration;

use shared_layout::wait::Waiter;
use shared_layout::{Area, Mode};

use crate::error::ProfileError;
use crate::procstat::ProcessCounters;
use crate::signals::Stopper;
use crate::source::Ending;

/// What to profile, as the user asked.
#[derive(Clone, Debug)]
pub struct Targets {
    /// `--pid`: running processes.
    pub pids: Vec<u32>,
    /// `monitor run`: a command will be started.
    pub command: bool,
    /// `--period-ms`.
    pub period_ms: Option<u32>,
    /// Each process counts with its descendants (unless `--no-inherit`): the live ones as
    /// they run, the reaped ones through its children's counts.
    pub inherit: bool,
}

impl Default for Targets {
    fn default() -> Targets {
        Targets {
            pids: Vec::new(),
            command: false,
            period_ms: None,
            inherit: true,
        }
    }
}

/// A producer of samples, in the order [`crate::session::profile`] calls it:
/// `open`, `adopt` (for a command), `start`, `produce`, then `stopper`/`on_command_exit` while samples flow, and
/// `finish` once the session has ended.
pub trait Backend: Sized {
    /// How the consumer sleeps while the ring is empty (strict mode).
    type Waiter: Waiter;

    /// Checks that `targets` can be profiled and takes hold of them (registering or
    /// attaching them); nothing is sampled yet.
    fn open(targets: &Targets) -> Result<Self, ProfileError>;

    /// Its name in the summary and the plot: "kernel" or "procfs".
    fn name(&self) -> &'static str;

    /// The command is forked and held before exec: profile it from here on, if the
    /// backend can before it runs.
    fn adopt(&mut self, pid: u32) -> Result<(), ProfileError>;

    /// Starts the session in `mode`: the ring, and how its consumer sleeps.
    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, Self::Waiter), ProfileError>;

    /// Samples begin to flow; `command` is the started command, running and not reaped.
    /// `ending` is to be rung when the producer ends the session.
    fn produce(
        &mut self,
        area: &Arc<Area>,
        command: Option<u32>,
        ending: Arc<Ending>,
    ) -> Result<(), ProfileError>;

    /// Told the command's final counts (wait4()) once it is reaped.
    fn on_command_exit(&self) -> Box<dyn FnOnce(ProcessCounters) + Send>;

    /// Ends the session early: the producer writes its last sample and cancels. Called
    /// from the signal thread.
    fn stopper(&self) -> Stopper;

    /// How long, after a stop, the session may take to end before the consumer takes
    /// what is ready and quits anyway.
    fn grace(&self) -> Duration;

    /// What the user is told when the ring breaks the protocol.
    fn ring_advice(&self) -> &'static str;

    /// After the session ended: what the profile misses or how it was measured, for the
    /// summary.
    fn finish(self) -> Result<Vec<String>, ProfileError>;
}
