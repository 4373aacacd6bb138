//! The profile as an SVG timeline: lanes on one time axis, in seconds, for the fault
//! rates, the major faults by mapping (where faults were attributed to mappings) and the
//! top file's by offset (a heat map), the resident and swapped memory, the memory stall and the CPU utilization, with the
//! thrashing verdict's bands shaded across all of them.
//!
//! Rates and shares are drawn as steps over each row's own period. A row much shorter
//! than the others (the last, partial period; an early sample at a process's exit) is
//! drawn merged with the row before it: alone, a few milliseconds of CPU time or a
//! single fault over a period that short reads as a spike the processes never had.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::attribution::{FileHeat, LaneRow, MappingLane, TOP};
use super::metadata::shortened;
use crate::attribution::offsets::human_span;
use crate::pressure::verdict::Band;
use crate::rows::row::Row;

/// The lane of major faults by mapping, or why the plot has none.
#[derive(Clone, Copy, Debug)]
pub enum ByMapping<'a> {
    Lane(&'a MappingLane),
    /// Faults were not attributed to mappings: why, in a few words.
    NotAttributed(&'a str),
}

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("drawing the plot: {0}")]
    Draw(String),
}

fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

const WIDTH: u32 = 1100;
/// Without the lane of major faults by mapping.
const HEIGHT: u32 = 1000;
/// The lane of major faults by mapping: its legend and its chart.
const MAPPING_LANE: u32 = 280;
/// The heat map of the top file's major faults by offset: its legend and its chart.
const HEAT_LANE: u32 = 260;
const FONT: &str = "sans-serif";
const MIB: f64 = (1u64 << 20) as f64;

const MINOR: RGBColor = RGBColor(31, 119, 180);
const MAJOR: RGBColor = RGBColor(214, 39, 40);
const ANON: RGBColor = RGBColor(255, 127, 14);
const FILE: RGBColor = RGBColor(44, 160, 44);
const SHMEM: RGBColor = RGBColor(148, 103, 189);
const SWAP: RGBColor = RGBColor(40, 40, 40);
const SOME: RGBColor = RGBColor(197, 176, 213);
const FULL: RGBColor = RGBColor(118, 42, 131);
const CPU: RGBColor = RGBColor(23, 190, 207);
const BAND: RGBColor = RGBColor(255, 80, 80);
/// The top mappings' layers, most major faults first, then the other mappings' and what
/// was not recorded.
const MAPPINGS: [RGBColor; TOP] = [
    RGBColor(57, 59, 121),
    RGBColor(227, 119, 194),
    RGBColor(188, 189, 34),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
];
const OTHER_MAPPINGS: RGBColor = RGBColor(190, 190, 190);
/// The heat map's scale, from a cell with one fault to the most (ColorBrewer's YlOrRd).
const HEAT: [RGBColor; 4] = [
    RGBColor(255, 237, 160),
    RGBColor(254, 178, 76),
    RGBColor(240, 59, 32),
    RGBColor(128, 0, 38),
];
const NOT_RECORDED: RGBColor = RGBColor(60, 60, 60);

/// One drawn step: a row, or a short row merged with the one before it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Step {
    /// Seconds on the rows' axis (0 at the first row's end).
    start: f64,
    end: f64,
    minor: u64,
    major: u64,
    cpu_ns: u64,
    /// Memory at the step's end, bytes.
    rss_anon: u64,
    rss_file: u64,
    rss_shmem: u64,
    swap: u64,
    /// Stall over the step, µs, where the rows have it.
    some_us: Option<u64>,
    full_us: Option<u64>,
    /// Major faults by mapping, where the lane is drawn.
    by_mapping: LaneRow,
}

impl Step {
    fn seconds(&self) -> f64 {
        (self.end - self.start).max(1e-9)
    }
}

/// The rows as steps, short ones merged into the step before. `lane`: the rows' major
/// faults by mapping, one per row (none: no lane).
fn steps(rows: &[Row], lane: &[LaneRow]) -> Vec<Step> {
    let mut periods: Vec<u64> = rows.iter().map(|r| r.period_ns).collect();
    periods.sort_unstable();
    let typical = periods.get(periods.len() / 2).copied().unwrap_or(0);
    let mut steps: Vec<Step> = Vec::with_capacity(rows.len());
    let lane = lane
        .iter()
        .copied()
        .chain(std::iter::repeat(LaneRow::default()));
    for (row, by_mapping) in rows.iter().zip(lane) {
        let end = row.time_ms as f64 / 1e3;
        let step = Step {
            start: end - row.period_ns as f64 / 1e9,
            end,
            minor: row.minor,
            major: row.major,
            cpu_ns: row.cpu_ns,
            rss_anon: row.rss_anon,
            rss_file: row.rss_file,
            rss_shmem: row.rss_shmem,
            swap: row.swap,
            some_us: row.pressure.stall_some_us,
            full_us: row.pressure.stall_full_us,
            by_mapping,
        };
        match steps.last_mut() {
            Some(before) if row.period_ns < typical / 2 && before.end > before.start => {
                let add = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_add(b?));
                *before = Step {
                    start: before.start,
                    minor: before.minor.saturating_add(step.minor),
                    major: before.major.saturating_add(step.major),
                    cpu_ns: before.cpu_ns.saturating_add(step.cpu_ns),
                    some_us: add(before.some_us, step.some_us),
                    full_us: add(before.full_us, step.full_us),
                    by_mapping: merged(before.by_mapping, step.by_mapping),
                    ..step
                };
            }
            _ => steps.push(step),
        }
    }
    steps
}

