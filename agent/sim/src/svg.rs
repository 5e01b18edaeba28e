//! Hand-written SVG charts (no plotting dependency): line charts over a numeric x, and dot
//! plots of one value per category and series. Ticks fall on round numbers (1, 2 or 5 × 10^k);
//! a y axis whose data spans more than [`LOG_SPAN`] times is drawn on a log scale.

use std::fmt::Write as _;

const W: f64 = 720.0;
const H: f64 = 360.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 45.0;
const COLORS: [&str; 12] = [
    "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#000000", "#aec7e8",
];
/// Largest over smallest value beyond which a y axis is logarithmic.
pub const LOG_SPAN: f64 = 5.0;
/// Decades of a log axis beyond which it ticks at powers of ten only.
const MANY_DECADES: i32 = 3;
/// Roughly this many ticks per axis.
const TICKS: f64 = 5.0;
/// Width of one character of the 9 px category labels, px (for the room they need).
const LABEL_CHAR: f64 = 5.5;

/// One named series of (x, y) points. In a dot plot x is the category's index.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A tick value as a label: as few decimals as its step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}")
}

/// The round step (1, 2 or 5 × 10^k) that cuts `span` into about [`TICKS`] parts.
fn round_step(span: f64) -> f64 {
    let raw = span / TICKS;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|m| raw <= m * magnitude * (1.0 + 1e-9))
        .unwrap_or(10.0);
    step * magnitude
}

/// One axis: its range, scale and ticks.
#[derive(Clone, Debug)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    /// (value, label) of each tick.
    ticks: Vec<(f64, String)>,
}

impl Axis {
    /// A linear axis over `[lo, hi]` widened to round ticks.
    fn linear(lo: f64, hi: f64) -> Self {
        let (lo, hi) = if hi - lo < 1e-12 {
            (lo, lo + 1.0)
        } else {
            (lo, hi)
        };
        let step = round_step(hi - lo);
        let (first, last) = ((lo / step).floor(), (hi / step).ceil());
        let ticks = (first as i64..=last as i64)
            .map(|k| {
                let v = k as f64 * step;
                (v, tick_label(v, step))
            })
            .collect();
        Self {
            lo: first * step,
            hi: last * step,
            log: false,
            ticks,
        }
    }

