//! Where the faults were, as the consumer shows it: each row's period tables taken from
//! the backend's [`Feed`], added up over each interval (the JSON Lines record), over the
//! run (the summary), over each thrashing band (the verdict names the mapping that took
//! most of its major faults), and row by row for the plot's lane of major faults by
//! mapping.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde::Serialize;

use crate::attribution::offsets::{FileRegion, BUCKETS};
use crate::attribution::symbols::Symbolizer;
use crate::attribution::{
    Attribution, Faults, Feed, FileId, Function, Mapping, MappingKind, OffsetHistogram,
    PeriodTable, Tally,
};
use crate::pressure::verdict::{Band, BandMapping, OpenBand};
use crate::rows::row::Row;

/// How many mappings (by major and by minor faults) and processes an interval's record
/// and the summary list; the rest is summed as "other".
pub const TOP: usize = 5;

/// How many of the processes that took a mapping's faults an interval's record names.
const TOP_TAKERS: usize = 3;

/// How many of a file's hottest regions an interval's record and the summary list.
pub const TOP_REGIONS: usize = 3;

/// How many files a row keeps its major faults by offset for, for the plot's heat map of
/// the run's top file: the row's two with the most (at most 64 buckets of 8 bytes each:
/// 1 KiB a row). A row where that file took fewer major faults than two others shows
/// none of them there.
const HEAT_PER_ROW: usize = 2;

/// The most mappings a row keeps its major faults apart for the plot's lane: its others'
/// are drawn among "other mappings". The lane draws the run's top [`TOP`]; one of them
/// left out of a row took fewer of the row's major faults than 16 other mappings did.
const LANE_PER_ROW: usize = 16;

/// The most periods with major faults kept for a band not begun yet (30 minutes of
/// 50 ms periods): pressure that lasts longer before thrashing begins is named from its
/// last 30 minutes. Once it has begun, what is certain to be in the band is summed.
const MAX_HISTORY: usize = 36_000;

/// The consumer's view of the tables.
pub struct AttributionReport {
    feed: Arc<Feed>,
    taken: Vec<PeriodTable>,
    interval: Interval,
    run: Tally,
    bands: BandHistory,
    /// Each row's major faults by mapping, when there is a plot to draw them in.
    lane: Option<LaneHistory>,
    /// Names the code that took the faults: here, in the consumer, not in the drain
    /// that must keep up with the kernel's rings.
    symbols: Symbolizer,
    functions: Vec<(Function, Faults)>,
}

/// The rows of the interval under way and their tables.
#[derive(Default)]
struct Interval {
    tally: Tally,
    /// The faults recorded by process and mapping: who took each mapping's.
    taken: HashMap<(Arc<Mapping>, u32), Faults>,
    /// The first row's start and the last row's end (ms on the rows' axis), the last's
    /// timestamp.
    span: Option<(u64, u64, u64)>,
    minor: u64,
    major: u64,
}

impl AttributionReport {
    /// `plot`: keep each row's major faults by mapping for the plot's lane.
    pub fn new(feed: Arc<Feed>, plot: bool) -> AttributionReport {
        AttributionReport {
            feed,
            taken: Vec::new(),
            interval: Interval::default(),
            run: Tally::default(),
            bands: BandHistory::default(),
            lane: plot.then(LaneHistory::default),
            symbols: Symbolizer::default(),
            functions: Vec::new(),
        }
    }

    /// A row: its period's table, and those of samples merged into it or lost before it.
    pub fn row(&mut self, row: &Row) {
        self.feed.take_until(row.mono_ns, &mut self.taken);
        for table in self.taken.drain(..) {
            self.interval.tally.add(&table);
            self.functions.clear();
            for (code, faults) in &table.code {
                self.functions.push((self.symbols.function(code), *faults));
            }
            (self.interval.tally).add_functions(&self.functions, table.code_rest);
            self.run.add_functions(&self.functions, table.code_rest);
            for entry in &table.entries {
                let key = (Arc::clone(&entry.mapping), entry.pid);
                *self.interval.taken.entry(key).or_default() += entry.faults;
            }
            self.run.add(&table);
            self.bands.add(&table);
            if let Some(lane) = self.lane.as_mut() {
                lane.add(&table);
            }
        }
        if let Some(lane) = self.lane.as_mut() {
            lane.end_row();
        }
        let start_ms = row.time_ms.saturating_sub(row.period_ns / 1_000_000);
        let span = self.interval.span.get_or_insert((start_ms, 0, 0));
        (span.1, span.2) = (row.time_ms, row.mono_ns);
        self.interval.minor = self.interval.minor.saturating_add(row.minor);
        self.interval.major = self.interval.major.saturating_add(row.major);
    }

    /// Names a band the verdict ended with the mapping that took most of its major
    /// faults.
    pub fn name(&mut self, band: &mut Band) {
        band.major_mapping = self.bands.top(band.start_mono_ns, band.end_mono_ns);
    }

