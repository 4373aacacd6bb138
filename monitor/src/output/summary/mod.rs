//! The summary: what it reports ([`Summary`], written as text by [`text`] and as one
//! JSON object by [`json`]), and where it goes and in which form: standard error (not
//! with `--quiet`) or a `--summary` file. A summary file that cannot be written (a full
//! disk) sends the summary to standard error instead: it is never lost.

mod json;
mod text;

pub use text::{ChildReport, Summary, Thrashing};

use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};

use super::error::OutputError;
use super::metadata::Metadata;
use super::writer::PendingFile;
use crate::system::terminal;

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
pub struct SummaryRequest {
    /// `--summary FILE`; standard error without it.
    pub file: Option<PathBuf>,
    pub style: SummaryStyle,
    /// `--quiet`: nothing on standard error but errors.
    pub quiet: bool,
}

/// The summary's destination, a file created at the start so an unwritable path fails
/// before anything runs.
pub struct SummarySink {
    target: SummaryRequest,
    file: Option<PendingFile>,
}

impl SummarySink {
    pub fn open(target: SummaryRequest) -> Result<SummarySink, OutputError> {
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
    /// for a person at a terminal is folded to fit its width; piped or in a file, each
    /// item stays on one line, for grep.
    pub fn deliver(self, summary: &Summary, metadata: &Metadata) -> Result<(), OutputError> {
        let text = match self.target.style {
            SummaryStyle::Text if self.file.is_none() && io::stderr().is_terminal() => {
                fold(&format!("{summary}\n"), terminal::stderr_line_width())
            }
            SummaryStyle::Text => format!("{summary}\n"),
            SummaryStyle::Json => format!("{}\n", json::of(summary, metadata)),
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

/// `text` with every line wider than `width` folded at spaces, its continuations
/// indented four more than it; the spaces that align its columns are kept. (`cli::wrap`
/// fills paragraphs of help; this keeps each line and hangs its rest under it, as the
/// summary's items read.) A word wider than the room is cut at the width.
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
            // A word wider than the room (a long path) is cut where the terminal would
            // wrap it, its rest hung as the line's.
            let mut word = word;
            loop {
                let room = width.saturating_sub(current.chars().count()).max(1);
                match word.char_indices().nth(room) {
                    Some((at, _)) => {
                        current.push_str(&word[..at]);
                        out.push_str(&current);
                        out.push('\n');
                        current.clone_from(&hang);
                        word = &word[at..];
                    }
                    None => break,
                }
            }
            current.push_str(word);
        }
        out.push_str(&current);
        out.push_str(newline);
    }
    out
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
            "  averyver\n      yver\n      ylon\n      gwor\n      d b"
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
