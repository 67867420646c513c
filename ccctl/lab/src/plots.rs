//! Plots of lab results, each written twice: `<stem>.png` and `<stem>.svg`.
//!
//! Three kinds: stacked time series sharing one x axis ([`time_series`]:
//! throughput and RTT per flow, later cwnd, pacing rate or mode), a scatter
//! with one colour per group ([`scatter`], including Pantheon's
//! throughput-vs-delay view with the delay axis inverted) and empirical CDFs
//! ([`cdf`]).
//!
//! Colours come from a fixed ten-colour palette. A known algorithm (cubic,
//! bbr, bpf_bbr, modest_bbr, dstar, patched_bbr, reno), named anywhere in a
//! label, has one fixed colour in every figure; a second series of the same
//! colour in a figure is dashed and takes another marker. Points that
//! are NaN or infinite are skipped; empty inputs, single points and constant
//! values give a plot with sensible axes rather than an error.
//!
//! Text needs a TrueType font to be rasterised into the PNG. The first of
//! `$CCCTL_PLOT_FONT` and a few usual DejaVu/Liberation paths is loaded once
//! per process. Without one the SVG is still written (its text is laid out
//! with estimated widths and drawn by the viewer) and the PNG step fails with
//! [`PlotError::NoFont`], which names the package to install.
use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Instant;

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::{register_font, FontStyle};

/// Environment variable naming a .ttf/.otf file to use instead of the system font.
pub const FONT_ENV: &str = "CCCTL_PLOT_FONT";

/// The Debian/Ubuntu package that provides the default font.
pub const FONT_PACKAGE: &str = "fonts-dejavu-core";

/// Searched in order after `$CCCTL_PLOT_FONT`.
const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// The family every text style uses; the loaded font is registered under it,
/// and it is what SVG viewers are asked for.
const FAMILY: &str = "sans-serif";

const TITLE_SIZE: f64 = 24.0;
const AXIS_DESC_SIZE: f64 = 18.0;
const TICK_SIZE: f64 = 15.0;
const LEGEND_SIZE: f64 = 15.0;

/// Height of the band holding the figure title.
const TITLE_H: u32 = 40;
/// Height of one time-series panel, and the extra below the last one for the x axis.
const PANEL_H: u32 = 300;
const X_AXIS_H: u32 = 40;
const TIME_W: u32 = 1000;
const SMALL_SIZE: (u32, u32) = (800, 600);

/// Series with at most this many points also get markers (else one point is invisible).
const MARKER_MAX_POINTS: usize = 20;
/// A CDF line keeps at most this many distinct steps; larger sets are sampled by quantile.
const CDF_MAX_STEPS: usize = 4000;

/// Tableau 10: distinct on screen and in print, and familiar from matplotlib.
const PALETTE: [RGBColor; 10] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0x17, 0xbe, 0xcf),
];

/// Why a plot was not written. Each names the file concerned.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The directory the plot goes in could not be created.
    #[error("cannot create the directory for plot {path}: {source}")]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// plotters failed while drawing or writing `path`.
    #[error("cannot draw plot {path}: {message}")]
    Draw { path: PathBuf, message: String },

    /// No font to rasterise text into the PNG `path`; the SVG `svg` was
    /// written all the same, so a caller may treat this as a warning.
    #[error(
        "cannot render plot {path}: no usable font (looked at {searched}); install the \
         `{FONT_PACKAGE}` package or set {FONT_ENV} to a .ttf file ({svg} was written)"
    )]
    NoFont {
        path: PathBuf,
        svg: PathBuf,
        searched: String,
    },
}

/// One line or point set.
#[derive(Debug, Clone)]
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

impl Series {
    pub fn new(label: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            label: label.into(),
            points,
        }
    }
}

/// One panel of a stacked time plot.
#[derive(Debug, Clone)]
pub struct Panel {
    pub y_label: String,
    pub series: Vec<Series>,
}

impl Panel {
    pub fn new(y_label: impl Into<String>, series: Vec<Series>) -> Self {
        Self {
            y_label: y_label.into(),
            series,
        }
    }
}

/// Stacked panels sharing the x axis `x_label` (e.g. "time (s)"); writes
/// `<stem>.png` and `<stem>.svg`, returns both paths (PNG first).
///
/// Use for: throughput (Mbit/s) and RTT (ms) over time per flow; later cwnd /
/// pacing rate / mode over time. Each panel's y axis starts at 0 (or below,
/// for negative data). A label keeps its colour in every panel.
pub fn time_series(
    stem: &Path,
    title: &str,
    x_label: &str,
    panels: &[Panel],
) -> Result<Vec<PathBuf>, PlotError> {
    let fig = TimeFigure {
        title,
        x_label,
        panels,
    };
    write_figure(stem, &fig, system_font())
}

/// Scatter, one colour per group (e.g. per congestion control), points
/// labelled only via the legend.
///
/// `invert_x`: x increases to the left (Pantheon's throughput-vs-delay
/// "Kleinrock" view: p95 delay on x, inverted, throughput on y, so better is
/// up-right). The y axis starts at 0 (or below, for negative data).
pub fn scatter(
    stem: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    groups: &[Series],
    invert_x: bool,
) -> Result<Vec<PathBuf>, PlotError> {
    let fig = ScatterFigure {
        title,
        x_label,
        y_label,
        groups,
        invert_x,
    };
    write_figure(stem, &fig, system_font())
}

/// Empirical CDFs: each entry is (label, values); y axis "CDF" from 0 to 1,
/// step lines.
pub fn cdf(
    stem: &Path,
    title: &str,
    x_label: &str,
    sets: &[(String, Vec<f64>)],
) -> Result<Vec<PathBuf>, PlotError> {
    let fig = CdfFigure {
        title,
        x_label,
        sets,
    };
    write_figure(stem, &fig, system_font())
}

/// One estimate with its interval, at one category of an [`intervals`] panel.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IntervalPoint {
    pub label: String,
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// One panel of an [`intervals`] figure: estimates per category, with a
/// reference value (e.g. a paper's number) drawn as a dashed line.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct IntervalPanel {
    pub y_label: String,
    pub reference: Option<f64>,
    pub reference_label: String,
    pub points: Vec<IntervalPoint>,
}

/// Stacked panels of estimates with error bars over named categories (x is
/// categorical), each with its reference line; writes `<stem>.png` and
/// `<stem>.svg`. Use for: a headline's value, overall and per sweep point,
/// with its 95 % interval, beside the paper's number.
pub fn intervals(
    stem: &Path,
    title: &str,
    panels: &[IntervalPanel],
) -> Result<Vec<PathBuf>, PlotError> {
    let fig = IntervalFigure { title, panels };
    write_figure(stem, &fig, system_font())
}

// ---------------------------------------------------------------------------
// Fonts

/// The registered font file, or the list of places looked at.
type FontState = Result<PathBuf, String>;

fn system_font() -> Result<&'static Path, &'static str> {
    static FONT: OnceLock<FontState> = OnceLock::new();
    match FONT.get_or_init(load_font) {
        Ok(path) => Ok(path.as_path()),
        Err(searched) => Err(searched.as_str()),
    }
}

