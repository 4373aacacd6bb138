//! Where the summary goes and in which form: standard error (not with `--quiet`) or a
//! `--summary` file, as text or as one JSON object. A summary file that cannot be written
//! (a full disk) sends the summary to standard error instead: it is never lost.

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::error::OutputError;
use super::metadata::Metadata;
use super::report::{Summary, Thrashing, Totals};
use super::whereabouts::{WhereSummary, TOP};
use super::writer::PendingFile;
use crate::attribution::{Attribution, Faults, Mapping};

/// `--summary-format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SummaryStyle {
    Text,
    Json,
}

impl SummaryStyle {
    /// Without `--summary-format`: JSON for a file named `*.json`, text otherwise.
    pub fn for_file(file: Option<&Path>) -> SummaryStyle {
        match file.and_then(Path::extension) {
            Some(e) if e.eq_ignore_ascii_case("json") => SummaryStyle::Json,
            _ => SummaryStyle::Text,
        }
    }
}

/// What the user asked for the summary.
#[derive(Clone, Debug)]
pub struct SummaryTarget {
    /// `--summary FILE`; standard error without it.
    pub file: Option<PathBuf>,
    pub style: SummaryStyle,
    /// `--quiet`: nothing on standard error but errors.
    pub quiet: bool,
}

/// The summary's destination, a file created at the start so an unwritable path fails
/// before anything runs.
pub struct SummarySink {
    target: SummaryTarget,
    file: Option<PendingFile>,
}

impl SummarySink {
    pub fn open(target: SummaryTarget) -> Result<SummarySink, OutputError> {
        let file = (target.file.as_deref())
            .map(|path| {
                PendingFile::create(path).map_err(|source| OutputError::Summary {
                    path: path.to_path_buf(),
                    source,
                })
            })
            .transpose()?;
        Ok(SummarySink { target, file })
    }

    /// Whether standard error may show the live line.
    pub fn leaves_stderr_to_the_live_line(&self) -> bool {
        !self.target.quiet
    }

    /// Whether the summary is text on standard error: read by a person at once, whom
    /// nothing after it (the exporters' linger) should keep waiting for it.
    pub fn is_text_on_stderr(&self) -> bool {
        self.file.is_none() && !self.target.quiet && self.target.style == SummaryStyle::Text
    }

    /// Writes the summary where it goes; to standard error when its file fails. Text
    /// for a person at a terminal is folded to fit 80 columns; piped or in a file, each
    /// item stays on one line, for grep.
    pub fn deliver(self, summary: &Summary, metadata: &Metadata) -> Result<(), OutputError> {
        let text = match self.target.style {
            SummaryStyle::Text if self.file.is_none() && io::stderr().is_terminal() => {
                fold(&format!("{summary}\n"), TERMINAL_WIDTH)
            }
            SummaryStyle::Text => format!("{summary}\n"),
            SummaryStyle::Json => format!("{}\n", as_json(summary, metadata)),
        };
        // One write: stderr is unbuffered. A closed stderr cannot be told anything.
        let to_stderr = || {
            let _ = io::stderr().write_all(text.as_bytes());
        };
        let (Some(mut file), Some(path)) = (self.file, self.target.file) else {
            if !self.target.quiet {
                to_stderr();
            }
            return Ok(());
        };
        file.write_all(text.as_bytes())
            .and_then(|()| file.commit())
            .map_err(|source| {
                to_stderr();
                OutputError::Summary { path, source }
            })
    }
}

/// The widest a folded line may be: one column short of an 80-column terminal, which
/// would wrap a line as wide as itself.
pub const TERMINAL_WIDTH: usize = 79;

/// `text` with every line wider than `width` folded at spaces, its continuations
/// indented four more than it; the spaces that align its columns are kept. (`cli::wrap`
/// fills paragraphs of help; this keeps each line and hangs its rest under it, as the
/// summary's items read.) A word wider than the room is left whole.
pub fn fold(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        if body.chars().count() <= width {
            out.push_str(line);
            continue;
        }
        let indent = body.len() - body.trim_start().len();
        let hang = " ".repeat(indent + 4);
        let mut current = body[..indent].to_owned();
        let mut rest = &body[indent..];
        while !rest.is_empty() {
            // The next word and the spaces before it.
            let spaces = rest.len() - rest.trim_start_matches(' ').len();
            let word_end = rest[spaces..]
                .find(' ')
                .map_or(rest.len(), |at| spaces + at);
            let (gap, word) = (&rest[..spaces], &rest[spaces..word_end]);
            rest = &rest[word_end..];
            let fresh = current.chars().count() == indent || current == hang;
            if !fresh && current.chars().count() + gap.len() + word.chars().count() > width {
                out.push_str(&current);
                out.push('\n');
                current.clone_from(&hang);
            } else {
                current.push_str(gap);
            }
            current.push_str(word);
        }
        out.push_str(&current);
        out.push_str(newline);
    }
    out
}

