//! Hand-written SVG line charts (no plotting dependency).

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

/// One named series of (x, y) points.
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The plot area and the data range it shows.
struct Frame {
    x0: f64,
    x1: f64,
    y0: f64,
    y1: f64,
}

/// Width and height of the plot area.
const PW: f64 = W - LEFT - RIGHT;
const PH: f64 = H - TOP - BOTTOM;

impl Frame {
    /// The range of every finite point, with y from 0 and 5 % of headroom above.
    fn fitting(series: &[Series]) -> Self {
        let pts = series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in pts {
            if x.is_finite() && y.is_finite() {
                x0 = x0.min(x);
                x1 = x1.max(x);
                y0 = y0.min(y);
                y1 = y1.max(y);
            }
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        y0 = y0.min(0.0);
        if (y1 - y0).abs() < 1e-12 {
            y1 = y0 + 1.0;
        }
        y1 += (y1 - y0) * 0.05;
        if (x1 - x0).abs() < 1e-12 {
            x1 = x0 + 1.0;
        }
        Self { x0, x1, y0, y1 }
    }

    fn sx(&self, x: f64) -> f64 {
        LEFT + (x - self.x0) / (self.x1 - self.x0) * PW
    }

    fn sy(&self, y: f64) -> f64 {
        TOP + PH - (y - self.y0) / (self.y1 - self.y0) * PH
    }

    /// Grid, tick labels, frame and axis titles.
    fn axes(&self, o: &mut String, x_label: &str, y_label: &str, x_labels: Option<&[String]>) {
        for i in 0..=5 {
            let y = self.y0 + (self.y1 - self.y0) * f64::from(i) / 5.0;
            let py = self.sy(y);
            let _ = writeln!(
                o,
                r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{y:.2}</text>"##,
                LEFT + PW,
                LEFT - 4.0,
                py + 4.0
            );
        }
        match x_labels {
            Some(labels) => {
                for (i, l) in labels.iter().enumerate() {
                    let px = self.sx(i as f64);
                    let _ = writeln!(
                        o,
                        r#"<text x="{px:.1}" y="{:.1}" text-anchor="end" transform="rotate(-35 {px:.1} {:.1})" font-size="9">{}</text>"#,
                        TOP + PH + 12.0,
                        TOP + PH + 12.0,
                        esc(l)
                    );
                }
            }
            None => {
                for i in 0..=5 {
                    let x = self.x0 + (self.x1 - self.x0) * f64::from(i) / 5.0;
                    let _ = writeln!(
                        o,
                        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{x:.2}</text>"#,
                        self.sx(x),
                        TOP + PH + 15.0
                    );
                }
            }
        }
        let _ = writeln!(
            o,
            r#"<rect x="{LEFT}" y="{TOP}" width="{PW}" height="{PH}" fill="none" stroke="black"/>"#
        );
        let _ = writeln!(
            o,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + PW / 2.0,
            H - 4.0,
            esc(x_label)
        );
        let _ = writeln!(
            o,
            r#"<text x="14" y="{:.1}" text-anchor="middle" transform="rotate(-90 14 {:.1})">{}</text>"#,
            TOP + PH / 2.0,
            TOP + PH / 2.0,
            esc(y_label)
        );
    }

    /// Series `i`: its line, its markers when there are few points, and its legend entry.
    fn series(&self, o: &mut String, i: usize, s: &Series) {
        let c = COLORS[i % COLORS.len()];
        let path: Vec<String> = s
            .points
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", self.sx(x), self.sy(y)))
            .collect();
        let _ = writeln!(
            o,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
            path.join(" ")
        );
        if s.points.len() <= 40 {
            for p in &path {
                let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = writeln!(o, r#"<circle cx="{px}" cy="{py}" r="2.5" fill="{c}"/>"#);
            }
        }
        let ly = TOP + 12.0 + i as f64 * 15.0;
        let lx = LEFT + PW + 10.0;
        let _ = writeln!(
            o,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{c}" stroke-width="2"/><text x="{}" y="{}">{}</text>"#,
            lx + 18.0,
            lx + 22.0,
            ly + 4.0,
            esc(&s.name)
        );
    }
}

/// A line chart with markers and a legend. `x_labels`, when given, label integer x positions.
#[must_use]
pub fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    x_labels: Option<&[String]>,
) -> String {
    let frame = Frame::fitting(series);
    let mut o = String::new();
    let _ = writeln!(
        o,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(o, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        o,
        r#"<text x="{}" y="18" text-anchor="middle" font-size="13">{}</text>"#,
        LEFT + PW / 2.0,
        esc(title)
    );
    frame.axes(&mut o, x_label, y_label, x_labels);
    for (i, s) in series.iter().enumerate() {
        frame.series(&mut o, i, s);
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_is_well_formed() {
        let s = line_chart(
            "t <1>",
            "x",
            "y",
            &[
                Series {
                    name: "a".into(),
                    points: vec![(0.0, 0.5), (1.0, 0.7)],
                },
                Series {
                    name: "b&c".into(),
                    points: vec![(0.0, f64::NAN), (1.0, 0.2)],
                },
            ],
            Some(&["w1".to_owned(), "w2".to_owned()]),
        );
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
        assert!(s.contains("t &lt;1&gt;") && s.contains("b&amp;c"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(!s.contains("NaN"));
    }
}
