//! Image reports (plotters): the timeline by category and the breakdown at the peak of one run,
//! or two runs compared, as PNG or SVG, fit to paste into a pull request.

use std::path::Path;

use anyhow::{Context, Result, anyhow, bail};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use vramscope_trace_format::{Category, Trace};

use crate::colors;
use crate::query::diff::{self, Diff, RunPeak};
use crate::query::timeline::{CATEGORIES, Timeline};
use crate::units;

/// One run to draw: its timeline (of the compared device) and its peak.
pub struct ReportRun {
    /// The file's name.
    pub name: String,
    /// Memory over time.
    pub timeline: Timeline,
    /// Whether times are event indices.
    pub no_clock: bool,
    /// What its times are said from: the trace's first event ([`Trace::origin_ns`]; of any
    /// device, where the timeline is of one).
    pub origin_ns: i64,
    /// The peak and what was alive at it.
    pub peak: RunPeak,
}

impl ReportRun {
    /// Analyses `trace` (read from `name`) for a report.
    pub fn new(trace: &Trace, name: &str) -> Self {
        let peak = diff::compared_run(trace, name, None);
        let timeline = Timeline::build(trace, peak.device);
        Self {
            name: name.to_owned(),
            timeline,
            no_clock: trace.metadata.clock == vramscope_trace_format::Clock::EventIndex,
            origin_ns: trace.origin_ns(),
            peak,
        }
    }
}

const WIDTH: u32 = 1600;
const FONT: &str = "sans-serif";

fn rgb((r, g, b): (u8, u8, u8)) -> RGBColor {
    RGBColor(r, g, b)
}

fn register_fonts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // The font egui ships: reports need no system fonts.
        let _ = plotters::style::register_font(FONT, FontStyle::Normal, epaint_default_fonts::UBUNTU_LIGHT);
        let _ = plotters::style::register_font(FONT, FontStyle::Bold, epaint_default_fonts::UBUNTU_LIGHT);
    });
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("cannot draw the report: {e:?}")
}

fn text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    s: &str,
    x: i32,
    y: i32,
    size: u32,
    color: &RGBColor,
) -> Result<()> {
    area.draw(&Text::new(s.to_owned(), (x, y), (FONT, size).into_font().color(color))).map_err(err)
}