    /// After each row fed to the verdict: what a band may still need of the history.
    pub fn keep(&mut self, open: Option<OpenBand>) {
        self.bands.keep(open);
    }

    /// What the rows since the last interval record took, by mapping, and the minor
    /// faults each recorded one stands for; `None`: not attributed.
    pub fn interval_tally(&self) -> Option<(&Tally, u64)> {
        Some((
            &self.interval.tally,
            minor_sampling(self.feed.attribution())?,
        ))
    }

    /// The record of the interval since the last one, if it had rows.
    pub fn interval_record(&mut self) -> Option<IntervalRecord> {
        let interval = std::mem::take(&mut self.interval);
        let (start_ms, end_ms, end_mono_ns) = interval.span?;
        let period = minor_sampling(self.feed.attribution());
        let tally = &interval.tally;
        let mappings: Vec<MappingRecord> = (tally.top_either(TOP).into_iter())
            .map(|(mapping, faults)| {
                let mut takers: Vec<(u32, Faults)> = (interval.taken.iter())
                    .filter(|((m, _), _)| m == mapping)
                    .map(|((_, pid), f)| (*pid, *f))
                    .collect();
                takers
                    .sort_by_key(|(pid, f)| (std::cmp::Reverse((f.major, f.minor_samples)), *pid));
                takers.truncate(TOP_TAKERS);
                let regions = hottest_regions(tally, mapping, faults.major > 0, period);
                MappingRecord::new(mapping, faults, period, &takers, regions)
            })
            .collect();
        let mut listed = Faults::default();
        for m in &mappings {
            listed += Faults {
                major: m.major,
                minor_samples: m.minor_samples,
            };
        }
        let recorded = tally.recorded();
        let processes: Vec<ProcessRecord> = (tally.top_processes(TOP).into_iter())
            .map(|(pid, p)| ProcessRecord {
                pid,
                comm: p.comm.to_string(),
                minor: p.minor,
                major: p.major,
            })
            .collect();
        let functions = (tally.top_functions_either(TOP).into_iter())
            .map(|(function, faults)| FunctionRecord::new(function, faults, period))
            .collect();
        let programs = (tally.top_programs(TOP).into_iter())
            .map(|p| ProgramRecord {
                comm: p.comm.to_string(),
                processes: p.processes,
                minor: p.minor,
                major: p.major,
            })
            .collect();
        let (minor, major) = processes
            .iter()
            .fold((0u64, 0u64), |(mi, ma), p| (mi + p.minor, ma + p.major));
        Some(IntervalRecord {
            start_ms,
            end_ms,
            end_mono_ns,
            minor_sampling: period,
            other_mappings: FaultsRecord::new(
                Faults {
                    major: recorded.major - listed.major,
                    minor_samples: recorded.minor_samples - listed.minor_samples,
                },
                period,
            ),
            mappings,
            functions,
            lost: FaultsRecord::new(tally.lost(), period),
            processes,
            programs,
            other_processes: Counts {
                minor: interval.minor.saturating_sub(minor),
                major: interval.major.saturating_sub(major),
            },
        })
    }

    /// What the summary and the plot show, once the rows have ended.
    pub fn finish(self) -> AttributionSummary {
        let attribution = self.feed.attribution().clone();
        let lane = match attribution {
            Attribution::On { .. } => self.lane.map(|lane| lane.finish(&self.run)),
            Attribution::Off(_) => None,
        };
        AttributionSummary {
            attribution,
            run: self.run,
            lane,
        }
    }
}

/// The recorded minor faults stand for this many each; `None`: not attributed.
fn minor_sampling(attribution: &Attribution) -> Option<u64> {
    match attribution {
        Attribution::On { minor_sampling, .. } => Some(*minor_sampling),
        Attribution::Off(_) => None,
    }
}

/// Faults as a record shows them: the minor ones estimated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct FaultsRecord {
    pub major: u64,
    /// `minor_samples` times the sampling period.
    pub minor_est: u64,
    pub minor_samples: u64,
}

impl FaultsRecord {
    fn new(faults: Faults, period: Option<u64>) -> FaultsRecord {
        FaultsRecord {
            major: faults.major,
            minor_est: faults.minor_samples.saturating_mul(period.unwrap_or(0)),
            minor_samples: faults.minor_samples,
        }
    }
}

/// A mapping in an interval's record.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MappingRecord {
    pub name: String,
    pub kind: MappingKind,
    /// For memory private to a process: its pid.
    pub pid: Option<u32>,
    pub major: u64,
    pub minor_est: u64,
    pub minor_samples: u64,
    /// The processes that took the most of its faults (a file's may be several), each
    /// with its own.
    pub by_process: Vec<TakerRecord>,
    /// A file's hottest regions, by major faults if it took any, else by minor; `None`:
    /// not a file, or no fault's offset known.
    pub regions: Option<Vec<RegionRecord>>,
}

