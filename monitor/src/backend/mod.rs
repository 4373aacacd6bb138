//! The seam between the profile's flow ([`crate::profile`]) and where samples come from:
//! the pfprof module ([`kernel::Kernel`]) or the monitor's own /proc sampler
//! ([`procfs::Procfs`]).

pub mod install;
pub mod kernel;
pub mod procfs;

use std::sync::Arc;
use std::time::Duration;

use shared_layout::wait::Waiter;
use shared_layout::{Area, Mode};

use crate::command::child::Running;
use crate::command::signals::Stopper;
use crate::profile::error::ProfileError;
use crate::rows::source::Ending;
use crate::system::cgroup::Cgroup;

/// Which processes to profile, as the user selected them.
#[derive(Clone, Debug)]
pub struct Selection {
    /// `--pid`: running processes.
    pub pids: Vec<u32>,
    /// `monitor run`: a command will be started.
    pub command: bool,
    /// `--cgroup`: every process in the cgroup and its descendant cgroups, counted while
    /// inside. A backend takes it from the open directory ([`Cgroup::fd`]) or its path.
    pub cgroup: Option<Arc<Cgroup>>,
    /// Each process counts with its descendants (unless `--no-inherit`): the live ones as
    /// they run, the reaped ones through its children's counts.
    pub inherit: bool,
}

impl Default for Selection {
    fn default() -> Selection {
        Selection {
            pids: Vec::new(),
            command: false,
            cgroup: None,
            inherit: true,
        }
    }
}

/// A producer of samples, in the order [`crate::profile::profile`] calls it:
/// `open`, `adopt` (for a command), `start`, `produce`, then `stopper` while samples flow,
/// and `finish` once the session has ended.
pub trait Backend: Sized {
    /// How the consumer sleeps while the ring is empty (strict mode).
    type Waiter: Waiter;

    /// Checks that the `selection` can be profiled, every `period_ms` (`--period-ms`) if
    /// given, and takes hold of it (registering or attaching its processes); nothing is
    /// sampled yet.
    fn open(selection: &Selection, period_ms: Option<u32>) -> Result<Self, ProfileError>;

    /// Its name in the summary and the plot: "kernel" or "procfs".
    fn name(&self) -> &'static str;

    /// The command is forked and held before exec: profile it from here on, if the
    /// backend can before it runs.
    fn adopt(&mut self, pid: u32) -> Result<(), ProfileError>;

    /// Starts the ring in `mode`, and says how its consumer sleeps.
    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, Self::Waiter), ProfileError>;

    /// Samples begin to flow; `command` is the started command, running and not reaped
    /// (a backend that counts it itself watches for its exit there). `ending` is to be
    /// announced when the producer ends the session.
    fn produce(
        &mut self,
        area: &Arc<Area>,
        command: Option<&mut Running>,
        ending: Arc<Ending>,
    ) -> Result<(), ProfileError>;

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
