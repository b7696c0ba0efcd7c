//! `brokk quickstart`: Brokk's main job end to end on one machine. It starts a
//! broker with three embedded sites of different sizes, benchmark results and
//! bandwidths, submits a job in every supported language and one
//! reservation-backed job, follows them to the end, prints where each ran and
//! how the prediction compared, and leaves the outputs in `./brokk-quickstart/`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use brokk_model::JobPreferences;
use brokk_proto::broker::BrokerClient;

/// Arguments of `brokk quickstart`.
#[derive(clap::Args)]
pub struct Args {
    /// Where to keep the broker's and sites' state and the outputs.
    #[arg(long, default_value = "brokk-quickstart")]
    dir: PathBuf,
}

/// One example job per language: (label, language, description).
const EXAMPLES: [(&str, &str, &str); 7] = [
    (
        "jsdl",
        "jsdl",
        r#"<?xml version="1.0" encoding="UTF-8"?>
<jsdl:JobDefinition xmlns:jsdl="http://schemas.ggf.org/jsdl/2005/11/jsdl"
                    xmlns:jsdl-posix="http://schemas.ggf.org/jsdl/2005/11/jsdl-posix">
  <jsdl:JobDescription>
    <jsdl:JobIdentification><jsdl:JobName>hello-jsdl</jsdl:JobName></jsdl:JobIdentification>
    <jsdl:Application>
      <jsdl-posix:POSIXApplication>
        <jsdl-posix:Executable>/bin/echo</jsdl-posix:Executable>
        <jsdl-posix:Argument>Hello from JSDL</jsdl-posix:Argument>
        <jsdl-posix:Output>jsdl.out</jsdl-posix:Output>
      </jsdl-posix:POSIXApplication>
    </jsdl:Application>
  </jsdl:JobDescription>
</jsdl:JobDefinition>
"#,
    ),
    (
        "xrsl",
        "xrsl",
        "&(executable = \"/bin/sh\")(arguments = \"-c\" \"echo Hello from xRSL on $(uname -s)\")(stdout = \"xrsl.out\")(count = 2)\n",
    ),
    (
        "rsl",
        "rsl",
        "&(executable = /bin/echo)(arguments = \"Hello from GRAM RSL\")(stdout = rsl.out)\n",
    ),
    (
        "jdl",
        "jdl",
        "[\n  Executable = \"/bin/echo\";\n  Arguments = \"Hello from gLite JDL\";\n  StdOutput = \"jdl.out\";\n]\n",
    ),
    (
        "condor",
        "condor",
        "executable = /bin/echo\narguments = \"Hello from HTCondor\"\noutput = condor.out\nrequest_cpus = 1\nqueue\n",
    ),
    (
        "slurm",
        "slurm",
        "#!/bin/sh\n#SBATCH --job-name=hello-slurm\n#SBATCH --output=slurm.out\n#SBATCH --time=00:05:00\necho \"Hello from a Slurm batch script\"\n",
    ),
    (
        "json",
        "json",
        r#"{"name": "hello-json", "executable": "/bin/echo", "arguments": ["Hello from Brokk's JSON"], "stdout": "json.out"}"#,
    ),
];

const RESERVED: &str = r#"{"name": "reserved", "executable": "/bin/echo", "arguments": ["Hello from a reservation"], "stdout": "reserved.out", "wall_time": 600}"#;

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
    std::fs::write(&config_path, config(&dir))?;
    let config = brokk_server::Config::load(&config_path)?;
    let rt = tokio::runtime::Runtime::new()?;
    let running = rt.block_on(brokk_server::start(config))?;
    let url = format!("http://{}", running.addr);
    println!("broker at {url} with embedded sites small (4 slots), medium (16), large (64)");
    let client = BrokerClient::new(&url, "quickstart");

    let mut submitted = Vec::new();
    for (label, format, text) in EXAMPLES {
        let accepted = client.submit(text, Some(format), None)?;
        for w in &accepted.warnings {
            println!("  {label}: warning: {w}");
        }
        submitted.push((label.to_string(), accepted.id));
    }
    let prefs = JobPreferences {
        use_reservations: Some(true),
        ..JobPreferences::default()
    };
    let accepted = client.submit(RESERVED, Some("json"), Some(prefs))?;
    submitted.push(("reserved".to_string(), accepted.id));

    let start = Instant::now();
    let mut jobs = Vec::new();
    for (label, id) in &submitted {
        let j = loop {
            let j = client.job(id)?;
            if matches!(j.state.as_str(), "finished" | "failed" | "cancelled")
                || start.elapsed() > Duration::from_secs(60)
            {
                break j;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        jobs.push((label.clone(), j));
    }

    println!(
        "\n{:<10} {:<8} {:<8} {:>14} {:>11} {:<10}",
        "job", "language", "site", "predicted (s)", "actual (s)", "state"
    );
    let mut ok = true;
    for (label, j) in &jobs {
        let actual = j.ended.map(|e| (e - j.submitted).0);
        let reserved = j
            .history
            .iter()
            .any(|h| h.detail.as_deref().is_some_and(|d| d.contains("reservation")));
        println!(
            "{:<10} {:<8} {:<8} {:>14} {:>11} {:<10}",
            if reserved { format!("{label}*") } else { label.clone() },
            j.format,
            j.site.as_deref().unwrap_or("-"),
            j.predicted_ttd.map_or("-".into(), |v| v.to_string()),
            actual.map_or("-".into(), |v| v.to_string()),
            j.state
        );
        ok &= j.state == "finished" && j.exit_code == Some(0);
        if let Some(name) = &j.stdout {
            if let Ok(bytes) = client.file(&j.id, name) {
                std::fs::write(dir.join(format!("{label}.out")), bytes)?;
            }
        }
    }
    println!("(* ran in an advance reservation)\noutputs in {}", dir.display());
    Ok(if ok { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