/// Two rows' major faults by mapping as one.
fn merged(a: LaneRow, b: LaneRow) -> LaneRow {
    let mut top = a.top;
    for (n, m) in top.iter_mut().zip(b.top) {
        *n = n.saturating_add(m);
    }
    LaneRow {
        top,
        other: a.other.saturating_add(b.other),
        lost: a.lost.saturating_add(b.lost),
    }
}

/// The heat map's colour for a cell of `n` faults (1 to `most`): the quarter of `most` it
/// is in, the most always the darkest.
fn heat_level(most: u64, n: u64) -> usize {
    let levels = HEAT.len() as u64;
    ((n * levels).div_ceil(most.max(1)).saturating_sub(1) as usize).min(HEAT.len() - 1)
}

/// The counts the heat map's colour `k` stands for (those n with [`heat_level`] k); none
/// when the most is smaller than the colours.
fn heat_range(most: u64, k: usize) -> Option<(u64, u64)> {
    let levels = HEAT.len() as u64;
    let k = k as u64;
    let low = k * most / levels + 1;
    let high = (k + 1) * most / levels;
    (low <= high).then_some((low, high))
}

/// A value held over each step, as the corners of a step line; an instant has none.
fn stepped(steps: &[Step], value: impl Fn(&Step) -> f64) -> Vec<(f64, f64)> {
    steps
        .iter()
        .filter(|s| s.end > s.start)
        .flat_map(|s| [(s.start, value(s)), (s.end, value(s))])
        .collect()
}

/// A level at each step's end, joined by straight lines.
fn levels(steps: &[Step], value: impl Fn(&Step) -> f64) -> Vec<(f64, f64)> {
    steps.iter().map(|s| (s.end, value(s))).collect()
}

/// The top of an axis holding `max`, with a little room above.
fn top(max: f64) -> f64 {
    if max > 0.0 {
        max * 1.08
    } else {
        1.0
    }
}

type Chart<'a> = ChartContext<
    'a,
    SVGBackend<'a>,
    Cartesian2d<plotters::coord::types::RangedCoordf64, plotters::coord::types::RangedCoordf64>,
>;

/// Room for the axis labels on each side: every lane as wide, so their time axes line up.
const Y_LABELS: u32 = 90;
/// The strip above a lane that holds its legend.
const LEGEND: u32 = 24;
/// A legend's width per character: without a font to measure with, a generous one.
const LEGEND_CHAR: i32 = 8;
/// A line of a legend of several lines.
const LEGEND_LINE: u32 = 20;

/// How an item of a legend is drawn.
#[derive(Clone, Copy)]
enum Key {
    Line(RGBColor),
    Dashed(RGBColor),
    Box(RGBColor),
    /// The thrashing bands' shading.
    Shade,
    /// Words alone.
    Note,
}

/// A lane's area: the legend strip drawn (its items side by side, never over the data),
/// the rest for the chart.
fn legend_row<'a>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    items: &[(&str, Key)],
) -> Result<DrawingArea<SVGBackend<'a>, Shift>, PlotError> {
    let (strip, chart) = area.split_vertically(LEGEND);
    let mut x = Y_LABELS as i32 + 14;
    for (label, key) in items {
        x = legend_item(&strip, (x, LEGEND as i32 / 2 + 2), label, *key)? + 24;
    }
    Ok(chart)
}

/// Draws a legend's item with its left end at `(x, y)` (the middle of its line); where
/// it ends.
fn legend_item(
    strip: &DrawingArea<SVGBackend<'_>, Shift>,
    (x, y): (i32, i32),
    label: &str,
    key: Key,
) -> Result<i32, PlotError> {
    match key {
        Key::Line(c) => strip.draw(&PathElement::new([(x, y), (x + 22, y)], c.stroke_width(2))),
        Key::Dashed(c) => strip
            .draw(&PathElement::new([(x, y), (x + 8, y)], c.stroke_width(2)))
            .and_then(|()| {
                strip.draw(&PathElement::new(
                    [(x + 14, y), (x + 22, y)],
                    c.stroke_width(2),
                ))
            }),
        Key::Box(c) => strip.draw(&Rectangle::new([(x, y - 6), (x + 22, y + 6)], c.filled())),
        Key::Shade => strip.draw(&Rectangle::new([(x, y - 6), (x + 22, y + 6)], shade())),
        Key::Note => Ok(()),
    }
    .map_err(draw_err)?;
    let text_x = if matches!(key, Key::Note) { x } else { x + 28 };
    strip
        .draw(&Text::new(
            label.to_string(),
            (text_x, y - 7),
            (FONT, 14).into_font().color(&BLACK),
        ))
        .map_err(draw_err)?;
    // Without a font to measure with, a generous width per character.
    Ok(text_x + LEGEND_CHAR * label.chars().count() as i32)
}

/// A lane's chart, its mesh not drawn yet (a second axis comes first).
fn lane<'a>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    x: (f64, f64),
    y_max: f64,
    bottom: bool,
    right_axis: bool,
) -> Result<Chart<'a>, PlotError> {
    let mut builder = ChartBuilder::on(area);
    builder
        .margin_left(8)
        .margin_top(4)
        .margin_bottom(if bottom { 4 } else { 10 })
        .x_label_area_size(if bottom { 46 } else { 0 })
        .y_label_area_size(Y_LABELS);
    if right_axis {
        builder.margin_right(8).right_y_label_area_size(Y_LABELS);
    } else {
        builder.margin_right(8 + Y_LABELS);
    }
    builder
        .build_cartesian_2d(x.0..x.1, 0.0..y_max)
        .map_err(draw_err)
}

