//! Figure files in the formats papers take: every figure is drawn once as
//! SVG and, as `[plots] formats` asks, rendered beside it as PNG (twice the
//! SVG's size, for print) and PDF (vector, fonts embedded), both from the
//! same parsed tree.
//!
//! Text needs a TrueType or OpenType font on the machine: the system's are
//! read once per process, and the figures' `sans-serif` is the first of
//! DejaVu Sans, Liberation Sans, Noto Sans, Arial and Helvetica found.
//! Without any font a PNG or PDF is refused rather than written without
//! its labels. The SVG files need nothing.

use std::io;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// A figure file format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Scalable Vector Graphics, as drawn.
    Svg,
    /// A bitmap at twice the drawing's size.
    Png,
    /// Vector PDF with its fonts embedded.
    Pdf,
}

/// The formats written when an experiment names none: SVG alone.
pub fn default_formats() -> Vec<Format> {
    vec![Format::Svg]
}

/// `[plots]` of an experiment whose figures have no other option.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FiguresSpec {
    /// The files each figure is written as: `svg`, `png`, `pdf` (SVG alone
    /// by default; see the module).
    #[serde(default = "default_formats")]
    pub formats: Vec<Format>,
}

impl Default for FiguresSpec {
    fn default() -> Self {
        FiguresSpec {
            formats: default_formats(),
        }
    }
}

/// The bitmap's scale against the drawing: 1440 × 880 pixels for the
/// usual 720 × 440 figure.
const PNG_SCALE: f32 = 2.0;

/// Sans-serif families tried in turn for the figures' text.
const SANS: [&str; 5] = ["DejaVu Sans", "Liberation Sans", "Noto Sans", "Arial", "Helvetica"];

/// The system's fonts, read once, with `sans-serif` mapped to one that is
/// there; `None` when the machine has none.
fn fonts() -> Option<Arc<resvg::usvg::fontdb::Database>> {
    static FONTS: OnceLock<Option<Arc<resvg::usvg::fontdb::Database>>> = OnceLock::new();
    FONTS
        .get_or_init(|| {
            let mut db = resvg::usvg::fontdb::Database::new();
            db.load_system_fonts();
            let families: Vec<String> = db
                .faces()
                .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
                .collect();
            let sans = SANS
                .iter()
                .find(|s| families.iter().any(|f| f == *s))
                .map(|s| s.to_string())
                .or_else(|| families.first().cloned())?;
            db.set_sans_serif_family(sans);
            Some(Arc::new(db))
        })
        .clone()
}

/// Writes figure `name` (a file name ending `.svg`) into `dir` in each of
/// `formats`, the PNG and PDF named like the SVG with their own endings.
pub fn save(dir: &Path, name: &str, svg: &str, formats: &[Format]) -> io::Result<()> {
    let stem = name.strip_suffix(".svg").unwrap_or(name);
    if formats.contains(&Format::Svg) {
        std::fs::write(dir.join(format!("{stem}.svg")), svg)?;
    }
    if !formats.iter().any(|f| *f != Format::Svg) {
        return Ok(());
    }
    let fontdb = fonts().ok_or_else(|| {
        io::Error::other(format!(
            "{stem}: PNG and PDF figures need a TrueType or OpenType font on this machine, and none was found \
             (Debian: apt-get install fonts-dejavu-core); SVG needs none"
        ))
    })?;
    let options = resvg::usvg::Options {
        fontdb,
        ..resvg::usvg::Options::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &options).map_err(|e| io::Error::other(format!("{stem}: {e}")))?;
    for format in formats {
        match format {
            Format::Svg => {}
            Format::Png => std::fs::write(
                dir.join(format!("{stem}.png")),
                png(&tree).map_err(|e| io::Error::other(format!("{stem}: {e}")))?,
            )?,
            Format::Pdf => {
                let pdf = svg2pdf::to_pdf(
                    &tree,
                    svg2pdf::ConversionOptions::default(),
                    svg2pdf::PageOptions::default(),
                )
                .map_err(|e| io::Error::other(format!("{stem}: {e}")))?;
                std::fs::write(dir.join(format!("{stem}.pdf")), in_order(pdf))?;
            }
        }
    }
    Ok(())
}