/// One of a file's hottest regions: its offsets `start..end` (bytes), its faults, and
/// their share of the file's (major faults, or minor ones, as it was ranked by).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RegionRecord {
    pub start: u64,
    pub end: u64,
    pub major: u64,
    pub minor_est: u64,
    pub minor_samples: u64,
    pub share: f64,
}

/// The hottest regions of `mapping`'s file in `tally`, ranked by major faults
/// (`by_major`) or by minor ones; `None`: not a file, or no offset known.
pub fn hottest_regions(
    tally: &Tally,
    mapping: &Mapping,
    by_major: bool,
    period: Option<u64>,
) -> Option<Vec<RegionRecord>> {
    let histogram = tally.offsets(&mapping.file?)?;
    let count = |f: &Faults| if by_major { f.major } else { f.minor_samples };
    let total = count(&histogram.total());
    if total == 0 {
        return None;
    }
    let regions = (histogram.hottest(TOP_REGIONS, count).into_iter())
        .map(|FileRegion { start, end, faults }| {
            let f = FaultsRecord::new(faults, period);
            RegionRecord {
                start,
                end,
                major: f.major,
                minor_est: f.minor_est,
                minor_samples: f.minor_samples,
                share: count(&faults) as f64 / total as f64,
            }
        })
        .collect();
    Some(regions)
}

/// A process that took a mapping's faults, and how many.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TakerRecord {
    pub pid: u32,
    pub major: u64,
    pub minor_est: u64,
}

impl MappingRecord {
    fn new(
        mapping: &Mapping,
        faults: Faults,
        period: Option<u64>,
        takers: &[(u32, Faults)],
        regions: Option<Vec<RegionRecord>>,
    ) -> MappingRecord {
        let f = FaultsRecord::new(faults, period);
        MappingRecord {
            name: mapping.name.clone(),
            kind: mapping.kind,
            pid: mapping.pid(),
            major: f.major,
            minor_est: f.minor_est,
            minor_samples: f.minor_samples,
            by_process: (takers.iter())
                .map(|&(pid, f)| {
                    let f = FaultsRecord::new(f, period);
                    TakerRecord {
                        pid,
                        major: f.major,
                        minor_est: f.minor_est,
                    }
                })
                .collect(),
            regions,
        }
    }
}

/// A function in an interval's record: the faults its code took.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionRecord {
    /// Its symbol's name (Rust's demangled), or `[unknown]` where its binary has none
    /// for the code.
    pub name: String,
    /// The binary or library its code is in (a path), or the memory's name as a mapping
    /// is named without its process (`[anonymous]`, `[anon:NAME]`), `[kernel]`.
    pub binary: String,
    pub major: u64,
    pub minor_est: u64,
    pub minor_samples: u64,
}

impl FunctionRecord {
    pub fn new(function: &Function, faults: Faults, period: Option<u64>) -> FunctionRecord {
        let f = FaultsRecord::new(faults, period);
        FunctionRecord {
            name: function.name.to_string(),
            binary: function.binary.clone(),
            major: f.major,
            minor_est: f.minor_est,
            minor_samples: f.minor_samples,
        }
    }
}

/// A program in an interval's record: the faults of its processes (those of one name),
/// exact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProgramRecord {
    pub comm: String,
    pub processes: u64,
    pub minor: u64,
    pub major: u64,
}

/// A process in an interval's record: its own faults, exact.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcessRecord {
    pub pid: u32,
    pub comm: String,
    pub minor: u64,
    pub major: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub minor: u64,
    pub major: u64,
}

/// The JSON Lines record of one interval (`"event":"where"`), after its rows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IntervalRecord {
    /// On the rows' time axis: the start of the interval's first period, the end of its
    /// last; the last one's timestamp.
    pub start_ms: u64,
    pub end_ms: u64,
    pub end_mono_ns: u64,
    /// One minor fault in this many was recorded; `null`: faults not attributed to
    /// mappings (the processes are still listed).
    pub minor_sampling: Option<u64>,
    /// The top mappings by major faults and by minor faults.
    pub mappings: Vec<MappingRecord>,
    /// The other mappings' faults.
    pub other_mappings: FaultsRecord,
    /// The top functions by major faults and by minor faults: where the instructions
    /// that took them were.
    pub functions: Vec<FunctionRecord>,
    /// Records the kernel could not deliver.
    pub lost: FaultsRecord,
    /// The processes with the most faults, exact.
    pub processes: Vec<ProcessRecord>,
    /// The programs with the most faults: the processes grouped by name.
    pub programs: Vec<ProgramRecord>,
    /// The rows' faults not in `processes`.
    pub other_processes: Counts,
}

