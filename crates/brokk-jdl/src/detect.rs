//! Recognising a job description's language from its content, with the file
//! extension as a hint when the content is ambiguous.

use crate::Format;

/// The most likely format of `text`, or `None` when nothing fits.
pub fn detect(text: &str, extension: Option<&str>) -> Option<Format> {
    let hint = extension.and_then(|e| match e.to_ascii_lowercase().as_str() {
        "jsdl" | "xml" => Some(Format::Jsdl),
        "xrsl" => Some(Format::Xrsl),
        "rsl" => Some(Format::Rsl),
        "jdl" => Some(Format::Jdl),
        "sub" | "submit" | "condor" => Some(Format::Condor),
        "sh" | "sbatch" | "slurm" => Some(Format::Slurm),
        "json" => Some(Format::Json),
        _ => None,
    });
    let t = skip_comments(text);
    if t.starts_with("<?xml") || t.starts_with('<') {
        return Some(Format::Jsdl);
    }
    if t.starts_with('{') || (t.starts_with('[') && t[1..].trim_start().starts_with('{')) {
        return Some(Format::Json);
    }
    if text.lines().any(|l| l.trim_start().starts_with("#SBATCH")) || text.starts_with("#!") {
        return Some(Format::Slurm);
    }
    if t.starts_with('&') || t.starts_with('+') || t.starts_with('(') {
        // Both RSL dialects share the syntax; xRSL-only attributes or the extension decide.
        let lower: String = text.to_ascii_lowercase().split_whitespace().collect();
        let xrsl = [
            "(jobname",
            "(inputfiles",
            "(outputfiles",
            "(walltime",
            "(cputime",
            "(runtimeenvironment",
            "(benchmarks",
            "(count",
            "(memory",
            "(*",
        ]
        .iter()
        .any(|k| lower.contains(k));
        let rsl = [
            "(maxwalltime",
            "(max_wall_time",
            "(file_stage_in",
            "(hostcount",
            "(maxcputime",
            "(maxmemory",
            "(resourcemanagercontact",
            "(directory",
            "(project",
        ]
        .iter()
        .any(|k| lower.contains(k));
        return Some(match (hint, xrsl, rsl) {
            (Some(h @ (Format::Xrsl | Format::Rsl)), _, _) => h,
            (_, false, true) => Format::Rsl,
            _ => Format::Xrsl,
        });
    }
    let lower = text.to_ascii_lowercase();
    let has_queue = lower.lines().any(|l| {
        let l = l.trim();
        l == "queue" || l.starts_with("queue ")
    });
    if has_queue {
        return Some(Format::Condor);
    }
    if t.starts_with('[')
        || lower.contains(';')
            && lower
                .lines()
                .any(|l| l.trim_start().starts_with("executable") && l.contains('"'))
    {
        return Some(Format::Jdl);
    }
    hint
}

/// The text after leading whitespace and comment lines of any language.
fn skip_comments(text: &str) -> &str {
    let mut t = text.trim_start();
    loop {
        if t.starts_with("//") || (t.starts_with('#') && !t.starts_with("#!") && !t.starts_with("#SBATCH")) {
            t = t.find('\n').map_or("", |i| &t[i..]).trim_start();
        } else if t.starts_with("(*") {
            t = t.find("*)").map_or("", |i| &t[i + 2..]).trim_start();
        } else if t.starts_with("<!--") {
            t = t.find("-->").map_or("", |i| &t[i + 3..]).trim_start();
            if !t.starts_with('<') {
                return t;
            }
            return t;
        } else {
            return t;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_each_language_from_content() {
        assert_eq!(
            detect("<?xml version=\"1.0\"?><jsdl:JobDefinition/>", None),
            Some(Format::Jsdl)
        );
        assert_eq!(detect("&(executable=a)(jobname=x)", None), Some(Format::Xrsl));
        assert_eq!(detect("&(executable=a)(maxWallTime=5)", None), Some(Format::Rsl));
        assert_eq!(detect("&(executable=a)", Some("rsl")), Some(Format::Rsl));
        assert_eq!(detect("[ Executable = \"/bin/ls\"; ]", None), Some(Format::Jdl));
        assert_eq!(
            detect("Executable = \"/bin/ls\";\nStdOutput = \"o\";", None),
            Some(Format::Jdl)
        );
        assert_eq!(detect("executable = /bin/ls\nqueue 3\n", None), Some(Format::Condor));
        assert_eq!(detect("#!/bin/bash\n#SBATCH -n 4\nsrun a\n", None), Some(Format::Slurm));
        assert_eq!(detect("{\"executable\": \"a\"}", None), Some(Format::Json));
        assert_eq!(detect("", None), None);
    }
}
