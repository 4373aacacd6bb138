//! The profile as an SVG timeline: lanes on one time axis, in seconds, for the fault
//! rates, the resident and swapped memory, the memory stall and the CPU utilization,
//! with the thrashing verdict's bands shaded across all of them.
//!
//! Rates and shares are drawn as steps over each row's own period. A row much shorter
//! than the others (the last, partial period; an early sample at a process's exit) is
//! drawn merged with the row before it: alone, a few milliseconds of CPU time or a
//! single fault over a period that short reads as a spike the processes never had. The
//! first row holds what the processes did before the profile's first sample (a
//! command's exec) over no known length: only its memory is drawn.

use plotters::coord::Shift;
use plotters::prelude::*;

use crate::pressure::verdict::Band;
use crate::rows::row::Row;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("drawing the plot: {0}")]
    Draw(String),
}

fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 1000;
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
}

impl Step {
    fn seconds(&self) -> f64 {
        (self.end - self.start).max(1e-9)
    }
}

/// The rows as steps, short ones merged into the step before; the first, of no known
/// length, as an instant.
fn steps(rows: &[Row]) -> Vec<Step> {
    let mut periods: Vec<u64> = rows.iter().map(|r| r.period_ns).collect();
    periods.sort_unstable();
    let typical = periods.get(periods.len() / 2).copied().unwrap_or(0);
    let mut steps: Vec<Step> = Vec::with_capacity(rows.len());
    for row in rows {
        let end = row.time_ms as f64 / 1e3;
        let step = Step {
            start: if steps.is_empty() {
                end
            } else {
                end - row.period_ns as f64 / 1e9
            },
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
                    ..step
                };
            }
            _ => steps.push(step),
        }
    }
    steps
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

/// How an item of a legend is drawn.
#[derive(Clone, Copy)]
enum Key {
    Line(RGBColor),
    Dashed(RGBColor),
    Box(RGBColor),
    /// The thrashing bands' shading.
    Shade,
}

/// A lane's area: the legend strip drawn (its items side by side, never over the data),
/// the rest for the chart.
fn legend_row<'a>(
    area: &DrawingArea<SVGBackend<'a>, Shift>,
    items: &[(&str, Key)],
) -> Result<DrawingArea<SVGBackend<'a>, Shift>, PlotError> {
    let (strip, chart) = area.split_vertically(LEGEND);
    let mut x = Y_LABELS as i32 + 14;
    let y = LEGEND as i32 / 2 + 2;
    for (label, key) in items {
        match *key {
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
        }
        .map_err(draw_err)?;
        strip
            .draw(&Text::new(
                label.to_string(),
                (x + 28, y - 7),
                (FONT, 14).into_font().color(&BLACK),
            ))
            .map_err(draw_err)?;
        // Without a font to measure with, a generous width per character.
        x += 28 + 8 * label.len() as i32 + 24;
    }
    Ok(chart)
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
        .x_label_formatter(&|t| format!("{t}"))
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
fn whole(v: &f64) -> String {
    if *v >= 10_000.0 {
        format!("{:.0}k", v / 1e3)
    } else if v.fract() == 0.0 || *v >= 10.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Renders `rows` and the verdict's `bands` as an SVG document. `caption` names the
/// backend, the mode and the period.
pub fn render(rows: &[Row], bands: &[Band], caption: &str) -> Result<String, PlotError> {
    let steps = steps(rows);
    let x = (
        steps.first().map_or(0.0, |s| s.start.min(0.0)),
        steps.last().map_or(0.0, |s| s.end).max(0.1),
    );
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let title = match bands {
            [] => caption.to_owned(),
            [_] => format!("{caption}; shaded: thrashing"),
            _ => format!("{caption}; shaded: thrashing ({} times)", bands.len()),
        };
        let root = root.titled(&title, (FONT, 20)).map_err(draw_err)?;
        let (faults_area, rest) = root.split_vertically(HEIGHT * 26 / 100);
        let (memory_area, rest) = rest.split_vertically(HEIGHT * 26 / 100);
        let (stall_area, cpu_area) = rest.split_vertically(HEIGHT * 20 / 100);
        let lanes = Lanes {
            steps: &steps,
            x,
            bands,
        };
        lanes.faults(&faults_area)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::row::Timeline;
    use shared_layout::abi::Sample;

    fn rows(count: u64, sample: impl Fn(u64) -> Sample) -> Vec<Row> {
        let mut t = Timeline::new(std::time::Duration::from_millis(50));
        (1..=count).map(|i| t.row(&sample(i))).collect()
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
        let svg = render(&rows, &[], "procfs backend, strict mode").unwrap();
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
        let svg = render(&rows, &[band], "caption").unwrap();
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
        let svg = render(&rows, &[], "caption").unwrap();
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
        let steps = steps(&rows);
        assert_eq!(steps.len(), 10);
        let last = steps.last().unwrap();
        assert_eq!(last.cpu_ns, 29_000_000);
        assert!((last.end - last.start - 0.055).abs() < 1e-9);
        // 29 ms over 55 ms: 53%, not 80%.
        assert!((last.cpu_ns as f64 / 1e9 / last.seconds() - 0.527).abs() < 0.001);
    }

    #[test]
    fn the_first_row_of_no_known_length_is_drawn_as_its_memory_only() {
        // The command's exec, before the first sample: 150 ms of CPU "in" 50 ms.
        let rows = rows(3, |i| Sample {
            time_ns: i * 50_000_000,
            cpu_ns: if i == 1 { 150_000_000 } else { 10_000_000 },
            rss_anon: i << 20,
            ..Sample::default()
        });
        let steps = steps(&rows);
        assert_eq!((steps[0].start, steps[0].end), (0.0, 0.0));
        let cpu = stepped(&steps, |s| s.cpu_ns as f64);
        assert_eq!(cpu, [(0.0, 1e7), (0.05, 1e7), (0.05, 1e7), (0.1, 1e7)]);
        assert_eq!(levels(&steps, |s| s.rss_anon as f64)[0], (0.0, 1048576.0));
    }

    #[test]
    fn an_empty_profile_still_renders() {
        assert!(render(&[], &[], "empty").unwrap().contains("</svg>"));
    }
}
