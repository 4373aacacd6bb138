//! Where the rows and the plot go. A file is written beside its target under a temporary
//! name and renamed over it only when the profile is complete, so a run that fails, or
//! fails to start, leaves an earlier file of that name as it was. The temporary name is
//! not hidden: `prof.csv.pfprof-PID.partial` beside `prof.csv`, so a monitor killed with
//! SIGKILL (the one signal it cannot finish on) leaves its partial rows in plain sight,
//! named as partial.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::Serialize;

use super::attribution::IntervalRecord;
use super::error::OutputError;
use super::metadata::Metadata;
use super::table::Table;
use crate::pressure::verdict::Band;
use crate::rows::row::{Pressure, Row, ROW_COLUMNS};

/// Output format of the sample rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Csv,
    Jsonl,
    /// For a person at a terminal: a line an interval ([`Table`]).
    Table,
}

#[derive(Debug, thiserror::Error)]
#[error("format must be csv, jsonl or table, not {0:?}")]
pub struct ParseFormatError(String);

impl FromStr for Format {
    type Err = ParseFormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "csv" => Ok(Format::Csv),
            "jsonl" => Ok(Format::Jsonl),
            "table" => Ok(Format::Table),
            _ => Err(ParseFormatError(s.to_owned())),
        }
    }
}

/// The CSV header: every column, in order.
pub fn csv_header() -> String {
    let columns: Vec<&str> = ROW_COLUMNS
        .iter()
        .chain(&Pressure::NAMES)
        .copied()
        .collect();
    columns.join(",")
}

/// How the CSV's first line, its metadata, begins.
pub const CSV_METADATA_PREFIX: &str = "# pfprof ";

/// A record in JSON Lines: `"event"` (`start`, `row`, `where`, `thrashing`) first, then
/// the fields of what it records, so that every record says what it is.
#[derive(Serialize)]
struct Event<'a, T: Serialize> {
    event: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

/// Writes rows in the chosen format. Once the reader has gone away (a closed pipe, as in
/// `monitor | head`) further rows are dropped: that is not an error, and
/// [`RowWriter::is_closed`] tells the caller to end the profile.
pub struct RowWriter<W: Write> {
    out: W,
    format: Format,
    /// [`Format::Table`]'s lines, a second each unless [`RowWriter::every`] says.
    table: Table,
    closed: bool,
}

impl<W: Write> RowWriter<W> {
    pub fn new(out: W, format: Format) -> Self {
        RowWriter {
            out,
            format,
            table: Table::new(std::time::Duration::from_secs(1)),
            closed: false,
        }
    }

    /// [`Format::Table`]: a line every `interval`.
    pub fn every(mut self, interval: std::time::Duration) -> Self {
        self.table = Table::new(interval);
        self
    }

    /// The metadata, then the CSV header row: in CSV a first line `# pfprof {...}` (the
    /// metadata as JSON; `#` lines are comments to CSV readers that take them), in JSON
    /// Lines a first record `{"event":"start",...}`.
    pub fn header(&mut self, metadata: &Metadata) -> io::Result<()> {
        let json = serde_json::to_string(&Event {
            event: "start",
            body: metadata,
        })
        .map_err(io::Error::from)?;
        match self.format {
            Format::Csv => self.guard(|out| {
                writeln!(out, "{CSV_METADATA_PREFIX}{json}")?;
                writeln!(out, "{}", csv_header())
            }),
            Format::Jsonl => self.guard(|out| writeln!(out, "{json}")),
            Format::Table => self.guard(|out| Table::title(out, metadata)),
        }
    }

    pub fn write(&mut self, row: &Row) -> io::Result<()> {
        if self.format == Format::Table {
            let table = &mut self.table;
            return guard(&mut self.closed, &mut self.out, |out| table.row(out, row));
        }
        let format = self.format;
        self.guard(|out| match format {
            Format::Csv => {
                write!(
                    out,
                    "{},{},{},{},{},{:.4},{},{},{},{}",
                    row.time_ms,
                    row.mono_ns,
                    row.minor,
                    row.major,
                    row.cpu_ns,
                    row.cpu_util,
                    row.rss_anon,
                    row.rss_file,
                    row.rss_shmem,
                    row.swap
                )?;
                // A counter the kernel does not have is an empty field.
                for value in row.pressure.values() {
                    match value {
                        Some(v) => write!(out, ",{v}")?,
                        None => out.write_all(b",")?,
                    }
                }
                out.write_all(b"\n")
            }
            Format::Jsonl => {
                let record = Event {
                    event: "row",
                    body: row,
                };
                serde_json::to_writer(&mut *out, &record).map_err(io::Error::from)?;
                out.write_all(b"\n")
            }
            Format::Table => Ok(()),
        })
    }

