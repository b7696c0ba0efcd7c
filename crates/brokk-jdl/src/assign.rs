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
            for s in [&mut job.stdout, &mut job.stderr, &mut job.stdin].into_iter().flatten() {
                *s = slurm(s, ids, &name);
            }
        }
        _ => {}
    }
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
    fn odd_patterns_survive() {
        assert_eq!(condor("$(Cluster", "c"), "$(Cluster");
        assert_eq!(condor("a$(Other)b$(cluster)", "c"), "a$(Other)bc");
        assert_eq!(slurm("100%", IDS, "n"), "100%");
        assert_eq!(slurm("%99999999999a", IDS, "n"), "0000000007");
        assert_eq!(slurm("é%jé", IDS, "n"), "é4f2aé");
    }
}
