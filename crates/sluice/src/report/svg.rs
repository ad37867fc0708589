//! The plots: line charts over time, the batch-delay histogram and their axis ticks, as
//! inline SVG. Every drawn element carries `class="mark"`: the page's check script (and the
//! browser test) counts a plot as drawn when it has one.

use std::fmt::Write;

use super::fmt::{esc, num, prefix};

/// Line colours, in order of the lines.
pub(crate) const COLORS: [&str; 9] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
    "#7f7f7f",
];
const W: f64 = 500.0;
const H: f64 = 220.0;
const PAD_L: f64 = 56.0;
const PAD_B: f64 = 28.0;
const PAD_T: f64 = 24.0;
const PAD_R: f64 = 12.0;

/// One line of a chart: `(x in seconds, y)`; a `None` or non-finite `y` is a gap.
pub(crate) type Points = Vec<(f64, Option<f64>)>;

/// Named lines, in legend order. Names are keys: a repeated name replaces the earlier
/// line's points in its place (as the Python report's dict did).
#[derive(Default)]
pub(crate) struct Lines(pub(crate) Vec<(String, Points)>);

impl Lines {
    pub(crate) fn set(&mut self, name: &str, points: Points) {
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some(line) => line.1 = points,
            None => self.0.push((name.to_string(), points)),
        }
    }

    pub(crate) fn one(name: &str, points: Points) -> Self {
        Lines(vec![(name.to_string(), points)])
    }
}

/// Round tick values from `lo` to `hi`, about `n` of them, on steps of 1, 2 or 5 × 10^k.
pub(crate) fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let hi = if hi <= lo { lo + 1.0 } else { hi };
    let n = n.max(1) as f64;
    // `powf`, not `powi`: the same `pow` the Python report's `10 ** k` called, so the
    // steps (and the labels drawn from them) come out bit for bit the same.
    let mut step = 10f64.powf(((hi - lo) / n).log10().floor());
    for m in [1.0, 2.0, 5.0, 10.0] {
        if (hi - lo) / (step * m) <= n {
            step *= m;
            break;
        }
    }
    if !(step.is_finite() && step > 0.0) {
        return Vec::new();
    }
    let first = (lo / step).ceil() * step;
    // Truncated toward zero like Python's `int()`; capped so odd input cannot run away.
    let count = (((hi - first) / step) as i64 + 1).clamp(0, 1000);
    (0..count).map(|i| first + i as f64 * step).collect()
}

