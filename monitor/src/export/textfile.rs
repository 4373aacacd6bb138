//! `--textfile DIR`: the snapshot in the classic text format (no timestamps), written to
//! `DIR/pfprof-TARGET-PID.prom` for node_exporter's textfile collector on every new snapshot,
//! through a temporary file renamed over it (the collector never reads half a file),
//! from a thread of its own. Removed at the end, so that a selection that ended is not
//! exported forever.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::error::ExportError;
use super::metrics::Labels;
use super::prometheus::exposition::TextFormat;
use super::prometheus::http::Shown;

/// How the writes went, for the summary.
#[derive(Clone, Debug, Default)]
struct Written {
    writes: u64,
    failures: u64,
    last_error: Option<String>,
}

pub struct Writer {
    path: PathBuf,
    written: Arc<Mutex<Written>>,
    thread: JoinHandle<()>,
}

/// The file's name: `pfprof-`, the `target` label (its characters other than letters,
/// digits, `-` and `_` made `_`), `-` and the monitor's pid (two monitors of one target
/// write two files), and `.prom` (the collector reads only that extension).
pub(super) fn file_name(labels: &Labels) -> String {
    let target = &labels.target;
    let name: String = target
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(100)
        .collect();
    format!("pfprof-{name}-{}.prom", labels.monitor_pid)
}

/// Writes `text` to `path` through a temporary file beside it. The temporary file is
/// created anew, never opened through what another user of the directory put at its
/// name (a symlink to a file of ours), and the rename replaces a name, not what it
/// points to.
fn replace(path: &Path, temp: &Path, text: &str) -> io::Result<()> {
    let create = || {
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(temp)
    };
    let mut file = match create() {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            fs::remove_file(temp)?;
            create()?
        }
        other => other?,
    };
    file.write_all(text.as_bytes())?;
    file.sync_data()?;
    fs::rename(temp, path)
}

impl Writer {
    /// Checks that `dir` takes files now (it fails before anything is profiled) and
    /// writes what `shown` shows to `dir/name` from a thread: whenever it changes, and
    /// looks again every `look_every` at least.
    pub fn start(
        dir: &Path,
        name: &str,
        shown: Arc<dyn Shown>,
        look_every: Duration,
    ) -> Result<Writer, ExportError> {
        let error = |source| ExportError::Textfile {
            dir: dir.to_path_buf(),
            source,
        };
        if !fs::metadata(dir).map_err(error)?.is_dir() {
            return Err(error(io::Error::from(io::ErrorKind::NotADirectory)));
        }
        let path = dir.join(name);
        // A name node_exporter skips (it reads *.prom only).
        let temp = dir.join(format!(".{name}.tmp"));
        replace(&path, &temp, &shown.text(TextFormat::Classic).0).map_err(|e| {
            let _ = fs::remove_file(&temp);
            error(e)
        })?;
        let written = Arc::new(Mutex::new(Written {
            writes: 1,
            ..Written::default()
        }));
        let thread = {
            let (path, written) = (path.clone(), Arc::clone(&written));
            thread::Builder::new()
                .name("pfprof-textfile".into())
                .spawn(move || write_loop(&path, &temp, shown.as_ref(), look_every, &written))
                .map_err(ExportError::Thread)?
        };
        Ok(Writer {
            path,
            written,
            thread,
        })
    }

    /// What is shown is closed: removes the file and says how the writes went.
    pub fn finish(self) -> String {
        // It stops at the close; a write in progress is waited for so that the file is
        // not put back after its removal.
        let _ = self.thread.join();
        let removed = match fs::remove_file(&self.path) {
            Ok(()) => "removed at the end".to_owned(),
            Err(e) => format!("could not be removed at the end ({e})"),
        };
        let w = self
            .written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let failures = match (w.failures, w.last_error) {
            (0, _) => String::new(),
            (n, Some(e)) => format!(", {n} writes failed (last error: {e})"),
            (n, None) => format!(", {n} writes failed"),
        };
        format!(
            "textfile: {} written {} times{failures}, {removed}",
            self.path.display(),
            w.writes
        )
    }
}

fn write_loop(
    path: &Path,
    temp: &Path,
    shown: &dyn Shown,
    look_every: Duration,
    written: &Mutex<Written>,
) {
    let mut seen = 0;
    while let Some(generation) = shown.wait_newer(seen, Instant::now() + look_every) {
        if generation == seen {
            continue;
        }
        seen = generation;
        let result = replace(path, temp, &shown.text(TextFormat::Classic).0);
        let mut w = written.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(()) => w.writes += 1,
            Err(e) => {
                let _ = fs::remove_file(temp);
                w.failures += 1;
                w.last_error = Some(e.to_string());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::board::Board;
    use crate::export::prometheus::http::OneTarget;
    use crate::export::Snapshot;

    #[test]
    fn the_file_name_keeps_only_safe_characters_of_the_target_and_names_the_monitor() {
        let name = |target: &str, monitor_pid: &str| {
            file_name(&Labels {
                target: target.into(),
                backend: "procfs".into(),
                mode: "strict".into(),
                monitor_pid: monitor_pid.into(),
                derived: Vec::new(),
            })
        };
        assert_eq!(name("work", "7"), "pfprof-work-7.prom");
        assert_ne!(name("work", "7"), name("work", "8"));
        assert_eq!(
            name("/system.slice/a b.service", "7"),
            "pfprof-system_slice_a_b_service-7.prom"
        );
        assert_eq!(
            name("../../etc/passwd", "7"),
            "pfprof-______etc_passwd-7.prom"
        );
    }

    #[test]
    fn a_symlink_planted_at_the_temporary_name_is_replaced_not_followed() {
        let dir = std::env::temp_dir().join(format!("pfprof-textfile-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir(&dir).unwrap();
        let victim = dir.join("victim");
        fs::write(&victim, "precious").unwrap();
        let temp = dir.join(".t.tmp");
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        replace(&dir.join("t.prom"), &temp, "metrics\n").unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(fs::read_to_string(dir.join("t.prom")).unwrap(), "metrics\n");
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_directory_that_is_not_writable_or_not_there_is_refused_at_start() {
        let labels = Arc::new(Labels {
            target: "t".into(),
            backend: "procfs".into(),
            mode: "strict".into(),
            monitor_pid: "7".into(),
            derived: Vec::new(),
        });
        let board = Arc::new(Board::new(Snapshot::default()));
        let shown: Arc<dyn Shown> = Arc::new(OneTarget { board, labels });
        for dir in ["/proc", "/nonexistent-pfprof-dir", "/dev/null"] {
            let every = Duration::from_secs(1);
            let err = Writer::start(Path::new(dir), "t.prom", Arc::clone(&shown), every).err();
            assert!(
                matches!(err, Some(ExportError::Textfile { .. })),
                "{dir}: {err:?}"
            );
        }
    }
}