fn load_font() -> FontState {
    let from_env = std::env::var_os(FONT_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let candidates = from_env
        .iter()
        .cloned()
        .chain(FONT_PATHS.iter().map(PathBuf::from));
    let mut searched = Vec::new();
    for path in candidates {
        let explicit = from_env.as_ref() == Some(&path);
        match register_file(&path, FontStyle::Normal) {
            Ok(()) => {
                // Titles are bold; without a bold face plotters falls back to the regular one.
                if let Some(bold) = bold_sibling(&path).filter(|b| b.is_file()) {
                    if let Err(e) = register_file(&bold, FontStyle::Bold) {
                        tracing::debug!("not using {} for bold text: {e}", bold.display());
                    }
                }
                tracing::debug!("plot font: {}", path.display());
                return Ok(path);
            }
            Err(e) => {
                if explicit {
                    tracing::warn!(
                        "{FONT_ENV}={}: {e}; trying the system fonts",
                        path.display()
                    );
                }
                searched.push(path.display().to_string());
            }
        }
    }
    tracing::warn!(
        "no font for plot text (looked at {}); PNG plots will fail, install `{FONT_PACKAGE}`",
        searched.join(", ")
    );
    Err(searched.join(", "))
}

fn register_file(path: &Path, style: FontStyle) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    // plotters keeps fonts for the life of the process and wants &'static;
    // this happens at most once per candidate file.
    let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
    register_font(FAMILY, style, bytes).map_err(|_| "not a TrueType/OpenType font".to_string())
}

/// `DejaVuSans.ttf` → `DejaVuSans-Bold.ttf`, `LiberationSans-Regular.ttf` → `LiberationSans-Bold.ttf`.
fn bold_sibling(path: &Path) -> Option<PathBuf> {
    let stem = path.file_stem()?.to_str()?;
    let ext = path.extension()?.to_str()?;
    let base = stem.strip_suffix("-Regular").unwrap_or(stem);
    Some(path.with_file_name(format!("{base}-Bold.{ext}")))
}

// ---------------------------------------------------------------------------
// Writing

type DrawResult<DB> = Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

/// Something that can draw itself on any backend.
trait Figure {
    fn size(&self) -> (u32, u32);
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB>;
}

fn with_suffix(stem: &Path, ext: &str) -> PathBuf {
    let mut s = OsString::from(stem.as_os_str());
    s.push(".");
    s.push(ext);
    PathBuf::from(s)
}

/// Writes the SVG, then (if a font is loaded) the PNG. `font` is the outcome
/// of the font search: the file in use, or the places looked at.
fn write_figure<F: Figure>(
    stem: &Path,
    fig: &F,
    font: Result<&Path, &str>,
) -> Result<Vec<PathBuf>, PlotError> {
    let png = with_suffix(stem, "png");
    let svg = with_suffix(stem, "svg");
    if let Some(dir) = stem.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| PlotError::CreateDir {
            path: svg.clone(),
            source,
        })?;
    }
    let size = fig.size();

    let started = Instant::now();
    render(SVGBackend::new(&svg, size).into_drawing_area(), fig).map_err(|message| {
        PlotError::Draw {
            path: svg.clone(),
            message,
        }
    })?;
    let svg_time = started.elapsed();

    if let Err(searched) = font {
        // Do not leave a PNG from an earlier run next to the new SVG.
        let _ = std::fs::remove_file(&png);
        return Err(PlotError::NoFont {
            path: png,
            svg,
            searched: searched.to_string(),
        });
    }
    let started = Instant::now();
    render(BitMapBackend::new(&png, size).into_drawing_area(), fig).map_err(|message| {
        PlotError::Draw {
            path: png.clone(),
            message,
        }
    })?;
    tracing::debug!(
        "plotted {} ({:?}) and {} ({:?})",
        svg.display(),
        svg_time,
        png.display(),
        started.elapsed()
    );
    Ok(vec![png, svg])
}

fn render<DB: DrawingBackend, F: Figure>(
    root: DrawingArea<DB, Shift>,
    fig: &F,
) -> Result<(), String> {
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    fig.draw(&root).map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------
// Data helpers

fn finite(p: &(f64, f64)) -> bool {
    p.0.is_finite() && p.1.is_finite()
}

fn finite_points(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points.iter().copied().filter(finite).collect()
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Pad {
    /// Exactly the data (time axes).
    Tight,
    /// 5% beyond the data on both sides.
    Around,
    /// Include 0, and pad 5% on the side(s) away from it.
    FromZero,
}

/// Axis bounds for `values` (non-finite ones ignored); always finite with lo < hi.
fn axis_range(values: impl Iterator<Item = f64>, pad: Pad) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite()) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (0.0, 1.0);
    }
    // Keep the span (and padding) representable.
    lo = lo.max(f64::MIN / 4.0);
    hi = hi.min(f64::MAX / 4.0);
    if pad == Pad::FromZero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    let span = hi - lo;
    if span <= 0.0 || span < hi.abs().max(lo.abs()) * 1e-12 {
        // All equal; with FromZero that means all zero.
        return match pad {
            Pad::FromZero => (0.0, 1.0),
            _ if lo == 0.0 => (-1.0, 1.0),
            _ => (lo - lo.abs() * 0.1, hi + hi.abs() * 0.1),
        };
    }
    let m = span * 0.05;
    match pad {
        Pad::Tight => (lo, hi),
        Pad::Around => (lo - m, hi + m),
        Pad::FromZero => (
            if lo < 0.0 { lo - m } else { lo },
            if hi > 0.0 { hi + m } else { hi },
        ),
    }
}

/// Tick label formatter for an axis over `lo..hi` showing about `labels` ticks:
/// as few decimals as the tick spacing needs, scientific notation for very
/// large or very small magnitudes.
fn tick_formatter(lo: f64, hi: f64, labels: usize) -> impl Fn(&f64) -> String {
    let span = (hi - lo).abs();
    let step = span / labels.max(1) as f64;
    let mag = lo.abs().max(hi.abs());
    let exp = if mag >= 1e6 || (mag > 0.0 && mag < 1e-3) {
        Some(mag.log10().floor() as i32)
    } else {
        None
    };
    let scale = exp.map_or(1.0, |e| 10f64.powi(e));
    let decimals = if step > 0.0 && step.is_finite() {
        (1.0 - (step / scale).log10().floor()).clamp(0.0, 12.0) as usize
    } else {
        3
    };
    move |v: &f64| format_tick(*v, decimals, exp)
}

fn format_tick(v: f64, decimals: usize, exp: Option<i32>) -> String {
    if v == 0.0 || !v.is_finite() {
        return if v.is_finite() {
            "0".into()
        } else {
            v.to_string()
        };
    }
    let (m, suffix) = match exp {
        Some(e) => (v / 10f64.powi(e), format!("e{e}")),
        None => (v, String::new()),
    };
    let mut s = format!("{m:.decimals$}");
    if s.contains('.') {
        s = s.trim_end_matches('0').trim_end_matches('.').to_string();
    }
    if s == "-0" {
        s = "0".into();
    }
    if s == "0" {
        return s;
    }
    s + &suffix
}

/// Palette index of the kernel's congestion controls the lab plots most,
/// fixed so that an algorithm has the same colour in every figure of a run
/// and across runs (a reader who learnt "Cubic is blue" in one plot can
/// trust it in the next). Ours take theirs from the registry
/// (`plot_colour`). Names are compared after lower-casing and `-` -> `_`
/// (`modest-bbr` is `modest_bbr`); `bbr` is the kernel's, as everywhere in
/// the lab.
const KERNEL_COLOURS: [(&str, usize); 3] = [("cubic", 0), ("bbr", 1), ("reno", 6)];

