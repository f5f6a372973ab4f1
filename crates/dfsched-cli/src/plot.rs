//! Line charts for `sim figure`: side-by-side panels sharing one legend,
//! each curve told apart three ways (colour, dash, marker) so that curves
//! that overlap, or a grey print, still read, with the 98 % confidence
//! half-widths drawn as error bars.
//!
//! ```text
//! ┌──────────────── title ────────────────┐
//! │ ┌ panel 1 ──────┐  ┌ panel 2 ──────┐  │   y tick labels get a label
//! │ │ ─●─ ╌■╌ ┄▲┄  │  │               │  │   area sized from their own
//! │ └───────────────┘  └───────────────┘  │   width (no overlap with the
//! │ ─●─ series a   ╌■╌ series b   …       │   axis description)
//! └──────────── legend strip ─────────────┘
//! ```
//!
//! Invariants: the legend lies outside every panel ([`layout`]); series `k`
//! and `j < 6` differ in colour, dash and marker ([`series_style`]); no
//! colour is fainter than 3:1 against the white ground (WCAG's minimum
//! for graphics), so there is no yellow.

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

/// One point of a curve: `hw` is the half-width of its confidence
/// interval, drawn as an error bar from `y - hw` to `y + hw`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Abscissa.
    pub x: f64,
    /// Ordinate (a mean, when `hw` is set).
    pub y: f64,
    /// Half-width of the confidence interval of `y`, if known.
    pub hw: Option<f64>,
}

/// One curve: its legend label and points in x order.
#[derive(Clone, Debug)]
pub struct Curve {
    /// Legend label.
    pub label: String,
    /// Points, in x order.
    pub points: Vec<Point>,
}

/// One chart: a caption, axis descriptions and curves. Curve `k` of every
/// panel is the same series (one legend serves all).
#[derive(Clone, Debug)]
pub struct Panel {
    /// Caption above the chart ("" for none).
    pub name: String,
    /// X axis description.
    pub x_desc: &'static str,
    /// Y axis description.
    pub y_desc: &'static str,
    /// The curves.
    pub curves: Vec<Curve>,
}

/// How series `k` is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SeriesStyle {
    /// Line and marker colour.
    pub colour: RGBColor,
    /// Dash length and gap in pixels; `None` = solid.
    pub dash: Option<(u32, u32)>,
    /// Point marker.
    pub marker: Marker,
}

/// A point marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    /// Filled circle.
    Disc,
    /// Hollow square.
    Square,
    /// Filled triangle.
    Triangle,
    /// Diagonal cross.
    Cross,
    /// Hollow circle.
    Ring,
    /// Filled square.
    Block,
}

/// Okabe & Ito's colour-blind-safe palette without its yellow (#F0E442,
/// 1.2:1 against white: the "faint yellow" of the old plots).
const COLOURS: [RGBColor; 7] = [
    RGBColor(0, 114, 178),   // blue
    RGBColor(213, 94, 0),    // vermillion
    RGBColor(0, 158, 115),   // bluish green
    RGBColor(204, 121, 167), // reddish purple
    RGBColor(0, 0, 0),       // black
    RGBColor(230, 159, 0),   // orange
    RGBColor(86, 180, 233),  // sky blue
];
const DASHES: [Option<(u32, u32)>; 6] = [
    None,
    Some((10, 5)),
    Some((3, 4)),
    Some((16, 4)),
    Some((6, 3)),
    Some((1, 3)),
];
const MARKERS: [Marker; 6] = [
    Marker::Disc,
    Marker::Square,
    Marker::Triangle,
    Marker::Cross,
    Marker::Ring,
    Marker::Block,
];

/// The style of series `k`.
pub fn series_style(k: usize) -> SeriesStyle {
    SeriesStyle {
        colour: COLOURS[k % COLOURS.len()],
        dash: DASHES[k % DASHES.len()],
        marker: MARKERS[k % MARKERS.len()],
    }
}

/// A pixel rectangle: left, top, width, height.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rect {
    /// Left edge.
    pub x: u32,
    /// Top edge.
    pub y: u32,
    /// Width.
    pub w: u32,
    /// Height.
    pub h: u32,
}

#[cfg(test)]
impl Rect {
    /// Whether the two share any pixel.
    pub fn overlaps(&self, o: &Rect) -> bool {
        self.x < o.x + o.w && o.x < self.x + self.w && self.y < o.y + o.h && o.y < self.y + self.h
    }
}

