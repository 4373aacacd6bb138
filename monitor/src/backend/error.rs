//! Why a backend could not profile the selection, and whose move it is.

use shared_layout::device::DeviceError;
use shared_layout::LayoutError;

use super::procfs::sampler::SamplerError;
use crate::system::error::SystemError;
use crate::system::exit::Blame;
use crate::system::procstat::StatError;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
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
    #[error("sampling /proc")]
    Sampler(#[source] SamplerError),
    #[error("creating the shared ring in a memfd")]
    Memfd(#[source] LayoutError),
    #[error(transparent)]
    System(#[from] SystemError),
}

impl BackendError {
    pub fn blame(&self) -> Blame {
        match self {
            BackendError::Attach { .. }
            | BackendError::NothingToProfile
            | BackendError::PeriodMismatch { .. } => Blame::Usage,
            BackendError::Device(e) if device_error_is_usage(e) => Blame::Usage,
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
            | DeviceError::TooDeep { .. }
            | DeviceError::Layout(LayoutError::VersionMismatch { .. })
    )
}