/// The fixed palette index of an algorithm's name (kernel name, or ours by
/// either name with `-` as `_`).
fn colour_of(name: &str) -> Option<usize> {
    KERNEL_COLOURS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, i)| i)
        .or_else(|| {
            ccctl_core::registry::ALGORITHMS
                .iter()
                .find(|a| a.kernel_name == name || a.name.replace('-', "_") == name)
                .map(|a| a.plot_colour)
        })
}

/// The fixed palette index of the first known algorithm named in `label`
/// (labels read "cubic #0", "harm tput (bpf_bbr)", "modest-bbr @ 0.5bdp").
fn algorithm_colour(label: &str) -> Option<usize> {
    label
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .map(|t| t.to_ascii_lowercase().replace('-', "_"))
        .find_map(|t| colour_of(&t))
}

/// Assigns each series of one figure its look. A label naming a known
/// algorithm takes that algorithm's fixed colour; further labels of the same
/// algorithm in the figure (flow #1, another buffer) keep the colour and
/// switch dashing and marker. Other labels take the colours no algorithm of
/// the figure uses, in order; an unlabelled series gets a colour of its own.
/// One label always has one look.
struct Slots {
    by_label: HashMap<String, Look>,
    /// Colours no known algorithm of this figure holds, in palette order.
    free: Vec<usize>,
    next_free: usize,
    /// Series drawn so far in each colour.
    uses: [usize; PALETTE.len()],
}

impl Slots {
    fn new<'a>(labels: impl IntoIterator<Item = &'a str>) -> Self {
        let taken: Vec<usize> = labels.into_iter().filter_map(algorithm_colour).collect();
        let free: Vec<usize> = (0..PALETTE.len()).filter(|i| !taken.contains(i)).collect();
        Slots {
            by_label: HashMap::new(),
            free: if free.is_empty() {
                (0..PALETTE.len()).collect()
            } else {
                free
            },
            next_free: 0,
            uses: [0; PALETTE.len()],
        }
    }

    fn look(&mut self, label: &str) -> Look {
        if let Some(l) = self.by_label.get(label) {
            return *l;
        }
        let colour = algorithm_colour(label).unwrap_or_else(|| {
            let c = self.free[self.next_free % self.free.len()];
            self.next_free += 1;
            c
        });
        let look = look(colour, self.uses[colour]);
        self.uses[colour] += 1;
        if !label.is_empty() {
            self.by_label.insert(label.to_string(), look);
        }
        look
    }
}

/// How a series looks: a palette colour; its `variant` (the how-manieth
/// series of that colour in the figure) switches the line's dash pattern
/// (solid, dashed, dotted, long-dashed: a CDF has no markers to tell them
/// apart) and the marker shape.
#[derive(Debug, Clone, Copy)]
struct Look {
    color: RGBColor,
    /// (dash, gap) in pixels; None: solid.
    dash: Option<(u32, u32)>,
    marker: Marker,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Marker {
    Circle,
    Triangle,
    Square,
    Cross,
}

fn look(colour: usize, variant: usize) -> Look {
    Look {
        color: PALETTE[colour % PALETTE.len()],
        dash: [None, Some((8, 5)), Some((2, 4)), Some((16, 6))][variant % 4],
        marker: match variant % 4 {
            0 => Marker::Circle,
            1 => Marker::Triangle,
            2 => Marker::Square,
            _ => Marker::Cross,
        },
    }
}

/// Draws `points` as markers of one shape.
fn draw_markers<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    points: &[(f64, f64)],
    marker: Marker,
    size: i32,
    style: ShapeStyle,
) -> DrawResult<DB> {
    let pts = points.iter().copied();
    match marker {
        Marker::Circle => chart.draw_series(pts.map(|p| Circle::new(p, size, style)))?,
        Marker::Triangle => {
            chart.draw_series(pts.map(|p| TriangleMarker::new(p, size + 1, style)))?
        }
        Marker::Square => chart.draw_series(pts.map(|p| {
            EmptyElement::at(p)
                + Rectangle::new([(-size + 1, -size + 1), (size - 1, size - 1)], style)
        }))?,
        Marker::Cross => {
            chart.draw_series(pts.map(|p| Cross::new(p, size, style.stroke_width(2))))?
        }
    };
    Ok(())
}

/// Draws one series' points as a line (and markers when sparse).
fn draw_line<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    points: &[(f64, f64)],
    look: Look,
) -> DrawResult<DB> {
    let line = look.color.stroke_width(2);
    if points.len() >= 2 {
        if let Some((dash, gap)) = look.dash {
            chart.draw_series(DashedLineSeries::new(
                points.iter().copied(),
                dash,
                gap,
                line,
            ))?;
        } else {
            chart.draw_series(LineSeries::new(points.iter().copied(), line))?;
        }
    }
    if points.len() <= MARKER_MAX_POINTS {
        draw_markers(chart, points, look.marker, 3, look.color.filled())?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Text and legend

fn text_style(size: f64, style: FontStyle) -> TextStyle<'static> {
    (FAMILY, size, style).into_font().color(&BLACK)
}

/// Width in pixels of `text`: measured with the font when there is one,
/// estimated otherwise (the SVG path without a font; the viewer draws the text).
fn text_width(style: &TextStyle, text: &str) -> i32 {
    match style.font.box_size(text) {
        Ok((w, _)) => w as i32,
        Err(_) => (text.chars().count() as f64 * style.font.get_size() * 0.55).ceil() as i32,
    }
}

/// Title centred in `area`, shrunk to fit its width if need be.
fn draw_title<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str) -> DrawResult<DB> {
    let (w, h) = area.dim_in_pixel();
    let mut size = TITLE_SIZE;
    let mut style = text_style(size, FontStyle::Bold);
    let room = w as i32 - 20;
    while size > 11.0 && text_width(&style, title) > room {
        size -= 1.0;
        style = text_style(size, FontStyle::Bold);
    }
    let style = style.pos(Pos::new(HPos::Center, VPos::Center));
    area.draw_text(title, &style, (w as i32 / 2, h as i32 / 2))
}

/// "no data" in the middle of a plotting area.
fn draw_no_data<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
    let (w, h) = area.dim_in_pixel();
    let grey = BLACK.mix(0.5);
    let style = text_style(AXIS_DESC_SIZE, FontStyle::Normal)
        .color(&grey)
        .pos(Pos::new(HPos::Center, VPos::Center));
    area.draw_text("no data", &style, (w as i32 / 2, h as i32 / 2))
}