/// A line chart of `lines` over time with a legend, a dashed horizontal `hline` (label,
/// value) and a fixed top `y_max` when given (else 10 % above the highest value).
pub(crate) fn line_chart(
    title: &str,
    lines: &Lines,
    y_label: &str,
    hline: Option<(&str, f64)>,
    y_max: Option<f64>,
) -> String {
    let finite = |y: &Option<f64>| y.filter(|y| y.is_finite());
    let pts: Vec<(f64, f64)> = lines
        .0
        .iter()
        .flat_map(|(_, v)| v.iter().filter_map(|(x, y)| finite(y).map(|y| (*x, y))))
        .collect();
    let mut xs: Vec<f64> = pts.iter().map(|p| p.0).collect();
    if xs.is_empty() {
        xs = vec![0.0, 1.0];
    }
    let mut ys: Vec<f64> = pts.iter().map(|p| p.1).collect();
    ys.extend(hline.map(|h| h.1));
    if ys.is_empty() {
        ys = vec![0.0, 1.0];
    }
    let (x0, x1) = (0.0, max(&xs).max(1e-9));
    let top = max(&ys);
    let y1 = y_max.unwrap_or(if top > 0.0 { top * 1.1 } else { 1.0 });
    let sx = |x: f64| PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R);
    let sy = |y: f64| H - PAD_B - y / y1 * (H - PAD_B - PAD_T);
    let title = esc(title);
    let mut out = format!(
        r#"<svg class="plot" role="img" aria-label="{title}" width="{W}" height="{}">"#,
        H as usize + 18 * lines.0.len().div_ceil(3)
    );
    let _ = write!(
        out,
        r#"<text x="{PAD_L}" y="14" font-weight="600">{title}</text>"#
    );
    for t in ticks(0.0, y1, 4) {
        if t <= y1 {
            let _ = write!(
                out,
                r##"<line x1="{PAD_L}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
                W - PAD_R,
                sy(t),
                sy(t),
                PAD_L - 4.0,
                sy(t) + 4.0,
                num(Some(t))
            );
        }
    }
    for t in ticks(x0, x1, 6) {
        let _ = write!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{} s</text>"#,
            sx(t),
            H - PAD_B + 14.0,
            num(Some(t))
        );
    }
    let mid = (H - PAD_B + PAD_T) / 2.0;
    let _ = write!(
        out,
        r#"<text x="12" y="{mid:.0}" transform="rotate(-90 12 {mid:.0})" text-anchor="middle">{}</text>"#,
        esc(y_label)
    );
    let _ = write!(
        out,
        r##"<line x1="{PAD_L}" x2="{PAD_L}" y1="{PAD_T}" y2="{}" stroke="#999"/><line x1="{PAD_L}" x2="{}" y1="{}" y2="{}" stroke="#999"/>"##,
        H - PAD_B,
        W - PAD_R,
        H - PAD_B,
        H - PAD_B
    );
    if let Some((label, y)) = hline {
        let _ = write!(
            out,
            r##"<line x1="{PAD_L}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="#555" stroke-dasharray="5,4"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - PAD_R,
            sy(y),
            sy(y),
            W - PAD_R,
            sy(y) - 4.0,
            esc(label)
        );
    }
    for (i, (name, v)) in lines.0.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let good: Vec<(f64, f64)> = v
            .iter()
            .filter_map(|(x, y)| finite(y).map(|y| (sx(*x), sy(y.min(y1)))))
            .collect();
        match good.as_slice() {
            [] => {}
            [(x, y)] => {
                let _ = write!(
                    out,
                    r#"<circle class="mark" cx="{x:.1}" cy="{y:.1}" r="3" fill="{c}"/>"#
                );
            }
            _ => {
                let d: Vec<String> = good.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
                let _ = write!(
                    out,
                    r#"<polyline class="mark" fill="none" stroke="{c}" stroke-width="1.6" points="{}"/>"#,
                    d.join(" ")
                );
            }
        }
        let (lx, ly) = (
            PAD_L as usize + (i % 3) * 148,
            H as usize + 4 + 18 * (i / 3),
        );
        let _ = write!(
            out,
            r#"<rect x="{lx}" y="{ly}" width="10" height="10" fill="{c}"/><text x="{}" y="{}">{}</text>"#,
            lx + 14,
            ly + 9,
            esc(prefix(name, 20))
        );
    }
    out.push_str("</svg>");
    out
}

