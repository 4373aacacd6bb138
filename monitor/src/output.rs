//! Where the rows and the plot go. A file is written beside its target under a temporary
//! name and renamed over it only when the profile is complete, so a run that fails, or
//! fails to start, leaves an earlier file of that name as it was.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};

use crate::error::ProfileError;
use crate::report::{Format, Row, RowWriter};

/// A file being written: under a temporary name in the target's directory until
/// [`PendingFile::commit`]; dropped uncommitted, it is removed.
pub struct PendingFile {
    file: File,
    target: PathBuf,
    /// `None` when the target is not a regular file (a FIFO, /dev/stdout, a terminal):
    /// that is written directly, never replaced.
    temp: Option<PathBuf>,
}

impl PendingFile {
    pub fn create(target: &Path) -> io::Result<PendingFile> {
        let direct = fs::metadata(target).is_ok_and(|m| !m.is_file());
        if direct {
            let file = OpenOptions::new().write(true).open(target)?;
            return Ok(PendingFile {
                file,
                target: target.to_path_buf(),
                temp: None,
            });
        }
        // A symlink to a file: that file is replaced, the link stays.
        let target = fs::canonicalize(target).unwrap_or_else(|_| target.to_path_buf());
        let name = target
            .file_name()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "not a file name"))?;
        let mut temp_name = std::ffi::OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".pfprof-{}.tmp", std::process::id()));
        let temp = target.with_file_name(temp_name);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)?;
        Ok(PendingFile {
            file,
            target,
            temp: Some(temp),
        })
    }

    /// Puts the file in place of its target.
    pub fn commit(mut self) -> io::Result<()> {
        self.file.flush()?;
        match self.temp.take() {
            Some(temp) => fs::rename(&temp, &self.target).inspect_err(|_| {
                let _ = fs::remove_file(&temp);
            }),
            None => Ok(()),
        }
    }
}

impl Write for PendingFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for PendingFile {
    fn drop(&mut self) {
        if let Some(temp) = &self.temp {
            let _ = fs::remove_file(temp);
        }
    }
}

/// Where the rows go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    File(PathBuf),
    Stdout,
    /// `monitor run`'s default: its command has the standard output (as `perf stat`).
    Stderr,
}

enum Sink {
    File(PendingFile),
    Stdout(io::Stdout),
    Stderr(io::Stderr),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::File(f) => f.write(buf),
            Sink::Stdout(s) => s.write(buf),
            Sink::Stderr(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            Sink::Stdout(s) => s.flush(),
            Sink::Stderr(s) => s.flush(),
        }
    }
}

/// The rows' output.
pub struct Output {
    rows: RowWriter<BufWriter<Sink>>,
    destination: Destination,
}

impl Output {
    /// Opens the destination now, so an unwritable path fails before anything runs.
    pub fn open(destination: Destination, format: Format) -> Result<Output, ProfileError> {
        let sink = match &destination {
            Destination::File(path) => {
                Sink::File(
                    PendingFile::create(path).map_err(|source| ProfileError::Output {
                        path: path.clone(),
                        source,
                    })?,
                )
            }
            Destination::Stdout => Sink::Stdout(io::stdout()),
            Destination::Stderr => Sink::Stderr(io::stderr()),
        };
        Ok(Output {
            rows: RowWriter::new(BufWriter::new(sink), format),
            destination,
        })
    }

    /// Whether a live status line on stderr would not land among the rows.
    pub fn leaves_stderr_to_the_status_line(&self) -> bool {
        let stderr = io::stderr().is_terminal();
        match self.destination {
            Destination::File(_) => stderr,
            Destination::Stdout => stderr && !io::stdout().is_terminal(),
            Destination::Stderr => false,
        }
    }

    pub fn header(&mut self) -> Result<(), ProfileError> {
        self.rows.header().map_err(ProfileError::Write)
    }

    pub fn write(&mut self, row: &Row) -> Result<(), ProfileError> {
        self.rows.write(row).map_err(ProfileError::Write)
    }

    pub fn flush(&mut self) -> Result<(), ProfileError> {
        self.rows.flush().map_err(ProfileError::Write)
    }

    /// The reader went away (a closed pipe): nothing more can be written.
    pub fn is_closed(&self) -> bool {
        self.rows.is_closed()
    }

    /// Flushes and puts a file output in place.
    pub fn commit(self) -> Result<(), ProfileError> {
        let write_error = |source| match &self.destination {
            Destination::File(path) => ProfileError::Output {
                path: path.clone(),
                source,
            },
            _ => ProfileError::Write(source),
        };
        let closed = self.rows.is_closed();
        let sink = self
            .rows
            .into_inner()
            .into_inner()
            .map_err(|e| e.into_error());
        match sink {
            Ok(Sink::File(file)) => file.commit().map_err(write_error),
            Ok(_) => Ok(()),
            // A reader that left took the unwritten rest with it.
            Err(e) if closed || e.kind() == io::ErrorKind::BrokenPipe => Ok(()),
            Err(e) => Err(write_error(e)),
        }
    }
}

/// The plot's file, created at the start so an unwritable path fails before anything runs.
pub struct PlotFile {
    path: PathBuf,
    file: PendingFile,
}

impl PlotFile {
    pub fn create(path: &Path) -> Result<PlotFile, ProfileError> {
        if !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            return Err(ProfileError::PlotNotSvg {
                path: path.to_path_buf(),
            });
        }
        let file = PendingFile::create(path).map_err(|source| ProfileError::Plot {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(PlotFile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes `svg` and puts the file in place.
    pub fn commit(mut self, svg: &str) -> Result<(), ProfileError> {
        let error = |source| ProfileError::Plot {
            path: self.path.clone(),
            source,
        };
        self.file.write_all(svg.as_bytes()).map_err(error)?;
        self.file.commit().map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileTypeExt;

    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pfprof-output-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_pending_file_replaces_its_target_only_when_committed() {
        let dir = scratch("commit");
        let target = dir.join("prof.csv");
        fs::write(&target, "earlier").unwrap();
        let mut pending = PendingFile::create(&target).unwrap();
        pending.write_all(b"new").unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "earlier");
        pending.commit().unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "new");
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "a temporary file is left"
        );
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_pending_file_dropped_uncommitted_leaves_the_target_and_no_temporary_file() {
        let dir = scratch("drop");
        let target = dir.join("prof.csv");
        fs::write(&target, "earlier").unwrap();
        let mut pending = PendingFile::create(&target).unwrap();
        pending.write_all(b"new").unwrap();
        drop(pending);
        assert_eq!(fs::read_to_string(&target).unwrap(), "earlier");
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 1);
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_symlinked_target_keeps_its_link_and_a_device_is_written_directly() {
        let dir = scratch("link");
        let real = dir.join("real.csv");
        let link = dir.join("link.csv");
        fs::write(&real, "earlier").unwrap();
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let mut pending = PendingFile::create(&link).unwrap();
        pending.write_all(b"new").unwrap();
        pending.commit().unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
        let null = PendingFile::create(Path::new("/dev/null")).unwrap();
        assert!(null.temp.is_none());
        null.commit().unwrap();
        assert!(fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device());
        fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_plot_must_be_named_svg() {
        let err = PlotFile::create(Path::new("/tmp/out.png")).err();
        assert!(
            matches!(err, Some(ProfileError::PlotNotSvg { .. })),
            "{err:?}"
        );
    }
}