/// What a legend entry shows next to its label.
#[derive(Debug, Clone, Copy)]
enum Sample {
    Line(Look),
    /// A line with a marker in its middle (sparse series).
    LineMarker(Look),
    Marker(Look),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Corner {
    UpperRight,
    LowerRight,
}

struct LegendEntry {
    label: String,
    sample: Sample,
}

/// The legend, in a right-hand corner of the plotting `area` (pixel
/// coordinates), on a semi-opaque white box; it wraps into columns if too tall.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    entries: &[LegendEntry],
    corner: Corner,
) -> DrawResult<DB> {
    if entries.is_empty() {
        return Ok(());
    }
    let style = text_style(LEGEND_SIZE, FontStyle::Normal);
    let (aw, ah) = area.dim_in_pixel();
    let (pad, inset, sample_w, gap, col_gap) = (8, 10, 28, 6, 14);
    let row_h = LEGEND_SIZE as i32 + 6;

    let max_rows = ((ah as i32 - 2 * inset - 2 * pad) / row_h).max(1) as usize;
    let cols = entries.len().div_ceil(max_rows);
    let rows = entries.len().div_ceil(cols);
    let text_w = entries
        .iter()
        .map(|e| text_width(&style, &e.label))
        .max()
        .unwrap_or(0);
    let col_w = sample_w + gap + text_w;
    let w = 2 * pad + cols as i32 * col_w + (cols as i32 - 1) * col_gap;
    let h = 2 * pad + rows as i32 * row_h;
    let x0 = (aw as i32 - inset - w).max(0);
    let y0 = match corner {
        Corner::UpperRight => inset,
        Corner::LowerRight => (ah as i32 - inset - h).max(0),
    };

    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        WHITE.mix(0.85).filled(),
    ))?;
    area.draw(&Rectangle::new(
        [(x0, y0), (x0 + w, y0 + h)],
        BLACK.mix(0.35),
    ))?;
    let text = style.pos(Pos::new(HPos::Left, VPos::Center));
    for (i, e) in entries.iter().enumerate() {
        let (col, row) = ((i / rows) as i32, (i % rows) as i32);
        let sx = x0 + pad + col * (col_w + col_gap);
        let cy = y0 + pad + row * row_h + row_h / 2;
        let (look, line, marker) = match e.sample {
            Sample::Line(l) => (l, true, false),
            Sample::LineMarker(l) => (l, true, true),
            Sample::Marker(l) => (l, false, true),
        };
        if line {
            let stroke = look.color.stroke_width(2);
            let ends = vec![(sx, cy), (sx + sample_w, cy)];
            if let Some((dash, gap)) = look.dash {
                area.draw(&DashedPathElement::new(ends, dash, gap, stroke))?;
            } else {
                area.draw(&PathElement::new(ends, stroke))?;
            }
        }
        if marker {
            let c = (sx + sample_w / 2, cy);
            let fill = look.color.filled();
            match look.marker {
                Marker::Circle => area.draw(&Circle::new(c, 4, fill))?,
                Marker::Triangle => area.draw(&TriangleMarker::new(c, 5, fill))?,
                Marker::Square => area.draw(&Rectangle::new(
                    [(c.0 - 3, c.1 - 3), (c.0 + 3, c.1 + 3)],
                    fill,
                ))?,
                Marker::Cross => area.draw(&Cross::new(c, 4, fill.stroke_width(2)))?,
            }
        }
        area.draw_text(&e.label, &text, (sx + sample_w + gap, cy))?;
    }
    Ok(())
}

/// Legend label: the series label, flagged when nothing of it could be drawn.
fn legend_label(label: &str, drawn: usize) -> String {
    if drawn == 0 {
        format!("{label} (no data)")
    } else {
        label.to_string()
    }
}

/// Grid, ticks and axis descriptions shared by all figures.
#[allow(clippy::too_many_arguments)]
fn draw_mesh<DB: DrawingBackend>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>,
    x_desc: Option<&str>,
    y_desc: &str,
    x_fmt: &dyn Fn(&f64) -> String,
    y_fmt: &dyn Fn(&f64) -> String,
    x_labels: usize,
    y_labels: usize,
) -> DrawResult<DB> {
    let mut mesh = chart.configure_mesh();
    mesh.x_labels(x_labels)
        .y_labels(y_labels)
        .x_label_formatter(x_fmt)
        .y_label_formatter(y_fmt)
        .max_light_lines(0)
        .bold_line_style(BLACK.mix(0.12))
        .axis_style(BLACK.mix(0.7))
        .label_style(text_style(TICK_SIZE, FontStyle::Normal))
        .axis_desc_style(text_style(AXIS_DESC_SIZE, FontStyle::Normal))
        .y_desc(y_desc);
    if let Some(x) = x_desc {
        mesh.x_desc(x);
    }
    mesh.draw()
}

// ---------------------------------------------------------------------------
// Figures

struct TimeFigure<'a> {
    title: &'a str,
    x_label: &'a str,
    panels: &'a [Panel],
}

impl Figure for TimeFigure<'_> {
    fn size(&self) -> (u32, u32) {
        (
            TIME_W,
            PANEL_H * self.panels.len().max(1) as u32 + TITLE_H + X_AXIS_H,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (title_area, body) = root.split_vertically(TITLE_H);
        draw_title(&title_area, self.title)?;
        if self.panels.is_empty() {
            return draw_no_data(&body);
        }
        let all_x = self
            .panels
            .iter()
            .flat_map(|p| &p.series)
            .flat_map(|s| &s.points)
            .filter(|p| finite(p));
        let (x0, x1) = axis_range(all_x.map(|p| p.0), Pad::Tight);
        let x_fmt = tick_formatter(x0, x1, 10);
        let hide = |_: &f64| String::new();

        let breaks: Vec<i32> = (1..self.panels.len())
            .map(|i| (i as u32 * PANEL_H) as i32)
            .collect();
        let areas = body.split_by_breakpoints([] as [i32; 0], breaks);
        let mut slots = Slots::new(
            self.panels
                .iter()
                .flat_map(|p| &p.series)
                .map(|s| s.label.as_str()),
        );
        for (i, (panel, area)) in self.panels.iter().zip(&areas).enumerate() {
            let last = i + 1 == self.panels.len();
            let lines: Vec<(Vec<(f64, f64)>, &Series)> = panel
                .series
                .iter()
                .map(|s| (finite_points(&s.points), s))
                .collect();
            let (y0, y1) = axis_range(
                lines.iter().flat_map(|(p, _)| p).map(|p| p.1),
                Pad::FromZero,
            );
            let y_fmt = tick_formatter(y0, y1, 6);

            let mut chart = ChartBuilder::on(area)
                .margin_top(10)
                .margin_left(10)
                .margin_right(25)
                .x_label_area_size(if last { X_AXIS_H + 10 } else { 10 })
                .y_label_area_size(85)
                .build_cartesian_2d(x0..x1, y0..y1)?;
            draw_mesh(
                &mut chart,
                last.then_some(self.x_label),
                &panel.y_label,
                if last { &x_fmt } else { &hide },
                &y_fmt,
                10,
                6,
            )?;
            let mut legend = Vec::new();
            for (points, s) in &lines {
                let look = slots.look(&s.label);
                draw_line(&mut chart, points, look)?;
                if !s.label.is_empty() {
                    let sample = if points.len() <= MARKER_MAX_POINTS {
                        Sample::LineMarker(look)
                    } else {
                        Sample::Line(look)
                    };
                    legend.push(LegendEntry {
                        label: legend_label(&s.label, points.len()),
                        sample,
                    });
                }
            }
            let plot = chart.plotting_area().strip_coord_spec();
            if lines.iter().all(|(p, _)| p.is_empty()) {
                draw_no_data(&plot)?;
            }
            draw_legend(&plot, &legend, Corner::UpperRight)?;
        }
        Ok(())
    }
}

struct ScatterFigure<'a> {
    title: &'a str,
    x_label: &'a str,
    y_label: &'a str,
    groups: &'a [Series],
    invert_x: bool,
}