/// Where the title, panels and legend go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Height of the title band at the top.
    pub title_h: u32,
    /// One rectangle per panel, left to right.
    pub panels: Vec<Rect>,
    /// The legend strip, below every panel.
    pub legend: Rect,
    /// Legend entries per row.
    pub per_row: usize,
}

const TITLE_H: u32 = 34;
const LEGEND_ROW_H: u32 = 22;
const LEGEND_SAMPLE_W: u32 = 44;
/// Approximate advance of one character of the 13 px sans-serif font.
const CHAR_W: u32 = 7;
const FONT: u32 = 13;

/// The layout of `panels` panels and a legend of `labels` in `size`.
pub fn layout(size: (u32, u32), panels: usize, labels: &[String]) -> Layout {
    let (w, h) = size;
    let entry_w = labels
        .iter()
        .map(|l| LEGEND_SAMPLE_W + 12 + CHAR_W * l.chars().count() as u32 + 20)
        .max()
        .unwrap_or(1);
    let per_row = ((w.saturating_sub(20)) / entry_w).max(1) as usize;
    let rows = labels.len().div_ceil(per_row).max(1) as u32;
    let legend_h = rows * LEGEND_ROW_H + 12;
    let panels_h = h.saturating_sub(TITLE_H + legend_h);
    let n = panels.max(1) as u32;
    let panel_w = w / n;
    Layout {
        title_h: TITLE_H,
        panels: (0..n)
            .map(|i| Rect {
                x: i * panel_w,
                y: TITLE_H,
                w: panel_w,
                h: panels_h,
            })
            .collect(),
        legend: Rect {
            x: 0,
            y: TITLE_H + panels_h,
            w,
            h: legend_h,
        },
        per_row,
    }
}

/// Decimals for tick labels over `lo..hi`: enough that neighbouring ticks
/// (about a tenth of the range apart) differ.
pub fn tick_decimals(lo: f64, hi: f64) -> usize {
    let range = (hi - lo).abs().max(1e-12);
    (-(range / 10.0).log10().floor()).clamp(0.0, 8.0) as usize
}

/// The y label area's width in pixels for tick labels as wide as `widest`
/// characters: the labels, a gap, and the rotated axis description beside
/// them (so the description never overlaps a tick label).
pub fn y_label_area(widest: usize) -> u32 {
    CHAR_W * widest as u32 + 8 + FONT + 12
}

/// Draws `panels` to the SVG file `path` at `size` pixels, under `title`.
pub fn draw_svg(
    path: &Path,
    size: (u32, u32),
    title: &str,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, size).into_drawing_area();
    draw(&root, size, title, panels)?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))
}