    /// A log axis over positive `[lo, hi]`, ticks at 1, 2 and 5 × 10^k (at 10^k alone over
    /// more than [`MANY_DECADES`] decades, where the others would crowd their labels).
    fn log(lo: f64, hi: f64) -> Self {
        let (k0, k1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        let mantissas: &[f64] = if k1 - k0 > MANY_DECADES {
            &[1.0]
        } else {
            &[1.0, 2.0, 5.0]
        };
        let mut ticks = Vec::new();
        for k in k0..=k1 {
            for &m in mantissas {
                let v = m * 10f64.powi(k);
                if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                    ticks.push((v, tick_label(v, 10f64.powi(k))));
                }
            }
        }
        // The range runs from the tick at or below `lo` to the one at or above `hi`.
        let below = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * 10f64.powi(k0))
            .rfind(|&v| v <= lo)
            .unwrap_or(10f64.powi(k0));
        let above = [1.0, 2.0, 5.0, 10.0]
            .into_iter()
            .map(|m| m * 10f64.powi(hi.log10().floor() as i32))
            .find(|&v| v >= hi)
            .unwrap_or(10f64.powi(k1));
        for v in [below, above] {
            if !ticks.iter().any(|(t, _)| (t - v).abs() < v * 1e-9) {
                ticks.push((v, tick_label(v, 10f64.powf(v.log10().floor()))));
            }
        }
        ticks.sort_by(|a, b| a.0.total_cmp(&b.0));
        Self {
            lo: below,
            hi: above,
            log: true,
            ticks,
        }
    }

    /// The y axis for `values`: from 0 (linear) or log when they span more than [`LOG_SPAN`].
    fn for_values(values: impl Iterator<Item = f64>) -> Self {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for v in values.filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if lo > hi {
            return Self::linear(0.0, 1.0);
        }
        if lo > 0.0 && hi / lo > LOG_SPAN {
            Self::log(lo, hi)
        } else {
            Self::linear(lo.min(0.0), hi)
        }
    }

    /// Where `v` falls on the axis, 0 at `lo` and 1 at `hi`.
    fn fraction(&self, v: f64) -> f64 {
        if self.log {
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

/// The canvas: its size, margins and the two axes.
struct Frame {
    height: f64,
    bottom: f64,
    y: Axis,
}

impl Frame {
    fn plot_height(&self) -> f64 {
        self.height - TOP - self.bottom
    }

    fn plot_width() -> f64 {
        W - LEFT - RIGHT
    }

    fn sy(&self, y: f64) -> f64 {
        TOP + self.plot_height() * (1.0 - self.y.fraction(y))
    }

    fn open(&self, o: &mut String, title: &str) {
        let h = self.height;
        let _ = writeln!(
            o,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" viewBox="0 0 {W} {h}" font-family="sans-serif" font-size="11">"#
        );
        let _ = writeln!(o, r#"<rect width="{W}" height="{h}" fill="white"/>"#);
        let _ = writeln!(
            o,
            r#"<text x="{}" y="18" text-anchor="middle" font-size="13">{}</text>"#,
            LEFT + Self::plot_width() / 2.0,
            esc(title)
        );
    }

    /// The y grid and tick labels, the frame, and the axis titles.
    fn axes(&self, o: &mut String, x_label: &str, y_label: &str) {
        let (pw, ph) = (Self::plot_width(), self.plot_height());
        for (v, label) in &self.y.ticks {
            let py = self.sy(*v);
            let _ = writeln!(
                o,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{label}</text>"##,
                LEFT + pw,
                LEFT - 4.0,
                py + 4.0
            );
        }
        let _ = writeln!(
            o,
            r#"<rect x="{LEFT}" y="{TOP}" width="{pw}" height="{ph}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + pw / 2.0,
            self.height - 4.0,
            esc(x_label)
        );
        let scale = if self.y.log { " (log scale)" } else { "" };
        let _ = writeln!(
            o,
            r#"<text x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}{scale}</text>"#,
            TOP + ph / 2.0,
            TOP + ph / 2.0,
            esc(y_label)
        );
    }

    /// Legend entry `i`.
    fn legend(o: &mut String, i: usize, name: &str, line: bool) {
        let c = COLORS[i % COLORS.len()];
        let ly = TOP + 12.0 + i as f64 * 15.0;
        let lx = LEFT + Self::plot_width() + 10.0;
        if line {
            let _ = write!(
                o,
                r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/>"#,
                lx + 18.0
            );
        } else {
            let _ = write!(
                o,
                r#"<circle cx="{}" cy="{ly}" r="3.5" fill="{c}"/>"#,
                lx + 9.0
            );
        }
        let _ = writeln!(
            o,
            r#"<text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            ly + 4.0,
            esc(name)
        );
    }
}

/// A line chart with markers and a legend, over a numeric x.
#[must_use]
pub fn line_chart(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    chart(title, (x_label, y_label), series, Axis::linear)
}

/// [`line_chart`] over a positive x on a log scale (ticks at 1, 2 and 5 × 10^k); points at
/// x ≤ 0 are left out.
#[must_use]
pub fn line_chart_log_x(title: &str, x_label: &str, y_label: &str, series: &[Series]) -> String {
    let positive: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            points: s.points.iter().copied().filter(|p| p.0 > 0.0).collect(),
        })
        .collect();
    chart(title, (x_label, y_label), &positive, Axis::log)
}

fn chart(
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
    x_axis: fn(f64, f64) -> Axis,
) -> String {
    let finite = |&(x, y): &(f64, f64)| x.is_finite() && y.is_finite();
    let points = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().copied().filter(finite))
    };
    let frame = Frame {
        height: H,
        bottom: BOTTOM,
        y: Axis::for_values(points().map(|p| p.1)),
    };
    let (x0, x1) = points().fold((f64::MAX, f64::MIN), |(lo, hi), (x, _)| {
        (lo.min(x), hi.max(x))
    });
    let x = if x0 > x1 {
        Axis::linear(0.0, 1.0)
    } else {
        x_axis(x0, x1)
    };
    let sx = |v: f64| LEFT + x.fraction(v) * Frame::plot_width();
    let mut o = String::new();
    frame.open(&mut o, title);
    frame.axes(&mut o, x_label, y_label);
    for (v, label) in &x.ticks {
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{label}</text>"#,
            sx(*v),
            TOP + frame.plot_height() + 15.0
        );
    }
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(finite)
            .map(|(x, y)| (sx(x), frame.sy(y)))
            .collect();
        let joined: Vec<String> = path.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
            joined.join(" ")
        );
        if path.len() <= 40 {
            for (px, py) in &path {
                let _ = writeln!(
                    o,
                    r#"<circle cx="{px:.1}" cy="{py:.1}" r="2.5" fill="{c}"/>"#
                );
            }
        }
        Frame::legend(&mut o, i, &s.name, true);
    }
    o.push_str("</svg>\n");
    o
}

