//! The Grid Workloads Archive format (version 1): 29 tab- or space-separated
//! fields per job, `#` comment lines. Fields 1-16 mean what they mean in SWF;
//! then the submitting and executing sites (names or numbers), job structure,
//! network, disk and resource usage and requests, virtual organisation and
//! project. A header comment naming the columns (`# JobID SubmitTime ...`) is
//! honoured, so files with a subset of the columns read too; a line with the
//! wrong number of fields is an error naming the line.

use std::io::{self, BufRead};

use crate::swf::SwfJob;

/// The 29 columns of GWF version 1, in order.
pub const COLUMNS: [&str; 29] = [
    "JobID",
    "SubmitTime",
    "WaitTime",
    "RunTime",
    "NProcs",
    "AverageCPUTimeUsed",
    "UsedMemory",
    "ReqNProcs",
    "ReqTime",
    "ReqMemory",
    "Status",
    "UserID",
    "GroupID",
    "ExecutableID",
    "QueueID",
    "PartitionID",
    "OrigSiteID",
    "LastRunSiteID",
    "JobStructure",
    "JobStructureParams",
    "UsedNetwork",
    "UsedLocalDiskSpace",
    "UsedResources",
    "ReqPlatform",
    "ReqNetwork",
    "ReqLocalDiskSpace",
    "ReqResources",
    "VOID",
    "ProjectID",
];

/// One grid job: the SWF fields plus where it came from and ran.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GwfJob {
    /// Fields 1-16 (17 and 18 of SWF are -1).
    pub swf: SwfJob,
    /// Field 17: the site it was submitted to.
    pub orig_site: String,
    /// Field 18: the site it last ran on.
    pub run_site: String,
    /// Field 28: virtual organisation.
    pub vo: String,
    /// Field 29: project.
    pub project: String,
}

/// A GWF file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GwfError {
    /// A line that does not fit the columns.
    #[error("line {line}: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// The input could not be read.
    #[error("reading the workload: {0}")]
    Io(#[from] io::Error),
}

/// Reads GWF jobs; columns come from a `# JobID ...` header when present.
pub fn read(input: impl BufRead) -> Result<Vec<GwfJob>, GwfError> {
    let mut columns: Vec<String> = COLUMNS.iter().map(|c| c.to_string()).collect();
    let mut jobs = Vec::new();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if let Some(comment) = t.strip_prefix('#') {
            let names: Vec<&str> = comment.split_whitespace().collect();
            if names.first().is_some_and(|n| n.eq_ignore_ascii_case("JobID")) {
                columns = names.iter().map(|n| n.to_string()).collect();
            }
            continue;
        }
        let fields: Vec<&str> = t.split_whitespace().collect();
        if fields.len() != columns.len() {
            return Err(GwfError::Malformed {
                line: i + 1,
                message: format!("expected {} fields, found {}", columns.len(), fields.len()),
            });
        }
        let get = |name: &str| {
            columns
                .iter()
                .position(|c| c.eq_ignore_ascii_case(name))
                .map(|k| fields[k])
        };
        let int = |name: &str| -> Result<i64, GwfError> {
            match get(name) {
                None => Ok(-1),
                Some(v) => v
                    .parse::<i64>()
                    .or_else(|_| v.parse::<f64>().map(|f| f as i64))
                    .map_err(|_| GwfError::Malformed {
                        line: i + 1,
                        message: format!("{name} must be a number, found `{v}`"),
                    }),
            }
        };
        let real = |name: &str| -> f64 { get(name).and_then(|v| v.parse().ok()).unwrap_or(-1.0) };
        let text = |name: &str| get(name).unwrap_or("-1").to_string();
        jobs.push(GwfJob {
            swf: SwfJob {
                id: int("JobID")?,
                submit: int("SubmitTime")?,
                wait: int("WaitTime")?,
                run: int("RunTime")?,
                procs: int("NProcs")?,
                avg_cpu: real("AverageCPUTimeUsed"),
                used_memory: real("UsedMemory"),
                req_procs: int("ReqNProcs")?,
                req_time: int("ReqTime")?,
                req_memory: int("ReqMemory")?,
                status: int("Status")?,
                user: int("UserID")?,
                group: int("GroupID")?,
                executable: int("ExecutableID")?,
                queue: int("QueueID")?,
                partition: int("PartitionID")?,
                preceding: -1,
                think: -1,
            },
            orig_site: text("OrigSiteID"),
            run_site: text("LastRunSiteID"),
            vo: text("VOID"),
            project: text("ProjectID"),
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_full_rows_with_tabs_and_spaces() {
        let row = "1\t100\t5\t60\t1\t-1\t-1\t1\t3600\t-1\t1\t7\t1\t-1\t2\t3 siteA siteB UNITARY -1 -1 -1 -1 x86 -1 -1 -1 atlas P1";
        let jobs = read(format!("# a comment\n{row}\n").as_bytes()).unwrap();
        let j = &jobs[0];
        assert_eq!(
            (j.swf.submit, j.swf.run, j.swf.req_time, j.swf.partition),
            (100, 60, 3600, 3)
        );
        assert_eq!(
            (j.orig_site.as_str(), j.run_site.as_str(), j.vo.as_str()),
            ("siteA", "siteB", "atlas")
        );
    }

    #[test]
    fn a_header_selects_a_subset_of_columns() {
        let text = "# JobID SubmitTime RunTime NProcs OrigSiteID\n7 50 30 4 DAS2/fs0\n";
        let j = &read(text.as_bytes()).unwrap()[0];
        assert_eq!(
            (j.swf.id, j.swf.submit, j.swf.run, j.swf.procs, j.swf.wait),
            (7, 50, 30, 4, -1)
        );
        assert_eq!(j.orig_site, "DAS2/fs0");
    }

    #[test]
    fn a_short_line_is_an_error_with_its_number() {
        match read("# JobID SubmitTime RunTime\n1 2 3\n4 5\n".as_bytes()) {
            Err(GwfError::Malformed { line, .. }) => assert_eq!(line, 3),
            other => panic!("{other:?}"),
        }
    }
}