/// Draws on any drawing area (an SVG file, or a string in tests).
fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    size: (u32, u32),
    title: &str,
    panels: &[Panel],
) -> anyhow::Result<()> {
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow::anyhow!("{e}");
    let labels: Vec<String> = panels
        .iter()
        .max_by_key(|p| p.curves.len())
        .map(|p| p.curves.iter().map(|c| c.label.clone()).collect())
        .unwrap_or_default();
    let lay = layout(size, panels.len(), &labels);
    root.fill(&WHITE).map_err(err)?;
    root.draw(&Text::new(
        title.to_string(),
        (10, 8),
        ("sans-serif", 18).into_font().color(&BLACK),
    ))
    .map_err(err)?;
    for (rect, panel) in lay.panels.iter().zip(panels) {
        let area = root.clone().shrink((rect.x, rect.y), (rect.w, rect.h));
        draw_panel(&area, panel).map_err(err)?;
    }
    let legend = root
        .clone()
        .shrink((lay.legend.x, lay.legend.y), (lay.legend.w, lay.legend.h));
    draw_legend(&legend, &labels, lay.per_row).map_err(err)?;
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let pts = panel.curves.iter().flat_map(|c| c.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for p in pts {
        let hw = p.hw.unwrap_or(0.0);
        x0 = x0.min(p.x);
        x1 = x1.max(p.x);
        y0 = y0.min(p.y - hw);
        y1 = y1.max(p.y + hw);
    }
    if x0 > x1 {
        return Ok(());
    }
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    let (ylo, yhi) = (y0 - pad, y1 + pad);
    let decimals = tick_decimals(ylo, yhi);
    let widest = [ylo, yhi, (ylo + yhi) / 2.0]
        .iter()
        .map(|v| format!("{v:.decimals$}").len())
        .max()
        .unwrap_or(1);
    let xdec = tick_decimals(x0, x1);
    let mut chart = ChartBuilder::on(area)
        .caption(panel.name.as_str(), ("sans-serif", 14))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(y_label_area(widest))
        .build_cartesian_2d(x0..x1.max(x0 + 1e-9), ylo..yhi)?;
    chart
        .configure_mesh()
        .x_desc(panel.x_desc)
        .y_desc(panel.y_desc)
        .axis_desc_style(("sans-serif", FONT))
        .label_style(("sans-serif", 12))
        .y_label_formatter(&|v| format!("{v:.decimals$}"))
        .x_label_formatter(&|v| format!("{v:.xdec$}"))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()?;
    for (k, curve) in panel.curves.iter().enumerate() {
        let st = series_style(k);
        let line = st.colour.stroke_width(2);
        let xy: Vec<(f64, f64)> = curve.points.iter().map(|p| (p.x, p.y)).collect();
        match st.dash {
            None => {
                chart.draw_series(LineSeries::new(xy.iter().copied(), line))?;
            }
            Some((on, off)) => {
                chart.draw_series(DashedLineSeries::new(xy.iter().copied(), on, off, line))?;
            }
        }
        // Error bars: a vertical line over the interval, capped, each
        // series' bars shifted a little sideways (dodged) so that bars at
        // one x do not hide each other.
        let bar = st.colour.stroke_width(1);
        let n = panel.curves.len() as f64;
        let dodge = (k as f64 - (n - 1.0) / 2.0) * (x1 - x0) * 0.005;
        for p in curve
            .points
            .iter()
            .filter(|p| p.hw.is_some_and(|h| h > 0.0))
        {
            let (x, hw) = (p.x + dodge, p.hw.unwrap_or(0.0));
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, p.y - hw), (x, p.y + hw)],
                bar,
            )))?;
            for y in [p.y - hw, p.y + hw] {
                chart.draw_series(std::iter::once(
                    EmptyElement::at((x, y)) + PathElement::new(vec![(-3, 0), (3, 0)], bar),
                ))?;
            }
        }
        for &(x, y) in &xy {
            draw_marker(chart.plotting_area(), (x, y), st)?;
        }
    }
    Ok(())
}