    /// The end of the rows: a table's last, partial line.
    pub fn finish(&mut self) -> io::Result<()> {
        if self.format != Format::Table {
            return Ok(());
        }
        let table = &mut self.table;
        guard(&mut self.closed, &mut self.out, |out| table.finish(out))
    }

    /// A thrashing band, in JSON Lines as a record among the rows (after the row that
    /// ended it); the CSV holds rows only.
    pub fn event(&mut self, band: &Band) -> io::Result<()> {
        self.record("thrashing", band)
    }

    /// Where an interval's faults were, in JSON Lines as a record after its rows.
    pub fn interval(&mut self, record: &IntervalRecord) -> io::Result<()> {
        self.record("where", record)
    }

    /// A record among the rows, JSON Lines only.
    fn record(&mut self, event: &'static str, body: &impl Serialize) -> io::Result<()> {
        match self.format {
            Format::Csv | Format::Table => Ok(()),
            Format::Jsonl => self.guard(|out| {
                serde_json::to_writer(&mut *out, &Event { event, body })
                    .map_err(io::Error::from)?;
                out.write_all(b"\n")
            }),
        }
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.guard(|out| out.flush())
    }

    /// Whether the reader has gone away.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn guard(&mut self, f: impl FnOnce(&mut W) -> io::Result<()>) -> io::Result<()> {
        guard(&mut self.closed, &mut self.out, f)
    }
}

/// Runs `f` on `out` unless the reader went away; a closed pipe is no error but `closed`.
fn guard<W: Write>(
    closed: &mut bool,
    out: &mut W,
    f: impl FnOnce(&mut W) -> io::Result<()>,
) -> io::Result<()> {
    if *closed {
        return Ok(());
    }
    match f(out) {
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            *closed = true;
            Ok(())
        }
        other => other,
    }
}

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
        let mut temp_name = name.to_os_string();
        temp_name.push(format!(".pfprof-{}.partial", std::process::id()));
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
    Stderr,
    /// `monitor run`'s default: its command has the standard output, and standard error
    /// shows the live line and the summary (as `perf stat`).
    Nowhere,
}

impl Destination {
    /// What `--output PATH` names: `-` and /dev/stdout are standard output, /dev/stderr
    /// standard error; anything else a file.
    pub fn named(path: PathBuf) -> Destination {
        match path.to_str() {
            Some("-" | "/dev/stdout") => Destination::Stdout,
            Some("/dev/stderr") => Destination::Stderr,
            _ => Destination::File(path),
        }
    }
}

enum Sink {
    File(PendingFile),
    Stdout(io::Stdout),
    Stderr(io::Stderr),
    Nowhere,
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::File(f) => f.write(buf),
            Sink::Stdout(s) => s.write(buf),
            Sink::Stderr(s) => s.write(buf),
            Sink::Nowhere => Ok(buf.len()),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::File(f) => f.flush(),
            Sink::Stdout(s) => s.flush(),
            Sink::Stderr(s) => s.flush(),
            Sink::Nowhere => Ok(()),
        }
    }
}

/// The rows' output. A write that fails (a full disk) ends the rows, not the profile:
/// the error is kept for [`Output::commit`], so the summary is still written.
pub struct Output {
    rows: RowWriter<BufWriter<Sink>>,
    destination: Destination,
    failure: Option<io::Error>,
}

impl Output {
    /// Opens the destination now, so an unwritable path fails before anything runs;
    /// `interval`: a table's line (`--interval`).
    pub fn open(
        destination: Destination,
        format: Format,
        interval: std::time::Duration,
    ) -> Result<Output, OutputError> {
        let sink =
            match &destination {
                Destination::File(path) => Sink::File(PendingFile::create(path).map_err(
                    |source| OutputError::File {
                        path: path.clone(),
                        source,
                    },
                )?),
                Destination::Stdout => Sink::Stdout(io::stdout()),
                Destination::Stderr => Sink::Stderr(io::stderr()),
                Destination::Nowhere => Sink::Nowhere,
            };
        Ok(Output {
            rows: RowWriter::new(BufWriter::new(sink), format).every(interval),
            destination,
            failure: None,
        })
    }

    /// Whether a live status line on stderr would not land among the rows: they go to a
    /// file, or nowhere. Rows on standard output may reach the same terminal even when it
    /// is a pipe (`| tee prof.csv`).
    pub fn leaves_stderr_to_the_status_line(&self) -> bool {
        match self.destination {
            Destination::File(_) | Destination::Nowhere => io::stderr().is_terminal(),
            Destination::Stdout | Destination::Stderr => false,
        }
    }

    /// The metadata record, then the CSV header.
    pub fn header(&mut self, metadata: &Metadata) {
        self.keep(|rows| rows.header(metadata));
    }