impl Figure for ScatterFigure<'_> {
    fn size(&self) -> (u32, u32) {
        SMALL_SIZE
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (title_area, body) = root.split_vertically(TITLE_H);
        draw_title(&title_area, self.title)?;
        let groups: Vec<Vec<(f64, f64)>> = self
            .groups
            .iter()
            .map(|g| finite_points(&g.points))
            .collect();
        let (x0, x1) = axis_range(groups.iter().flatten().map(|p| p.0), Pad::Around);
        let (y0, y1) = axis_range(groups.iter().flatten().map(|p| p.1), Pad::FromZero);
        let x_fmt = tick_formatter(x0, x1, 8);
        let y_fmt = tick_formatter(y0, y1, 8);
        // A reversed range maps the larger values to the left; ticks stay positive.
        let x_range = if self.invert_x { x1..x0 } else { x0..x1 };

        let mut chart = ChartBuilder::on(&body)
            .margin_top(10)
            .margin_left(10)
            .margin_right(25)
            .margin_bottom(5)
            .x_label_area_size(X_AXIS_H + 10)
            .y_label_area_size(85)
            .build_cartesian_2d(x_range, y0..y1)?;
        draw_mesh(
            &mut chart,
            Some(self.x_label),
            self.y_label,
            &x_fmt,
            &y_fmt,
            8,
            8,
        )?;

        let mut slots = Slots::new(self.groups.iter().map(|g| g.label.as_str()));
        let mut legend = Vec::new();
        for (g, points) in self.groups.iter().zip(&groups) {
            let look = slots.look(&g.label);
            draw_markers(
                &mut chart,
                points,
                look.marker,
                5,
                look.color.mix(0.85).filled(),
            )?;
            if !g.label.is_empty() {
                legend.push(LegendEntry {
                    label: legend_label(&g.label, points.len()),
                    sample: Sample::Marker(look),
                });
            }
        }
        let plot = chart.plotting_area().strip_coord_spec();
        if groups.iter().all(|g| g.is_empty()) {
            draw_no_data(&plot)?;
        }
        draw_legend(&plot, &legend, Corner::UpperRight)
    }
}

struct CdfFigure<'a> {
    title: &'a str,
    x_label: &'a str,
    sets: &'a [(String, Vec<f64>)],
}

/// The staircase of the empirical CDF of `sorted` (finite, ascending), from
/// (`lo`, 0) to (`hi`, 1). Large sets keep at most `CDF_MAX_STEPS` steps,
/// chosen at evenly spaced quantiles.
fn cdf_steps(sorted: &[f64], lo: f64, hi: f64) -> Vec<(f64, f64)> {
    if sorted.is_empty() {
        return Vec::new();
    }
    let n = sorted.len() as f64;
    // (value, fraction of samples <= value) for each distinct value.
    let mut distinct: Vec<(f64, f64)> = Vec::new();
    for (i, &v) in sorted.iter().enumerate() {
        let f = (i + 1) as f64 / n;
        match distinct.last_mut() {
            Some(last) if last.0 == v => last.1 = f,
            _ => distinct.push((v, f)),
        }
    }
    if distinct.len() > CDF_MAX_STEPS {
        let last = distinct.len() - 1;
        distinct = (0..CDF_MAX_STEPS)
            .map(|k| distinct[k * last / (CDF_MAX_STEPS - 1)])
            .collect();
    }
    let mut steps = Vec::with_capacity(distinct.len() * 2 + 2);
    steps.push((lo.min(distinct[0].0), 0.0));
    let mut below = 0.0;
    for &(v, f) in &distinct {
        steps.push((v, below));
        steps.push((v, f));
        below = f;
    }
    steps.push((hi.max(sorted[sorted.len() - 1]), 1.0));
    steps
}

impl Figure for CdfFigure<'_> {
    fn size(&self) -> (u32, u32) {
        SMALL_SIZE
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (title_area, body) = root.split_vertically(TITLE_H);
        draw_title(&title_area, self.title)?;
        let sets: Vec<Vec<f64>> = self
            .sets
            .iter()
            .map(|(_, v)| {
                let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
                v.sort_by(f64::total_cmp);
                v
            })
            .collect();
        let (x0, x1) = axis_range(sets.iter().flatten().copied(), Pad::Around);
        let x_fmt = tick_formatter(x0, x1, 8);
        let y_fmt = tick_formatter(0.0, 1.0, 10);

        let mut chart = ChartBuilder::on(&body)
            .margin_top(10)
            .margin_left(10)
            .margin_right(25)
            .margin_bottom(5)
            .x_label_area_size(X_AXIS_H + 10)
            .y_label_area_size(85)
            .build_cartesian_2d(x0..x1, 0.0..1.0)?;
        draw_mesh(&mut chart, Some(self.x_label), "CDF", &x_fmt, &y_fmt, 8, 10)?;

        let mut slots = Slots::new(self.sets.iter().map(|(l, _)| l.as_str()));
        let mut legend = Vec::new();
        for ((label, _), values) in self.sets.iter().zip(&sets) {
            let look = slots.look(label);
            let steps = cdf_steps(values, x0, x1);
            // Markers would sit on the corners of the staircase; a CDF reads fine without.
            let line = look.color.stroke_width(2);
            if let Some((dash, gap)) = look.dash {
                chart.draw_series(DashedLineSeries::new(
                    steps.iter().copied(),
                    dash,
                    gap,
                    line,
                ))?;
            } else {
                chart.draw_series(LineSeries::new(steps.iter().copied(), line))?;
            }
            if !label.is_empty() {
                legend.push(LegendEntry {
                    label: legend_label(label, values.len()),
                    sample: Sample::Line(look),
                });
            }
        }
        let plot = chart.plotting_area().strip_coord_spec();
        if sets.iter().all(|s| s.is_empty()) {
            draw_no_data(&plot)?;
        }
        // The upper right of a CDF is where the tails run into 1; the lower right is empty.
        draw_legend(&plot, &legend, Corner::LowerRight)
    }
}

/// Width per category of an [`intervals`] panel, and its least width.
const CATEGORY_W: u32 = 150;
const INTERVAL_MIN_W: u32 = 800;

struct IntervalFigure<'a> {
    title: &'a str,
    panels: &'a [IntervalPanel],
}