/// The thrashing bands' shading, as drawn and as its legend shows it.
fn shade() -> ShapeStyle {
    BAND.mix(0.18).filled()
}

/// Draws a lane's mesh and axes and shades the bands, under the series to come.
fn mesh(
    chart: &mut Chart<'_>,
    y_desc: &str,
    y_format: &dyn Fn(&f64) -> String,
    bottom: bool,
    bands: &[Band],
) -> Result<(), PlotError> {
    let mut mesh = chart.configure_mesh();
    mesh.label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .y_desc(y_desc)
        .y_labels(5)
        .y_label_formatter(y_format)
        .x_label_formatter(&seconds)
        .light_line_style(WHITE.mix(0.0))
        .bold_line_style(BLACK.mix(0.08));
    if bottom {
        mesh.x_desc("time (s)");
    } else {
        mesh.x_labels(0);
    }
    mesh.draw().map_err(draw_err)?;
    shade_bands(chart, bands)
}

/// Shades the thrashing bands across a lane's height.
fn shade_bands(chart: &mut Chart<'_>, bands: &[Band]) -> Result<(), PlotError> {
    let y_max = chart.y_range().end;
    chart
        .draw_series(bands.iter().map(|b| {
            Rectangle::new(
                [
                    (b.start_ms as f64 / 1e3, 0.0),
                    (b.end_ms as f64 / 1e3, y_max),
                ],
                shade(),
            )
        }))
        .map_err(draw_err)?;
    Ok(())
}

/// Axis labels: thousands as "k" from 10,000 on, whole numbers, a decimal only on an
/// axis that short.
/// A time axis's tick, in seconds: as few decimals as it needs, at most three (a tick of
/// 0.1 s steps is 0.6000000000000001 in f64).
fn seconds(t: &f64) -> String {
    let fixed = format!("{t:.3}");
    let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
    if trimmed == "-0" {
        "0".to_owned()
    } else {
        trimmed.to_owned()
    }
}