    pub fn write(&mut self, row: &Row) {
        self.keep(|rows| rows.write(row));
    }

    /// A thrashing band among the rows (JSON Lines only).
    pub fn event(&mut self, band: &Band) {
        self.keep(|rows| rows.event(band));
    }

    /// Where an interval's faults were, after its rows (JSON Lines only).
    pub fn interval(&mut self, record: &IntervalRecord) {
        self.keep(|rows| rows.interval(record));
    }

    pub fn flush(&mut self) {
        self.keep(RowWriter::flush);
    }

    /// Runs `write` unless an earlier write failed, or the rows go nowhere (a fleet's
    /// targets: a thousand rows a second made to be thrown away); keeps its error.
    fn keep(&mut self, write: impl FnOnce(&mut RowWriter<BufWriter<Sink>>) -> io::Result<()>) {
        let nowhere = matches!(self.destination, Destination::Nowhere);
        if self.failure.is_none() && !nowhere {
            self.failure = write(&mut self.rows).err();
        }
    }

    /// The reader went away (a closed pipe): nothing more can be written.
    pub fn is_closed(&self) -> bool {
        self.rows.is_closed()
    }

    /// Flushes and puts a file output in place.
    pub fn commit(mut self) -> Result<(), OutputError> {
        self.keep(RowWriter::finish);
        let write_error = |source| match &self.destination {
            Destination::File(path) => OutputError::File {
                path: path.clone(),
                source,
            },
            _ => OutputError::Write(source),
        };
        if let Some(failure) = self.failure {
            return Err(write_error(failure));
        }
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
    pub fn create(path: &Path) -> Result<PlotFile, OutputError> {
        if !path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("svg"))
        {
            return Err(OutputError::PlotNotSvg {
                path: path.to_path_buf(),
            });
        }
        let file = PendingFile::create(path).map_err(|source| OutputError::Plot {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(PlotFile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// Writes `svg` and puts the file in place.
    pub fn commit(mut self, svg: &str) -> Result<(), OutputError> {
        let error = |source| OutputError::Plot {
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
    use std::time::Duration;

    use super::*;
    use crate::output::metadata::test_metadata;
    use crate::pressure::verdict::test_band as band;
    use crate::rows::row::{test_sample as sample, Timeline};

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
            matches!(err, Some(OutputError::PlotNotSvg { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn csv_rows_follow_the_header_columns() {
        let mut buf = Vec::new();
        let mut w = RowWriter::new(&mut buf, Format::Csv);
        w.header(&test_metadata()).unwrap();
        let mut row = Timeline::new(Duration::from_millis(50)).row(&sample(100, 7, 1));
        row.pressure.stall_some_us = Some(120);
        row.pressure.pgmajfault = Some(3);
        w.write(&row).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let (metadata, text) = text.split_once('\n').unwrap();
        let metadata: serde_json::Value =
            serde_json::from_str(metadata.strip_prefix(CSV_METADATA_PREFIX).unwrap()).unwrap();
        assert_eq!(
            (&metadata["event"], &metadata["pids"][0]),
            (&"start".into(), &42.into())
        );
        assert_eq!(
            text,
            "time_ms,mono_ns,minor,major,cpu_ns,cpu_util,rss_anon,rss_file,rss_shmem,swap,\
             stall_some_us,stall_full_us,cgroup_stall_some_us,cgroup_stall_full_us,\
             pswpin,pswpout,workingset_refault_anon,workingset_refault_file,\
             pgscan_kswapd,pgscan_direct,pgmajfault\n\
             50,100000000,7,0,1,0.0000,4096,0,0,0,120,,,,,,,,,,3\n"
        );
    }

    #[test]
    fn a_flushed_row_reaches_the_file_before_the_writer_ends() {
        let mut w = RowWriter::new(BufWriter::new(Vec::new()), Format::Csv);
        w.write(&Timeline::new(Duration::from_millis(50)).row(&sample(1, 2, 3)))
            .unwrap();
        assert!(w.out.get_ref().is_empty(), "BufWriter holds the row");
        w.flush().unwrap();
        assert!(w.out.get_ref().starts_with(b"1,1000000,2,"));
    }

    #[test]
    fn a_write_error_other_than_a_closed_pipe_is_reported() {
        let full = Failing::with(io::ErrorKind::StorageFull);
        let mut w = RowWriter::new(full, Format::Csv);
        let row = Timeline::new(Duration::from_millis(50)).row(&sample(1, 2, 3));
        assert_eq!(
            w.write(&row).unwrap_err().kind(),
            io::ErrorKind::StorageFull
        );
        assert!(!w.is_closed());
    }

    #[test]
    fn jsonl_rows_are_records_named_row_with_the_csv_column_names() {
        let mut buf = Vec::new();
        let mut w = RowWriter::new(&mut buf, Format::Jsonl);
        w.header(&test_metadata()).unwrap();
        w.write(&Timeline::new(Duration::from_millis(50)).row(&sample(1, 2, 3)))
            .unwrap();
        let mut records = serde_json::Deserializer::from_slice(&buf).into_iter();
        let start: serde_json::Value = records.next().unwrap().unwrap();
        assert_eq!(start["event"], "start");
        assert_eq!(start["period_ms"], 50);
        let v: serde_json::Value = records.next().unwrap().unwrap();
        assert_eq!(v["event"], "row");
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let header = csv_header();
        let mut expected: Vec<&str> = header.split(',').chain(["event"]).collect();
        expected.sort_unstable();
        keys.sort_unstable();
        assert_eq!(keys, expected);
        // A counter the kernel does not have is null, as it is an empty CSV field.
        assert_eq!(v["pgmajfault"], serde_json::Value::Null);
        assert_eq!(v["rss_anon"], 4096);
    }

    /// Fails every call with its error, counting them.
    struct Failing {
        kind: io::ErrorKind,
        calls: usize,
    }
    impl Failing {
        fn with(kind: io::ErrorKind) -> Failing {
            Failing { kind, calls: 0 }
        }
    }
    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            self.calls += 1;
            Err(self.kind.into())
        }
        fn flush(&mut self) -> io::Result<()> {
            self.calls += 1;
            Err(self.kind.into())
        }
    }

    #[test]
    fn a_closed_pipe_silences_the_writer_instead_of_failing() {
        let mut w = RowWriter::new(Failing::with(io::ErrorKind::BrokenPipe), Format::Csv);
        w.header(&test_metadata()).unwrap();
        w.write(&Timeline::new(Duration::from_millis(50)).row(&sample(1, 2, 3)))
            .unwrap();
        w.flush().unwrap();
        assert_eq!(w.out.calls, 1, "nothing is written after the reader left");
    }

    #[test]
    fn a_band_is_a_json_lines_record_named_thrashing_and_nothing_in_the_csv() {
        let mut buf = Vec::new();
        let mut w = RowWriter::new(&mut buf, Format::Jsonl);
        w.event(&band()).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["event"], "thrashing");
        assert_eq!(
            (v["start_ms"].as_u64(), v["end_ms"].as_u64()),
            (Some(2150), Some(6200))
        );
        assert_eq!(v["pswpout_rate"], serde_json::Value::Null);
        assert_eq!(v["onset_rss_anon"], 64 << 20);
        // The schema README.md documents, "event" first.
        assert!(buf.starts_with(br#"{"event":"thrashing","start_ms":2150,"#));
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        let mut documented = [
            "event",
            "start_ms",
            "end_ms",
            "start_mono_ns",
            "end_mono_ns",
            "ongoing",
            "stall_full_pct",
            "stall_some_pct",
            "major_rate",
            "refault_rate",
            "pswpin_rate",
            "pswpout_rate",
            "major_faults",
            "system_major_faults",
            "target_share",
            "onset_rss_anon",
            "onset_rss_file",
            "onset_rss_shmem",
            "onset_swap",
            "major_mapping",
        ];
        documented.sort_unstable();
        assert_eq!(keys, documented);
        let mut csv = Vec::new();
        RowWriter::new(&mut csv, Format::Csv)
            .event(&band())
            .unwrap();
        assert!(csv.is_empty());
    }

    #[test]
    fn where_the_faults_were_is_a_json_lines_record_after_its_rows_and_nothing_in_the_csv() {
        use crate::output::attribution::{Counts, FaultsRecord, IntervalRecord};
        let record = IntervalRecord {
            start_ms: 0,
            end_ms: 1000,
            end_mono_ns: 5,
            minor_sampling: Some(61),
            mappings: Vec::new(),
            other_mappings: FaultsRecord {
                major: 0,
                minor_est: 0,
                minor_samples: 0,
            },
            functions: Vec::new(),
            lost: FaultsRecord {
                major: 1,
                minor_est: 61,
                minor_samples: 1,
            },
            processes: Vec::new(),
            programs: Vec::new(),
            other_processes: Counts { minor: 3, major: 0 },
        };
        let mut buf = Vec::new();
        RowWriter::new(&mut buf, Format::Jsonl)
            .interval(&record)
            .unwrap();
        assert!(buf.starts_with(br#"{"event":"where","start_ms":0,"end_ms":1000,"#));
        let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
        assert_eq!(v["lost"]["minor_est"], 61);
        assert_eq!(v["other_processes"]["minor"], 3);
        let mut csv = Vec::new();
        RowWriter::new(&mut csv, Format::Csv)
            .interval(&record)
            .unwrap();
        assert!(csv.is_empty());
    }
}
