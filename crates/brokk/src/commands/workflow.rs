//! `brokk workflow`: workflows from DAGMan files, WfCommons instances or
//! Brokk's canonical JSON. `validate` reads one and its node files and
//! reports every error with its file, line and column; `plan` admits it
//! against a deadline on a described grid (a dry run of the broker's
//! admission: the same schedulers, empty sites); `submit`, `status`,
//! `list` and `cancel` do it for real through `brokk serve`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use brokk_broker::workflow::{admit, memory_sites, Network, Options, Scheduler, Topology};
use brokk_broker::Site;
use brokk_jdl::workflow::read_path;
use brokk_model::{Duration, Time};
use brokk_proto::wire::{WorkflowRequest, WorkflowView};
use brokk_sim::admission::GridConfig;

use super::user::{upload_files, Server};

/// Arguments of `brokk workflow`.
#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Read a workflow and its node files; print its tasks and dependencies,
    /// or every error with its place.
    Validate(ValidateArgs),
    /// Admit a workflow against a deadline on a grid described in a file
    /// (empty sites, as at the start of an experiment): print the plan, or
    /// why not and the earliest finish on offer.
    Plan(PlanArgs),
    /// Admit a workflow against a deadline at the broker service and run
    /// it: every task in its reservation, each child with its parents'
    /// outputs. Prints the plan, or why not and the earliest finish on
    /// offer (exit status 6).
    Submit(SubmitArgs),
    /// A workflow's tasks: where, when, and how each is doing.
    Status(StatusArgs),
    /// Your workflows.
    List(ListArgs),
    /// Cancel a workflow: its running tasks and every reservation left.
    Cancel(StatusArgs),
}

/// How to admit, for `plan` and `submit`.
#[derive(clap::Args)]
struct AdmitArgs {
    /// The deadline after the start, now for `submit` (`90m`, `6h`)
    /// [default: the workflow's own, else none].
    #[arg(long)]
    deadline: Option<Duration>,
    /// The scheduler: single, heftsync, heftsyncbt, hlst or genetic.
    #[arg(long, default_value = "heftsync")]
    scheduler: Scheduler,
    /// Print the plan or the refusal as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct SubmitArgs {
    /// A DAGMan file (its node files beside it) or Brokk's workflow JSON.
    file: PathBuf,
    #[command(flatten)]
    admit: AdmitArgs,
    #[command(flatten)]
    server: Server,
}