/// Draws one run's timeline in `area`, with `x_max_s` seconds (or events) on the x axis and
/// `y_max_bytes` on the y axis, so two runs can share scales.
fn timeline_chart<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    run: &ReportRun,
    caption: &str,
    x_max: f64,
    y_max_bytes: u64,
) -> Result<()> {
    let t = &run.timeline;
    let (first_ns, last_ns) = t.time_span_ns();
    let origin_ns = origin(run);
    let scale = if run.no_clock { 1.0 } else { 1e9 };
    let (unit, unit_name) = byte_unit(y_max_bytes);
    let y_max = y_max_bytes as f64 / unit * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, (FONT, 20))
        .margin(10)
        .x_label_area_size(32)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max.max(1e-9), 0f64..y_max.max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc(if run.no_clock { "event" } else { "time (s) from the trace's first event" })
        .y_desc(unit_name)
        .label_style((FONT, 14))
        .axis_desc_style((FONT, 15))
        .light_line_style(RGBColor(235, 235, 235))
        .draw()
        .map_err(err)?;
    let columns = 800usize;
    let span_ns = (last_ns - first_ns).max(1) as f64;
    let cols = t.columns(first_ns as f64, first_ns as f64 + span_ns * 1.0001, columns);
    let offset = (first_ns - origin_ns) as f64 / scale;
    let x_of = |c: usize| offset + (c as f64 + 0.5) / columns as f64 * span_ns / scale;
    // Stacked areas: each category's cumulative top, drawn from the tallest down.
    let mut tops: Vec<Vec<(f64, f64)>> = (0..CATEGORIES).map(|_| Vec::with_capacity(columns)).collect();
    let mut requested = Vec::with_capacity(columns);
    let mut reserved = Vec::with_capacity(columns);
    let mut present = [false; CATEGORIES];
    for (c, col) in cols.iter().enumerate() {
        let Some(col) = col else { continue };
        let mut acc = 0u64;
        for (i, &bytes) in col.categories.iter().enumerate() {
            acc += bytes;
            present[i] |= bytes > 0;
            if let Some(top) = tops.get_mut(i) {
                top.push((x_of(c), acc as f64 / unit));
            }
        }
        requested.push((x_of(c), col.range.requested_max as f64 / unit));
        reserved.push((x_of(c), col.range.reserved_max as f64 / unit));
    }
    for i in (0..CATEGORIES).rev() {
        let (Some(points), Some(&category)) = (tops.get(i), Category::ALL.get(i)) else { continue };
        if !present[i] {
            continue;
        }
        let color = rgb(colors::category_rgb(category));
        chart
            .draw_series(AreaSeries::new(points.iter().copied(), 0.0, color.filled()))
            .map_err(err)?
            .label(crate::words::category_label(category))
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled()));
    }
    let requested_color = rgb(colors::REQUESTED_RGB);
    chart
        .draw_series(LineSeries::new(requested, requested_color.stroke_width(1)))
        .map_err(err)?
        .label("requested")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], requested_color.stroke_width(2)));
    let reserved_color = rgb(colors::RESERVED_RGB);
    chart
        .draw_series(LineSeries::new(reserved, reserved_color.stroke_width(2)))
        .map_err(err)?
        .label("reserved")
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 14, y)], reserved_color.stroke_width(2)));
    // The peak.
    let peak_point = t.peak_allocated_point();
    let peak_x = (t.time_ns(peak_point) - origin_ns) as f64 / scale;
    let peak_y = t.values(peak_point).0 as f64 / unit;
    let peak_color = RGBColor(0xff, 0x5a, 0x36);
    chart.draw_series(std::iter::once(Circle::new((peak_x, peak_y), 5, peak_color.filled()))).map_err(err)?;
    // The label goes on the side of the point with room for it.
    let anchor = if peak_x > x_max * 0.75 { HPos::Right } else { HPos::Left };
    let label_style = (FONT, 15).into_font().color(&peak_color).pos(Pos::new(anchor, VPos::Bottom));
    chart
        .draw_series(std::iter::once(Text::new(
            format!(" peak {} ", units::bytes(run.peak.peak_allocated_bytes)),
            (peak_x, peak_y * 1.01),
            label_style,
        )))
        .map_err(err)?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(200, 200, 200))
        .draw()
        .map_err(err)?;
    Ok(())
}

/// A unit that keeps axis numbers readable.
fn byte_unit(max: u64) -> (f64, &'static str) {
    match max {
        m if m >= 2 << 30 => ((1u64 << 30) as f64, "GiB"),
        m if m >= 2 << 20 => ((1u64 << 20) as f64, "MiB"),
        m if m >= 2 << 10 => (1024.0, "KiB"),
        _ => (1.0, "bytes"),
    }
}

/// What a run's times are said from: the trace's first event, or its timeline's first event
/// number for a trace without a clock.
fn origin(run: &ReportRun) -> i64 {
    if run.no_clock { run.timeline.time_span_ns().0 } else { run.origin_ns }
}

fn x_extent(run: &ReportRun) -> f64 {
    let (_, b) = run.timeline.time_span_ns();
    let span = (b - origin(run)).max(1) as f64;
    if run.no_clock { span } else { span / 1e9 }
}

fn y_extent(run: &ReportRun) -> u64 {
    let r = run.timeline.range(0, run.timeline.len());
    r.allocated_max.max(r.reserved_max).max(r.requested_max).max(1)
}

fn categories_sorted(run: &RunPeak) -> Vec<(Category, u64)> {
    let mut rows: Vec<(Category, u64)> = Category::ALL
        .iter()
        .filter_map(|c| run.categories_at_peak.get(c).map(|v| (*c, *v)))
        .filter(|(_, v)| *v > 0)
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    rows
}