/// `pdf` with the entries of its resource dictionaries in byte order.
/// svg2pdf writes a page's resources (`/xo12 40 0 R`, one per line) in the
/// order of a hash map, which changes from run to run; sorting each run of
/// such lines outside streams gives the same file every time, and since
/// the lines only change places, every object keeps its length and the
/// cross-reference table stays true.
fn in_order(pdf: Vec<u8>) -> Vec<u8> {
    fn is_entry(line: &[u8]) -> bool {
        let rest = line.trim_ascii_start();
        let Some(rest) = rest.strip_prefix(b"/") else {
            return false;
        };
        let name_end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
        let (name, reference) = rest.split_at(name_end);
        let numbered = name.iter().position(u8::is_ascii_digit).is_some_and(|k| {
            k > 0 && name[..k].iter().all(u8::is_ascii_alphabetic) && name[k..].iter().all(u8::is_ascii_digit)
        });
        let target = reference.strip_prefix(b" ").and_then(|r| r.strip_suffix(b" 0 R"));
        numbered && target.is_some_and(|t| !t.is_empty() && t.iter().all(u8::is_ascii_digit))
    }
    let mut out = Vec::with_capacity(pdf.len());
    let mut run: Vec<&[u8]> = Vec::new();
    let mut in_stream = false;
    let flush = |run: &mut Vec<&[u8]>, out: &mut Vec<u8>| {
        run.sort_unstable();
        for line in run.drain(..) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    };
    let lines: Vec<&[u8]> = pdf.split(|b| *b == b'\n').collect();
    let last = lines.len() - 1;
    for (k, line) in lines.into_iter().enumerate() {
        if !in_stream && is_entry(line) && k < last {
            run.push(line);
            continue;
        }
        flush(&mut run, &mut out);
        out.extend_from_slice(line);
        if k < last {
            out.push(b'\n');
        }
        if line.ends_with(b"endstream") {
            in_stream = false;
        } else if line.ends_with(b"stream") {
            in_stream = true;
        }
    }
    out
}

/// The tree as a PNG at [`PNG_SCALE`].
fn png(tree: &resvg::usvg::Tree) -> Result<Vec<u8>, String> {
    let size = tree
        .size()
        .to_int_size()
        .scale_by(PNG_SCALE)
        .ok_or("the figure is too large")?;
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).ok_or("the figure is empty")?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        tree,
        resvg::tiny_skia::Transform::from_scale(PNG_SCALE, PNG_SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small figure with a line and a label, as plotters writes them.
    const SVG: &str = r##"<svg width="200" height="100" viewBox="0 0 200 100" xmlns="http://www.w3.org/2000/svg">
<rect x="0" y="0" width="200" height="100" fill="#FFFFFF" opacity="1"/>
<polyline fill="none" opacity="1" stroke="#0072B2" stroke-width="2" points="10,90 190,10 "/>
<text x="100" y="50" dy="0.5ex" text-anchor="middle" font-family="sans-serif" font-size="14" opacity="1" fill="#000000">wait (s)</text>
</svg>"##;

    fn written(formats: &[Format]) -> (std::path::PathBuf, Vec<String>) {
        let dir = std::env::temp_dir().join(format!("brokk-figures-{}-{}", std::process::id(), formats.len()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        save(&dir, "wait.svg", SVG, formats).unwrap();
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        (dir, names)
    }

    #[test]
    fn svg_alone_by_default_and_png_and_pdf_when_asked_each_the_same_every_time() {
        let (dir, names) = written(&default_formats());
        assert_eq!(names, ["wait.svg"]);
        assert_eq!(std::fs::read_to_string(dir.join("wait.svg")).unwrap(), SVG);
        let (dir, names) = written(&[Format::Svg, Format::Png, Format::Pdf]);
        assert_eq!(names, ["wait.pdf", "wait.png", "wait.svg"]);
        let png = std::fs::read(dir.join("wait.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // IHDR: twice the drawing's 200 x 100.
        let (w, h) = (
            u32::from_be_bytes(png[16..20].try_into().unwrap()),
            u32::from_be_bytes(png[20..24].try_into().unwrap()),
        );
        assert_eq!((w, h), (400, 200));
        let pdf = std::fs::read(dir.join("wait.pdf")).unwrap();
        assert!(pdf.starts_with(b"%PDF-"));
        // The label's font travels with the document.
        assert!(pdf.windows(8).any(|w| w == b"FontFile"), "no embedded font");
        // The same input gives the same bytes.
        save(&dir, "again.svg", SVG, &[Format::Png, Format::Pdf]).unwrap();
        assert_eq!(std::fs::read(dir.join("again.png")).unwrap(), png);
        assert_eq!(std::fs::read(dir.join("again.pdf")).unwrap(), pdf);
        // Many translucent shapes, each a resource of the page: the
        // resources come in the same order every time.
        let shapes: String = (0..40)
            .map(|k| {
                format!(
                    r##"<rect x="{k}" y="{k}" width="20" height="20" fill="#E69F00" opacity="0.{}"/>"##,
                    k % 9 + 1
                )
            })
            .collect();
        let many = SVG.replace("</svg>", &format!("{shapes}</svg>"));
        save(&dir, "many.svg", &many, &[Format::Pdf]).unwrap();
        let first = std::fs::read(dir.join("many.pdf")).unwrap();
        for _ in 0..3 {
            save(&dir, "many.svg", &many, &[Format::Pdf]).unwrap();
            assert_eq!(std::fs::read(dir.join("many.pdf")).unwrap(), first);
        }
        // The label is drawn: a bitmap without text differs.
        let blank = SVG.replace("wait (s)", "");
        save(&dir, "blank.svg", &blank, &[Format::Png]).unwrap();
        assert_ne!(std::fs::read(dir.join("blank.png")).unwrap(), png);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
