//! Why a profile failed, and whose move it is ([`Blame`]): the user's (a usage error), the
//! command's (not found, not executable), or ours.

use std::io;
use std::path::PathBuf;

use shared_layout::device::DeviceError;
use shared_layout::{LayoutError, ProtocolError};

use crate::backend::procfs::sampler::SamplerError;
use crate::command::child::SpawnError;
use crate::export::ExportError;
use crate::output::plot::PlotError;
use crate::system::cgroup::CgroupError;
use crate::system::exit::Blame;
use crate::system::procstat::StatError;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot write the output file {}", path.display())]
    Output {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write the plot file {}", path.display())]
    Plot {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the plot is an SVG: {} must end in .svg", path.display())]
    PlotNotSvg { path: PathBuf },
    #[error("cannot profile process {pid}")]
    Attach {
        pid: u32,
        #[source]
        source: StatError,
    },
    #[error("cannot use the pfprof module")]
    Device(#[source] DeviceError),
    #[error("nothing to profile: give --pid PID or --cgroup PATH, or use `monitor run -- CMD`")]
    NothingToProfile,
    #[error("the module samples every {module_ms} ms, not every {asked_ms} ms")]
    PeriodMismatch { module_ms: u128, asked_ms: u32 },
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("reading samples from the ring failed: {advice}")]
    Ring {
        advice: &'static str,
        #[source]
        source: ProtocolError,
    },
    #[error("writing the samples")]
    Write(#[source] io::Error),
    #[error("drawing the plot")]
    Draw(#[source] PlotError),
    #[error("sampling /proc")]
    Sampler(#[source] SamplerError),
    #[error("creating the shared ring in a memfd")]
    Memfd(#[source] LayoutError),
    #[error("waiting for the command")]
    Reap(#[source] io::Error),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error("--cgroup")]
    Cgroup(#[from] CgroupError),
    #[error("{what}")]
    System {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

impl ProfileError {
    pub fn blame(&self) -> Blame {
        match self {
            ProfileError::Output { .. }
            | ProfileError::Plot { .. }
            | ProfileError::PlotNotSvg { .. }
            | ProfileError::Attach { .. }
            | ProfileError::NothingToProfile
            | ProfileError::Cgroup(_)
            | ProfileError::PeriodMismatch { .. } => Blame::Usage,
            ProfileError::Device(e) if device_error_is_usage(e) => Blame::Usage,
            ProfileError::Export(e) => e.blame(),
            ProfileError::Spawn(e) => e.blame(),
            _ => Blame::Internal,
        }
    }
}

/// The module's errors the user can act on: not loaded, no permission, ABI mismatch, too
/// many sessions, a process that is not there or not theirs.
fn device_error_is_usage(e: &DeviceError) -> bool {
    matches!(
        e,
        DeviceError::NotLoaded { .. }
            | DeviceError::PermissionDenied { .. }
            | DeviceError::AbiMismatch { .. }
            | DeviceError::TooManySessions { .. }
            | DeviceError::NoSuchProcess { .. }
            | DeviceError::NotAllowed { .. }
            | DeviceError::AlreadyCounted { .. }
            | DeviceError::Layout(LayoutError::VersionMismatch { .. })
    )
}