/// Bars by category at the peak of one run.
fn breakdown<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, run: &RunPeak) -> Result<()> {
    text(area, "At the peak, by category", 10, 5, 20, &BLACK)?;
    let total = run.peak_allocated_bytes.max(1);
    let (w, _) = area.dim_in_pixel();
    let bar_max = (w as i32 - 420).max(50);
    for (row, (category, bytes)) in categories_sorted(run).iter().enumerate() {
        let y = 40 + row as i32 * 28;
        let color = rgb(colors::category_rgb(*category));
        text(area, crate::words::category_label(*category), 10, y, 16, &BLACK)?;
        let len = (*bytes as f64 / total as f64 * f64::from(bar_max)) as i32;
        area.draw(&Rectangle::new([(170, y), (170 + len.max(1), y + 18)], color.filled())).map_err(err)?;
        let label = format!("{}  ({:.1}%)", units::bytes(*bytes), *bytes as f64 * 100.0 / total as f64);
        text(area, &label, 180 + len.max(1), y, 16, &BLACK)?;
    }
    Ok(())
}

fn site_lines<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, title: &str, lines: &[String]) -> Result<()> {
    text(area, title, 10, 5, 20, &BLACK)?;
    for (i, line) in lines.iter().enumerate() {
        text(area, line, 10, 40 + i as i32 * 24, 15, &RGBColor(40, 40, 40))?;
    }
    Ok(())
}

fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max { s.to_owned() } else { format!("{}…", s.chars().take(max - 1).collect::<String>()) }
}

fn draw_single<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, run: &ReportRun) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let (header, rest) = root.split_vertically(80);
    let p = &run.peak;
    text(&header, &format!("vramscope — {}", run.name), 14, 10, 26, &BLACK)?;
    let when = match p.peak_allocated_clock_ns {
        Some(_) if !run.no_clock => {
            let at = run.timeline.time_ns(run.timeline.peak_allocated_point()) - origin(run);
            format!(" at +{}", units::duration_ns(at))
        }
        _ => String::new(),
    };
    let device = &p.label;
    let line = format!(
        "{device}: peak allocated {}{when}, peak reserved {}",
        units::bytes(p.peak_allocated_bytes),
        units::bytes(p.peak_reserved_bytes)
    );
    text(&header, &line, 14, 46, 18, &RGBColor(60, 60, 60))?;
    let (chart, bottom) = rest.split_vertically(500);
    timeline_chart(&chart, run, "Memory over time, allocated by category", x_extent(run), y_extent(run))?;
    let (left, right) = bottom.split_horizontally(WIDTH / 2);
    breakdown(&left, p)?;
    let lines: Vec<String> = p
        .sites
        .iter()
        .take(12)
        .map(|s| {
            format!(
                "{:>10}  {}  ({})",
                units::bytes(s.bytes),
                clip(&s.site, 80),
                units::counted(s.blocks, "block", "blocks")
            )
        })
        .collect();
    site_lines(&right, "Largest allocation sites at the peak", &lines)
}

