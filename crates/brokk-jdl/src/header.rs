//! A script's own `#SBATCH` header. A job whose description carries a
//! script (canonical JSON, a workflow task, any language that passes one
//! through) may begin that script with `#SBATCH` lines. sbatch would read
//! them as options, after whatever the site writes, and the later value
//! wins: a script could lengthen its own wall time, widen itself, enter a
//! reservation that is not its owner's or ask to run as another user. So
//! the header is read into the job here, as the Slurm reader reads a batch
//! script, where the broker's checks see it; the description's own fields
//! win over it (as sbatch's command line wins over a script); and the script
//! keeps everything but the directives.

use brokk_model::Job;
use serde_json::{Map, Value};

use crate::diag::Diagnostic;
use crate::slurm;

/// Fields that say a job's processors together: the description's shape is
/// taken whole, or the header's, never a mix of both.
const SHAPE: &[&str] = &["cpus", "cpus_per_node", "nodes", "cpus_per_task", "gpus"];

/// The script's header (its interpreter line, comments and `#SBATCH` lines
/// before the first command) and the script without its `#SBATCH` lines;
/// `None` when the header has no directive.
fn split(script: &str) -> Option<(String, String)> {
    let mut header = String::new();
    let mut rest = String::new();
    let mut in_header = true;
    let mut any = false;
    for line in script.split_inclusive('\n') {
        let t = line.trim();
        if in_header && !(t.is_empty() || t.starts_with('#')) {
            in_header = false;
        }
        if in_header {
            header.push_str(line);
            if t.starts_with("#SBATCH") {
                any = true;
                continue;
            }
        }
        rest.push_str(line);
    }
    any.then_some((header, rest))
}

/// A diagnostic about the script's header, placed in the description `src`
/// where that line of the script is found there (a script inside a JSON
/// string is escaped, so the search may fail: then at the start).
fn placed(src: &str, header: &str, d: &Diagnostic, error: bool) -> Diagnostic {
    let line = header.lines().nth(d.line.saturating_sub(1)).unwrap_or("").trim();
    let offset = (!line.is_empty()).then(|| src.find(line)).flatten().unwrap_or(0);
    let message = format!("the script's line {}: {}", d.line, d.message);
    if error {
        Diagnostic::error_at(src, offset, message)
    } else {
        Diagnostic::warning_at(src, offset, message)
    }
}

fn is_unset(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    }
}

/// The header's fields put into `job` where the description left them unset;
/// the names of the fields the description kept against the header.
fn merge(job: &mut Job, from: &Job) -> Vec<String> {
    let (Ok(Value::Object(mut mine)), Ok(Value::Object(theirs))) =
        (serde_json::to_value(&*job), serde_json::to_value(from))
    else {
        return Vec::new();
    };
    let shape_given = SHAPE.iter().any(|k| !is_unset(mine.get(*k)));
    let mut kept = Vec::new();
    for (k, v) in theirs {
        if is_unset(Some(&v)) {
            continue;
        }
        let whole_shape_given = shape_given && SHAPE.contains(&k.as_str());
        if is_unset(mine.get(&k)) && !whole_shape_given {
            mine.insert(k, v);
        } else if mine.get(&k) != Some(&v) {
            kept.push(k);
        }
    }
    if let Ok(merged) = serde_json::from_value::<Job>(Value::Object(Map::from_iter(mine))) {
        *job = merged;
    }
    kept
}