/// The summary as one JSON object, with what was profiled.
fn as_json(summary: &Summary, metadata: &Metadata) -> Value {
    let t = summary.totals;
    let seconds = |ns: u64| ns as f64 / 1e9;
    let (judged, bands) = match summary.thrashing {
        Thrashing::NotJudged => (false, &[][..]),
        Thrashing::Judged(bands, _) => (true, bands),
    };
    json!({
        "profile": metadata,
        "samples": t.samples,
        "duration_s": seconds(t.covered_ns),
        "minor_faults": t.minor,
        "major_faults": t.major,
        "minor_fault_rate": { "mean": t.mean_minor_rate(), "peak": t.peak_minor_rate },
        "major_fault_rate": { "mean": t.mean_major_rate(), "peak": t.peak_major_rate },
        "cpu_s": seconds(t.cpu_ns),
        "cpu_util": t.cpu_util(),
        "samples_lost": t.lost,
        "producer_blocked_s": summary.blocked.as_secs_f64(),
        "samples_deferred": summary.deferred,
        "memory_peak": { "resident_bytes": t.peak_resident, "swap_bytes": t.peak_swap },
        "memory_stall_s": {
            "some": t.stall_some_us.map(|us| us as f64 / 1e6),
            "full": t.stall_full_us.map(|us| us as f64 / 1e6),
        },
        "thrashing": { "judged": judged, "bands": bands },
        "command": summary.child.map(|c| json!({
            "minor_faults": c.minor,
            "major_faults": c.major,
            "cpu_s": seconds(c.cpu_ns),
            "user_s": seconds(c.usage.user_ns),
            "system_s": seconds(c.usage.system_ns),
            "max_rss_bytes": c.usage.max_rss_bytes,
            "exit": c.status.to_string(),
            "exit_code": c.status.code(),
        })),
        "attached": summary.peaks.iter().map(|p| json!({
            "pid": p.pid,
            "max_rss_bytes": p.bytes,
            "exited_within_s": p.exited_within.map(|d| d.as_secs_f64()),
        })).collect::<Vec<_>>(),
        "where": summary.whereabouts.map(|w| where_json(w, t)),
        "notes": summary.notes,
    })
}

/// Where the faults were: the top mappings by major and by minor faults, the processes.
fn where_json(w: &WhereSummary, totals: &Totals) -> Value {
    let (period, kernel_faults, off) = match &w.attribution {
        Attribution::On {
            minor_sampling,
            kernel_faults,
        } => (Some(*minor_sampling), Some(*kernel_faults), None),
        Attribution::Off(why) => (None, None, Some(why.as_str())),
    };
    let recorded = w.run.recorded();
    let lost = w.run.lost();
    let estimate = |samples: u64| samples.saturating_mul(period.unwrap_or(0));
    let mapping = |m: &Mapping, count: u64, of: u64, f: Faults| {
        json!({
            "name": m.name,
            "kind": m.kind,
            "pid": m.pid(),
            "display": m.to_string(),
            "major": f.major,
            "minor_est": estimate(f.minor_samples),
            "minor_samples": f.minor_samples,
            "share": count as f64 / of.max(1) as f64,
        })
    };
    let processes = w.run.top_processes(TOP);
    let (minor, major) = (processes.iter()).fold((0u64, 0u64), |(mi, ma), (_, p)| {
        (mi.saturating_add(p.minor), ma.saturating_add(p.major))
    });
    json!({
        "attributed": period.is_some(),
        "not_attributed": off,
        "minor_sampling": period,
        "kernel_faults": kernel_faults,
        "major": {
            "recorded": recorded.major,
            "of": totals.major,
            "lost": lost.major,
            "top": (w.run.top_major(TOP).into_iter())
                .map(|(m, f)| mapping(m, f.major, recorded.major, f))
                .collect::<Vec<_>>(),
        },
        "minor": {
            "estimated": estimate(recorded.minor_samples),
            "recorded": recorded.minor_samples,
            "of": totals.minor,
            "lost_est": estimate(lost.minor_samples),
            "lost": lost.minor_samples,
            "top": (w.run.top_minor(TOP).into_iter())
                .map(|(m, f)| mapping(m, f.minor_samples, recorded.minor_samples, f))
                .collect::<Vec<_>>(),
        },
        "processes": (processes.iter())
            .map(|(pid, p)| json!({ "pid": pid, "comm": &*p.comm, "minor": p.minor, "major": p.major }))
            .collect::<Vec<_>>(),
        "programs": (w.run.top_programs(TOP).iter())
            .map(|p| json!({
                "comm": &*p.comm, "processes": p.processes, "minor": p.minor, "major": p.major,
            }))
            .collect::<Vec<_>>(),
        "other_processes": {
            "minor": totals.minor.saturating_sub(minor),
            "major": totals.major.saturating_sub(major),
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_line_too_wide_is_folded_under_itself_and_its_columns_kept() {
        let text = "pfprof summary\n  samples           7\n  thrashing          from t=1 s to \
                    t=2 s: memory full stall 52% of the time\n";
        assert_eq!(
            super::fold(text, 40),
            "pfprof summary\n  samples           7\n  thrashing          from t=1 s to t=2\n      \
             s: memory full stall 52% of the\n      time\n"
        );
        assert!(super::fold(text, 40).lines().all(|l| l.len() <= 40));
        assert_eq!(
            super::fold("  averyveryverylongword b", 10),
            "  averyveryverylongword\n      b"
        );
    }

    use super::*;

    #[test]
    fn a_file_named_json_gets_json_unless_told_otherwise() {
        assert_eq!(
            SummaryStyle::for_file(Some(Path::new("run.JSON"))),
            SummaryStyle::Json
        );
        assert_eq!(
            SummaryStyle::for_file(Some(Path::new("run.txt"))),
            SummaryStyle::Text
        );
        assert_eq!(SummaryStyle::for_file(None), SummaryStyle::Text);
    }
}
