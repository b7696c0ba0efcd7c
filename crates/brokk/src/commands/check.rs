//! What the broker answers to "would your sites take this?"
//! (`brokk submit --dry-run`, `brokk validate --broker`): each job's site,
//! and every site's answer in a table.

use std::process::ExitCode;

use brokk_model::Duration;
use brokk_proto::wire::{Checked, SiteCheck};

use super::listing::{aligned, shown};

/// The lines that show `checked` for the description `file`: per job, where
/// a decision now would send it, then each site's answer aligned in columns.
pub fn lines(file: &str, checked: &Checked) -> Vec<String> {
    let mut out = Vec::new();
    let several = checked.jobs.len() > 1;
    for (k, job) in checked.jobs.iter().enumerate() {
        let which = match (several, &job.name) {
            (true, Some(n)) => format!("{file}: job {} ({})", k + 1, shown(n)),
            (true, None) => format!("{file}: job {}", k + 1),
            (false, Some(n)) => format!("{file} ({})", shown(n)),
            (false, None) => file.to_string(),
        };
        out.push(match job.sites.iter().find(|s| Some(&s.site) == job.site.as_ref()) {
            Some(s) => format!(
                "{which}: the broker would send it to {} now: start {}, results {}",
                shown(&s.site),
                within(s.tts),
                within(s.ttd)
            ),
            None => format!("{which}: no site of the broker would take it now"),
        });
        let head = ["SITE", "ANSWER", "START", "RESULTS", "REASON"]
            .map(String::from)
            .to_vec();
        let rows: Vec<Vec<String>> = std::iter::once(head).chain(job.sites.iter().map(row)).collect();
        out.extend(aligned(&rows).into_iter().map(|line| format!("  {line}")));
    }
    out
}

/// One site's answer as table cells.
fn row(s: &SiteCheck) -> Vec<String> {
    let secs = |v: Option<i64>| v.map_or("-".to_string(), |v| Duration(v).human());
    [
        shown(&s.site),
        s.answer.clone(),
        secs(s.tts),
        secs(s.ttd),
        shown(&s.reasons.join("; ")),
    ]
    .to_vec()
}

/// "now" or "in 9m" for a prediction in seconds from now.
fn within(secs: Option<i64>) -> String {
    match secs {
        Some(s) if s > 0 => format!("in {}", Duration(s).human()),
        Some(_) => "now".into(),
        None => "?".into(),
    }
}

/// Prints `checked` for `file` (JSON, or the warnings and [`lines`]) and
/// returns the exit status.
pub fn show(file: &str, checked: &Checked, json: bool) -> ExitCode {
    if json {
        say!("{}", serde_json::to_string_pretty(checked).unwrap_or_default());
    } else {
        for w in &checked.warnings {
            eprintln!("warning: {file}: {w}");
        }
        for line in lines(file, checked) {
            say!("{line}");
        }
    }
    status(checked)
}

/// Whether every job has a site that takes it.
pub fn all_placed(checked: &Checked) -> bool {
    checked.jobs.iter().all(|j| j.site.is_some())
}

/// 0 when every job has a site that takes it, else 1.
pub fn status(checked: &Checked) -> ExitCode {
    if all_placed(checked) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

#[cfg(test)]
mod tests {
    use brokk_proto::wire::JobCheck;

    use super::*;

    fn site(name: &str, answer: &str, tts: Option<i64>, reasons: &[&str]) -> SiteCheck {
        SiteCheck {
            site: name.into(),
            answer: answer.into(),
            tts,
            ttd: tts.map(|t| t + 600),
            reasons: reasons.iter().map(|r| r.to_string()).collect(),
        }
    }

    #[test]
    fn the_chosen_site_is_said_first_then_every_site_in_columns() {
        let checked = Checked {
            jobs: vec![JobCheck {
                name: Some("sim".into()),
                site: Some("beta".into()),
                sites: vec![
                    site("beta", "takes", Some(0), &[]),
                    site("alpha", "takes", Some(540), &[]),
                    site(
                        "gamma",
                        "cannot",
                        None,
                        &["it asks for 64 processors, the site has at most 4"],
                    ),
                ],
            }],
            warnings: vec![],
        };
        assert_eq!(
            lines("job.sh", &checked),
            [
                "job.sh (sim): the broker would send it to beta now: start now, results in 10m",
                "  SITE   ANSWER  START  RESULTS  REASON",
                "  beta   takes   0s     10m",
                "  alpha  takes   9m     19m",
                "  gamma  cannot  -      -        it asks for 64 processors, the site has at most 4",
            ]
        );
        assert_eq!(status(&checked), ExitCode::SUCCESS);
        let nowhere = Checked {
            jobs: vec![JobCheck {
                name: None,
                site: None,
                sites: vec![site("gamma", "unavailable", None, &["connection refused"])],
            }],
            warnings: vec![],
        };
        assert_eq!(
            lines("a.jdl", &nowhere)[0],
            "a.jdl: no site of the broker would take it now"
        );
        assert_eq!(status(&nowhere), ExitCode::from(1));
    }
}
