//! A minimal line chart rendered to PNG: log2 x axis, linear y axis, one line per series,
//! labels in the 8x8 bitmap font. Enough for benchmark plots without a font or C dependency.

use font8x8::UnicodeFonts;

const W: usize = 900;
const H: usize = 560;
const LEFT: usize = 90;
const RIGHT: usize = 200;
const TOP: usize = 50;
const BOTTOM: usize = 70;
const COLORS: [[u8; 3]; 4] = [
    [31, 119, 180],
    [214, 39, 40],
    [44, 160, 44],
    [148, 103, 189],
];

pub struct Series {
    pub name: String,
    /// (x, y) points; x > 0 (plotted on a log2 axis).
    pub points: Vec<(f64, f64)>,
}

struct Canvas {
    px: Vec<u8>,
}

impl Canvas {
    fn set(&mut self, x: i64, y: i64, c: [u8; 3]) {
        if x >= 0 && y >= 0 && (x as usize) < W && (y as usize) < H {
            let i = (y as usize * W + x as usize) * 3;
            self.px[i..i + 3].copy_from_slice(&c);
        }
    }

    fn line(&mut self, (x0, y0): (i64, i64), (x1, y1): (i64, i64), c: [u8; 3], thick: i64) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let (mut x, mut y, mut err) = (x0, y0, dx + dy);
        loop {
            for t in 0..thick {
                self.set(x, y + t, c);
                self.set(x + t, y, c);
            }
            if x == x1 && y == y1 {
                break;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x += sx;
            }
            if e2 <= dx {
                err += dx;
                y += sy;
            }
        }
    }

    fn text(&mut self, x: i64, y: i64, s: &str, c: [u8; 3]) {
        for (n, ch) in s.chars().enumerate() {
            let Some(glyph) = font8x8::BASIC_FONTS.get(ch) else {
                continue;
            };
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..8 {
                    if bits & (1 << col) != 0 {
                        self.set(x + n as i64 * 8 + col, y + row as i64, c);
                    }
                }
            }
        }
    }
}

fn human_bytes(b: f64) -> String {
    if b >= 1048576.0 {
        format!("{}M", b / 1048576.0)
    } else if b >= 1024.0 {
        format!("{}K", b / 1024.0)
    } else {
        format!("{b}")
    }
}

/// Renders the chart as PNG bytes.
pub fn line_chart_png(
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Result<Vec<u8>, png::EncodingError> {
    let mut cv = Canvas {
        px: vec![255; W * H * 3],
    };
    let black = [0, 0, 0];
    let grey = [220, 220, 220];
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .filter(|x| *x > 0.0)
        .collect();
    let (xmin, xmax) = xs
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    let ymax = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.1;
    let (lx0, lx1) = (xmin.max(1.0).log2(), xmax.max(2.0).log2());
    let plot_w = (W - LEFT - RIGHT) as f64;
    let plot_h = (H - TOP - BOTTOM) as f64;
    let to_px = |x: f64, y: f64| -> (i64, i64) {
        let fx = if lx1 > lx0 {
            (x.log2() - lx0) / (lx1 - lx0)
        } else {
            0.5
        };
        (
            LEFT as i64 + (fx * plot_w) as i64,
            (TOP as f64 + plot_h - y / ymax * plot_h) as i64,
        )
    };
    // Grid and y ticks.
    for t in 0..=5 {
        let y = ymax * f64::from(t) / 5.0;
        let (_, py) = to_px(xmin, y);
        cv.line((LEFT as i64, py), ((W - RIGHT) as i64, py), grey, 1);
        let label = if ymax < 20.0 {
            format!("{y:>9.1}")
        } else {
            format!("{y:>9.0}")
        };
        cv.text(8, py - 4, &label, black);
    }
    // x ticks at the data points; with many points, at the powers of two between them.
    let mut ticks = xs.clone();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    if ticks.len() > 16 {
        let (lo, hi) = (xmin.max(1.0).log2().ceil(), xmax.max(1.0).log2().floor());
        let step = ((hi - lo) / 12.0).ceil().max(1.0);
        let mut e = lo;
        ticks.clear();
        while e <= hi {
            ticks.push(e.exp2());
            e += step;
        }
    }
    for x in ticks {
        let (px, _) = to_px(x, 0.0);
        cv.line((px, TOP as i64), (px, (H - BOTTOM) as i64), grey, 1);
        let label = human_bytes(x);
        cv.text(
            px - label.len() as i64 * 4,
            (H - BOTTOM + 10) as i64,
            &label,
            black,
        );
    }
    cv.line(
        (LEFT as i64, (H - BOTTOM) as i64),
        ((W - RIGHT) as i64, (H - BOTTOM) as i64),
        black,
        2,
    );
    cv.line(
        (LEFT as i64, TOP as i64),
        (LEFT as i64, (H - BOTTOM) as i64),
        black,
        2,
    );
    for (i, s) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut pts: Vec<(f64, f64)> = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in pts.windows(2) {
            cv.line(to_px(w[0].0, w[0].1), to_px(w[1].0, w[1].1), c, 3);
        }
        for p in &pts {
            let (x, y) = to_px(p.0, p.1);
            for d in -3..=3 {
                cv.line((x - 3, y + d), (x + 3, y + d), c, 1);
            }
        }
        let ly = (TOP + 20 + i * 20) as i64;
        cv.line(
            ((W - RIGHT + 15) as i64, ly + 4),
            ((W - RIGHT + 40) as i64, ly + 4),
            c,
            3,
        );
        cv.text((W - RIGHT + 48) as i64, ly, &s.name, black);
    }
    cv.text(LEFT as i64, 18, title, black);
    cv.text(
        (LEFT + (W - LEFT - RIGHT) / 2 - x_label.len() * 4) as i64,
        (H - 30) as i64,
        x_label,
        black,
    );
    cv.text(8, (TOP - 20) as i64, y_label, black);

    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, W as u32, H as u32);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header()?;
        writer.write_image_data(&cv.px)?;
    }
    Ok(out)
}