fn draw_compare<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    a: &ReportRun,
    b: &ReportRun,
    d: &Diff,
) -> Result<()> {
    root.fill(&WHITE).map_err(err)?;
    let (header, rest) = root.split_vertically(110);
    text(&header, &format!("vramscope — A: {}   B: {}", a.name, b.name), 14, 10, 24, &BLACK)?;
    for (i, line) in wrap_words(&crate::words::diff_summary(d), 140).iter().take(2).enumerate() {
        text(&header, line, 14, 46 + i as i32 * 28, 20, &RGBColor(30, 30, 30))?;
    }
    // Same time axis from each run's start, same byte scale.
    let x_max = x_extent(a).max(x_extent(b));
    let y_max = y_extent(a).max(y_extent(b));
    let (chart_a, rest) = rest.split_vertically(360);
    let (chart_b, bottom) = rest.split_vertically(360);
    timeline_chart(&chart_a, a, &format!("A: {}", a.name), x_max, y_max)?;
    timeline_chart(&chart_b, b, &format!("B: {}", b.name), x_max, y_max)?;
    let (phases, bottom) = bottom.split_vertically(PHASES_HEIGHT);
    draw_phases(&phases, d)?;
    let (left, right) = bottom.split_horizontally(WIDTH / 2);
    text(&left, "At each peak, by category", 10, 5, 20, &BLACK)?;
    let header_y = 36;
    for (x, label) in [(10, "category"), (180, "A"), (300, "B"), (420, "B - A"), (560, "%")] {
        text(&left, label, x, header_y, 15, &RGBColor(90, 90, 90))?;
    }
    let rows = [
        ("peak allocated".to_owned(), d.a.peak_allocated_bytes, d.b.peak_allocated_bytes, None),
        ("peak reserved".to_owned(), d.a.peak_reserved_bytes, d.b.peak_reserved_bytes, None),
    ]
    .into_iter()
    .chain(
        d.categories.iter().map(|c| (crate::words::category_label(c.category).to_owned(), c.a, c.b, Some(c.category))),
    );
    for (i, (name, va, vb, category)) in rows.enumerate() {
        let y = header_y + 26 + i as i32 * 24;
        if let Some(category) = category {
            left.draw(&Rectangle::new([(10, y + 2), (22, y + 14)], rgb(colors::category_rgb(category)).filled()))
                .map_err(err)?;
        }
        let delta = vb as i64 - va as i64;
        let color = match delta {
            d if d > 0 => RGBColor(0xc0, 0x30, 0x20),
            d if d < 0 => RGBColor(0x20, 0x80, 0x30),
            _ => RGBColor(110, 110, 110),
        };
        text(&left, &name, if category.is_some() { 28 } else { 10 }, y, 15, &BLACK)?;
        text(&left, &units::bytes(va), 180, y, 15, &BLACK)?;
        text(&left, &units::bytes(vb), 300, y, 15, &BLACK)?;
        text(&left, &units::signed_bytes(delta), 420, y, 15, &color)?;
        let pct = if va == 0 && vb == 0 { String::new() } else { units::percent(diff::percent(va, vb)) };
        text(&left, &pct, 560, y, 15, &color)?;
    }
    let mut lines = Vec::new();
    for (title, list) in
        [("grew", &d.grown), ("only in B", &d.only_in_b), ("shrank", &d.shrunk), ("only in A", &d.only_in_a)]
    {
        for s in list.iter().take(4) {
            lines.push(format!("{:>11}  {title}: {}", units::signed_bytes(s.delta), clip(&s.site, 70)));
        }
    }
    site_lines(&right, "Allocation sites that changed (live bytes at each peak)", &lines)
}

/// The height of the phases' table in a report of two runs.
const PHASES_HEIGHT: u32 = 250;