/// What the summary and the plot show of where the faults were.
#[derive(Clone, Debug)]
pub struct AttributionSummary {
    pub attribution: Attribution,
    pub run: Tally,
    /// Each row's major faults by mapping: when faults were attributed and there is a
    /// plot.
    pub lane: Option<MappingLane>,
}

/// The plot's lane: each row's major faults on the run's top mappings by major faults.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MappingLane {
    /// The run's [`TOP`] mappings with the most major faults, most first: each as the
    /// summary names it (`/srv/db/index.dat (shared)`, `[heap] of pid 1234`), and its
    /// major faults over the run.
    pub mappings: Vec<(String, u64)>,
    /// Major faults recorded over the run, on any mapping, and those the kernel could
    /// not record.
    pub recorded: u64,
    pub lost: u64,
    /// One per row, in the rows' order.
    pub rows: Vec<LaneRow>,
    /// The major faults by offset of the first file among [`MappingLane::mappings`],
    /// where their offsets were known.
    pub heat: Option<FileHeat>,
}

/// A file's major faults by offset, row by row: the plot's heat map.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FileHeat {
    /// As the summary names its mapping.
    pub name: String,
    /// Each bucket's width, bytes: the run's histogram's.
    pub width: u64,
    /// The buckets up to the last with faults.
    pub buckets: usize,
    /// One per row, in the rows' order: each bucket with major faults, and how many.
    pub rows: Vec<Vec<(u8, u64)>>,
    /// The most major faults of one bucket in one row.
    pub most: u64,
}

/// A row's major faults by offset in one file: its histogram's width (a power of two)
/// and the buckets with some.
struct RowOffsets {
    file: FileId,
    shift: u32,
    buckets: Vec<(u8, u32)>,
}

/// One row's major faults, as the lane stacks them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LaneRow {
    /// On each of [`MappingLane::mappings`], in their order (0 past their number).
    pub top: [u64; TOP],
    /// Recorded on the other mappings.
    pub other: u64,
    /// Not recorded: the kernel's buffer was full.
    pub lost: u64,
}

/// One row's major faults as kept: by mapping (at most [`LANE_PER_ROW`], most first), and
/// in all.
#[derive(Default)]
struct RowMajors {
    by_mapping: Vec<(u32, u64)>,
    recorded: u64,
    lost: u64,
}

/// Each row's major faults by mapping, its mappings numbered.
#[derive(Default)]
struct LaneHistory {
    ids: HashMap<Arc<Mapping>, u32>,
    /// The row under way.
    pending: HashMap<Arc<Mapping>, u64>,
    pending_offsets: HashMap<FileId, OffsetHistogram>,
    row: RowMajors,
    rows: Vec<RowMajors>,
    /// Each row's major faults by offset, of its [`HEAT_PER_ROW`] files with most.
    offsets: Vec<Vec<RowOffsets>>,
}

impl LaneHistory {
    fn add(&mut self, table: &PeriodTable) {
        for entry in table.entries.iter().filter(|e| e.faults.major > 0) {
            *self.pending.entry(Arc::clone(&entry.mapping)).or_default() += entry.faults.major;
        }
        for (file, histogram) in &table.offsets {
            self.pending_offsets
                .entry(*file)
                .or_default()
                .merge(histogram);
        }
        self.row.recorded = self.row.recorded.saturating_add(table.recorded().major);
        self.row.lost = self.row.lost.saturating_add(table.lost.major);
    }

    fn end_row(&mut self) {
        let mut majors: Vec<(Arc<Mapping>, u64)> = self.pending.drain().collect();
        majors.sort_by(|(a, x), (b, y)| (y, a).cmp(&(x, b)));
        majors.truncate(LANE_PER_ROW);
        let mut row = std::mem::take(&mut self.row);
        for (mapping, n) in majors {
            let next = self.ids.len() as u32;
            let id = *self.ids.entry(mapping).or_insert(next);
            row.by_mapping.push((id, n));
        }
        self.rows.push(row);
        let mut files: Vec<(FileId, OffsetHistogram)> = (self.pending_offsets.drain())
            .filter(|(_, h)| h.total().major > 0)
            .collect();
        files.sort_by_key(|(file, h)| (std::cmp::Reverse(h.total().major), *file));
        files.truncate(HEAT_PER_ROW);
        let kept = (files.into_iter())
            .map(|(file, h)| RowOffsets {
                file,
                shift: h.width().trailing_zeros(),
                buckets: (h.buckets())
                    .filter(|(_, _, f)| f.major > 0)
                    .map(|(start, _, f)| {
                        let count = u32::try_from(f.major).unwrap_or(u32::MAX);
                        ((start / h.width()) as u8, count)
                    })
                    .collect(),
            })
            .collect();
        self.offsets.push(kept);
    }

