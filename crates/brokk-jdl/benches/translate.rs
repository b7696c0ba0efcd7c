//! Read + translate throughput per language, over the valid test corpus.
//!
//! Each benchmark reads every valid corpus file of one language and writes the
//! jobs as canonical JSON and as xRSL; the baseline in the same run (`json`) does
//! the same from the canonical JSON of all the corpus's jobs, so figures can be
//! read as ratios to it.
#![allow(missing_docs)] // criterion_group! generates undocumented items

use std::path::Path;

use brokk_jdl::{read, write, Format, ReadOptions};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

fn corpus(format: Format) -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus")
        .join(format.name())
        .join("valid");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.sort();
    files
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("read_translate");
    let opts = ReadOptions::default();
    // The baseline: the same jobs as canonical JSON, which the JSON reader maps straight onto the model.
    let json: Vec<String> = Format::ALL
        .iter()
        .flat_map(|&f| corpus(f).into_iter().map(move |t| (f, t)))
        .filter_map(|(f, t)| read(f, &t, &opts).ok())
        .filter_map(|p| write(Format::Json, &p.jobs).ok())
        .map(|w| w.text)
        .collect();
    for format in Format::ALL {
        let texts = if format == Format::Json {
            json.clone()
        } else {
            corpus(format)
        };
        if texts.is_empty() {
            continue;
        }
        let bytes: usize = texts.iter().map(String::len).sum();
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_with_input(
            BenchmarkId::new("to_json_and_xrsl", format.name()),
            &texts,
            |b, texts| {
                b.iter(|| {
                    for t in texts {
                        if let Ok(p) = read(format, t, &opts) {
                            let _ = write(Format::Json, &p.jobs);
                            let _ = write(Format::Xrsl, &p.jobs);
                        }
                    }
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