fn whole(v: &f64) -> String {
    if *v >= 10_000.0 {
        format!("{:.0}k", v / 1e3)
    } else if v.fract() == 0.0 || *v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Renders `rows` and the verdict's `bands` as an SVG document, with the lane of major
/// faults by mapping when there are some. `caption` names the backend, the mode and the
/// period.
pub fn render(
    rows: &[Row],
    bands: &[Band],
    caption: &str,
    by_mapping: ByMapping<'_>,
) -> Result<String, PlotError> {
    let lane_rows = match by_mapping {
        ByMapping::Lane(lane) => &lane.rows[..],
        ByMapping::NotAttributed(_) => &[],
    };
    let steps = steps(rows, lane_rows);
    let x = (
        steps.first().map_or(0.0, |s| s.start.min(0.0)),
        steps.last().map_or(0.0, |s| s.end).max(0.1),
    );
    // The lane, or without major faults by mapping to draw, a line that says why.
    let lane: Result<&MappingLane, String> = match by_mapping {
        ByMapping::Lane(lane) if lane.recorded > 0 || lane.lost > 0 => Ok(lane),
        ByMapping::Lane(_) => Err("none recorded".to_owned()),
        ByMapping::NotAttributed(why) => Err(format!("not attributed ({why})")),
    };
    let by_mapping_height = if lane.is_ok() { MAPPING_LANE } else { LEGEND };
    let heat = lane.as_ref().ok().and_then(|l| l.heat.as_ref());
    let heat_height = if heat.is_some() { HEAT_LANE } else { 0 };
    let height = HEIGHT + by_mapping_height + heat_height;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title = match bands {
            [] => caption.to_owned(),
            [_] => format!("{caption}; shaded: thrashing"),
            _ => format!("{caption}; shaded: thrashing ({} times)", bands.len()),
        };
        let root = root.titled(&title, (FONT, 20)).map_err(draw_err)?;
        let (faults_area, rest) = root.split_vertically(HEIGHT * 26 / 100);
        let (by_mapping_area, rest) = rest.split_vertically(by_mapping_height);
        let (heat_area, rest) = rest.split_vertically(heat_height);
        let (memory_area, rest) = rest.split_vertically(HEIGHT * 26 / 100);
        let (stall_area, cpu_area) = rest.split_vertically(HEIGHT * 20 / 100);
        let lanes = Lanes {
            steps: &steps,
            x,
            bands,
        };
        lanes.faults(&faults_area)?;
        match lane {
            Ok(lane) => lanes.by_mapping(&by_mapping_area, lane)?,
            Err(note) => {
                let note = format!("major faults by mapping: {note}");
                legend_row(&by_mapping_area, &[(&note, Key::Note)])?;
            }
        }
        if let Some(heat) = heat {
            lanes.heat(&heat_area, rows, heat)?;
        }
        lanes.memory(&memory_area)?;
        lanes.stall(&stall_area)?;
        lanes.cpu(&cpu_area)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// A lane's share of the drawing.
type LaneArea<'a> = DrawingArea<SVGBackend<'a>, Shift>;

/// What every lane draws from: the steps, the time axis, the thrashing bands.
struct Lanes<'s> {
    steps: &'s [Step],
    x: (f64, f64),
    bands: &'s [Band],
}

impl Lanes<'_> {
    /// The steps of a known length: rates are drawn over them.
    fn spans(&self) -> impl Iterator<Item = &Step> {
        self.steps.iter().filter(|s| s.end > s.start)
    }

    /// Fault rates: minor on the left axis, major on the right.
    fn faults(&self, area: &LaneArea<'_>) -> Result<(), PlotError> {
        let minor_rate = |s: &Step| s.minor as f64 / s.seconds();
        let major_rate = |s: &Step| s.major as f64 / s.seconds();
        let minor_max = top(self.spans().map(minor_rate).fold(0.0, f64::max));
        let major_max = top(self.spans().map(major_rate).fold(0.0, f64::max));
        let mut legend = vec![
            ("minor faults/s (left axis)", Key::Line(MINOR)),
            ("major faults/s (right axis)", Key::Line(MAJOR)),
        ];
        if !self.bands.is_empty() {
            legend.push(("thrashing", Key::Shade));
        }
        let area = legend_row(area, &legend)?;
        let (x0, x1) = self.x;
        let mut faults = lane(&area, self.x, minor_max, false, true)?
            .set_secondary_coord(x0..x1, 0.0..major_max);
        mesh(&mut faults, "minor faults/s", &whole, false, self.bands)?;
        faults
            .configure_secondary_axes()
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 15))
            .y_desc("major faults/s")
            .y_labels(5)
            .y_label_formatter(&whole)
            .draw()
            .map_err(draw_err)?;
        faults
            .draw_series(LineSeries::new(
                stepped(self.steps, minor_rate),
                MINOR.stroke_width(2),
            ))
            .map_err(draw_err)?;
        faults
            .draw_secondary_series(LineSeries::new(
                stepped(self.steps, major_rate),
                MAJOR.stroke_width(2),
            ))
            .map_err(draw_err)?;
        Ok(())
    }

    /// Major faults by mapping: the run's top mappings stacked, the one with the most at
    /// the bottom, then the other mappings' and those not recorded.
    fn by_mapping(&self, area: &LaneArea<'_>, majors: &MappingLane) -> Result<(), PlotError> {
        let layers = layers(majors);
        let lines = 1 + layers.len().div_ceil(2) as u32;
        let (strip, area) = area.split_vertically(LEGEND_LINE * lines + 8);
        let x = Y_LABELS as i32 + 14;
        let line_y = |line: u32| (line * LEGEND_LINE + LEGEND_LINE / 2 + 2) as i32;
        legend_item(
            &strip,
            (x, line_y(0)),
            "major faults/s by mapping, every one recorded (minor faults are sampled: not drawn here)",
            Key::Note,
        )?;
        let column = (WIDTH - 2 * Y_LABELS - 28) as i32 / 2;
        let chars = ((column - 28 - 16) / LEGEND_CHAR) as usize;
        for (i, layer) in layers.iter().enumerate() {
            let at = (x + column * (i % 2) as i32, line_y(1 + i as u32 / 2));
            legend_item(&strip, at, &layer.legend(chars), Key::Box(layer.color))?;
        }
        let stacked = |s: &Step, k: usize| stacked(&layers, s, k);
        let last = layers.len().saturating_sub(1);
        let y_max = top(self.spans().map(|s| stacked(s, last)).fold(0.0, f64::max));
        let mut chart = lane(&area, self.x, y_max, false, false)?;
        mesh(&mut chart, "major faults/s", &whole, false, &[])?;
        // Each stack's top, the tallest first, opaque: what shows of each is its own layer.
        for (k, layer) in layers.iter().enumerate().rev() {
            chart
                .draw_series(AreaSeries::new(
                    stepped(self.steps, |s| stacked(s, k)),
                    0.0,
                    layer.color,
                ))
                .map_err(draw_err)?;
        }
        shade_bands(&mut chart, self.bands)
    }

    /// The top file's major faults by offset, row by row: a cell a row and bucket, its
    /// colour the faults the row took there (white: none).
    fn heat(&self, area: &LaneArea<'_>, rows: &[Row], heat: &FileHeat) -> Result<(), PlotError> {
        let (strip, area) = area.split_vertically(2 * LEGEND_LINE + 8);
        let x = Y_LABELS as i32 + 14;
        let line_y = |line: u32| (line * LEGEND_LINE + LEGEND_LINE / 2 + 2) as i32;
        let chars = ((WIDTH - 2 * Y_LABELS) as i32 / LEGEND_CHAR) as usize - 40;
        let title = format!(
            "major faults by file offset in {}, a cell a period and {}:",
            shortened(&heat.name, chars),
            human_span(0, heat.width).trim_start_matches("0-")
        );
        legend_item(&strip, (x, line_y(0)), &title, Key::Note)?;
        let mut at = x;
        for (k, colour) in HEAT.iter().enumerate() {
            let Some((low, high)) = heat_range(heat.most, k) else {
                continue;
            };
            let label = if low == high {
                format!("{low}")
            } else {
                format!("{low}-{high}")
            };
            at = legend_item(&strip, (at, line_y(1)), &label, Key::Box(*colour))? + 16;
        }
        // The axis in the largest unit the file's extent is at least 2 of: ticks at round
        // numbers of it.
        let extent = (heat.buckets as u64).saturating_mul(heat.width);
        let (unit, name) = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")]
            .into_iter()
            .find(|(unit, _)| extent / unit >= 2)
            .unwrap_or((1, "bytes"));
        let y_max = extent as f64 / unit as f64;
        let mut chart = lane(&area, self.x, y_max.max(1.0), false, false)?;
        let y_desc = format!("file offset ({name})");
        mesh(&mut chart, &y_desc, &whole, false, self.bands)?;
        let width = heat.width as f64 / unit as f64;
        let cells = rows.iter().zip(&heat.rows).flat_map(|(row, cells)| {
            let end = row.time_ms as f64 / 1e3;
            let start = end - row.period_ns as f64 / 1e9;
            cells.iter().map(move |&(bucket, n)| {
                let low = f64::from(bucket) * width;
                let colour = HEAT[heat_level(heat.most, n)];
                Rectangle::new([(start, low), (end, low + width)], colour.filled())
            })
        });
        chart.draw_series(cells).map_err(draw_err)?;
        Ok(())
    }

    /// Memory: resident anonymous, file and shared stacked, swapped out as a line.
    fn memory(&self, area: &LaneArea<'_>) -> Result<(), PlotError> {
        let anon = |s: &Step| s.rss_anon as f64 / MIB;
        let file = |s: &Step| (s.rss_anon + s.rss_file) as f64 / MIB;
        let shmem = |s: &Step| (s.rss_anon + s.rss_file + s.rss_shmem) as f64 / MIB;
        let swap = |s: &Step| s.swap as f64 / MIB;
        let memory_max = top(self
            .steps
            .iter()
            .map(|s| shmem(s).max(swap(s)))
            .fold(0.0, f64::max));
        let area = legend_row(
            area,
            &[
                ("resident anonymous", Key::Box(ANON)),
                ("resident file", Key::Box(FILE)),
                ("resident shmem", Key::Box(SHMEM)),
                ("swapped out", Key::Dashed(SWAP)),
            ],
        )?;
        let mut memory = lane(&area, self.x, memory_max, false, false)?;
        // The bands are shaded over the opaque layers, not under them.
        mesh(&mut memory, "memory (MiB)", &whole, false, &[])?;
        // Each stack's top, the tallest first, opaque: what shows of each is its own
        // layer in its legend's colour (translucent layers would blend into others).
        for (stack, color) in [
            (&shmem as &dyn Fn(&Step) -> f64, SHMEM),
            (&file, FILE),
            (&anon, ANON),
        ] {
            memory
                .draw_series(AreaSeries::new(levels(self.steps, stack), 0.0, color))
                .map_err(draw_err)?;
        }
        shade_bands(&mut memory, self.bands)?;
        memory
            .draw_series(DashedLineSeries::new(
                levels(self.steps, swap),
                8,
                6,
                SWAP.stroke_width(2),
            ))
            .map_err(draw_err)?;
        Ok(())
    }

    /// Memory stall, % of each period: some task stalled, and every task at once.
    fn stall(&self, area: &LaneArea<'_>) -> Result<(), PlotError> {
        let pct = |us: Option<u64>, s: &Step| us.map_or(0.0, |us| us as f64 / 1e4 / s.seconds());
        let has_stall = self.steps.iter().any(|s| s.some_us.is_some());
        let legend: &[(&str, Key)] = if has_stall {
            &[
                ("some task stalled on memory", Key::Box(SOME)),
                ("every task stalled at once (full)", Key::Box(FULL)),
            ]
        } else {
            &[("no memory stall: this kernel has no PSI", Key::Box(WHITE))]
        };
        let area = legend_row(area, legend)?;
        let mut stall = lane(&area, self.x, 100.0, false, false)?;
        mesh(&mut stall, "memory stall (%)", &whole, false, self.bands)?;
        if !has_stall {
            return Ok(());
        }
        stall
            .draw_series(AreaSeries::new(
                stepped(self.steps, |s| pct(s.some_us, s)),
                0.0,
                SOME.mix(0.9),
            ))
            .map_err(draw_err)?;
        stall
            .draw_series(AreaSeries::new(
                stepped(self.steps, |s| pct(s.full_us, s)),
                0.0,
                FULL.mix(0.9),
            ))
            .map_err(draw_err)?;
        Ok(())
    }

    /// CPU utilization, % of one CPU.
    fn cpu(&self, area: &LaneArea<'_>) -> Result<(), PlotError> {
        let util = |s: &Step| s.cpu_ns as f64 / 1e7 / s.seconds();
        let util_max = top(self.spans().map(util).fold(100.0_f64, f64::max));
        let area = legend_row(area, &[("CPU time, % of one CPU", Key::Line(CPU))])?;
        let mut cpu = lane(&area, self.x, util_max, true, false)?;
        mesh(&mut cpu, "CPU (%)", &whole, true, self.bands)?;
        cpu.draw_series(LineSeries::new(
            stepped(self.steps, util),
            CPU.stroke_width(2),
        ))
        .map_err(draw_err)?;
        Ok(())
    }
}

