//! Every consumer of the rows, fed in one place: the output, the thrashing verdict, the
//! running totals and the status line, where the faults were, the exporters, and the rows
//! kept for the plot. A new output or exporter is added here and nowhere else.

use std::io::{self, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::attribution::Feed;
use crate::export::{Exporters, ThrashingState};
use crate::output::attribution::{AttributionReport, AttributionSummary};
use crate::output::metadata::Metadata;
use crate::output::totals::Totals;
use crate::output::writer::Output;
use crate::pressure::verdict::{Band, Verdict, RULE};
use crate::rows::row::Row;
use crate::rows::source::Batch;
use crate::system::terminal;

/// How often the live status line is redrawn.
pub(super) const STATUS_EVERY: Duration = Duration::from_millis(250);

pub(super) struct Consumers {
    output: Output,
    verdict: Verdict,
    totals: Totals,
    /// Drawn on stderr when it does not land among the rows.
    status: Option<StatusLine>,
    exporters: Option<Exporters>,
    /// Every row, when a plot is drawn from them.
    rows: Option<Vec<Row>>,
    /// Where the faults were, when the backend says.
    attributed: Option<AttributionReport>,
    /// The verdict's bands, named by where their major faults were.
    bands: Vec<Band>,
    /// `--count`: the profile is this many rows; those after them are not taken.
    limit: Option<u64>,
    /// Whether the limit was reached before the batch now being fed: its samples lost
    /// came before its rows, so they count only if some of its rows do.
    full_before_batch: bool,
}

/// What the consumers gathered, once the loop ended.
pub(super) struct Consumed {
    pub output: Output,
    pub exporters: Option<Exporters>,
    pub totals: Totals,
    /// Every row kept for the plot; none when there is no plot.
    pub rows: Vec<Row>,
    /// The thrashing the verdict found, and whether it could judge at all.
    pub bands: Vec<Band>,
    pub judged: bool,
    /// Where the faults were, when the backend says.
    pub attributed: Option<AttributionSummary>,
}

impl Consumers {
    /// `live_line`: whether standard error may show the status line (not `--quiet`);
    /// `attribution`: the backend's period tables, if it makes them; `limit`: how many
    /// rows to take at most (`--count`).
    pub fn new(
        output: Output,
        exporters: Option<Exporters>,
        live_line: bool,
        keep_rows: bool,
        attribution: Option<Arc<Feed>>,
        limit: Option<u64>,
    ) -> Consumers {
        let status = (live_line && output.leaves_stderr_to_the_status_line()).then(StatusLine::new);
        Consumers {
            output,
            verdict: Verdict::new(RULE),
            totals: Totals::default(),
            status,
            exporters,
            rows: keep_rows.then(Vec::new),
            attributed: attribution.map(|feed| AttributionReport::new(feed, keep_rows)),
            bands: Vec::new(),
            limit,
            full_before_batch: false,
        }
    }

    /// Before the first row: the output's metadata and header, flushed at once (a reader
    /// that takes only them, `head -1`, is gone by the first rows), the exporters' period.
    pub fn start(&mut self, period: Duration, metadata: &Metadata) {
        self.output.header(metadata);
        self.output.flush();
        if let Some(e) = self.exporters.as_mut() {
            e.set_period(period);
        }
    }

    /// Whether a status line is drawn, so the consumer wakes up for it.
    pub fn draws_status(&self) -> bool {
        self.status.is_some()
    }

    /// How many rows `--count` still takes; `None` without a count.
    pub fn rows_left(&self) -> Option<u64> {
        Some(self.limit?.saturating_sub(self.totals.samples))
    }

    /// Whether `--count` rows have been taken: the profile is complete.
    pub fn full(&self) -> bool {
        self.rows_left() == Some(0)
    }

    /// Takes `row` into every consumer, unless the profile is full.
    pub fn row(&mut self, row: Row) {
        if self.full() {
            return;
        }
        self.totals.add(&row);
        if let Some(status) = self.status.as_mut() {
            status.recent.add(&row);
            status.resident = row
                .rss_anon
                .saturating_add(row.rss_file)
                .saturating_add(row.rss_shmem);
        }
        self.output.write(&row);
        // The row's tables before the verdict: a band it ends may end with this row.
        if let Some(w) = self.attributed.as_mut() {
            w.row(&row);
        }
        if let Some(band) = self.verdict.feed(&row) {
            self.band(band);
        }
        if let Some(w) = self.attributed.as_mut() {
            w.keep(self.verdict.open_band());
        }
        if let Some(e) = self.exporters.as_mut() {
            e.add(&row);
        }
        if let Some(rows) = self.rows.as_mut() {
            rows.push(row);
        }
    }

    /// After each batch's rows: the samples it lost, the verdict's last band once the
    /// session ended, and what is written so far flushed and published.
    pub fn batch_done(&mut self, batch: Batch) {
        let lost = if self.full_before_batch {
            0
        } else {
            batch.lost
        };
        self.totals.lost += lost;
        self.full_before_batch = self.full();
        // The interval's faults by mapping, before its record is made of them.
        let by_mapping = self
            .attributed
            .as_ref()
            .and_then(AttributionReport::interval_tally);
        if let (Some((tally, minor_sampling)), Some(e)) = (by_mapping, self.exporters.as_mut()) {
            e.add_attributed(tally, minor_sampling);
        }
        if let Some(record) = self
            .attributed
            .as_mut()
            .and_then(AttributionReport::interval_record)
        {
            self.output.interval(&record);
        }
        if batch.ended {
            if let Some(band) = self.verdict.finish() {
                self.band(band);
            }
        }
        self.output.flush();
        if let Some(e) = self.exporters.as_mut() {
            e.lost(lost);
            e.set_thrashing(thrashing_state(&self.verdict));
            e.publish();
        }
    }

    /// A band the verdict ended: named, written, kept for the summary and the plot.
    fn band(&mut self, mut band: Band) {
        if let Some(w) = self.attributed.as_mut() {
            w.name(&mut band);
        }
        self.output.event(&band);
        self.bands.push(band);
    }

    /// The output's reader went away.
    pub fn output_closed(&self) -> bool {
        self.output.is_closed()
    }

    /// Redraws the status line when it is due.
    pub fn draw_status(&mut self) {
        if let Some(status) = self.status.as_mut() {
            status.draw(&self.totals);
        }
    }

    pub fn finish(mut self) -> Consumed {
        // Erased before the summary (dropped, the line erases itself).
        drop(self.status.take());
        Consumed {
            output: self.output,
            exporters: self.exporters,
            totals: self.totals,
            rows: self.rows.unwrap_or_default(),
            bands: self.bands,
            judged: self.verdict.judged(),
            attributed: self.attributed.map(AttributionReport::finish),
        }
    }
}

/// The verdict as the exporters show it: thrashing now, and the episodes begun so far.
fn thrashing_state(verdict: &Verdict) -> ThrashingState {
    let now = verdict.thrashing_now();
    ThrashingState {
        judged: verdict.judged(),
        now,
        episodes: verdict.bands().len() as u64 + u64::from(now),
    }
}

/// The live status line on stderr: the totals, and the rates since it was last drawn.
struct StatusLine {
    recent: Totals,
    /// The last row's resident memory, bytes.
    resident: u64,
    last: Instant,
    /// Drawn at least once: erased before the summary.
    drawn: bool,
}

impl StatusLine {
    fn new() -> StatusLine {
        StatusLine {
            recent: Totals::default(),
            resident: 0,
            last: Instant::now(),
            drawn: false,
        }
    }

    fn draw(&mut self, totals: &Totals) {
        if self.last.elapsed() < STATUS_EVERY || self.recent.samples == 0 {
            return;
        }
        // A full-screen program (less, vim, top) owns the terminal: it turns canonical
        // input off while it runs, and the line would be painted over its screen.
        if !terminal::stderr_is_line_by_line() {
            // Its rates, when it is drawn again, are of the samples since then.
            self.recent = Totals::default();
            self.last = Instant::now();
            return;
        }
        let line = format!(
            "\r{}\x1b[K",
            totals.status_line(&self.recent, self.resident, terminal::stderr_line_width())
        );
        // A closed stderr cannot be told anything.
        let _ = io::stderr().write_all(line.as_bytes());
        self.drawn = true;
        self.recent = Totals::default();
        self.last = Instant::now();
    }
}

impl Drop for StatusLine {
    /// Erases the line once drawn, whichever way the profile ends: before the summary,
    /// and before an error's message, which would otherwise be written after it.
    fn drop(&mut self) {
        if self.drawn {
            // A closed stderr cannot be told anything.
            let _ = io::stderr().write_all(b"\r\x1b[K");
        }
    }
}