impl Figure for IntervalFigure<'_> {
    fn size(&self) -> (u32, u32) {
        let most = self
            .panels
            .iter()
            .map(|p| p.points.len())
            .max()
            .unwrap_or(1) as u32;
        (
            (CATEGORY_W * most + 200).max(INTERVAL_MIN_W),
            (PANEL_H + X_AXIS_H) * self.panels.len().max(1) as u32 + TITLE_H,
        )
    }

    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> DrawResult<DB> {
        let (title_area, body) = root.split_vertically(TITLE_H);
        draw_title(&title_area, self.title)?;
        if self.panels.is_empty() {
            return draw_no_data(&body);
        }
        let breaks: Vec<i32> = (1..self.panels.len())
            .map(|i| (i as u32 * (PANEL_H + X_AXIS_H)) as i32)
            .collect();
        let areas = body.split_by_breakpoints([] as [i32; 0], breaks);
        let ours = PALETTE[0];
        let paper = PALETTE[3];
        for (panel, area) in self.panels.iter().zip(&areas) {
            let n = panel.points.len().max(1);
            let values = panel
                .points
                .iter()
                .flat_map(|p| [p.value, p.low, p.high])
                .chain(panel.reference);
            let (y0, y1) = axis_range(values, Pad::FromZero);
            // Headroom above the data for the legend, so it hides no bar.
            let y1 = y1 + (y1 - y0) * 0.45;
            let y_fmt = tick_formatter(y0, y1, 6);
            let labels: Vec<String> = panel.points.iter().map(|p| p.label.clone()).collect();
            let x_fmt = move |x: &f64| {
                let i = x.round();
                if (x - i).abs() > 1e-6 || i < 0.0 {
                    return String::new();
                }
                labels.get(i as usize).cloned().unwrap_or_default()
            };
            let mut chart = ChartBuilder::on(area)
                .margin_top(10)
                .margin_left(10)
                .margin_right(25)
                .x_label_area_size(X_AXIS_H + 10)
                .y_label_area_size(85)
                .build_cartesian_2d(-0.5..(n as f64 - 0.5), y0..y1)?;
            draw_mesh(&mut chart, None, &panel.y_label, &x_fmt, &y_fmt, n, 6)?;
            let mut legend = Vec::new();
            if let Some(r) = panel.reference.filter(|r| r.is_finite()) {
                let look = Look {
                    color: paper,
                    dash: Some((8, 5)),
                    marker: Marker::Square,
                };
                draw_line(&mut chart, &[(-0.5, r), (n as f64 - 0.5, r)], look)?;
                legend.push(LegendEntry {
                    label: panel.reference_label.clone(),
                    sample: Sample::Line(look),
                });
            }
            let style = ShapeStyle::from(&ours).stroke_width(2);
            // Caps a fixed share of a category's width, narrower when the
            // panel has few categories (one category spans the whole plot).
            let cap = 0.12 * (n as f64 / 4.0).min(1.0);
            for (i, p) in panel.points.iter().enumerate() {
                if !(p.value.is_finite() && p.low.is_finite() && p.high.is_finite()) {
                    continue;
                }
                let x = i as f64;
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, p.low), (x, p.high)],
                    style,
                )))?;
                for y in [p.low, p.high] {
                    chart.draw_series(std::iter::once(PathElement::new(
                        vec![(x - cap, y), (x + cap, y)],
                        style,
                    )))?;
                }
                chart.draw_series(std::iter::once(Circle::new((x, p.value), 5, ours.filled())))?;
            }
            let look = Look {
                color: ours,
                dash: None,
                marker: Marker::Circle,
            };
            legend.push(LegendEntry {
                label: "ours: mean, 95 % interval".into(),
                sample: Sample::LineMarker(look),
            });
            let plot = chart.plotting_area().strip_coord_spec();
            if panel.points.is_empty() {
                draw_no_data(&plot)?;
            }
            draw_legend(&plot, &legend, Corner::UpperRight)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TestDir(ccctl_sys::ScratchDir);

    impl TestDir {
        fn new(name: &str) -> Self {
            Self(ccctl_sys::scratch_dir(&format!("plots-{name}")).unwrap())
        }
        fn stem(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    const PNG_SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";

    /// Error bars beside a reference line: a PNG and an SVG, sized by the
    /// widest panel; a panel with no points, or with a non-finite point,
    /// still draws (the point is skipped), and the SVG holds the labels.
    #[test]
    fn intervals_draw_error_bars_beside_the_reference() {
        let dir = TestDir::new("intervals");
        let point = |label: &str, value: f64, low: f64, high: f64| IntervalPoint {
            label: label.into(),
            value,
            low,
            high,
        };
        let panels = [
            IntervalPanel {
                y_label: "harm ratio".into(),
                reference: Some(1.6),
                reference_label: "paper: 1.6".into(),
                points: vec![
                    point("all (14)", 1.4, 1.1, 1.7),
                    point("10M 100ms 0.5bdp", 2.1, 2.1, 2.1),
                    point("100M 50ms 1bdp", f64::NAN, 0.0, 1.0),
                ],
            },
            IntervalPanel {
                y_label: "empty".into(),
                reference: None,
                reference_label: String::new(),
                points: Vec::new(),
            },
        ];
        let files =
            intervals(&dir.stem("fig"), "Fig. 7: ours and the paper's", &panels).expect("drawn");
        assert_eq!(files.len(), 2);
        check_png(&files[0]);
        let svg = std::fs::read_to_string(&files[1]).expect("svg");
        for text in ["10M 100ms 0.5bdp", "paper: 1.6", "harm ratio", "no data"] {
            assert!(svg.contains(text), "{text} missing from the SVG");
        }
        let fig = IntervalFigure {
            title: "",
            panels: &panels,
        };
        assert_eq!(
            fig.size(),
            (INTERVAL_MIN_W, 2 * (PANEL_H + X_AXIS_H) + TITLE_H),
            "three categories fit the least width"
        );
    }

    fn check_png(path: &Path) {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(&bytes[..8], PNG_SIGNATURE, "{}", path.display());
        assert!(
            bytes.len() > 5000,
            "{} is only {} bytes",
            path.display(),
            bytes.len()
        );
    }

    fn check_svg(path: &Path, texts: &[&str]) {
        let svg =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(svg.contains("<svg"), "{} is not an SVG", path.display());
        for t in texts {
            assert!(svg.contains(t), "{} lacks {t:?}", path.display());
        }
    }

    fn check_outputs(stem: &Path, paths: &[PathBuf], texts: &[&str]) {
        assert_eq!(paths, [with_suffix(stem, "png"), with_suffix(stem, "svg")]);
        check_png(&paths[0]);
        check_svg(&paths[1], texts);
    }

    fn wave(label: &str, n: usize, scale: f64, phase: f64) -> Series {
        let points = (0..n)
            .map(|i| {
                let t = i as f64 * 0.1;
                (t, scale * (1.0 + 0.5 * (t + phase).sin()))
            })
            .collect();
        Series::new(label, points)
    }

    fn typical_panels() -> Vec<Panel> {
        let flows = ["cubic-1", "bbr-2", "reno-3"];
        vec![
            Panel::new(
                "throughput (Mbit/s)",
                flows
                    .iter()
                    .enumerate()
                    .map(|(i, f)| wave(f, 300, 30.0, i as f64))
                    .collect(),
            ),
            Panel::new(
                "RTT (ms)",
                flows
                    .iter()
                    .enumerate()
                    .map(|(i, f)| wave(f, 300, 40.0, 2.0 * i as f64))
                    .collect(),
            ),
        ]
    }

    #[test]
    fn time_series_writes_png_and_svg() {
        let dir = TestDir::new("time");
        let stem = dir.stem("tput");
        let paths = time_series(
            &stem,
            "Throughput and RTT per flow",
            "time (s)",
            &typical_panels(),
        )
        .unwrap();
        check_outputs(
            &stem,
            &paths,
            &[
                "Throughput and RTT per flow",
                "time (s)",
                "throughput (Mbit/s)",
                "RTT (ms)",
                "cubic-1",
                "reno-3",
            ],
        );
    }

    #[test]
    fn scatter_writes_png_and_svg() {
        let dir = TestDir::new("scatter");
        let groups: Vec<Series> = ["cubic", "bbr", "vegas"]
            .iter()
            .enumerate()
            .map(|(g, name)| {
                let pts = (0..10)
                    .map(|i| (20.0 + 10.0 * g as f64 + i as f64, 50.0 + 5.0 * i as f64))
                    .collect();
                Series::new(*name, pts)
            })
            .collect();
        for invert in [false, true] {
            let stem = dir.stem(&format!("kleinrock-{invert}"));
            let paths = scatter(
                &stem,
                "Throughput vs delay",
                "95th percentile delay (ms)",
                "throughput (Mbit/s)",
                &groups,
                invert,
            )
            .unwrap();
            check_outputs(
                &stem,
                &paths,
                &[
                    "Throughput vs delay",
                    "95th percentile delay (ms)",
                    "cubic",
                    "vegas",
                ],
            );
        }
    }

    #[test]
    fn cdf_writes_png_and_svg() {
        let dir = TestDir::new("cdf");
        let stem = dir.stem("rtt-cdf");
        let sets = vec![
            (
                "cubic".to_string(),
                (0..1000)
                    .map(|i| 20.0 + (i % 97) as f64)
                    .collect::<Vec<_>>(),
            ),
            (
                "bbr".to_string(),
                (0..20_000)
                    .map(|i| 15.0 + (i as f64).sqrt() * 0.3)
                    .collect(),
            ),
        ];
        let paths = cdf(&stem, "RTT distribution", "RTT (ms)", &sets).unwrap();
        check_outputs(
            &stem,
            &paths,
            &["RTT distribution", "RTT (ms)", "CDF", "cubic", "bbr"],
        );
    }

    #[test]
    fn degenerate_inputs_do_not_fail() {
        let dir = TestDir::new("degenerate");
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        let odd = vec![
            Series::new("empty", vec![]),
            Series::new("single", vec![(1.0, 5.0)]),
            Series::new(
                "nan-inf",
                vec![(nan, 1.0), (2.0, inf), (3.0, -inf), (4.0, 2.0), (inf, inf)],
            ),
            Series::new("only-nan", vec![(nan, nan)]),
            Series::new("equal", vec![(5.0, 7.0); 4]),
            Series::new("", vec![(0.0, 0.0), (0.0, 0.0)]),
            Series::new("huge", vec![(0.0, f64::MAX), (1.0, f64::MIN)]),
        ];
        let cases: Vec<(&str, Vec<Panel>)> = vec![
            ("no-panels", vec![]),
            ("no-series", vec![Panel::new("y", vec![])]),
            (
                "mixed",
                vec![
                    Panel::new("y", odd.clone()),
                    Panel::new("zeros", vec![Series::new("z", vec![(0.0, 0.0)])]),
                ],
            ),
            (
                "each",
                odd.iter()
                    .map(|s| Panel::new(s.label.clone(), vec![s.clone()]))
                    .collect(),
            ),
        ];
        for (name, panels) in &cases {
            let stem = dir.stem(name);
            let paths = time_series(&stem, name, "time (s)", panels).unwrap();
            check_outputs(&stem, &paths, &[name]);
        }

        for (i, s) in odd.iter().enumerate() {
            for invert in [false, true] {
                let stem = dir.stem(&format!("scatter-{i}-{invert}"));
                let paths = scatter(
                    &stem,
                    "odd scatter",
                    "x",
                    "y",
                    std::slice::from_ref(s),
                    invert,
                )
                .unwrap();
                check_outputs(&stem, &paths, &["odd scatter"]);
            }
        }
        let stem = dir.stem("scatter-none");
        scatter(&stem, "no groups", "x", "y", &[], true).unwrap();
        let stem = dir.stem("scatter-all");
        scatter(&stem, "all", "x", "y", &odd, false).unwrap();

        let sets: Vec<(String, Vec<f64>)> = vec![
            ("empty".into(), vec![]),
            ("single".into(), vec![3.0]),
            ("nan".into(), vec![nan, inf, -inf, 1.0, 2.0]),
            ("equal".into(), vec![4.0; 10]),
            ("only-nan".into(), vec![nan]),
        ];
        for (i, set) in sets.iter().enumerate() {
            let stem = dir.stem(&format!("cdf-{i}"));
            let paths = cdf(&stem, "odd cdf", "x", std::slice::from_ref(set)).unwrap();
            check_outputs(&stem, &paths, &["odd cdf", &set.0]);
        }
        cdf(&dir.stem("cdf-all"), "all", "x", &sets).unwrap();
        cdf(&dir.stem("cdf-none"), "none", "x", &[]).unwrap();
    }

    #[test]
    fn many_series_and_odd_text() {
        let dir = TestDir::new("many");
        let series: Vec<Series> = (0..25)
            .map(|i| wave(&format!("flow {i} <&>"), 50, 1.0 + i as f64, i as f64))
            .collect();
        let stem = dir.stem("many");
        let long_title =
            "A very long title that will not fit at the usual size, \"quoted\" & <escaped> "
                .repeat(3);
        let paths = time_series(
            &stem,
            &long_title,
            "time (s)",
            &[Panel::new("y", series.clone())],
        )
        .unwrap();
        check_outputs(&stem, &paths, &["flow 24 &lt;&amp;&gt;"]);
        scatter(&dir.stem("many-scatter"), "many", "x", "y", &series, true).unwrap();
        // A stem in a directory that does not exist yet.
        let nested = dir.0.join("a/b/plot");
        let paths = scatter(&nested, "nested", "x", "y", &series[..2], false).unwrap();
        check_outputs(&nested, &paths, &["nested"]);
    }

    #[test]
    fn unwritable_path_names_the_file() {
        let dir = TestDir::new("unwritable");
        let blocker = dir.0.join("file");
        std::fs::write(&blocker, b"x").unwrap();
        let err = cdf(&blocker.join("plot"), "t", "x", &[]).unwrap_err();
        assert!(err.to_string().contains("plot.svg"), "{err}");
    }

    /// Writes one figure of each kind as if no font had been found.
    fn assert_no_font_behaviour(dir: &TestDir) {
        let panels = typical_panels();
        let groups = [Series::new("cubic", vec![(10.0, 5.0), (20.0, 8.0)])];
        let sets = [("bbr".to_string(), vec![1.0, 2.0, 2.0, 5.0])];
        let time = TimeFigure {
            title: "No font: time",
            x_label: "time (s)",
            panels: &panels,
        };
        let scatter = ScatterFigure {
            title: "No font: scatter",
            x_label: "delay (ms)",
            y_label: "tput",
            groups: &groups,
            invert_x: true,
        };
        let cdf = CdfFigure {
            title: "No font: cdf",
            x_label: "RTT (ms)",
            sets: &sets,
        };
        let results = [
            (
                "time",
                write_figure(&dir.stem("time"), &time, Err("/nonexistent/font.ttf")),
                "cubic-1",
            ),
            (
                "scatter",
                write_figure(&dir.stem("scatter"), &scatter, Err("/nonexistent/font.ttf")),
                "cubic",
            ),
            (
                "cdf",
                write_figure(&dir.stem("cdf"), &cdf, Err("/nonexistent/font.ttf")),
                "bbr",
            ),
        ];
        for (name, result, label) in results {
            let stem = dir.stem(name);
            let err = result.unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(&err, PlotError::NoFont { svg, .. } if *svg == with_suffix(&stem, "svg")),
                "{msg}"
            );
            assert!(msg.contains(FONT_PACKAGE), "{msg}");
            assert!(
                msg.contains(&format!("{name}.png")) && msg.contains("/nonexistent/font.ttf"),
                "{msg}"
            );
            check_svg(
                &with_suffix(&stem, "svg"),
                &[&format!("No font: {name}"), label],
            );
            assert!(
                !with_suffix(&stem, "png").exists(),
                "PNG written without a font"
            );
        }
        // A PNG left over from an earlier run goes, so it cannot pass for this one.
        let stem = dir.stem("stale");
        std::fs::write(with_suffix(&stem, "png"), b"stale").unwrap();
        write_figure(&stem, &cdf, Err("/nonexistent/font.ttf")).unwrap_err();
        assert!(!with_suffix(&stem, "png").exists(), "stale PNG left behind");
    }

    #[test]
    fn no_font_still_writes_svg() {
        let dir = TestDir::new("nofont");
        assert_no_font_behaviour(&dir);
    }

    const CHILD_ENV: &str = "CCCTL_PLOTS_TEST_CHILD";

    /// The same in a process that never registered a font (the other tests
    /// in this process have), so nothing on the SVG path can lean on one.
    /// Run as a child by `no_font_in_fresh_process`.
    #[test]
    #[ignore = "run by no_font_in_fresh_process"]
    fn no_font_child() {
        if std::env::var_os(CHILD_ENV).is_some() {
            let font = text_style(12.0, FontStyle::Normal).font;
            assert!(
                font.box_size("x").is_err(),
                "a font is registered in the child"
            );
        }
        let dir = TestDir::new("nofont-child");
        assert_no_font_behaviour(&dir);
    }

    #[test]
    fn no_font_in_fresh_process() {
        let module = module_path!()
            .split_once("::")
            .map_or(module_path!(), |(_, m)| m);
        let exe = std::env::current_exe().unwrap();
        let out = std::process::Command::new(exe)
            .args([
                &format!("{module}::no_font_child"),
                "--exact",
                "--ignored",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn axis_ranges() {
        let r = |v: &[f64], p| axis_range(v.iter().copied(), p);
        assert_eq!(r(&[], Pad::FromZero), (0.0, 1.0));
        assert_eq!(r(&[f64::NAN, f64::INFINITY], Pad::Around), (0.0, 1.0));
        assert_eq!(r(&[0.0, 0.0], Pad::FromZero), (0.0, 1.0));
        assert_eq!(r(&[10.0, 10.0], Pad::FromZero), (0.0, 10.5));
        assert_eq!(r(&[-10.0], Pad::FromZero), (-10.5, 0.0));
        assert_eq!(r(&[5.0], Pad::Tight), (4.5, 5.5));
        assert_eq!(r(&[0.0], Pad::Around), (-1.0, 1.0));
        assert_eq!(r(&[2.0, 12.0], Pad::Tight), (2.0, 12.0));
        assert_eq!(r(&[2.0, 12.0], Pad::Around), (1.5, 12.5));
        assert_eq!(r(&[2.0, 12.0], Pad::FromZero), (0.0, 12.6));
        assert_eq!(r(&[-2.0, 8.0], Pad::FromZero), (-2.5, 8.5));
        let (lo, hi) = r(&[f64::MAX, f64::MIN], Pad::Around);
        assert!(lo.is_finite() && hi.is_finite() && lo < hi);
        let (lo, hi) = r(&[1e9, 1e9 + 1e-9], Pad::Around);
        assert!(lo < hi);
    }

    #[test]
    fn tick_labels() {
        let f = tick_formatter(0.0, 1.0, 10);
        assert_eq!(f(&0.30000000000000004), "0.3");
        assert_eq!(f(&1.0), "1");
        assert_eq!(f(&-0.0), "0");
        let f = tick_formatter(0.0, 126.0, 6);
        assert_eq!(f(&100.0), "100");
        let f = tick_formatter(0.0, 2.2e9, 6);
        assert_eq!(f(&1.5e9), "1.5e9");
        assert_eq!(f(&0.0), "0");
        let f = tick_formatter(0.0, 0.0005, 5);
        assert_eq!(f(&0.0002), "2e-4");
        let f = tick_formatter(-0.5, 0.5, 10);
        assert_eq!(f(&-0.2), "-0.2");
    }

    #[test]
    fn cdf_staircase() {
        assert!(cdf_steps(&[], 0.0, 1.0).is_empty());
        assert_eq!(
            cdf_steps(&[1.0, 2.0, 2.0, 3.0], 0.0, 4.0),
            vec![
                (0.0, 0.0),
                (1.0, 0.0),
                (1.0, 0.25),
                (2.0, 0.25),
                (2.0, 0.75),
                (3.0, 0.75),
                (3.0, 1.0),
                (4.0, 1.0)
            ]
        );
        let big: Vec<f64> = (0..100_000).map(f64::from).collect();
        let steps = cdf_steps(&big, 0.0, 1e5);
        assert!(steps.len() <= 2 * CDF_MAX_STEPS + 2);
        assert_eq!(steps[steps.len() - 2], (99_999.0, 1.0));
    }

    #[test]
    fn colours_follow_labels() {
        let mut s = Slots::new(["a", "b", "", "a"]);
        let (a, b, none1, a2, none2) = (
            s.look("a"),
            s.look("b"),
            s.look(""),
            s.look("a"),
            s.look(""),
        );
        assert_eq!(a.color, a2.color);
        let colours = [a.color, b.color, none1.color, none2.color];
        for (i, x) in colours.iter().enumerate() {
            for y in &colours[i + 1..] {
                assert_ne!(x, y, "distinct labels share a colour: {colours:?}");
            }
        }
    }

    /// Issue 14: Cubic was blue in one figure and orange in the next. An
    /// algorithm's colour no longer depends on what else a figure shows or in
    /// which order; its second series in a figure is dashed, same colour.
    #[test]
    fn an_algorithm_keeps_its_colour_in_every_figure() {
        let mut f1 = Slots::new(["cubic #0", "bpf_bbr #1"]);
        let mut f2 = Slots::new(["modest-bbr", "harm tput (cubic)", "pacing"]);
        let mut f3 = Slots::new(["bbr #0", "cubic #1", "cubic #2"]);
        let cubic = f1.look("cubic #0").color;
        assert_eq!(f2.look("harm tput (cubic)").color, cubic);
        assert_eq!(f3.look("bbr #0").color, PALETTE[1]);
        let (c1, c2) = (f3.look("cubic #1"), f3.look("cubic #2"));
        assert_eq!((c1.color, c2.color), (cubic, cubic));
        assert!(c1.dash.is_none() && c2.dash.is_some() && c1.marker != c2.marker);
        // A label that names no algorithm avoids the colours the figure's algorithms hold.
        let pacing = f2.look("pacing").color;
        assert_ne!(pacing, cubic);
        assert_ne!(pacing, f2.look("modest-bbr").color);
        assert_eq!(f2.look("modest-bbr").color, PALETTE[3]);
        assert_eq!(f1.look("bpf_bbr #1").color, PALETTE[2]);
    }

    #[test]
    fn bold_face_next_to_regular() {
        assert_eq!(
            bold_sibling(Path::new("/f/DejaVuSans.ttf")),
            Some(PathBuf::from("/f/DejaVuSans-Bold.ttf"))
        );
        assert_eq!(
            bold_sibling(Path::new("/f/LiberationSans-Regular.ttf")),
            Some(PathBuf::from("/f/LiberationSans-Bold.ttf"))
        );
    }
}