/// The batch-delay histogram: `buckets` are `(lower edge in ms, outputs)` on a log axis
/// (each spans 1/16 of its power of two), with labelled dashed lines at `marks` (P50, …).
pub(crate) fn histogram(buckets: &[(f64, f64)], marks: &[(&str, Option<f64>)]) -> String {
    if buckets.is_empty() {
        return r#"<svg class="plot" width="640" height="40"><text x="8" y="20">no batches delivered</text></svg>"#.into();
    }
    let lo = buckets
        .iter()
        .map(|b| b.0)
        .fold(f64::INFINITY, f64::min)
        .max(1e-4);
    let highest_mark = marks
        .iter()
        .filter_map(|m| m.1)
        .fold(None, |a: Option<f64>, m| Some(a.map_or(m, |a| a.max(m))));
    let hi = max(&[
        max(&buckets.iter().map(|b| b.0).collect::<Vec<_>>()) * 1.0625,
        highest_mark.unwrap_or(lo),
        lo * 10.0,
    ]);
    let top = max(&buckets.iter().map(|b| b.1).collect::<Vec<_>>());
    let scale = if top > 0.0 { top } else { 1.0 };
    let lx = |ms: f64| {
        PAD_L + (ms.max(lo).log10() - lo.log10()) / (hi.log10() - lo.log10()) * (W - PAD_L - PAD_R)
    };
    let sy = |n: f64| H - PAD_B - n / scale * (H - PAD_B - PAD_T);
    let mut out = format!(
        r##"<svg class="plot" role="img" aria-label="batch delay" width="{W}" height="{H}"><text x="56" y="14" font-weight="600">How long the loop waited for each batch (log scale)</text><line x1="{PAD_L}" x2="{}" y1="{}" y2="{}" stroke="#999"/>"##,
        W - PAD_R,
        H - PAD_B,
        H - PAD_B
    );
    for e in (lo.log10().floor() as i32)..=(hi.log10().ceil() as i32) {
        let decade = 10f64.powf(e as f64);
        let x = lx(decade);
        if (PAD_L..=W - PAD_R).contains(&x) {
            let _ = write!(
                out,
                r#"<text x="{x:.1}" y="{}" text-anchor="middle">{} ms</text>"#,
                H - PAD_B + 14.0,
                num(Some(decade))
            );
        }
    }
    for &(ms, n) in buckets {
        let (x0, x1) = (lx(ms), lx(ms * 1.0625));
        let _ = write!(
            out,
            r##"<rect class="mark" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#1f77b4"><title>{} ms: {}</title></rect>"##,
            sy(n),
            (x1 - x0).max(1.5),
            H - PAD_B - sy(n),
            num(Some(ms)),
            n.trunc()
        );
    }
    for (i, (name, ms)) in marks.iter().enumerate() {
        let Some(ms) = *ms else { continue };
        let x = lx(ms);
        let _ = write!(
            out,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{PAD_T}" y2="{}" stroke="{}" stroke-dasharray="4,3"/><text x="{:.1}" y="{}">{} {} ms</text>"#,
            H - PAD_B,
            COLORS[(i + 1) % COLORS.len()],
            x + 3.0,
            PAD_T as usize + 12 + 12 * i,
            esc(name),
            num(Some(ms))
        );
    }
    let _ = write!(
        out,
        r#"<text x="{}" y="{}" text-anchor="end">{top}</text></svg>"#,
        PAD_L - 4.0,
        PAD_T + 4.0
    );
    out
}

