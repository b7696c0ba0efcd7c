//! What a scheduler fills in when it accepts a job, in the job's own
//! language: the ids in HTCondor's `$(Cluster)` and Slurm's `%j`, `%A`,
//! `%a`, `%x`, `%u` file-name patterns, and the standard streams a job
//! keeps when it names none (Slurm's `slurm-%j.out`, holding both; for the
//! others `stdout` and `stderr`, as ARC's and HTCondor's users fetch them).
//! And what the site fills in where the job runs: GRAM's standard RSL
//! substitutions (`$(HOME)`, `$(SCRATCH_DIRECTORY)`, ...), which a reader
//! keeps as written.

use brokk_model::Job;

use crate::Format;

/// The ids a broker gives one job of a submission.
#[derive(Debug, Clone, Copy)]
pub struct Ids<'a> {
    /// The job's own id.
    pub job: &'a str,
    /// The submission's id (HTCondor's cluster, Slurm's array job): its
    /// first job's id.
    pub submission: &'a str,
    /// The job's place in its submission, from 0 (HTCondor's process,
    /// Slurm's array index).
    pub index: usize,
    /// Its owner.
    pub user: &'a str,
}

/// Fills in `ids` where `format` writes placeholders, and names the standard
/// streams the job would otherwise lose.
pub fn assign(format: Format, job: &mut Job, ids: Ids<'_>) {
    keep_streams(format, job);
    match format {
        Format::Condor => {
            let fill = |s: &mut String| *s = condor(s, ids.submission);
            each_string(job, fill);
        }
        Format::Slurm => {
            let name = job.name.clone().unwrap_or_default();
            // An array task's `%a` is its task id, as Slurm gives it.
            let ids = Ids {
                index: crate::slurm::task_of(job).map_or(ids.index, |t| t as usize),
                ..ids
            };
            for s in [&mut job.stdout, &mut job.stderr, &mut job.stdin].into_iter().flatten() {
                *s = slurm(s, ids, &name);
            }
            // An array task finds its array's id (its submission's first
            // job), as Slurm sets it.
            if crate::slurm::task_of(job).is_some() && !job.environment.iter().any(|v| v.name == "SLURM_ARRAY_JOB_ID") {
                job.environment.push(brokk_model::EnvVar {
                    name: "SLURM_ARRAY_JOB_ID".into(),
                    value: ids.submission.to_string(),
                });
            }
        }
        _ => {}
    }
}

/// File-name patterns written in the target's own syntax: HTCondor's
/// `$(Cluster)` is Slurm's `%j` and back (`%A` too, `%x` the job's name, `%%`
/// a percent sign); a pattern the target has no form for is kept as written
/// and named in the returned notes. Canonical JSON keeps every form.
/// A language without `%a` gets each task's own index in its names.
pub(crate) fn translate_patterns(format: Format, job: &mut Job) -> Vec<String> {
    let mut notes = Vec::new();
    if format == Format::Json {
        return notes;
    }
    let name = job.name.clone();
    let task = (format != Format::Slurm)
        .then(|| crate::slurm::task_of(job))
        .flatten()
        .map(|t| t.to_string());
    for (what, slot) in [
        ("stdin", &mut job.stdin),
        ("stdout", &mut job.stdout),
        ("stderr", &mut job.stderr),
    ] {
        let Some(s) = slot else { continue };
        if let Some(t) = &task {
            *s = crate::slurm::task_index(s, t);
        }
        let (out, kept) = match format {
            Format::Slurm => (condor(s, "%j"), Vec::new()),
            Format::Condor => slurm_to_condor(s, name.as_deref()),
            _ => (s.clone(), patterns_in(s)),
        };
        if !kept.is_empty() {
            notes.push(format!(
                "{what}: the file-name pattern {} has no form in {format}; written as it is",
                kept.join(", ")
            ));
        }
        *s = out;
    }
    notes
}

/// The id patterns of either language in `s`.
fn patterns_in(s: &str) -> Vec<String> {
    let lower = s.to_ascii_lowercase();
    let mut found: Vec<String> = ["$(Cluster)", "$(ClusterId)"]
        .iter()
        .filter(|p| lower.contains(&p.to_ascii_lowercase()))
        .map(|p| p.to_string())
        .collect();
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '%' {
            let mut p = String::from("%");
            while let Some(&d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                p.push(d);
                chars.next();
            }
            if let Some(l) = chars.next().filter(|l| l.is_ascii_alphabetic()) {
                p.push(l);
                found.push(p);
            }
        }
    }
    found
}