/// A dot plot: one column per category, whose whole name is written under it, and in it one
/// dot per series, side by side in legend order. Nothing joins categories.
#[must_use]
pub fn dot_plot(title: &str, y_label: &str, categories: &[String], series: &[Series]) -> String {
    let longest = categories
        .iter()
        .map(|c| c.chars().count())
        .max()
        .unwrap_or(0);
    // Labels stand at 45 degrees: each needs its length × sin 45° below the plot.
    let bottom = BOTTOM.max(20.0 + longest as f64 * LABEL_CHAR * std::f64::consts::FRAC_1_SQRT_2);
    let frame = Frame {
        height: H - BOTTOM + bottom,
        bottom,
        y: Axis::for_values(series.iter().flat_map(|s| s.points.iter().map(|p| p.1))),
    };
    let band = Frame::plot_width() / categories.len().max(1) as f64;
    let mut o = String::new();
    frame.open(&mut o, title);
    frame.axes(&mut o, "", y_label);
    let base = TOP + frame.plot_height();
    for (i, c) in categories.iter().enumerate() {
        let left = LEFT + band * i as f64;
        if i > 0 {
            let _ = writeln!(
                o,
                r##"<line x1="{left:.1}" y1="{TOP}" x2="{left:.1}" y2="{base:.1}" stroke="#eee"/>"##
            );
        }
        let (px, py) = (left + band / 2.0, base + 10.0);
        let _ = writeln!(
            o,
            r#"<text x="{px:.1}" y="{py:.1}" text-anchor="end" transform="rotate(-45 {px:.1} {py:.1})" font-size="9">{}</text>"#,
            esc(c)
        );
    }
    let slots = series.len().max(1) as f64;
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        for &(x, y) in s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
        {
            let px = LEFT + band * (x + (i as f64 + 0.5) / slots * 0.8 + 0.1);
            let _ = writeln!(
                o,
                r#"<circle cx="{px:.1}" cy="{:.1}" r="3" fill="{c}"/>"#,
                frame.sy(y)
            );
        }
        Frame::legend(&mut o, i, &s.name, false);
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two() -> Vec<Series> {
        vec![
            Series {
                name: "a".into(),
                points: vec![(0.0, 0.5), (1.0, 0.7)],
            },
            Series {
                name: "b&c".into(),
                points: vec![(0.0, f64::NAN), (1.0, 0.2)],
            },
        ]
    }

    #[test]
    fn chart_is_well_formed() {
        let s = line_chart("t <1>", "x", "y", &two());
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("t &lt;1&gt;") && s.contains("b&amp;c"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(!s.contains("NaN"));
    }

    #[test]
    fn ticks_fall_on_round_numbers() {
        let labels = |a: &Axis| a.ticks.iter().map(|t| t.1.clone()).collect::<Vec<_>>();
        // The relative-time plot used to tick at 1.53, 3.06, 4.59.
        let y = Axis::for_values([1.0, 4.59].into_iter());
        assert!(!y.log);
        assert_eq!(labels(&y), ["0", "1", "2", "3", "4", "5"]);
        assert_eq!(labels(&Axis::linear(0.0, 7.4)), ["0", "2", "4", "6", "8"]);
        assert_eq!(
            labels(&Axis::linear(0.0, 0.73)),
            ["0.0", "0.2", "0.4", "0.6", "0.8"]
        );
        assert_eq!(
            labels(&Axis::linear(6.0, 14.0)),
            ["6", "8", "10", "12", "14"]
        );
        // One value 7x the rest: a log axis.
        let log = Axis::for_values([1.0, 1.3, 9.1].into_iter());
        assert!(log.log);
        assert_eq!(labels(&log), ["1", "2", "5", "10"]);
        assert!((log.fraction(1.0)).abs() < 1e-9 && (log.fraction(10.0) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_log_x_chart_ticks_whole_powers_and_leaves_out_what_it_cannot_place() {
        let series = [Series {
            name: "memtide".into(),
            points: vec![(0.0, 1.5), (4.0, 1.1), (1024.0, 1.2), (32768.0, 1.4)],
        }];
        let s = line_chart_log_x("t", "records per sample", "y", &series);
        // Powers of ten, and the round values the range starts and ends at.
        for label in [">2<", ">10<", ">100<", ">1000<", ">10000<", ">50000<"] {
            assert!(s.contains(label), "{label} missing: {s}");
        }
        assert!(!s.contains(">20<") && !s.contains(">5000<"), "{s}");
        assert_eq!(s.matches("<circle").count(), 3, "x = 0 has no place: {s}");
        // Over three decades or fewer the 2s and 5s tick too.
        let labels: Vec<String> = Axis::log(4.0, 500.0)
            .ticks
            .into_iter()
            .map(|t| t.1)
            .collect();
        assert_eq!(labels, ["2", "5", "10", "20", "50", "100", "200", "500"]);
    }

    #[test]
    fn a_dot_plot_writes_whole_labels_and_joins_nothing() {
        let categories = ["clustered-64k".to_owned(), "bw-multistream".to_owned()];
        let s = dot_plot("t", "y", &categories, &two());
        assert!(s.contains(">clustered-64k</text>") && s.contains(">bw-multistream</text>"));
        assert_eq!(s.matches("<polyline").count(), 0);
        assert_eq!(
            s.matches(r#"r="3" fill"#).count(),
            3,
            "three finite points: {s}"
        );
        // Room for the longest label below the plot.
        let height: f64 = s
            .split("height=\"")
            .nth(1)
            .and_then(|h| h.split('"').next())
            .and_then(|h| h.parse().ok())
            .unwrap();
        assert!(height > H, "{height}");
    }
}