#[derive(clap::Args)]
struct StatusArgs {
    /// The workflow's id.
    id: String,
    /// Print it as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

#[derive(clap::Args)]
struct ListArgs {
    /// Print them as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    server: Server,
}

#[derive(clap::Args)]
struct PlanArgs {
    /// A DAGMan file, a WfFormat instance or Brokk's workflow JSON.
    file: PathBuf,
    /// The grid (TOML: `preset = "ediscom"`, or `[[sites]]` with name,
    /// capacity and speed, `links` as pairs of names, `bandwidth` in bytes/s).
    #[arg(long)]
    grid: PathBuf,
    #[command(flatten)]
    admit: AdmitArgs,
}

#[derive(clap::Args)]
struct ValidateArgs {
    /// A DAGMan file, a WfFormat instance or Brokk's workflow JSON.
    file: PathBuf,
    /// Print the workflow as Brokk's canonical JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `brokk workflow`.
pub fn run(a: Args) -> Result<ExitCode> {
    let v = match a.what {
        What::Validate(v) => v,
        What::Plan(p) => return plan(p),
        What::Submit(a) => return submit(a),
        What::Status(a) => return status(a, false),
        What::Cancel(a) => return status(a, true),
        What::List(a) => return list(a),
    };
    match read_path(&v.file) {
        Ok(read) => {
            for w in &read.warnings {
                eprintln!("{w}");
            }
            let w = &read.workflow;
            if v.json {
                say!("{}", serde_json::to_string_pretty(w)?);
            } else {
                let work: i64 = w.tasks.iter().map(|t| t.runtime.0 * i64::from(t.cores)).sum();
                let bytes: u64 = w.edges.iter().map(|e| e.bytes).sum();
                say!(
                    "{}: ok: {} tasks, {} dependencies, {} processor-seconds on the reference resource, {} bytes between tasks",
                    v.file.display(),
                    w.tasks.len(),
                    w.edges.len(),
                    work,
                    bytes
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            for d in &e.errors {
                eprintln!("{d}");
            }
            Ok(ExitCode::from(1))
        }
    }
}

/// Seconds after the plan's start, as `+1h30m`.
fn offset(t: Time) -> String {
    format!("+{}", Duration(t.0).human())
}

fn plan(p: PlanArgs) -> Result<ExitCode> {
    let Some(read) = read_or_report(&p.file) else {
        return Ok(ExitCode::from(2));
    };
    let text = std::fs::read_to_string(&p.grid).with_context(|| format!("reading {}", p.grid.display()))?;
    let grid: GridConfig = toml::from_str(&text).with_context(|| format!("in {}", p.grid.display()))?;
    let (specs, links) = grid.platform().with_context(|| format!("in {}", p.grid.display()))?;
    // Times are offsets from the start: the workflow starts at 0.
    let mut wf = read.workflow;
    let (start, horizon) = (Time(0), Time(400 * 86_400));
    if let Some(d) = p.admit.deadline {
        wf.deadline = Some(start + d);
    }
    let mut net = Network::new(specs.len(), links, 1, horizon)?;
    let mut sites = memory_sites(&specs, horizon);
    let topo = Topology::new(specs, &net);
    let opts = Options {
        scheduler: p.admit.scheduler,
        now: start,
        hold: Duration(600),
        explain: true,
    };
    let mut refs: Vec<&mut dyn Site> = sites.iter_mut().map(|s| s as &mut dyn Site).collect();
    let name = |i: usize| topo.sites.get(i).map_or("?", |s| s.name.as_str());
    match admit(&wf, &topo, &mut refs, &mut net, "you", &opts) {
        Ok(offer) => {
            if p.admit.json {
                say!("{}", serde_json::to_string_pretty(&offer)?);
                return Ok(ExitCode::SUCCESS);
            }
            let plan = &offer.plan;
            say!(
                "admitted by {}: {} tasks from {} to {}{}",
                p.admit.scheduler,
                plan.tasks.len(),
                offset(plan.start),
                offset(plan.finish),
                wf.deadline
                    .map_or(String::new(), |d| format!(" (deadline {})", offset(d)))
            );
            let w = plan.tasks.iter().map(|t| t.task.len()).max().unwrap_or(4).max(4);
            say!("{:<w$}  {:<12} {:>10} {:>10}", "task", "site", "start", "end");
            for t in &plan.tasks {
                say!(
                    "{:<w$}  {:<12} {:>10} {:>10}",
                    t.task,
                    name(t.site),
                    offset(t.start),
                    offset(t.end)
                );
            }
            if !plan.transfers.is_empty() {
                say!("transfers between sites:");
                for x in &plan.transfers {
                    let what = match x.kind {
                        brokk_broker::workflow::TransferKind::Data { bytes } => format!("{bytes} bytes"),
                        brokk_broker::workflow::TransferKind::Stream => "stream".to_string(),
                    };
                    say!(
                        "  {} -> {}: {} -> {}, {} to {}, {} at {} bytes/s",
                        x.from_task,
                        x.to_task,
                        name(x.from_site),
                        name(x.to_site),
                        offset(x.start),
                        offset(x.end),
                        what,
                        x.bytes_per_s
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(r) => {
            if p.admit.json {
                say!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                let offered = r.earliest_finish.map_or(String::new(), |f| {
                    format!("; the earliest finish on offer is {}", offset(f))
                });
                eprintln!("rejected by {}: {}{offered}", p.admit.scheduler, r.reason);
            }
            Ok(ExitCode::from(6))
        }
    }
}

/// Reads a workflow and its node files, or prints every error (`None`).
fn read_or_report(file: &std::path::Path) -> Option<brokk_jdl::workflow::ReadWorkflow> {
    match read_path(file) {
        Ok(r) => {
            for w in &r.warnings {
                eprintln!("{w}");
            }
            Some(r)
        }
        Err(e) => {
            for d in &e.errors {
                eprintln!("{d}");
            }
            None
        }
    }
}

fn submit(a: SubmitArgs) -> Result<ExitCode> {
    let Some(read) = read_or_report(&a.file) else {
        return Ok(ExitCode::from(2));
    };
    let mut wf = read.workflow;
    if let Some(d) = a.admit.deadline {
        wf.deadline = Some(brokk_proto::wall_clock() + d);
    }
    let c = a.server.client()?;
    // Node files name their inputs relative to the workflow's directory;
    // an input not there is one a parent task makes.
    let base = a.file.parent().map_or_else(|| PathBuf::from("."), PathBuf::from);
    let inputs = wf
        .tasks
        .iter()
        .filter_map(|t| t.job.as_ref())
        .flat_map(|j| &j.input_files);
    let uploads = upload_files(&c, &base, inputs, |p| p.is_file())?;
    let req = WorkflowRequest {
        workflow: wf,
        scheduler: Some(a.admit.scheduler.name().to_string()),
        uploads,
    };
    match c.submit_workflow(&req)? {
        Ok(view) => {
            for w in &view.warnings {
                eprintln!("warning: {w}");
            }
            if a.admit.json {
                say!("{}", serde_json::to_string_pretty(&view)?);
            } else {
                say!("{}", view.id);
                show(&view, brokk_proto::wall_clock());
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(refused) => {
            if a.admit.json {
                say!("{}", serde_json::to_string_pretty(&refused)?);
            } else {
                eprintln!("rejected by {}: {}", a.admit.scheduler, refused.error);
            }
            Ok(ExitCode::from(6))
        }
    }
}

/// Prints a workflow: a heading, then one line per task.
fn show(w: &WorkflowView, now: Time) {
    let until = |t: Time| {
        let d = t - now;
        if d.0 >= 0 {
            format!("in {}", d.human())
        } else {
            format!("{} ago", Duration(-d.0).human())
        }
    };
    let deadline = w.deadline.map_or(String::new(), |d| format!(", deadline {d}"));
    say!(
        "{} ({}): {} by {}, {} tasks from {} to {}{deadline}",
        w.id,
        w.name,
        w.state,
        w.scheduler,
        w.tasks.len(),
        w.start,
        w.finish
    );
    if let Some(r) = &w.reason {
        say!("  reason: {r}");
    }
    let tw = w.tasks.iter().map(|t| t.task.len()).max().unwrap_or(4).max(4);
    let jw = w.tasks.iter().map(|t| t.job.len()).max().unwrap_or(3).max(3);
    say!(
        "{:<tw$}  {:<jw$}  {:<10}  {:<12}  {:>13}  {:>8}  {:>4}",
        "task",
        "job",
        "state",
        "site",
        "start",
        "length",
        "exit"
    );
    for t in &w.tasks {
        say!(
            "{:<tw$}  {:<jw$}  {:<10}  {:<12}  {:>13}  {:>8}  {:>4}",
            t.task,
            t.job,
            t.state.as_str(),
            t.site,
            until(t.start),
            (t.end - t.start).human(),
            t.exit_code.map_or("-".to_string(), |c| c.to_string())
        );
    }
    for t in &w.tasks {
        for m in &t.moves {
            say!("  {} moved from {} to {} at {}: {}", t.task, m.from, m.to, m.at, m.why);
        }
    }
    for x in &w.transfers {
        say!(
            "  {} -> {}: {} -> {} from {} to {} at {} bytes/s",
            x.from_task,
            x.to_task,
            x.from_site,
            x.to_site,
            x.start,
            x.end,
            x.bytes_per_s
        );
    }
}

fn status(a: StatusArgs, cancel: bool) -> Result<ExitCode> {
    let c = a.server.client()?;
    let w = if cancel {
        c.cancel_workflow(&a.id)?
    } else {
        c.workflow(&a.id)?
    };
    if a.json {
        say!("{}", serde_json::to_string_pretty(&w)?);
    } else {
        show(&w, brokk_proto::wall_clock());
    }
    Ok(ExitCode::SUCCESS)
}

fn list(a: ListArgs) -> Result<ExitCode> {
    let all = a.server.client()?.workflows()?;
    if a.json {
        say!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(ExitCode::SUCCESS);
    }
    let iw = all.iter().map(|w| w.id.len()).max().unwrap_or(2).max(2);
    say!(
        "{:<iw$}  {:<20}  {:<9}  {:>5}  {:<20}  {:<20}",
        "id",
        "name",
        "state",
        "tasks",
        "finish",
        "deadline"
    );
    for w in &all {
        say!(
            "{:<iw$}  {:<20}  {:<9}  {:>5}  {:<20}  {:<20}",
            w.id,
            w.name,
            w.state.as_str(),
            w.tasks.len(),
            w.finish.to_string(),
            w.deadline.map_or("-".to_string(), |d| d.to_string())
        );
    }
    Ok(ExitCode::SUCCESS)
}