/// Reads each job's script header into the job (see the module's words):
/// the warnings to add, or the errors that refuse the description.
pub(crate) fn absorb(src: &str, jobs: &mut [Job]) -> Result<Vec<Diagnostic>, Vec<Diagnostic>> {
    let mut warnings = Vec::new();
    let mut errors = Vec::new();
    for job in jobs.iter_mut() {
        let Some((header, rest)) = job.script.as_deref().and_then(split) else {
            continue;
        };
        let read = match slurm::read(&header) {
            Ok(read) => read,
            Err(e) => {
                errors.extend(e.diagnostics.iter().map(|d| placed(src, &header, d, true)));
                continue;
            }
        };
        let array = read.jobs.len() != 1
            || read.jobs[0]
                .environment
                .iter()
                .any(|e| slurm::ARRAY_VARIABLES.contains(&e.name.as_str()));
        if array {
            let at = header.lines().position(|l| {
                l.split_whitespace()
                    .any(|w| w.starts_with("--array") || w.starts_with("-a"))
            });
            let d = Diagnostic::error_at(
                &header,
                header.lines().take(at.unwrap_or(0)).map(|l| l.len() + 1).sum(),
                "an array in the script's #SBATCH header would make several Slurm jobs of one; \
                 submit the job as a Slurm batch script or give the array in the description",
            );
            errors.push(placed(src, &header, &d, true));
            continue;
        }
        warnings.extend(read.warnings.iter().map(|d| placed(src, &header, d, false)));
        for field in merge(job, &read.jobs[0]) {
            warnings.push(Diagnostic::warning_at(
                src,
                0,
                format!("the description's `{field}` is kept over the script's #SBATCH header, as sbatch keeps its command line over a script's"),
            ));
        }
        job.script = Some(rest);
    }
    match errors.is_empty() {
        true => Ok(warnings),
        false => Err(errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use brokk_model::Duration;

    fn job(script: &str) -> Job {
        Job {
            script: Some(script.into()),
            ..Job::default()
        }
    }

    #[test]
    fn the_header_fills_what_the_description_left_unset_and_leaves_the_script() {
        let mut jobs = vec![Job {
            wall_time: Some(Duration(60)),
            ..job("#!/bin/sh\n#SBATCH --time=07:00:00\n#SBATCH --ntasks=6 --reservation=ann\n# note\necho hi\n#SBATCH --uid=0\n")
        }];
        let warnings = absorb("", &mut jobs).unwrap();
        let j = &jobs[0];
        assert_eq!(j.wall_time, Some(Duration(60)), "the description's wall time wins");
        assert_eq!((j.cpus, j.reservation.as_deref()), (Some(6), Some("ann")));
        // After the first command sbatch reads no directive: left as a comment.
        assert_eq!(
            j.script.as_deref(),
            Some("#!/bin/sh\n# note\necho hi\n#SBATCH --uid=0\n")
        );
        assert!(
            warnings.iter().any(|w| w.message.contains("`wall_time`")),
            "{warnings:?}"
        );
    }

    #[test]
    fn the_shape_is_the_descriptions_or_the_headers_never_a_mix() {
        let mut jobs = vec![Job {
            cpus: Some(1),
            ..job("#SBATCH --nodes=4 --cpus-per-task=8\nrun\n")
        }];
        let warnings = absorb("", &mut jobs).unwrap();
        assert_eq!(
            (jobs[0].cpus, jobs[0].nodes, jobs[0].cpus_per_task),
            (Some(1), None, None)
        );
        assert!(warnings.iter().any(|w| w.message.contains("`cpus`")), "{warnings:?}");
    }

    #[test]
    fn another_users_identity_and_arrays_are_refused_with_their_line() {
        let src = r##"{"script": "#!/bin/sh\n#SBATCH --uid=0\nid\n"}"##;
        let e = absorb(src, &mut [job("#!/bin/sh\n#SBATCH --uid=0\nid\n")]).unwrap_err();
        assert!(
            e[0].message
                .starts_with("the script's line 2: `--uid=0` asks to run as another user"),
            "{e:?}"
        );
        let e = absorb("", &mut [job("#SBATCH --gid 0\nid\n")]).unwrap_err();
        assert!(e[0].message.contains("--gid"), "{e:?}");
        let e = absorb("", &mut [job("#SBATCH -J x\n#SBATCH --array=0-3\nid\n")]).unwrap_err();
        assert!(e[0].message.starts_with("the script's line 2: an array"), "{e:?}");
    }

    #[test]
    fn a_script_without_directives_is_untouched() {
        let mut jobs = vec![job("#!/bin/bash\n# SBATCH is mentioned\necho #SBATCH\n")];
        assert!(absorb("", &mut jobs).unwrap().is_empty());
        assert_eq!(
            jobs[0].script.as_deref(),
            Some("#!/bin/bash\n# SBATCH is mentioned\necho #SBATCH\n")
        );
    }
}