/// Slurm's patterns in HTCondor's syntax, and those it has no form for.
fn slurm_to_condor(s: &str, name: Option<&str>) -> (String, Vec<String>) {
    let (mut out, mut kept) = (String::with_capacity(s.len()), Vec::new());
    let mut rest = s;
    while let Some(p) = rest.find('%') {
        out.push_str(&rest[..p]);
        let after = &rest[p + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        let letter = after[digits..].chars().next();
        let whole = &rest[p..p + 1 + digits + letter.map_or(0, char::len_utf8)];
        match (letter, name) {
            (Some('%'), _) => out.push('%'),
            (Some('j' | 'A'), _) => out.push_str("$(Cluster)"),
            (Some('x'), Some(n)) => out.push_str(n),
            (Some(l), _) if l.is_ascii_alphabetic() => {
                out.push_str(whole);
                kept.push(whole.to_string());
            }
            _ => out.push_str(whole),
        }
        rest = &rest[p + whole.len()..];
    }
    out.push_str(rest);
    (out, kept)
}

/// Names the streams a job leaves unnamed.
fn keep_streams(format: Format, job: &mut Job) {
    if format == Format::Slurm {
        // sbatch: output to slurm-%j.out, and error wherever output goes.
        let out = job.stdout.get_or_insert_with(|| "slurm-%j.out".to_string()).clone();
        job.stderr.get_or_insert(out);
    } else {
        job.stdout.get_or_insert_with(|| "stdout".to_string());
        job.stderr.get_or_insert_with(|| "stderr".to_string());
    }
}

/// GRAM's standard RSL substitutions, which the job manager defines where the
/// job runs: the RSL reader keeps them as written, and the site fills them
/// in ([`fill_at_site`]).
pub const GRAM_VARIABLES: [&str; 9] = [
    "HOME",
    "LOGNAME",
    "GLOBUS_ID",
    "GLOBUS_GRAM_JOB_CONTACT",
    "GLOBUS_HOST_MANUFACTURER",
    "GLOBUS_HOST_CPUTYPE",
    "GLOBUS_HOST_OSNAME",
    "GLOBUS_HOST_OSVERSION",
    "SCRATCH_DIRECTORY",
];

/// Replaces `$(NAME)` for each of GRAM's variables `values` names, in every
/// string of the job.
pub fn fill_at_site(job: &mut Job, values: &[(&str, String)]) {
    // Not in a script: there `$(HOME)` is the shell's command substitution.
    each_string(job, |s| {
        if !s.contains("$(") {
            return;
        }
        for (name, value) in values {
            *s = s.replace(&format!("$({name})"), value);
        }
    });
}

/// Every string of a job a submit file's macros can reach.
fn each_string(job: &mut Job, mut f: impl FnMut(&mut String)) {
    for s in [
        &mut job.name,
        &mut job.executable,
        &mut job.stdin,
        &mut job.stdout,
        &mut job.stderr,
    ]
    .into_iter()
    .flatten()
    {
        f(s);
    }
    job.arguments.iter_mut().for_each(&mut f);
    job.environment.iter_mut().for_each(|v| f(&mut v.value));
    for i in &mut job.input_files {
        f(&mut i.name);
        if let Some(s) = &mut i.source {
            f(s);
        }
    }
    for o in &mut job.output_files {
        f(&mut o.name);
        if let Some(t) = &mut o.target {
            f(t);
        }
    }
}

/// `$(Cluster)` and `$(ClusterId)`, in any case, replaced by `cluster`.
fn condor(s: &str, cluster: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("$(") {
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let name = after[2..].split(')').next().unwrap_or("");
        let closed = after.len() > name.len() + 2;
        if closed && (name.eq_ignore_ascii_case("cluster") || name.eq_ignore_ascii_case("clusterid")) {
            out.push_str(cluster);
            rest = &after[name.len() + 3..];
        } else {
            out.push_str("$(");
            rest = &after[2..];
        }
    }
    out.push_str(rest);
    out
}

/// Slurm's file-name pattern: `%j` (job id), `%A` (array job id), `%a`
/// (array index, zero-padded to the width given as in `%3a`), `%x` (job
/// name), `%u` (user), `%%`; others (`%N`, `%t`, known only where the job
/// runs) are left as they are.
fn slurm(s: &str, ids: Ids<'_>, name: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut width = String::new();
        while let Some(&(_, d)) = chars.peek() {
            if !d.is_ascii_digit() {
                break;
            }
            width.push(d);
            chars.next();
        }
        let pad = width.parse::<usize>().unwrap_or(0).min(10);
        match chars.next() {
            Some((_, '%')) => out.push('%'),
            Some((_, 'j')) => out.push_str(ids.job),
            Some((_, 'A')) => out.push_str(ids.submission),
            Some((_, 'a')) => out.push_str(&format!("{:0pad$}", ids.index)),
            Some((_, 'x')) => out.push_str(name),
            Some((_, 'u')) => out.push_str(ids.user),
            Some((j, other)) => out.push_str(&s[i..j + other.len_utf8()]),
            None => out.push_str(&s[i..]),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDS: Ids<'static> = Ids {
        job: "4f2a",
        submission: "4f29",
        index: 7,
        user: "ann",
    };

    fn read(format: Format, text: &str) -> Job {
        crate::read(format, text, &crate::ReadOptions::default())
            .unwrap()
            .jobs
            .remove(0)
    }

    #[test]
    fn condor_cluster_is_the_submission() {
        let mut j = read(
            Format::Condor,
            "executable = /bin/echo\narguments = $(Cluster).$(Process)\noutput = out.$(ClusterId).$(Process)\nqueue\n",
        );
        assign(Format::Condor, &mut j, IDS);
        assert_eq!(j.stdout.as_deref(), Some("out.4f29.0"));
        assert_eq!(j.arguments, ["4f29.0"]);
        assert_eq!(j.stderr.as_deref(), Some("stderr"), "kept when unnamed");
    }

    #[test]
    fn slurm_patterns_and_default_output() {
        let mut j = read(
            Format::Slurm,
            "#!/bin/sh\n#SBATCH --job-name=sim\n#SBATCH --output=%x-%A_%3a.%j.out\n#SBATCH --error=e%%-%N-%u\necho hi\n",
        );
        assign(Format::Slurm, &mut j, IDS);
        assert_eq!(j.stdout.as_deref(), Some("sim-4f29_007.4f2a.out"));
        assert_eq!(j.stderr.as_deref(), Some("e%-%N-ann"));
        let mut j = read(Format::Slurm, "#!/bin/sh\necho hi\n");
        assign(Format::Slurm, &mut j, IDS);
        assert_eq!(j.stdout.as_deref(), Some("slurm-4f2a.out"));
        assert_eq!(j.stderr, j.stdout, "sbatch sends error where output goes");
    }

    #[test]
    fn gram_variables_are_kept_by_the_reader_and_filled_at_the_site() {
        let mut j = read(
            Format::Rsl,
            "&(executable = $(HOME)/bin/app)(arguments = $(SCRATCH_DIRECTORY)/in $(LOGNAME))(stdout = $(GLOBUS_HOST_OSNAME).out)",
        );
        assert_eq!(j.executable.as_deref(), Some("$(HOME)/bin/app"));
        fill_at_site(
            &mut j,
            &[
                ("HOME", "/work/job-7".into()),
                ("SCRATCH_DIRECTORY", "/work/job-7".into()),
                ("LOGNAME", "ann".into()),
                ("GLOBUS_HOST_OSNAME", "linux".into()),
            ],
        );
        assert_eq!(j.executable.as_deref(), Some("/work/job-7/bin/app"));
        assert_eq!(j.arguments, ["/work/job-7/in", "ann"]);
        assert_eq!(j.stdout.as_deref(), Some("linux.out"));
        // Others stay undefined.
        let e = crate::read(Format::Rsl, "&(executable = $(NOPE)/x)", &crate::ReadOptions::default()).unwrap_err();
        assert!(e.to_string().contains("undefined variable `$(NOPE)`"), "{e}");
    }

    #[test]
    fn file_name_patterns_move_between_condor_and_slurm() {
        let mut j = Job {
            name: Some("sim".into()),
            stdout: Some("out.$(Cluster).txt".into()),
            stderr: Some("%x-%j_%3a.err".into()),
            stdin: Some("in.%N".into()),
            ..Job::default()
        };
        let mut to_slurm = j.clone();
        assert!(translate_patterns(Format::Slurm, &mut to_slurm).is_empty());
        assert_eq!(to_slurm.stdout.as_deref(), Some("out.%j.txt"));
        let notes = translate_patterns(Format::Condor, &mut j);
        assert_eq!(j.stderr.as_deref(), Some("sim-$(Cluster)_%3a.err"));
        assert_eq!(j.stdin.as_deref(), Some("in.%N"));
        assert_eq!(notes.len(), 2, "{notes:?}");
        let mut x = Job {
            stdout: Some("o.%j".into()),
            ..Job::default()
        };
        let notes = translate_patterns(Format::Xrsl, &mut x);
        assert!(notes[0].contains("%j") && notes[0].contains("xrsl"), "{notes:?}");
        assert_eq!(slurm_to_condor("100%", None).0, "100%");
    }

    #[test]
    fn an_array_tasks_pattern_is_its_task_id() {
        let jobs = crate::read(
            Format::Slurm,
            "#!/bin/sh\n#SBATCH --array=4,9\n#SBATCH --output=t_%A_%a.out\necho $SLURM_ARRAY_TASK_ID\n",
            &crate::ReadOptions::default(),
        )
        .unwrap()
        .jobs;
        let outs: Vec<String> = jobs
            .into_iter()
            .enumerate()
            .map(|(index, mut j)| {
                assign(Format::Slurm, &mut j, Ids { index, ..IDS });
                j.stdout.unwrap()
            })
            .collect();
        assert_eq!(outs, ["t_4f29_4.out", "t_4f29_9.out"]);
    }

    #[test]
    fn odd_patterns_survive() {
        assert_eq!(condor("$(Cluster", "c"), "$(Cluster");
        assert_eq!(condor("a$(Other)b$(cluster)", "c"), "a$(Other)bc");
        assert_eq!(slurm("100%", IDS, "n"), "100%");
        assert_eq!(slurm("%99999999999a", IDS, "n"), "0000000007");
        assert_eq!(slurm("é%jé", IDS, "n"), "é4f2aé");
    }
}