/// The largest of `v` (the first of equals), which is never empty here.
fn max(v: &[f64]) -> f64 {
    v.iter()
        .copied()
        .reduce(|a, b| if b > a { b } else { a })
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_fall_on_round_steps() {
        // Values as the Python report computed them (float steps keep their rounding).
        assert_eq!(ticks(0.0, 1.0, 4), vec![0.0, 0.5, 1.0]);
        assert_eq!(ticks(0.0, 105.0, 4), vec![0.0, 50.0, 100.0]);
        assert_eq!(ticks(0.0, 13.2, 6), vec![0.0, 5.0, 10.0]);
        assert_eq!(ticks(0.0, 3300.0, 4), vec![0.0, 1000.0, 2000.0, 3000.0]);
        assert_eq!(
            ticks(0.0, 0.37, 4),
            vec![0.0, 0.1, 0.2, 0.30000000000000004]
        );
        assert_eq!(ticks(0.0, 2.2, 6), vec![0.0, 0.5, 1.0, 1.5, 2.0]);
        // An empty range is widened to one unit.
        assert_eq!(ticks(5.0, 5.0, 4), vec![5.0, 5.5, 6.0]);
        assert_eq!(ticks(0.0, 1e-9, 6).len(), 6);
    }

    #[test]
    fn an_empty_series_still_draws_its_axes_and_legend_but_no_mark() {
        let svg = line_chart(
            "Queue",
            &Lines::one("a", vec![(0.1, None)]),
            "chunks",
            None,
            None,
        );
        // What the Python report drew for the same input, byte for byte.
        let want = concat!(
            r##"<svg class="plot" role="img" aria-label="Queue" width="500" height="238"><text x="56" y="14" font-weight="600">Queue</text>"##,
            r##"<line x1="56" x2="488" y1="192.0" y2="192.0" stroke="#eee"/><text x="52" y="196.0" text-anchor="end">0</text>"##,
            r##"<line x1="56" x2="488" y1="115.6" y2="115.6" stroke="#eee"/><text x="52" y="119.6" text-anchor="end">0.5</text>"##,
            r##"<line x1="56" x2="488" y1="39.3" y2="39.3" stroke="#eee"/><text x="52" y="43.3" text-anchor="end">1</text>"##,
            r##"<text x="56.0" y="206" text-anchor="middle">0 s</text><text x="142.4" y="206" text-anchor="middle">0.2 s</text>"##,
            r##"<text x="228.8" y="206" text-anchor="middle">0.4 s</text><text x="315.2" y="206" text-anchor="middle">0.6 s</text>"##,
            r##"<text x="401.6" y="206" text-anchor="middle">0.8 s</text><text x="488.0" y="206" text-anchor="middle">1 s</text>"##,
            r##"<text x="12" y="108" transform="rotate(-90 12 108)" text-anchor="middle">chunks</text>"##,
            r##"<line x1="56" x2="56" y1="24" y2="192" stroke="#999"/><line x1="56" x2="488" y1="192" y2="192" stroke="#999"/>"##,
            r##"<rect x="56" y="224" width="10" height="10" fill="#1f77b4"/><text x="70" y="233">a</text></svg>"##,
        );
        assert_eq!(svg, want);
        assert!(!svg.contains("mark"));
    }

    #[test]
    fn one_point_is_a_dot_and_more_are_a_line_clipped_at_the_top() {
        let mut lines = Lines::default();
        lines.set("one", vec![(1.0, Some(2.0))]);
        lines.set("two", vec![(0.5, Some(1.0)), (1.0, Some(500.0))]);
        let svg = line_chart("busy", &lines, "busy %", None, Some(105.0));
        assert!(
            svg.contains(r##"<circle class="mark" cx="488.0" cy="188.8" r="3" fill="#1f77b4"/>"##)
        );
        assert!(svg.contains(r#"points="272.0,190.4 488.0,24.0""#));
        // A repeated name replaces the line in its place.
        lines.set("one", vec![]);
        assert_eq!(lines.0.len(), 2);
        assert!(lines.0[0].1.is_empty());
    }

    #[test]
    fn the_cores_line_is_dashed_and_counts_for_the_top() {
        let svg = line_chart(
            "CPU",
            &Lines::one("cores used", vec![(1.0, Some(1.0))]),
            "cores",
            Some(("8 cores available", 8.0)),
            None,
        );
        assert!(svg.contains(r##"<line x1="56" x2="488" y1="39.3" y2="39.3" stroke="#555" stroke-dasharray="5,4"/><text x="488" y="35.3" text-anchor="end">8 cores available</text>"##));
        assert!(
            svg.contains(r##"<circle class="mark" cx="488.0" cy="172.9" r="3" fill="#1f77b4"/>"##)
        );
    }

    #[test]
    fn histogram_bars_ticks_and_marks() {
        assert!(histogram(&[], &[]).contains("no batches delivered"));
        let svg = histogram(
            &[(0.5, 3.0), (2.0, 1.0)],
            &[("P50", Some(0.5)), ("P95", Some(2.0)), ("max", Some(2.1))],
        );
        assert_eq!(svg.matches(r#"<rect class="mark""#).count(), 2);
        assert!(svg.contains("<title>0.5 ms: 3</title>"));
        assert!(svg.contains(">1 ms</text>"));
        assert!(svg.contains(">max 2.1 ms</text>"));
        assert!(svg.ends_with(r#"<text x="52" y="28" text-anchor="end">3</text></svg>"#));
    }
}
