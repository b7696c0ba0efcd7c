//! `brokk quickstart`: Brokk's main job end to end on one machine. It starts a
//! broker with three embedded sites of different sizes, benchmark results and
//! bandwidths, submits a job in every supported language, one
//! reservation-backed job and a three-job co-allocation, follows them to the
//! end, prints where each ran and how the prediction compared, and leaves the
//! outputs in `./brokk-quickstart/`.

use brokk_proto::wire::SubmitRequest;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use brokk_model::{Benchmark, JobPreferences};
use brokk_proto::broker::BrokerClient;
use brokk_proto::wire::{BrokerState, CoallocJob, CoallocRequest};

/// Arguments of `brokk quickstart`.
#[derive(clap::Args)]
pub struct Args {
    /// Where to keep the broker's and sites' state and the outputs.
    #[arg(long, default_value = "brokk-quickstart")]
    dir: PathBuf,
}

/// One example job per language (label, language, description), from
/// `examples/quickstart/`.
const EXAMPLES: [(&str, &str, &str); 7] = [
    (
        "jsdl",
        "jsdl",
        include_str!("../../../../examples/quickstart/hello.jsdl"),
    ),
    (
        "xrsl",
        "xrsl",
        include_str!("../../../../examples/quickstart/hello.xrsl"),
    ),
    ("rsl", "rsl", include_str!("../../../../examples/quickstart/hello.rsl")),
    ("jdl", "jdl", include_str!("../../../../examples/quickstart/hello.jdl")),
    (
        "condor",
        "condor",
        include_str!("../../../../examples/quickstart/hello.sub"),
    ),
    (
        "slurm",
        "slurm",
        include_str!("../../../../examples/quickstart/hello.sh"),
    ),
    (
        "json",
        "json",
        include_str!("../../../../examples/quickstart/hello.json"),
    ),
];

/// A job run in an advance reservation.
const RESERVED: &str = include_str!("../../../../examples/quickstart/reserved.json");

fn config(dir: &std::path::Path) -> String {
    format!(
        r#"database = "{db}"
state_dir = "{state}"
[tokens]
"quickstart" = "you"
[[embedded]]
name = "small"
capacity = 4
bandwidth_bytes_per_s = 10000000
benchmarks = [{{ name = "specint2006", value = 10.0 }}]
[[embedded]]
name = "medium"
capacity = 16
bandwidth_bytes_per_s = 100000000
benchmarks = [{{ name = "specint2006", value = 20.0 }}]
[[embedded]]
name = "large"
capacity = 64
bandwidth_bytes_per_s = 1000000000
benchmarks = [{{ name = "specint2006", value = 30.0 }}]
"#,
        db = dir.join("broker.db").display(),
        state = dir.join("sites").display()
    )
}