/// What a layer of the lane of major faults by mapping counts of a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LayerOf {
    /// The run's top mapping at this rank.
    Top(usize),
    Other,
    NotRecorded,
}

impl LayerOf {
    fn count(self, row: &LaneRow) -> u64 {
        match self {
            LayerOf::Top(i) => row.top[i],
            LayerOf::Other => row.other,
            LayerOf::NotRecorded => row.lost,
        }
    }
}

/// A layer of the lane: what it counts, its name and count over the run, its colour.
#[derive(Clone, Debug, PartialEq)]
struct Layer {
    of: LayerOf,
    name: String,
    /// Major faults over the run, and their share of those recorded (none: not
    /// recorded).
    faults: u64,
    share: Option<f64>,
    color: RGBColor,
}

impl Layer {
    /// Its legend, at most `chars` characters: the name shortened in its middle, the
    /// count whole.
    fn legend(&self, chars: usize) -> String {
        let count = match self.share {
            Some(share) => format!(": {} ({:.0}%)", self.faults, share * 100.0),
            None => format!(": {}", self.faults),
        };
        let room = chars.saturating_sub(count.chars().count());
        format!("{}{count}", shortened(&self.name, room))
    }
}

/// The lane's layers, bottom up: the top mappings, the other mappings (if they took
/// any), what was not recorded (if anything was not).
fn layers(lane: &MappingLane) -> Vec<Layer> {
    let share = |n: u64| Some(n as f64 / lane.recorded.max(1) as f64);
    let mut layers: Vec<Layer> = (lane.mappings.iter().zip(MAPPINGS).enumerate())
        .map(|(i, ((name, faults), color))| Layer {
            of: LayerOf::Top(i),
            name: name.clone(),
            faults: *faults,
            share: share(*faults),
            color,
        })
        .collect();
    let top: u64 = lane.mappings.iter().map(|(_, n)| n).sum();
    let other = lane.recorded.saturating_sub(top);
    if other > 0 {
        layers.push(Layer {
            of: LayerOf::Other,
            name: "other mappings".to_owned(),
            faults: other,
            share: share(other),
            color: OTHER_MAPPINGS,
        });
    }
    if lane.lost > 0 {
        layers.push(Layer {
            of: LayerOf::NotRecorded,
            name: "not recorded (the kernel's buffer was full)".to_owned(),
            faults: lane.lost,
            share: None,
            color: NOT_RECORDED,
        });
    }
    layers
}

