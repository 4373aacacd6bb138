//! The seam between the profile's flow ([`crate::profile`]) and where samples come from:
//! the pfprof module ([`kernel::Kernel`]) or the monitor's own /proc sampler
//! ([`procfs::Procfs`]). The lowest stage: it imports nothing from those that consume
//! its samples, and they hand it callbacks ([`OnEnd`]) rather than their own types.

pub mod error;
pub mod install;
pub mod kernel;
pub mod procfs;

use std::sync::Arc;
use std::time::Duration;

use shared_layout::wait::Waiter;
use shared_layout::{Area, Mode};

use crate::attribution::Feed;
use crate::backend::procfs::fleet_faults::FleetFaults;
use crate::backend::procfs::sampler::SamplerPool;
use crate::system::cgroup::Cgroup;
use crate::system::procstat::ProcessCounters;
pub use error::BackendError;

/// Ends the session: makes the producer write its last sample and cancel.
pub type Stopper = Box<dyn FnOnce() -> Result<(), BackendError> + Send>;

/// Run by the producer when it ends the session, so the consumer sees the end at once.
pub type OnEnd = Box<dyn FnOnce() + Send>;

/// Told of the end of the command `monitor run` started, by the thread that reaps it: how
/// a backend that counts the command itself takes its last counts.
pub trait ExitWatch: Send {
    /// The command `pid` has exited and is not reaped yet: its pid is still its own, and
    /// its zombie can be read.
    fn exited(&mut self, pid: u32);
    /// It has been reaped: `totals` are wait4()'s, its own counts and those of the
    /// descendants it waited for.
    fn reaped(self: Box<Self>, pid: u32, totals: ProcessCounters);
}

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
    /// Faults are attributed to mappings, one minor fault in this many recorded (every
    /// major one); `None`: not (`--no-attribution`).
    pub attribution: Option<u64>,
    /// The procfs backend's ring, in pages (the module's is its `buffer_pages`).
    pub ring_pages: u64,
    /// A fleet's: the procfs backend samples a cgroup on this one thread with the other
    /// targets', not on a thread of its own.
    pub sampler_pool: Option<SamplerPool>,
    /// A fleet's: the procfs backend attributes the cgroup's faults from the fleet's
    /// events, shared by its targets, not from events of its own.
    pub fleet_faults: Option<FleetFaults>,
}

impl Default for Selection {
    fn default() -> Selection {
        Selection {
            pids: Vec::new(),
            command: false,
            cgroup: None,
            inherit: true,
            attribution: Some(crate::attribution::DEFAULT_MINOR_SAMPLING),
            ring_pages: shared_layout::abi::BUFFER_PAGES_DEFAULT.into(),
            sampler_pool: None,
            fleet_faults: None,
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
    fn open(selection: &Selection, period_ms: Option<u32>) -> Result<Self, BackendError>;

    /// Its name in the summary and the plot: "kernel" or "procfs".
    fn name(&self) -> &'static str;

    /// The command is forked and held before exec: profile it from here on, if the
    /// backend can before it runs.
    fn adopt(&mut self, pid: u32) -> Result<(), BackendError>;

    /// Starts the ring in `mode`, and says how its consumer sleeps.
    fn start(&mut self, mode: Mode) -> Result<(Arc<Area>, Self::Waiter), BackendError>;

    /// Samples begin to flow; `command` is the started command's pid, running and not
    /// reaped. `on_end` runs when the producer ends the session. A backend that counts the
    /// command itself returns what must be told of its exit.
    fn produce(
        &mut self,
        area: &Arc<Area>,
        command: Option<u32>,
        on_end: OnEnd,
    ) -> Result<Option<Box<dyn ExitWatch>>, BackendError>;

    /// Once samples flow: where each period's table comes from, if the backend makes
    /// them ([`crate::attribution`]).
    fn attribution(&self) -> Option<Arc<Feed>>;

    /// Ends the session early: the producer writes its last sample and cancels. Called
    /// from the signal thread.
    fn stopper(&self) -> Stopper;

    /// How long, after a stop, the session may take to end before the consumer takes
    /// what is ready and quits anyway.
    fn grace(&self) -> Duration;

    /// What the user is told when the ring breaks the protocol.
    fn ring_advice(&self) -> &'static str;

    /// Whether the first sample marks the start (taken as the profile starts, a
    /// fraction of a period) rather than ending a whole period: the consumer folds it
    /// into the next ([`crate::rows::row::Timeline`]).
    fn first_sample_marks_the_start(&self) -> bool;

    /// After the session ended: what the profile misses or how it was measured, for the
    /// summary.
    fn finish(self) -> Result<Vec<String>, BackendError>;
}