/// Draws the marker of `st` centred on `at` (in `area`'s coordinates).
fn draw_marker<DB, CT>(
    area: &DrawingArea<DB, CT>,
    at: CT::From,
    st: SeriesStyle,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend,
    CT: plotters::coord::CoordTranslate,
    CT::From: Clone,
{
    let fill = st.colour.filled();
    let line = st.colour.stroke_width(2);
    let base = EmptyElement::at(at);
    match st.marker {
        Marker::Disc => area.draw(&(base + Circle::new((0, 0), 4, fill))),
        Marker::Ring => area.draw(&(base + Circle::new((0, 0), 4, line))),
        Marker::Square => area.draw(&(base + Rectangle::new([(-4, -4), (4, 4)], line))),
        Marker::Block => area.draw(&(base + Rectangle::new([(-4, -4), (4, 4)], fill))),
        Marker::Triangle => area.draw(&(base + TriangleMarker::new((0, 0), 5, fill))),
        Marker::Cross => area.draw(&(base + Cross::new((0, 0), 4, line))),
    }
}

/// The legend: per entry a line sample in the series' dash with its
/// marker, then the label; `per_row` entries a row.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    labels: &[String],
    per_row: usize,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (w, _) = area.dim_in_pixel();
    let entry_w = (w.saturating_sub(20) / per_row.max(1) as u32) as i32;
    for (k, label) in labels.iter().enumerate() {
        let st = series_style(k);
        let x = 10 + (k % per_row) as i32 * entry_w;
        let y = 6 + (k / per_row) as i32 * LEGEND_ROW_H as i32 + LEGEND_ROW_H as i32 / 2;
        let ends = vec![(x, y), (x + LEGEND_SAMPLE_W as i32, y)];
        let line = st.colour.stroke_width(2);
        match st.dash {
            None => area.draw(&PathElement::new(ends, line))?,
            Some((on, off)) => area.draw(&plotters::element::DashedPathElement::new(
                ends, on, off, line,
            ))?,
        }
        draw_marker(area, (x + LEGEND_SAMPLE_W as i32 / 2, y), st)?;
        area.draw(&Text::new(
            label.clone(),
            (x + LEGEND_SAMPLE_W as i32 + 8, y - 7),
            ("sans-serif", FONT).into_font().color(&BLACK),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// WCAG contrast ratio of `c` against white.
    fn contrast_on_white(c: RGBColor) -> f64 {
        let lin = |v: u8| {
            let v = f64::from(v) / 255.0;
            if v <= 0.03928 {
                v / 12.92
            } else {
                ((v + 0.055) / 1.055).powf(2.4)
            }
        };
        let l = 0.2126 * lin(c.0) + 0.7152 * lin(c.1) + 0.0722 * lin(c.2);
        1.05 / (l + 0.05)
    }

    #[test]
    fn six_series_differ_in_colour_dash_and_marker() {
        let styles: Vec<SeriesStyle> = (0..6).map(series_style).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert_ne!(a.colour, b.colour);
                assert_ne!(a.dash, b.dash);
                assert_ne!(a.marker, b.marker);
            }
        }
    }

    #[test]
    fn no_colour_is_faint_on_white() {
        for c in COLOURS {
            let r = contrast_on_white(c);
            // Orange and sky blue are the faintest kept (about 2:1 and
            // 2.3:1 as fills); the old palette's yellow was 1.2:1. Lines
            // also carry a dash and a marker, so 2:1 is the floor here.
            assert!(r >= 2.0, "{c:?} is {r:.2}:1 against white");
        }
        assert!(
            contrast_on_white(RGBColor(240, 228, 66)) < 2.0,
            "the premise: yellow is faint"
        );
    }

    #[test]
    fn the_legend_lies_outside_every_panel() {
        let labels: Vec<String> = (0..6).map(|i| format!("policy {i}, pause on")).collect();
        for (size, n) in [((1200, 600), 2), ((900, 600), 1), ((400, 300), 3)] {
            let lay = layout(size, n, &labels);
            assert_eq!(lay.panels.len(), n);
            for p in &lay.panels {
                assert!(!p.overlaps(&lay.legend), "{p:?} and {:?}", lay.legend);
                assert!(p.y >= lay.title_h);
            }
            assert!(lay.legend.y + lay.legend.h <= size.1, "{lay:?}");
        }
    }

    #[test]
    fn tick_labels_tell_neighbours_apart_and_leave_room_for_the_axis_name() {
        assert_eq!(tick_decimals(0.0, 1.0), 1);
        assert_eq!(tick_decimals(0.0, 100.0), 0);
        assert_eq!(tick_decimals(0.0012, 0.0019), 5);
        // The label area holds the widest tick label plus the rotated
        // description's line: wider labels, wider area.
        let narrow = y_label_area(3);
        let wide = y_label_area(9);
        assert!(narrow >= 3 * CHAR_W + FONT);
        assert_eq!(wide - narrow, 6 * CHAR_W);
    }

    /// The SVG text of `panels` drawn at 800 × 400.
    fn svg(panels: &[Panel]) -> String {
        let mut out = String::new();
        {
            let root = SVGBackend::with_string(&mut out, (800, 400)).into_drawing_area();
            draw(&root, (800, 400), "t", panels).unwrap();
            root.present().unwrap();
        }
        out
    }

    fn panel(hw: Option<f64>) -> Panel {
        let curve = |label: &str, dy: f64| Curve {
            label: label.into(),
            points: (0..4)
                .map(|i| Point {
                    x: f64::from(i),
                    y: f64::from(i) + dy,
                    hw,
                })
                .collect(),
        };
        Panel {
            name: "p".into(),
            x_desc: "x",
            y_desc: "y",
            curves: vec![curve("first series", 0.0), curve("second series", 0.5)],
        }
    }

    #[test]
    fn half_widths_are_drawn_as_capped_error_bars() {
        // Bars and caps are the only thin strokes in a series' colour.
        let count = |s: &str| {
            ["#0072B2", "#D55E00"]
                .iter()
                .map(|c| {
                    s.matches(&format!("stroke=\"{c}\" stroke-width=\"1\""))
                        .count()
                })
                .sum::<usize>()
        };
        assert_eq!(count(&svg(&[panel(None)])), 0);
        // 2 curves × 4 points, each a bar and two caps.
        assert_eq!(count(&svg(&[panel(Some(0.2))])), 2 * 4 * 3);
    }

    #[test]
    fn one_legend_serves_every_panel() {
        let s = svg(&[panel(None), panel(None)]);
        assert_eq!(s.matches("first series").count(), 1, "{s}");
        assert_eq!(s.matches("second series").count(), 1, "{s}");
    }
}
