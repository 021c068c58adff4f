//! The axes of the timelines: byte and time ticks at round steps, and where a time range falls
//! across a plot.

use egui::{Rect, Stroke, pos2};

use crate::units;

/// 1, 2 or 5 times a power of ten, at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if raw <= 0.0 || !raw.is_finite() {
        return 1.0;
    }
    let power = 10f64.powf(raw.log10().floor());
    let mantissa = raw / power;
    let nice = if mantissa <= 1.0 {
        1.0
    } else if mantissa <= 2.0 {
        2.0
    } else if mantissa <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * power
}

/// The byte axis of `plot`, 0 to `top_bytes`, in the unit that suits it.
pub fn y_axis(painter: &egui::Painter, plot: Rect, top_bytes: f64, visuals: &egui::Visuals) {
    let units_list = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"), (1, "B")];
    let (unit, name) = units_list.iter().copied().find(|(u, _)| top_bytes >= 2.0 * *u as f64).unwrap_or((1, "B"));
    let step = nice_step(top_bytes / unit as f64 / 5.0);
    let mut v = 0.0;
    while v * unit as f64 <= top_bytes {
        let y = plot.bottom() - (v * unit as f64 / top_bytes * f64::from(plot.height())) as f32;
        painter.hline(plot.x_range(), y, Stroke::new(1.0, visuals.faint_bg_color));
        let text = if step < 1.0 { format!("{v:.1} {name}") } else { format!("{v:.0} {name}") };
        painter.text(
            pos2(plot.left() - 6.0, y),
            egui::Align2::RIGHT_CENTER,
            text,
            egui::FontId::proportional(11.0),
            visuals.text_color(),
        );
        v += step;
    }
}

/// The time axis of `plot` showing `v0..v1`: ticks from `origin` (the trace's start), labelled
/// at `label_y` as durations, or as event numbers when the trace has no clock.
pub fn x_axis(
    painter: &egui::Painter,
    plot: Rect,
    origin: f64,
    event_numbers: bool,
    (v0, v1): (f64, f64),
    label_y: f32,
    visuals: &egui::Visuals,
) {
    let ticks = (plot.width() / 110.0).max(2.0);
    let step = nice_step((v1 - v0) / f64::from(ticks));
    // What the times count from, said at the right end of the labels (none cover it).
    let caption = if event_numbers { "event number" } else { "time from the trace's first event" };
    let caption_rect = painter.text(
        pos2(plot.right(), label_y),
        egui::Align2::RIGHT_TOP,
        caption,
        egui::FontId::proportional(11.0),
        visuals.weak_text_color(),
    );
    let mut t = ((v0 - origin) / step).ceil() * step;
    while origin + t <= v1 {
        let x = plot.left() + ((origin + t - v0) / (v1 - v0) * f64::from(plot.width())) as f32;
        painter.vline(x, plot.y_range(), Stroke::new(1.0, visuals.faint_bg_color));
        if x + 40.0 > caption_rect.left() {
            t += step;
            continue;
        }
        let label =
            if event_numbers { format!("#{}", (origin + t) as i64) } else { format!("+{}", units::tick_duration(t)) };
        painter.text(
            pos2(x, label_y),
            egui::Align2::CENTER_TOP,
            label,
            egui::FontId::proportional(11.0),
            visuals.text_color(),
        );
        t += step;
    }
}

/// Where `start..end` lies across `rect` showing `v0..v1`, at least a pixel wide; `None` when it
/// is out of view.
pub fn x_span(rect: Rect, (v0, v1): (f64, f64), start: i64, end: i64) -> Option<(f32, f32)> {
    let (start, end) = (start as f64, end as f64);
    if end < v0 || start > v1 {
        return None;
    }
    let px_per_ns = f64::from(rect.width()) / (v1 - v0);
    let x0 = rect.left() + ((start.max(v0) - v0) * px_per_ns) as f32;
    let x1 = (rect.left() + ((end.min(v1) - v0) * px_per_ns) as f32).max(x0 + 1.0);
    Some((x0, x1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(0.7), 1.0);
        assert_eq!(nice_step(1.5), 2.0);
        assert_eq!(nice_step(3.0), 5.0);
        assert_eq!(nice_step(7.0), 10.0);
        assert_eq!(nice_step(130.0), 200.0);
        assert_eq!(units::tick_duration(1.5e9), "1.5 s");
        assert_eq!(units::tick_duration(2e6), "2 ms");
        assert_eq!(units::tick_duration(250e3), "250 µs");
    }
}
