//! Why the rows or the plot could not be written, and whose move it is.

use std::io;
use std::path::PathBuf;

use super::plot::PlotError;
use crate::system::exit::Blame;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("cannot write the output file {}", path.display())]
    File {
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
    #[error("cannot write the summary file {} (the summary went to standard error)", path.display())]
    Summary {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the plot is an SVG: {} must end in .svg", path.display())]
    PlotNotSvg { path: PathBuf },
    #[error("writing the samples")]
    Write(#[source] io::Error),
    #[error("drawing the plot")]
    Draw(#[source] PlotError),
}

impl OutputError {
    pub fn blame(&self) -> Blame {
        match self {
            OutputError::File { .. }
            | OutputError::Plot { .. }
            | OutputError::Summary { .. }
            | OutputError::PlotNotSvg { .. } => Blame::Usage,
            OutputError::Write(_) | OutputError::Draw(_) => Blame::Internal,
        }
    }
}