/// The top of layer `k` over step `s`, in major faults a second: its count and those of
/// the layers under it.
fn stacked(layers: &[Layer], s: &Step, k: usize) -> f64 {
    let count: u64 = (layers.iter().take(k + 1))
        .map(|l| l.of.count(&s.by_mapping))
        .sum();
    count as f64 / s.seconds()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::row::Timeline;
    use shared_layout::abi::Sample;

    fn rows(count: u64, sample: impl Fn(u64) -> Sample) -> Vec<Row> {
        let mut t = Timeline::new(std::time::Duration::from_millis(50));
        (1..=count).map(|i| t.row(&sample(i))).collect()
    }

    fn unattributed() -> ByMapping<'static> {
        ByMapping::NotAttributed("test")
    }

    fn texts(svg: &str) -> Vec<&str> {
        svg.split("</text>")
            .filter_map(|t| Some(t.rsplit('>').next()?.trim()))
            .collect()
    }

    #[test]
    fn the_plot_is_an_svg_document_with_its_caption_and_every_lane() {
        let rows = rows(40, |i| Sample {
            time_ns: i * 50_000_000,
            minor: i,
            major: i % 3,
            cpu_ns: 1,
            rss_anon: i << 20,
            ..Sample::default()
        });
        let svg = render(&rows, &[], "procfs backend, strict mode", unattributed()).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        let texts = texts(&svg);
        for text in [
            "procfs backend, strict mode",
            "time (s)",
            "minor faults/s",
            "major faults/s",
            "memory (MiB)",
            "resident anonymous",
            "swapped out",
            "memory stall (%)",
            "CPU (%)",
            "no memory stall: this kernel has no PSI",
        ] {
            assert!(texts.contains(&text), "missing {text:?}: {texts:?}");
        }
    }

    #[test]
    fn a_band_is_shaded_across_every_lane_and_named_in_the_title() {
        let rows = rows(80, |i| Sample {
            time_ns: i * 50_000_000,
            ..Sample::default()
        });
        let band = Band {
            start_ms: 1000,
            end_ms: 2500,
            start_mono_ns: 0,
            end_mono_ns: 0,
            ongoing: false,
            stall_full_pct: 50.0,
            stall_some_pct: 60.0,
            major_rate: 100.0,
            refault_rate: None,
            pswpin_rate: None,
            pswpout_rate: None,
            major_faults: 150,
            system_major_faults: None,
            target_share: None,
            onset_rss_anon: 0,
            onset_rss_file: 0,
            onset_rss_shmem: 0,
            onset_swap: 0,
            major_mapping: None,
        };
        let svg = render(&rows, &[band], "caption", unattributed()).unwrap();
        assert!(texts(&svg).contains(&"caption; shaded: thrashing"));
        // The band's colour, filled, once per lane and once in the legend, which names it.
        let shaded = svg.matches("opacity=\"0.18\" fill=\"#FF5050\"").count();
        assert_eq!(shaded, 5, "{svg}");
        assert!(texts(&svg).contains(&"thrashing"), "{svg}");
    }

    #[test]
    fn each_memory_layer_is_drawn_in_its_legends_colour_not_blended_with_the_others() {
        let rows = rows(4, |i| Sample {
            time_ns: i * 50_000_000,
            rss_anon: 8 << 20,
            rss_file: 4 << 20,
            rss_shmem: 2 << 20,
            ..Sample::default()
        });
        let svg = render(&rows, &[], "caption", unattributed()).unwrap();
        for colour in [ANON, FILE, SHMEM] {
            let RGBColor(r, g, b) = colour;
            let fill = format!("opacity=\"1\" fill=\"#{r:02X}{g:02X}{b:02X}\"");
            assert_eq!(
                svg.matches(&fill).count(),
                2,
                "legend and layer {fill}: {svg}"
            );
        }
    }

    #[test]
    fn a_short_last_period_is_drawn_merged_with_the_one_before_not_as_a_spike() {
        // A thread busy half of each 50 ms period; its last, 5 ms period holds 4 ms of
        // CPU time (the exit's, and a tick's lag): alone it would draw as 80%.
        let mut rows = rows(10, |i| Sample {
            time_ns: i * 50_000_000,
            cpu_ns: 25_000_000,
            ..Sample::default()
        });
        let mut t = Timeline::new(std::time::Duration::from_millis(50));
        for r in &rows {
            t.row(&Sample {
                time_ns: r.mono_ns,
                ..Sample::default()
            });
        }
        rows.push(t.row(&Sample {
            time_ns: 505_000_000,
            cpu_ns: 4_000_000,
            ..Sample::default()
        }));
        let steps = steps(&rows, &[]);
        assert_eq!(steps.len(), 10);
        let last = steps.last().unwrap();
        assert_eq!(last.cpu_ns, 29_000_000);
        assert!((last.end - last.start - 0.055).abs() < 1e-9);
        // 29 ms over 55 ms: 53%, not 80%.
        assert!((last.cpu_ns as f64 / 1e9 / last.seconds() - 0.527).abs() < 0.001);
    }

    #[test]
    fn the_first_row_is_drawn_over_its_period_from_the_start() {
        let rows = rows(3, |i| Sample {
            time_ns: i * 50_000_000,
            cpu_ns: 10_000_000,
            rss_anon: i << 20,
            ..Sample::default()
        });
        let steps = steps(&rows, &[]);
        assert_eq!((steps[0].start, steps[0].end), (0.0, 0.05));
        let ends: Vec<f64> = steps.iter().map(|s| s.end).collect();
        assert_eq!(ends, [0.05, 0.1, 0.15]);
        assert!(steps
            .windows(2)
            .all(|w| (w[1].start - w[0].end).abs() < 1e-9));
    }

    /// 20 rows of 50 ms, each with 15 major faults on the database's file, 5 on a heap
    /// and 1 on other mappings; the third also 10 the kernel could not record.
    fn attributed() -> (Vec<Row>, MappingLane) {
        let rows = rows(20, |i| Sample {
            time_ns: i * 50_000_000,
            major: 21,
            ..Sample::default()
        });
        let lane_rows = (0..20)
            .map(|i| LaneRow {
                top: [15, 5, 0, 0, 0],
                other: 1,
                lost: if i == 2 { 10 } else { 0 },
            })
            .collect();
        let lane = MappingLane {
            mappings: vec![
                ("/srv/db/index.dat (shared)".into(), 300),
                ("[heap] of pid 7".into(), 100),
            ],
            recorded: 420,
            lost: 10,
            rows: lane_rows,
            heat: None,
        };
        (rows, lane)
    }

    #[test]
    fn the_lane_names_each_top_mapping_with_its_major_faults_and_stacks_them_row_by_row() {
        let (rows, lane) = attributed();
        let svg = render(&rows, &[], "caption", ByMapping::Lane(&lane)).unwrap();
        let texts = texts(&svg);
        for text in [
            "major faults/s by mapping, every one recorded (minor faults are sampled: not drawn here)",
            "/srv/db/index.dat (shared): 300 (71%)",
            "[heap] of pid 7: 100 (24%)",
            "other mappings: 20 (5%)",
            "not recorded (the kernel&apos;s buffer was full): 10",
        ] {
            assert!(texts.contains(&text), "missing {text:?}: {texts:?}");
        }
        assert!(svg.contains(&format!("height=\"{}\"", HEIGHT + MAPPING_LANE)));
        // Each layer in its legend's colour: its legend's box and its area.
        for colour in [MAPPINGS[0], MAPPINGS[1], OTHER_MAPPINGS, NOT_RECORDED] {
            let RGBColor(r, g, b) = colour;
            let fill = format!("opacity=\"1\" fill=\"#{r:02X}{g:02X}{b:02X}\"");
            assert_eq!(svg.matches(&fill).count(), 2, "{fill}: {svg}");
        }
        // The stack over a row: 15 on the file, 5 on the heap, 1 elsewhere, in 50 ms.
        let layers = layers(&lane);
        let kinds: Vec<LayerOf> = layers.iter().map(|l| l.of).collect();
        assert_eq!(
            kinds,
            [
                LayerOf::Top(0),
                LayerOf::Top(1),
                LayerOf::Other,
                LayerOf::NotRecorded
            ]
        );
        let steps = steps(&rows, &lane.rows);
        let tops = |s: &Step| -> Vec<f64> {
            (0..layers.len())
                .map(|k| stacked(&layers, s, k).round())
                .collect()
        };
        assert_eq!(tops(&steps[1]), [300.0, 400.0, 420.0, 420.0]);
        assert_eq!(tops(&steps[2]), [300.0, 400.0, 420.0, 620.0]);
    }

    #[test]
    fn the_top_files_offsets_are_a_heat_map_with_its_axis_in_bytes_and_its_scale() {
        let (rows, mut lane) = attributed();
        // 0-4 MiB in the first 10 rows, 12-16 MiB in the last 10, in 256 KiB buckets.
        let heat_rows: Vec<Vec<(u8, u64)>> = (0..20u8)
            .map(|i| match i {
                0..10 => (0..16).map(|b| (b, u64::from(i) + 1)).collect(),
                _ => (48..64).map(|b| (b, 40)).collect(),
            })
            .collect();
        lane.heat = Some(FileHeat {
            name: "/srv/db/index.dat (shared)".into(),
            width: 256 << 10,
            buckets: 64,
            rows: heat_rows,
            most: 40,
        });
        let svg = render(&rows, &[], "caption", ByMapping::Lane(&lane)).unwrap();
        let texts = texts(&svg);
        for text in [
            "major faults by file offset in /srv/db/index.dat (shared), a cell a period and 256 KiB:",
            "1-10",
            "31-40",
            "file offset (MiB)",
        ] {
            assert!(texts.contains(&text), "missing {text:?}: {texts:?}");
        }
        assert!(svg.contains(&format!("height=\"{}\"", HEIGHT + MAPPING_LANE + HEAT_LANE)));
        // A cell for each row's bucket with faults, the most in the darkest colour: 10
        // rows of 16 cells of 40, and its legend's box.
        let RGBColor(r, g, b) = HEAT[3];
        let darkest = format!("fill=\"#{r:02X}{g:02X}{b:02X}\"");
        assert_eq!(svg.matches(&darkest).count(), 160 + 1, "{svg}");
    }

    #[test]
    fn each_count_has_one_colour_of_the_heat_maps_scale_and_its_legend_says_which() {
        for most in [1, 2, 3, 4, 7, 40, 1000] {
            for n in 1..=most {
                let level = heat_level(most, n);
                let (low, high) = heat_range(most, level).unwrap();
                assert!((low..=high).contains(&n), "{n} of {most}: {level}");
            }
            assert_eq!(heat_level(most, most), HEAT.len() - 1);
        }
        assert_eq!(heat_range(1, 0), None);
        assert_eq!(heat_range(10, 0), Some((1, 2)));
        assert_eq!(heat_range(10, 3), Some((8, 10)));
    }

    #[test]
    fn without_attribution_there_is_no_lane_and_a_line_says_why() {
        let (rows, _) = attributed();
        let unattributed = ByMapping::NotAttributed("the kernel backend does not attribute them");
        let svg = render(&rows, &[], "caption", unattributed).unwrap();
        assert!(texts(&svg).contains(
            &"major faults by mapping: not attributed (the kernel backend does not attribute them)"
        ));
        assert!(!svg.contains("/srv/db/index.dat"), "{svg}");
        assert!(!svg.contains("faults/s by mapping"), "{svg}");
        assert!(svg.contains(&format!("height=\"{}\"", HEIGHT + LEGEND)));
        // Attributed, but not one major fault: no lane either.
        let none = MappingLane {
            mappings: Vec::new(),
            recorded: 0,
            lost: 0,
            rows: vec![LaneRow::default(); rows.len()],
            heat: None,
        };
        let svg = render(&rows, &[], "caption", ByMapping::Lane(&none)).unwrap();
        assert!(texts(&svg).contains(&"major faults by mapping: none recorded"));
        assert!(!svg.contains("faults/s by mapping"), "{svg}");
    }

    #[test]
    fn a_hostile_mapping_name_is_text_in_the_svg_and_a_long_one_keeps_its_ends() {
        let (rows, mut lane) = attributed();
        lane.mappings[0].0 = "/t/</text><script>\u{1}x (shared)".into();
        let long = format!("/srv/{}/index.dat (shared)", "d".repeat(200));
        lane.mappings[1].0 = long.clone();
        let svg = render(&rows, &[], "caption", ByMapping::Lane(&lane)).unwrap();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(!svg.contains('\u{1}'), "{svg}");
        assert!(
            texts(&svg).contains(&"/t/&lt;/text&gt;&lt;script&gt;\u{fffd}x (shared): 300 (71%)"),
            "{svg}"
        );
        let shown = texts(&svg)
            .into_iter()
            .find(|t| t.starts_with("/srv/d"))
            .expect("the long name");
        assert!(shown.contains('…') && shown.ends_with("/index.dat (shared): 100 (24%)"));
        assert!(shown.chars().count() < 60, "{shown}");
    }

    #[test]
    fn a_short_rows_major_faults_by_mapping_are_drawn_with_the_row_before() {
        let mut t = Timeline::new(std::time::Duration::from_millis(50));
        let rows: Vec<Row> = [50, 100, 105]
            .into_iter()
            .map(|ms| {
                t.row(&Sample {
                    time_ns: ms * 1_000_000,
                    ..Sample::default()
                })
            })
            .collect();
        let row = |top0, other| LaneRow {
            top: [top0, 0, 0, 0, 0],
            other,
            lost: 0,
        };
        let steps = steps(&rows, &[row(0, 0), row(8, 1), row(2, 1)]);
        assert_eq!(steps.len(), 2);
        assert_eq!(steps[1].by_mapping, row(10, 2));
    }

    #[test]
    fn an_empty_profile_still_renders() {
        assert!(render(&[], &[], "empty", unattributed())
            .unwrap()
            .contains("</svg>"));
    }

    #[test]
    fn time_ticks_say_no_more_decimals_than_they_need() {
        assert_eq!(seconds(&(0.1 * 6.0)), "0.6");
        assert_eq!(seconds(&2.0), "2");
        assert_eq!(seconds(&0.25), "0.25");
        assert_eq!(seconds(&0.0), "0");
        assert_eq!(seconds(&-0.0001), "0");
        assert_eq!(seconds(&12.5), "12.5");
    }
}
