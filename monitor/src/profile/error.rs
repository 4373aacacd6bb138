//! Why a profile failed, and whose move it is ([`Blame`]): the user's (a usage error), the
//! command's (not found, not executable), or ours. Each stage's own error is wrapped
//! whole, its message unchanged.

use std::io;

use shared_layout::ProtocolError;

use crate::backend::BackendError;
use crate::command::child::SpawnError;
use crate::export::ExportError;
use crate::output::error::OutputError;
use crate::system::cgroup::CgroupError;
use crate::system::error::SystemError;
use crate::system::exit::Blame;

#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// Where the samples come from: the module, or the /proc sampler.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// Where the rows and the plot go.
    #[error(transparent)]
    Output(#[from] OutputError),
    #[error(transparent)]
    Export(#[from] ExportError),
    #[error(transparent)]
    Spawn(#[from] SpawnError),
    #[error("--cgroup")]
    Cgroup(#[from] CgroupError),
    #[error("reading samples from the ring failed: {advice}")]
    Ring {
        advice: &'static str,
        #[source]
        source: ProtocolError,
    },
    #[error("waiting for the command")]
    Reap(#[source] io::Error),
    #[error(transparent)]
    System(#[from] SystemError),
}

impl ProfileError {
    pub fn blame(&self) -> Blame {
        match self {
            ProfileError::Backend(e) => e.blame(),
            ProfileError::Output(e) => e.blame(),
            ProfileError::Export(e) => e.blame(),
            ProfileError::Spawn(e) => e.blame(),
            ProfileError::Cgroup(_) => Blame::Usage,
            ProfileError::Ring { .. } | ProfileError::Reap(_) | ProfileError::System(_) => {
                Blame::Internal
            }
        }
    }
}