/// Runs the quickstart.
pub fn run(a: Args) -> Result<ExitCode> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let dir = a.dir.canonicalize()?;
    // A fresh broker and fresh sites each time; outputs are rewritten.
    let _ = std::fs::remove_file(dir.join("broker.db"));
    let _ = std::fs::remove_dir_all(dir.join("sites"));
    let config_path = dir.join("broker.toml");
    super::write_private(&config_path, &config(&dir))?;
    let config = brokk_server::Config::load(&config_path)?;
    let rt = super::runtime()?;
    let running = rt.block_on(brokk_server::start(config))?;
    let url = format!("http://{}", running.addr);
    say!("broker at {url} with embedded sites small (4 slots), medium (16), large (64)");
    let client = BrokerClient::new(&url, "quickstart");

    // Every example takes 2 minutes where SPECint2006 scores 20 ([ET-brokering]'s
    // benchmark triples), so the broker predicts it on each site from the
    // site's own score.
    let prefs = JobPreferences {
        benchmarks: vec![Benchmark {
            name: "specint2006".into(),
            result: 20.0,
            time: brokk_model::Duration(120),
        }],
        ..JobPreferences::default()
    };
    let mut submitted = Vec::new();
    for (label, format, text) in EXAMPLES {
        let accepted = client.submit(&SubmitRequest {
            description: text.to_string(),
            format: Some(format.to_string()),
            preferences: Some(prefs.clone()),
            ..SubmitRequest::default()
        })?;
        for w in &accepted.warnings {
            say!("  {label}: warning: {w}");
        }
        submitted.push((label.to_string(), accepted.id));
    }
    let reserved = JobPreferences {
        use_reservations: Some(true),
        ..prefs
    };
    let accepted = client.submit(&SubmitRequest {
        description: RESERVED.to_string(),
        format: Some("json".into()),
        preferences: Some(reserved),
        ..SubmitRequest::default()
    })?;
    submitted.push(("reserved".to_string(), accepted.id));

    // Three jobs of 2, 4 and 8 slots that must start within 10 s of each other.
    let now = brokk_proto::wall_clock();
    let co = CoallocRequest {
        jobs: [2, 4, 8]
            .iter()
            .map(|n| CoallocJob {
                description: format!(
                    r#"{{"executable": "/bin/sh", "arguments": ["-c", "echo co-allocated part with {n} slots"], "cpus": {n}, "wall_time": 120, "stdout": "co{n}.out"}}"#
                ),
                format: Some("json".into()),
            })
            .collect(),
        earliest: now,
        latest: now + brokk_model::Duration(600),
        delta: brokk_model::Duration(10),
    };
    let done = client.coallocate(&co)?;
    for (k, id) in done.ids.iter().enumerate() {
        submitted.push((format!("co-{}", k + 1), id.clone()));
    }

    let start = Instant::now();
    let mut jobs = Vec::new();
    for (label, id) in &submitted {
        let j = loop {
            let j = client.job(id)?;
            if j.state().is_terminal() || start.elapsed() > Duration::from_secs(60) {
                break j;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        jobs.push((label.clone(), j));
    }

    say!(
        "\n{:<10} {:<8} {:<8} {:>10} {:>14} {:>11} {:<10}",
        "job",
        "language",
        "site",
        "asked (s)",
        "predicted (s)",
        "actual (s)",
        "state"
    );
    let mut ok = true;
    for (label, j) in &jobs {
        let actual = j.ended.map(|e| (e - j.submitted).0);
        let reserved = j
            .history
            .iter()
            .any(|h| h.detail.as_deref().is_some_and(|d| d.contains("reservation")));
        say!(
            "{:<10} {:<8} {:<8} {:>10} {:>14} {:>11} {:<10}",
            if reserved { format!("{label}*") } else { label.clone() },
            j.format,
            j.site.as_deref().unwrap_or("-"),
            j.wall_time.map_or("-".into(), |v| v.to_string()),
            j.predicted_ttd.map_or("-".into(), |v| v.to_string()),
            actual.map_or("-".into(), |v| v.to_string()),
            j.state()
        );
        ok &= j.state() == BrokerState::Finished && j.exit_code == Some(0);
        if let Some(name) = &j.stdout {
            if let Ok(mut file) = client.file(&j.id, name) {
                std::io::copy(&mut file, &mut std::fs::File::create(dir.join(format!("{label}.out")))?)?;
            }
        }
    }
    let starts: Vec<i64> = jobs
        .iter()
        .filter(|(l, _)| l.starts_with("co-"))
        .filter_map(|(_, j)| j.started.map(|t| t.0))
        .collect();
    if let (Some(lo), Some(hi)) = (starts.iter().min(), starts.iter().max()) {
        say!(
            "co-1..3 were co-allocated (delta 10 s): they started {} s apart",
            hi - lo
        );
    }
    say!(
        "(* ran in an advance reservation)\n\n\
         asked: the wall time the job declared. predicted: the time to delivery the broker\n\
         expected when it chose the site: the site's queue wait, plus staging, plus the\n\
         declared time scaled by the site's benchmark against the job's reference [ET-brokering].\n\
         actual: submission to end. These jobs declare minutes and run for about a second,\n\
         so actual is far below predicted; a job that uses its whole wall time ends near it.\n\
         outputs in {}",
        dir.display()
    );
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
