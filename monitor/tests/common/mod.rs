//! Helpers shared by the monitor's integration tests: they drive the real binaries.

#![allow(dead_code)] // each test crate uses its own subset

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub const MONITOR: &str = env!("CARGO_BIN_EXE_monitor");
pub const WORK: &str = env!("CARGO_BIN_EXE_work");

/// A fresh, empty scratch directory for one test, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("pfprof-monitor-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn monitor(args: &[&str]) -> Output {
    Command::new(MONITOR)
        .args(args)
        .output()
        .expect("monitor runs")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One CSV row, as the monitor writes them.
#[derive(Debug, Clone)]
pub struct Row {
    pub time_ms: u64,
    pub mono_ns: u64,
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    pub cpu_util: f64,
    pub rss_anon: u64,
    pub rss_file: u64,
    pub rss_shmem: u64,
    pub swap: u64,
    /// The pressure columns, `None` where empty.
    pub pressure: Vec<Option<u64>>,
}

/// The metadata line that begins the monitor's CSV, as JSON.
pub fn csv_metadata(text: &str) -> serde_json::Value {
    let first = text.lines().next().unwrap_or_default();
    let json = first
        .strip_prefix(monitor::output::writer::CSV_METADATA_PREFIX)
        .unwrap_or_else(|| panic!("no metadata line first: {first:?}"));
    serde_json::from_str(json).expect("the metadata line is JSON")
}

/// Parses the monitor's CSV, checking the metadata line and the header.
pub fn parse_csv(text: &str) -> Vec<Row> {
    csv_metadata(text);
    let mut lines = text.lines().skip(1);
    let header = monitor::output::writer::csv_header();
    assert_eq!(lines.next(), Some(header.as_str()));
    let columns = header.split(',').count();
    lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            assert_eq!(f.len(), columns, "row {line:?}");
            Row {
                time_ms: f[0].parse().unwrap(),
                mono_ns: f[1].parse().unwrap(),
                minor: f[2].parse().unwrap(),
                major: f[3].parse().unwrap(),
                cpu_ns: f[4].parse().unwrap(),
                cpu_util: f[5].parse().unwrap(),
                rss_anon: f[6].parse().unwrap(),
                rss_file: f[7].parse().unwrap(),
                rss_shmem: f[8].parse().unwrap(),
                swap: f[9].parse().unwrap(),
                pressure: f[10..]
                    .iter()
                    .map(|v| (!v.is_empty()).then(|| v.parse().unwrap()))
                    .collect(),
            }
        })
        .collect()
}

/// The number after `label` in the summary, e.g. `summary_value(s, "samples")`.
pub fn summary_value(stderr: &str, label: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no {label:?} in summary:\n{stderr}"));
    line[line.find(label).unwrap() + label.len()..]
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap_or_else(|_| panic!("no number in {line:?}"))
}

/// What `work` says about itself when done: (minor, major) from its own /proc/self/stat.
pub fn work_self_report(stderr: &str) -> (u64, u64) {
    *work_self_reports(stderr).first().expect("work's report")
}

/// What every `work` said about itself, in the order they ended.
pub fn work_self_reports(stderr: &str) -> Vec<(u64, u64)> {
    stderr
        .lines()
        .filter(|l| l.starts_with("work: "))
        .map(|line| {
            let number_before = |what: &str| -> u64 {
                let end = line.find(what).unwrap();
                line[..end]
                    .split_whitespace()
                    .last()
                    .unwrap()
                    .parse()
                    .unwrap()
            };
            (
                number_before(" minor faults"),
                number_before(" major faults"),
            )
        })
        .collect()
}