/// Each phase's high point in both runs (each kind's highest, then the first iterations), or
/// why they cannot be compared.
fn draw_phases<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, d: &Diff) -> Result<()> {
    text(area, "Phase by phase: the high point of allocated memory in each", 10, 5, 20, &BLACK)?;
    let grey = RGBColor(90, 90, 90);
    if d.phases.is_empty() {
        let mut y = 40;
        for (name, run) in [("A", &d.a), ("B", &d.b)] {
            if run.phases.is_empty() {
                let line = format!("{name} shows no phases: {}.", crate::words::phases_from(None));
                for part in wrap_words(&line, 150) {
                    text(area, &part, 10, y, 15, &grey)?;
                    y += 22;
                }
            }
        }
        if !d.ranges.is_empty() {
            text(area, "Named ranges both runs have, the high point inside the first of each:", 10, y + 6, 15, &BLACK)?;
            for (i, r) in d.ranges.iter().take(5).enumerate() {
                let line = format!(
                    "{:>12} -> {:>12}  {:>12}  {}",
                    units::bytes(r.a),
                    units::bytes(r.b),
                    units::signed_bytes(r.delta),
                    clip(&r.name, 80)
                );
                text(area, &line, 10, y + 32 + i as i32 * 22, 15, &RGBColor(40, 40, 40))?;
            }
        }
        return Ok(());
    }
    let from = |run: &RunPeak| crate::words::phases_from(run.phases.from);
    text(area, &clip(&format!("A: {}.  B: {}.", from(&d.a), from(&d.b)), 190), 10, 32, 14, &grey)?;
    let header_y = 56;
    for (x, label) in [(10, "phase"), (300, "A"), (420, "B"), (540, "B - A"), (680, "%"), (790, "most changed")] {
        text(area, label, x, header_y, 15, &grey)?;
    }
    // Each kind's highest, then whole iterations and their phases while they fit.
    let rows = d.phases.iter().filter(|r| r.iteration.is_none() || r.iteration == Some(1)).take(7);
    for (i, r) in rows.enumerate() {
        let y = header_y + 24 + i as i32 * 22;
        let side = |s: Option<&diff::PhaseSide>| s.map_or_else(|| "none".to_owned(), |s| units::bytes(s.high_bytes));
        let indent = if r.iteration.is_some() && r.phase.is_some() { 24 } else { 10 };
        text(area, &crate::words::phase_row_label(r), indent, y, 15, &BLACK)?;
        text(area, &side(r.a.as_ref()), 300, y, 15, &BLACK)?;
        text(area, &side(r.b.as_ref()), 420, y, 15, &BLACK)?;
        if let Some(delta) = r.delta {
            let color = match delta {
                d if d > 0 => RGBColor(0xc0, 0x30, 0x20),
                d if d < 0 => RGBColor(0x20, 0x80, 0x30),
                _ => RGBColor(110, 110, 110),
            };
            text(area, &units::signed_bytes(delta), 540, y, 15, &color)?;
            let pct = units::percent(r.percent);
            text(area, &pct, 680, y, 15, &color)?;
        }
        if let Some(c) = r.categories.iter().find(|c| c.delta != 0) {
            let swatch = Rectangle::new([(790, y + 2), (802, y + 14)], rgb(colors::category_rgb(c.category)).filled());
            area.draw(&swatch).map_err(err)?;
            let name = crate::words::category_label(c.category);
            text(area, &format!("{name} {}", units::signed_bytes(c.delta)), 808, y, 15, &BLACK)?;
        }
    }
    Ok(())
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrap_words(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    lines
}

/// Writes the report of one run, or of two compared, to `out` (`.png` or `.svg`).
pub fn write(runs: &[ReportRun], out: &Path, force: bool) -> Result<()> {
    register_fonts();
    let svg = match out.extension().and_then(|e| e.to_str()).map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => true,
        Some("png") => false,
        _ => bail!("{}: the report is written as .png or .svg; name the output accordingly", out.display()),
    };
    if out.exists() && !force {
        bail!("{} exists; pass --force to replace it", out.display());
    }
    let height = if runs.len() > 1 { 1160 + PHASES_HEIGHT } else { 900 };
    let compared = match runs {
        [a, b] => Some(diff::diff(a.peak.clone(), b.peak.clone())),
        [_] => None,
        _ => bail!("a report covers one run or two"),
    };
    let bytes: Vec<u8> = if svg {
        let mut s = String::new();
        render(SVGBackend::with_string(&mut s, (WIDTH, height)).into_drawing_area(), runs, compared.as_ref())?;
        s.into_bytes()
    } else {
        let mut pixels = vec![0u8; WIDTH as usize * height as usize * 3];
        render(BitMapBackend::with_buffer(&mut pixels, (WIDTH, height)).into_drawing_area(), runs, compared.as_ref())?;
        let image = image::RgbImage::from_raw(WIDTH, height, pixels).ok_or_else(|| anyhow!("bad image size"))?;
        let mut png = Vec::new();
        image
            .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
            .context("cannot encode the PNG")?;
        png
    };
    write_atomically(out, &bytes, force)
}

fn render<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, runs: &[ReportRun], compared: Option<&Diff>) -> Result<()> {
    match (runs, compared) {
        ([a, b], Some(d)) => draw_compare(&root, a, b, d)?,
        ([run], _) => draw_single(&root, run)?,
        _ => {}
    }
    root.present().map_err(err)
}

/// Writes through a temporary file in the same directory, renamed into place when complete.
fn write_atomically(out: &Path, bytes: &[u8], force: bool) -> Result<()> {
    crate::atomic::write(out, bytes, force).map(|_| ())
}
