//! Why an exporter cannot start, and whose move it is.

use std::io;
use std::path::PathBuf;

use crate::system::exit::Blame;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot serve metrics on {addr}")]
    Listen {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("--prometheus {0:?} is not an address like 127.0.0.1:9464, [::1]:9464 or :9464")]
    Address(String),
    #[error("{from} {url:?}: {why}")]
    Url {
        from: String,
        url: String,
        why: &'static str,
    },
    #[error("{from} {given:?}: {why}")]
    Header {
        from: String,
        given: String,
        why: &'static str,
    },
    #[error("{name}={value:?}: {why}")]
    Setting {
        name: String,
        value: String,
        why: &'static str,
    },
    #[error("{name}={}: {why}", path.display())]
    Pem {
        name: String,
        path: PathBuf,
        why: String,
    },
    #[error("cannot write metrics files in {}", dir.display())]
    Textfile {
        dir: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("starting an exporter's thread")]
    Thread(#[source] io::Error),
}

impl ExportError {
    /// A thread that cannot start is ours; the rest is the invocation's.
    pub fn blame(&self) -> Blame {
        match self {
            ExportError::Thread(_) => Blame::Internal,
            _ => Blame::Usage,
        }
    }
}
