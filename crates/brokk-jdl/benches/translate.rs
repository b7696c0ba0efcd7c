//! Read + translate throughput per language, over the valid test corpus.
//!
//! Each benchmark reads every valid corpus file of one language and writes the
//! jobs as canonical JSON and as xRSL; the baseline in the same run is the JSON
//! reader on the same jobs, so figures can be read as ratios.
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
    for format in Format::ALL {
        let texts = corpus(format);
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