    /// The heat map of the first file among `top` whose offsets are known: each row's
    /// buckets put into the run's (as wide as any row's, or wider).
    fn heat(&self, run: &Tally, top: &[(&Arc<Mapping>, Faults)]) -> Option<FileHeat> {
        let (mapping, file, histogram) = top.iter().find_map(|(mapping, _)| {
            let file = mapping.file?;
            let histogram = run.offsets(&file).filter(|h| h.total().major > 0)?;
            Some((mapping, file, histogram))
        })?;
        let width = histogram.width();
        let rows: Vec<Vec<(u8, u64)>> = (self.offsets.iter())
            .map(|kept| {
                let mut cells = [0u64; BUCKETS];
                for row in kept.iter().filter(|r| r.file == file) {
                    for &(bucket, n) in &row.buckets {
                        let start = u64::from(bucket) << row.shift;
                        let at = ((start / width) as usize).min(BUCKETS - 1);
                        cells[at] = cells[at].saturating_add(u64::from(n));
                    }
                }
                (cells.iter().enumerate())
                    .filter(|(_, n)| **n > 0)
                    .map(|(b, n)| (b as u8, *n))
                    .collect()
            })
            .collect();
        let cells = || rows.iter().flatten();
        Some(FileHeat {
            name: mapping.to_string(),
            width,
            buckets: cells().map(|(b, _)| usize::from(*b) + 1).max().unwrap_or(0),
            most: cells().map(|(_, n)| *n).max().unwrap_or(0),
            rows,
        })
    }

    /// The lane of the run's top mappings by major faults.
    fn finish(self, run: &Tally) -> MappingLane {
        let top = run.top_major(TOP);
        let ids: Vec<Option<u32>> = (top.iter())
            .map(|(mapping, _)| self.ids.get(*mapping).copied())
            .collect();
        let rows = (self.rows.iter())
            .map(|kept| {
                let mut row = LaneRow {
                    lost: kept.lost,
                    ..LaneRow::default()
                };
                for (slot, id) in row.top.iter_mut().zip(&ids) {
                    *slot = (kept.by_mapping.iter())
                        .find(|(kept_id, _)| Some(*kept_id) == *id)
                        .map_or(0, |(_, n)| *n);
                }
                row.other = kept.recorded.saturating_sub(row.top.iter().sum());
                row
            })
            .collect();
        MappingLane {
            mappings: (top.iter())
                .map(|(mapping, faults)| (mapping.to_string(), faults.major))
                .collect(),
            recorded: run.recorded().major,
            lost: run.lost().major,
            rows,
            heat: self.heat(run, &top),
        }
    }
}

/// One period's major faults by mapping, and its end.
type Majors = (u64, Vec<(Arc<Mapping>, u64)>);

/// Major faults by mapping, period by period, for as long as a band may still need
/// them.
#[derive(Default)]
struct BandHistory {
    /// Each period with attributed major faults.
    periods: VecDeque<Majors>,
    /// A begun band's majors up to its settled end: its start, and the sums.
    settled: Option<(u64, HashMap<Arc<Mapping>, u64>)>,
}

impl BandHistory {
    fn add(&mut self, table: &PeriodTable) {
        let mut majors: HashMap<&Arc<Mapping>, u64> = HashMap::new();
        for entry in table.entries.iter().filter(|e| e.faults.major > 0) {
            *majors.entry(&entry.mapping).or_default() += entry.faults.major;
        }
        if majors.is_empty() {
            return;
        }
        let majors = majors
            .into_iter()
            .map(|(m, n)| (Arc::clone(m), n))
            .collect();
        self.periods.push_back((table.end_ns, majors));
        if self.periods.len() > MAX_HISTORY {
            self.periods.pop_front();
        }
    }

    fn keep(&mut self, open: Option<OpenBand>) {
        let Some(open) = open else {
            self.periods.clear();
            self.settled = None;
            return;
        };
        // A period ending at or before a band's start is not in it.
        while self
            .periods
            .front()
            .is_some_and(|(end, _)| *end <= open.start_ns)
        {
            self.periods.pop_front();
        }
        let Some(until) = open.settled_ns else {
            self.settled = None;
            return;
        };
        if self
            .settled
            .as_ref()
            .is_some_and(|(start, _)| *start != open.start_ns)
        {
            self.settled = None;
        }
        let (_, sums) = self
            .settled
            .get_or_insert_with(|| (open.start_ns, HashMap::new()));
        while self.periods.front().is_some_and(|(end, _)| *end <= until) {
            for (mapping, n) in self.periods.pop_front().into_iter().flat_map(|p| p.1) {
                *sums.entry(mapping).or_default() += n;
            }
        }
    }

