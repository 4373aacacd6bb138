//! The profile as an SVG: accumulated faults over time, and CPU utilization.

use plotters::prelude::*;

use crate::report::Row;

#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    #[error("drawing the plot: {0}")]
    Draw(String),
}

fn draw_err<E: std::fmt::Display>(e: E) -> PlotError {
    PlotError::Draw(e.to_string())
}

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 760;
const FONT: &str = "sans-serif";

/// Renders `rows` as an SVG document. `caption` names the backend and mode.
pub fn render(rows: &[Row], caption: &str) -> Result<String, PlotError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let root = root.titled(caption, (FONT, 24)).map_err(draw_err)?;
        let (upper, lower) = root.split_vertically(HEIGHT * 3 / 5);

        // Time of each row's end in seconds, and running totals.
        let mut minor = 0u64;
        let mut major = 0u64;
        let points: Vec<(f64, u64, u64, f64)> = rows
            .iter()
            .map(|r| {
                minor += r.minor;
                major += r.major;
                (r.time_ms as f64 / 1e3, minor, major, r.cpu_util * 100.0)
            })
            .collect();
        let t_max = points.last().map_or(0.0, |p| p.0).max(0.1);
        // Integer axes for counts: labels without decimals.
        let minor_max = (minor + minor / 20).max(1);
        let major_max = (major + major / 20).max(1);
        let util_max = points.iter().map(|p| p.3).fold(100.0, f64::max) * 1.05;

        let mut faults = ChartBuilder::on(&upper)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(90)
            .right_y_label_area_size(90)
            .build_cartesian_2d(0.0..t_max, 0..minor_max)
            .map_err(draw_err)?
            .set_secondary_coord(0.0..t_max, 0..major_max);
        faults
            .configure_mesh()
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .x_desc("time (s)")
            .y_desc("accumulated minor faults")
            .draw()
            .map_err(draw_err)?;
        faults
            .configure_secondary_axes()
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .y_desc("accumulated major faults")
            .draw()
            .map_err(draw_err)?;
        faults
            .draw_series(LineSeries::new(
                points.iter().map(|p| (p.0, p.1)),
                BLUE.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label("minor faults (left axis)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE.stroke_width(2)));
        faults
            .draw_secondary_series(LineSeries::new(
                points.iter().map(|p| (p.0, p.2)),
                RED.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label("major faults (right axis)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED.stroke_width(2)));
        faults
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(draw_err)?;

        let mut cpu = ChartBuilder::on(&lower)
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(90)
            .right_y_label_area_size(90)
            .build_cartesian_2d(0.0..t_max, 0.0..util_max)
            .map_err(draw_err)?;
        cpu.configure_mesh()
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .x_desc("time (s)")
            .y_desc("CPU utilization (% of one CPU)")
            .draw()
            .map_err(draw_err)?;
        cpu.draw_series(LineSeries::new(
            points.iter().map(|p| (p.0, p.3)),
            GREEN.stroke_width(2),
        ))
        .map_err(draw_err)?;
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Timeline;
    use shared_layout::abi::Sample;

    #[test]
    fn the_plot_is_an_svg_document_with_its_caption_and_axis_labels() {
        let mut t = Timeline::new(std::time::Duration::from_millis(50));
        let rows: Vec<Row> = (1..=40)
            .map(|i| {
                t.row(&Sample {
                    time_ns: i * 50_000_000,
                    minor: i,
                    major: i % 3,
                    cpu_ns: 1,
                })
            })
            .collect();
        let svg = render(&rows, "procfs backend, strict mode").unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        for text in [
            "procfs backend, strict mode",
            "time (s)",
            "accumulated minor faults",
        ] {
            assert!(svg.contains(text), "missing {text:?}");
        }
    }

    #[test]
    fn fault_axes_are_labelled_with_whole_numbers() {
        let mut t = Timeline::new(std::time::Duration::from_millis(50));
        let rows: Vec<Row> = (1..=40)
            .map(|i| {
                t.row(&Sample {
                    time_ns: i * 50_000_000,
                    minor: 3000,
                    major: 7,
                    cpu_ns: 1,
                })
            })
            .collect();
        let svg = render(&rows, "counts").unwrap();
        let labels: Vec<&str> = svg
            .split("</text>")
            .filter_map(|t| Some(t.rsplit('>').next()?.trim()))
            .collect();
        // 120,000 minor faults on the left axis, 280 major ones on the right.
        for count in ["120000", "250"] {
            assert!(labels.contains(&count), "no label {count}: {labels:?}");
            let decimal = format!("{count}.0");
            assert!(!labels.contains(&&*decimal), "{decimal}: {labels:?}");
        }
    }

    #[test]
    fn an_empty_profile_still_renders() {
        assert!(render(&[], "empty").unwrap().contains("</svg>"));
    }
}
