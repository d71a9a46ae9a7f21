//! Charts: grouped bars (servers × protocols, one panel per case) with min–max whiskers, as
//! PNG and SVG. Text is laid out with the bundled DejaVu Sans (`assets/`, loaded with
//! `include_bytes!` through plotters' `ab_glyph` support), so rendering needs no system font.
//! The PNG is plotters' RGB bitmap encoded with the `png` crate.

use std::fs;
use std::path::Path;
use std::sync::OnceLock;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::report::{case_title, Summary};

/// DejaVu Sans (Bitstream Vera license, `assets/DejaVuSans-LICENSE.txt`).
static FONT: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");

/// Pixel width of a chart.
const WIDTH: u32 = 1200;
/// Pixel height of one case's panel.
const PANEL_HEIGHT: u32 = 440;

/// Bar colours by protocol position (colour-blind safe pair first: blue, orange).
const COLORS: &[RGBColor] =
    &[RGBColor(0x1f, 0x77, 0xb4), RGBColor(0xff, 0x7f, 0x0e), RGBColor(0x2c, 0xa0, 0x2c), RGBColor(0x94, 0x67, 0xbd)];

/// Registers the bundled font as plotters' "sans-serif", once.
fn register_font() -> Result<(), String> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok());
    if ok {
        Ok(())
    } else {
        Err("the bundled font (assets/DejaVuSans.ttf) could not be loaded".into())
    }
}

/// A readable protocol name for the legend.
fn protocol_label(p: &str) -> String {
    match p {
        "h1" => "HTTP/1.1".into(),
        "h2" => "HTTP/2".into(),
        "h3" => "HTTP/3".into(),
        other => other.into(),
    }
}

/// Draws the whole chart onto `root`: one panel per case, stacked.
/// The y axis of a chart: its description and the decimals of its values.
#[derive(Clone, Copy, Debug)]
pub struct Axis<'a> {
    /// Axis description.
    pub desc: &'a str,
    /// Decimals of tick and bar labels.
    pub decimals: usize,
}

/// The upload charts' axis.
const MBPS: Axis<'static> = Axis { desc: "Mbit/s (median, whiskers min–max)", decimals: 0 };

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, s: &Summary, title: &str, axis: Axis) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the chart: {e}");
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 24)).map_err(err)?;
    let cases = s.cases.len().max(1);
    let panels = root.split_evenly((cases, 1));
    // One scale for every panel, so bars compare across cases; headroom for the labels and
    // the legend above the tallest whisker.
    let y_max = (s.max_value() * 1.4).max(1.0);
    let n_servers = s.servers.len().max(1);
    let n_proto = s.protocols.len().max(1);
    let group = 0.8;
    let bar_w = group / n_proto as f64;
    for (case, panel) in s.cases.iter().zip(panels.iter()) {
        let mut chart = ChartBuilder::on(panel)
            .caption(case_title(case), ("sans-serif", 18))
            .margin(12)
            .margin_bottom(8)
            .x_label_area_size(48)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..n_servers as f64, 0.0..y_max)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_label_formatter(&|_| String::new())
            .y_max_light_lines(1)
            .y_label_formatter(&|v| format!("{v:.*}", axis.decimals))
            .y_desc(axis.desc)
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 14))
            .draw()
            .map_err(err)?;
        for (j, proto) in s.protocols.iter().enumerate() {
            let color = COLORS[j % COLORS.len()];
            let mut bars = Vec::new();
            let mut whiskers = Vec::new();
            let mut labels = Vec::new();
            for (i, server) in s.servers.iter().enumerate() {
                let x0 = i as f64 + (1.0 - group) / 2.0 + j as f64 * bar_w;
                let x1 = x0 + bar_w * 0.92;
                let xc = (x0 + x1) / 2.0;
                match s.cell(&case.name, server, proto).and_then(|c| c.stat) {
                    Some(st) => {
                        bars.push(Rectangle::new([(x0, 0.0), (x1, st.median)], color.filled()));
                        let cap = bar_w * 0.2;
                        whiskers.push(vec![(xc, st.min), (xc, st.max)]);
                        whiskers.push(vec![(xc - cap, st.min), (xc + cap, st.min)]);
                        whiskers.push(vec![(xc - cap, st.max), (xc + cap, st.max)]);
                        labels.push((xc, st.max, format!("{:.*}", axis.decimals, st.median)));
                    }
                    None => labels.push((xc, 0.0, "n/a".to_string())),
                }
            }
            chart
                .draw_series(bars)
                .map_err(err)?
                .label(protocol_label(proto))
                .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
            chart
                .draw_series(whiskers.into_iter().map(|pts| PathElement::new(pts, BLACK.stroke_width(1))))
                .map_err(err)?;
            let style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
            chart
                .draw_series(
                    labels.into_iter().map(|(x, y, t)| EmptyElement::at((x, y)) + Text::new(t, (0, -3), style.clone())),
                )
                .map_err(err)?;
        }
        // Server names (and the h2/h1 ratio) under each group.
        let name_style = TextStyle::from(("sans-serif", 15).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        let ratio_style = TextStyle::from(("sans-serif", 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
        chart
            .draw_series(s.servers.iter().enumerate().map(|(i, server)| {
                let ratio =
                    s.ratio(&case.name, server, "h2", "h1").map(|r| format!("h2/h1 {r:.2}")).unwrap_or_default();
                EmptyElement::at((i as f64 + 0.5, 0.0))
                    + Text::new(server.clone(), (0, 6), name_style.clone())
                    + Text::new(ratio, (0, 25), ratio_style.clone())
            }))
            .map_err(err)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(err)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Chart size for a summary: one panel per case.
fn size(s: &Summary) -> (u32, u32) {
    let cases = u32::try_from(s.cases.len().max(1)).unwrap_or(1).min(16);
    (WIDTH, 40 + PANEL_HEIGHT * cases)
}

/// Renders the SVG text of the chart.
pub fn render_svg(s: &Summary, title: &str) -> Result<String, String> {
    render_svg_axis(s, title, MBPS)
}

/// Renders the SVG text of the chart with `axis`.
pub fn render_svg_axis(s: &Summary, title: &str, axis: Axis) -> Result<String, String> {
    register_font()?;
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, size(s)).into_drawing_area();
        draw(&root, s, title, axis)?;
    }
    Ok(out)
}

/// Renders the PNG bytes of the chart.
pub fn render_png(s: &Summary, title: &str) -> Result<Vec<u8>, String> {
    render_png_axis(s, title, MBPS)
}

/// Renders the PNG bytes of the chart with `axis`.
pub fn render_png_axis(s: &Summary, title: &str, axis: Axis) -> Result<Vec<u8>, String> {
    register_font()?;
    let (w, h) = size(s);
    let mut rgb = vec![0u8; w as usize * h as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut rgb, (w, h)).into_drawing_area();
        draw(&root, s, title, axis)?;
    }
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, w, h);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(|e| format!("encoding the PNG: {e}"))?;
    writer.write_image_data(&rgb).map_err(|e| format!("encoding the PNG: {e}"))?;
    writer.finish().map_err(|e| format!("encoding the PNG: {e}"))?;
    Ok(out)
}

/// Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg`.
pub fn write_charts(dir: &Path, stem: &str, s: &Summary, title: &str) -> Result<(), String> {
    write_charts_axis(dir, stem, s, title, MBPS)
}

/// Writes `<dir>/<stem>.png` and `<dir>/<stem>.svg` with `axis`.
pub fn write_charts_axis(dir: &Path, stem: &str, s: &Summary, title: &str, axis: Axis) -> Result<(), String> {
    let svg = render_svg_axis(s, title, axis)?;
    let png = render_png_axis(s, title, axis)?;
    let svg_path = dir.join(format!("{stem}.svg"));
    let png_path = dir.join(format!("{stem}.png"));
    fs::write(&svg_path, svg).map_err(|e| format!("writing {}: {e}", svg_path.display()))?;
    fs::write(&png_path, png).map_err(|e| format!("writing {}: {e}", png_path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::report::{parse_csv, Summary};
    use super::*;

    fn summary() -> Summary {
        let csv = "\
experiment,case,rtt_ms,rate_mbit,server,protocol,run,mbps,seconds,ok
upload,200mbit-40ms,40,200,sluice,h1,1,180,0.5,true
upload,200mbit-40ms,40,200,sluice,h1,2,170,0.5,true
upload,200mbit-40ms,40,200,sluice,h2,1,90,1,true
upload,200mbit-40ms,40,200,nginx,h1,1,160,0.5,true
upload,200mbit-40ms,40,200,nginx,h2,1,0,0,false
upload,200mbit-10ms,10,200,sluice,h1,1,190,0.5,true
upload,200mbit-10ms,10,200,sluice,h2,1,95,1,true
upload,200mbit-10ms,10,200,nginx,h1,1,185,0.5,true
upload,200mbit-10ms,10,200,nginx,h2,1,92,1,true
";
        Summary::from_rows(&parse_csv(csv).unwrap())
    }

    #[test]
    fn renders_png_and_svg_files() {
        let dir = tempfile::tempdir().unwrap();
        write_charts(dir.path(), "upload", &summary(), "10 MiB upload").unwrap();
        let png = fs::read(dir.path().join("upload.png")).unwrap();
        assert!(png.len() > 1000, "PNG is {} bytes", png.len());
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let svg = fs::read_to_string(dir.path().join("upload.svg")).unwrap();
        assert!(svg.contains("<svg"));
        assert!(svg.contains("sluice") && svg.contains("HTTP/2") && svg.contains("n/a"));
    }

    #[test]
    fn empty_summary_still_renders() {
        let s = Summary::from_rows(&[]);
        assert!(render_svg(&s, "nothing").unwrap().contains("<svg"));
        assert_eq!(&render_png(&s, "nothing").unwrap()[..4], b"\x89PNG");
    }
}