    /// The mapping with the most major faults between `start_ns` and `end_ns`, and its
    /// share of them.
    fn top(&mut self, start_ns: u64, end_ns: u64) -> Option<BandMapping> {
        let mut tally = Tally::default();
        if let Some((start, sums)) = self.settled.take() {
            if start == start_ns {
                for (mapping, n) in &sums {
                    tally.add_mapping(mapping, Faults::major(*n));
                }
            }
        }
        let within = |end: &u64| *end > start_ns && *end <= end_ns;
        for (_, majors) in self.periods.iter().filter(|(end, _)| within(end)) {
            for (mapping, n) in majors {
                tally.add_mapping(mapping, Faults::major(*n));
            }
        }
        let total = tally.recorded().major;
        let (mapping, faults) = tally.top_major(1).into_iter().next()?;
        Some(BandMapping {
            name: mapping.to_string(),
            kind: mapping.kind,
            major_faults: faults.major,
            share: faults.major as f64 / total as f64,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attribution::table::Builder;
    use crate::attribution::ProcessFaults;

    fn file(name: &str) -> Arc<Mapping> {
        Arc::new(Mapping {
            kind: MappingKind::Data,
            name: name.into(),
            file: None,
            owner: None,
        })
    }

    fn table(end_ns: u64, faults: &[(&str, u64, u64)]) -> PeriodTable {
        let mut builder = Builder::default();
        for (name, major, minor_samples) in faults {
            builder.add(
                1,
                file(name),
                Faults {
                    major: *major,
                    minor_samples: *minor_samples,
                },
            );
        }
        let processes = vec![ProcessFaults {
            pid: 1,
            comm: "work".into(),
            minor: 100,
            major: faults.iter().map(|f| f.1).sum(),
        }];
        builder.finish(end_ns, Faults::default(), processes)
    }

    fn row(i: u64, minor: u64, major: u64) -> Row {
        Row {
            time_ms: i * 50,
            mono_ns: i * 50_000_000,
            minor,
            major,
            period_ns: 50_000_000,
            ..Row::default()
        }
    }

    /// The summary of `place`, its totals `row`'s.
    fn summary_text(place: &AttributionSummary, row: &Row) -> String {
        use crate::output::summary::{Summary, Thrashing};
        use crate::output::totals::Totals;
        let mut totals = Totals::default();
        totals.add(row);
        Summary {
            backend: "procfs",
            mode: shared_layout::Mode::Strict,
            counted: "pid 42 and its descendants",
            totals: &totals,
            blocked: std::time::Duration::ZERO,
            deferred: 0,
            child: None,
            peaks: &[],
            thrashing: Thrashing::NotJudged,
            attributed: Some(place),
            notes: &[],
        }
        .to_string()
    }

    fn on() -> Arc<Feed> {
        Arc::new(Feed::new(Attribution::On {
            minor_sampling: 10,
            kernel_faults: true,
        }))
    }

    #[test]
    fn an_interval_record_lists_the_top_mappings_and_processes_and_the_rest_as_other() {
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        let names: Vec<String> = (0..8).map(|i| format!("/f{i}")).collect();
        let faults: Vec<(&str, u64, u64)> = (names.iter().enumerate())
            .map(|(i, n)| (n.as_str(), i as u64, 0))
            .collect();
        feed.push(table(50_000_000, &faults));
        feed.push(table(100_000_000, &[("/minor", 0, 7)]));
        w.row(&row(1, 170, 28));
        w.row(&row(2, 100, 0));
        let record = w.interval_record().expect("rows, a record");
        assert_eq!((record.start_ms, record.end_ms), (0, 100));
        assert_eq!(record.minor_sampling, Some(10));
        let listed: Vec<&str> = record.mappings.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(listed, ["/f7", "/f6", "/f5", "/f4", "/f3", "/minor"]);
        assert_eq!(record.mappings[5].minor_est, 70);
        assert_eq!(
            record.mappings[0].by_process,
            [TakerRecord {
                pid: 1,
                major: 7,
                minor_est: 0
            }]
        );
        // /f0 .. /f2 took 0 + 1 + 2 major faults.
        assert_eq!(record.other_mappings.major, 3);
        assert_eq!(record.processes.len(), 1);
        assert_eq!(
            (record.processes[0].minor, record.processes[0].major),
            (200, 28)
        );
        assert_eq!(
            record.other_processes,
            Counts {
                minor: 70,
                major: 0
            }
        );
        // The next interval starts afresh, and has no record without rows.
        assert!(w.interval_record().is_none());
    }

    #[test]
    fn a_files_hottest_regions_are_in_its_interval_record_and_the_summary() {
        use crate::attribution::FileId;

        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        let data = Arc::new(Mapping {
            kind: MappingKind::Shared,
            name: "/srv/data.bin".into(),
            file: Some(FileId {
                major: 8,
                minor: 1,
                inode: 7,
            }),
            owner: None,
        });
        let mib = 1u64 << 20;
        let mut builder = Builder::default();
        // 0-4 MiB read a page at a time, 12-16 MiB two faults a page: of 16 MiB, 256 KiB
        // buckets.
        for (range, each) in [(0..4 * mib, 1), (12 * mib..16 * mib, 2)] {
            for offset in range.step_by(4096) {
                builder.add_at(1, Arc::clone(&data), Some(offset), Faults::major(each));
            }
        }
        feed.push(builder.finish(50_000_000, Faults::default(), Vec::new()));
        w.row(&row(1, 0, 3072));
        let record = w.interval_record().unwrap();
        let regions = record.mappings[0]
            .regions
            .as_ref()
            .expect("a file's regions");
        let seen: Vec<(u64, u64, u64)> =
            regions.iter().map(|r| (r.start, r.end, r.major)).collect();
        assert_eq!(seen, [(12 * mib, 16 * mib, 2048), (0, 4 * mib, 1024)]);
        assert!((regions[0].share - 2.0 / 3.0).abs() < 1e-9);
        feed.push({
            let mut builder = Builder::default();
            builder.add_at(1, Arc::clone(&data), Some(0), Faults::major(1));
            builder.finish(100_000_000, Faults::default(), Vec::new())
        });
        w.row(&row(2, 0, 1));
        let place = w.finish();
        let text = summary_text(&place, &row(1, 0, 3073));
        assert!(
            text.contains("/srv/data.bin (shared)\n                             in the file: 12-16 MiB 67%, 0-4 MiB 33%\n"),
            "{text}"
        );
    }

    #[test]
    fn a_band_is_named_by_the_mapping_with_most_of_its_major_faults_however_long() {
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        // Before the band: /quiet's faults do not count.
        feed.push(table(50_000_000, &[("/quiet", 100, 0)]));
        w.row(&row(1, 0, 100));
        w.keep(Some(OpenBand {
            start_ns: 50_000_000,
            settled_ns: None,
        }));
        for i in 2..=40u64 {
            feed.push(table(i * 50_000_000, &[("/db", 8, 0), ("/log", 2, 0)]));
            w.row(&row(i, 0, 10));
            // Begun at period 20: what is before the last stalled period is settled.
            let settled_ns = (i >= 20).then_some((i - 1) * 50_000_000);
            w.keep(Some(OpenBand {
                start_ns: 50_000_000,
                settled_ns,
            }));
        }
        assert!(w.bands.periods.len() <= 2, "settled periods were kept");
        let mut band = crate::pressure::verdict::test_band();
        band.start_mono_ns = 50_000_000;
        band.end_mono_ns = 40 * 50_000_000;
        w.name(&mut band);
        let named = band.major_mapping.expect("named");
        assert_eq!(named.name, "/db (data)");
        assert_eq!(named.major_faults, 39 * 8);
        assert!((named.share - 0.8).abs() < 1e-9, "{}", named.share);
    }

    #[test]
    fn the_plots_lane_holds_each_rows_major_faults_on_the_runs_top_mappings() {
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), true);
        // Row 1: /f0 .. /f6 take 7 .. 1 major faults, and 2 are lost.
        let names: Vec<String> = (0..7).map(|i| format!("/f{i}")).collect();
        let faults: Vec<(&str, u64, u64)> = (names.iter().enumerate())
            .map(|(i, n)| (n.as_str(), 7 - i as u64, 1))
            .collect();
        let mut first = table(50_000_000, &faults);
        first.lost.major = 2;
        feed.push(first);
        w.row(&row(1, 0, 30));
        // Row 2: /f6 takes 20, and becomes the run's first.
        feed.push(table(100_000_000, &[("/f6", 20, 0)]));
        w.row(&row(2, 0, 20));
        // Row 3: nothing.
        w.row(&row(3, 0, 0));
        // Row 4: /f6 takes 1, fewer than 16 other mappings: drawn among the others.
        let many: Vec<String> = (0..LANE_PER_ROW).map(|i| format!("/g{i}")).collect();
        let mut faults: Vec<(&str, u64, u64)> = many.iter().map(|n| (n.as_str(), 3, 0)).collect();
        faults.push(("/f6", 1, 0));
        feed.push(table(200_000_000, &faults));
        w.row(&row(4, 0, 49));
        let lane = w.finish().lane.expect("attributed, and a plot");
        let names: Vec<&str> = lane.mappings.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "/f6 (data)",
                "/f0 (data)",
                "/f1 (data)",
                "/f2 (data)",
                "/f3 (data)"
            ]
        );
        assert_eq!(lane.mappings[0].1, 22);
        assert_eq!((lane.recorded, lane.lost), (28 + 20 + 49, 2));
        let lane_row = |top, other, lost| LaneRow { top, other, lost };
        assert_eq!(
            lane.rows,
            [
                lane_row([1, 7, 6, 5, 4], 5, 2),
                lane_row([20, 0, 0, 0, 0], 0, 0),
                lane_row([0; TOP], 0, 0),
                lane_row([0; TOP], 49, 0),
            ]
        );
    }

    #[test]
    fn the_heat_map_holds_the_top_files_major_faults_by_offset_in_the_runs_buckets() {
        use crate::attribution::FileId;
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), true);
        let file = |inode, name: &str| {
            Arc::new(Mapping {
                kind: MappingKind::Shared,
                name: name.into(),
                file: Some(FileId {
                    major: 8,
                    minor: 1,
                    inode,
                }),
                owner: None,
            })
        };
        let (db, log) = (file(1, "/db"), file(2, "/log"));
        let period = |end_ns, faults: &[(&Arc<Mapping>, u64, u64)]| {
            let mut builder = Builder::default();
            for (mapping, offset, n) in faults {
                builder.add_at(1, Arc::clone(mapping), Some(*offset), Faults::major(*n));
            }
            builder.finish(end_ns, Faults::default(), Vec::new())
        };
        // Row 1: /db's first page, in 4 KiB buckets; row 2: at 1 MiB, widening the run's
        // to 32 KiB; row 3: /log only.
        feed.push(period(50_000_000, &[(&db, 0, 3), (&db, 4096, 2)]));
        w.row(&row(1, 0, 5));
        feed.push(period(100_000_000, &[(&db, 1 << 20, 7)]));
        w.row(&row(2, 0, 7));
        feed.push(period(150_000_000, &[(&log, 0, 1)]));
        w.row(&row(3, 0, 1));
        let heat = w.finish().lane.unwrap().heat.expect("a file's offsets");
        assert_eq!(heat.name, "/db (shared)");
        assert_eq!(heat.width, 32 << 10);
        assert_eq!(heat.buckets, 33);
        assert_eq!(heat.rows, [vec![(0, 5)], vec![(32, 7)], vec![]]);
        assert_eq!(heat.most, 7);
    }

    #[test]
    fn without_attribution_or_without_a_plot_there_is_no_lane() {
        let off = Arc::new(Feed::new(Attribution::Off("refused".into())));
        let mut w = AttributionReport::new(Arc::clone(&off), true);
        w.row(&row(1, 0, 0));
        assert_eq!(w.finish().lane, None);
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        feed.push(table(50_000_000, &[("/a", 1, 0)]));
        w.row(&row(1, 0, 1));
        assert_eq!(w.finish().lane, None);
    }

    #[test]
    fn without_attribution_the_processes_are_still_listed() {
        let feed = Arc::new(Feed::new(Attribution::Off("refused".into())));
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        feed.push(table(50_000_000, &[]));
        w.row(&row(1, 100, 0));
        let record = w.interval_record().unwrap();
        assert_eq!(record.minor_sampling, None);
        assert!(record.mappings.is_empty());
        assert_eq!(record.processes[0].comm, "work");
    }

    #[test]
    fn code_is_named_by_function_in_the_record_and_the_summary_what_has_no_name_kept() {
        use crate::attribution::Code;
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        let mut table = table(50_000_000, &[("/f", 7, 2)]);
        // Code of no file (a JIT's), a kernel address, a module record without an IP.
        let jit = Arc::new(Mapping {
            kind: MappingKind::Anonymous,
            name: String::new(),
            file: None,
            owner: Some(42),
        });
        table.code = vec![
            (
                Code::User {
                    mapping: jit,
                    offset: None,
                },
                Faults::major(4),
            ),
            (Code::Kernel, Faults::major(2)),
            (
                Code::Unknown,
                Faults {
                    major: 1,
                    minor_samples: 2,
                },
            ),
        ];
        feed.push(table);
        w.row(&row(1, 20, 7));
        let record = w.interval_record().unwrap();
        let named: Vec<(&str, &str, u64)> = (record.functions.iter())
            .map(|f| (f.binary.as_str(), f.name.as_str(), f.major))
            .collect();
        assert_eq!(
            named,
            [
                ("[anonymous]", "[unknown]", 4),
                ("[kernel]", "[unknown]", 2),
                ("[unknown]", "[unknown]", 1),
            ]
        );
        assert_eq!(record.functions[2].minor_est, 20);
        let place = w.finish();
        let text = summary_text(&place, &row(1, 20, 7));
        for line in [
            "    major faults by function\n       57.1%              4  [unknown] in [anonymous]\n",
            "    minor faults by function\n      100.0%            ~20  [unknown] in [unknown]",
        ] {
            assert!(text.contains(line), "no {line:?} in {text}");
        }
    }

    #[test]
    fn the_summary_never_estimates_more_minor_faults_than_were_taken() {
        let feed = on();
        let mut w = AttributionReport::new(Arc::clone(&feed), false);
        // 30 recorded at one in 10: 300 estimated, where the rows say 200 were taken.
        feed.push(table(50_000_000, &[("/f", 0, 30)]));
        w.row(&row(1, 200, 0));
        let place = w.finish();
        let text = summary_text(&place, &row(1, 200, 0));
        assert!(text.contains("~200 estimated of 200"), "{text}");
        assert!(!text.contains("~300"), "{text}");
    }
}
