//! The Standard Workload Format of the Parallel Workloads Archive: one job per
//! line, 18 whitespace-separated fields, -1 for unknown, `;` header lines with
//! `Key: value` pairs. The header is kept and written back; a malformed line is
//! an error naming its line and field, or, when reading leniently, skipped and
//! counted.

use std::fmt::Write as _;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::Path;

/// One job record; fields keep the archive's units (seconds, KB per processor).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SwfJob {
    /// 1: job number.
    pub id: i64,
    /// 2: submit time, seconds from the log's start.
    pub submit: i64,
    /// 3: wait time in seconds.
    pub wait: i64,
    /// 4: run time in seconds.
    pub run: i64,
    /// 5: allocated processors.
    pub procs: i64,
    /// 6: average CPU time used, seconds.
    pub avg_cpu: f64,
    /// 7: used memory, KB per processor.
    pub used_memory: f64,
    /// 8: requested processors.
    pub req_procs: i64,
    /// 9: requested time (the user's estimate), seconds.
    pub req_time: i64,
    /// 10: requested memory, KB per processor.
    pub req_memory: i64,
    /// 11: status (1 completed, 0 failed, 5 cancelled, ...).
    pub status: i64,
    /// 12: user id.
    pub user: i64,
    /// 13: group id.
    pub group: i64,
    /// 14: executable (application) number.
    pub executable: i64,
    /// 15: queue number.
    pub queue: i64,
    /// 16: partition number (the site, in grid logs).
    pub partition: i64,
    /// 17: preceding job number.
    pub preceding: i64,
    /// 18: think time from the preceding job, seconds.
    pub think: i64,
}

/// A workload: its header lines, as written, and its jobs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Swf {
    /// Header lines including their leading `;`.
    pub header: Vec<String>,
    /// The job records, in file order.
    pub jobs: Vec<SwfJob>,
    /// Malformed lines skipped by a lenient read.
    pub skipped: usize,
}

/// A workload that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SwfError {
    /// A line that is not a job record.
    #[error("line {line}: {message}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// 1-based field number, 0 when the line as a whole is wrong.
        field: usize,
        /// What is wrong.
        message: String,
    },
    /// The file could not be read.
    #[error("reading the workload: {0}")]
    Io(#[from] io::Error),
}

impl Swf {
    /// The value of header key `key` (`; MaxProcs: 100` gives `"100"`).
    pub fn header_value(&self, key: &str) -> Option<&str> {
        self.header.iter().find_map(|l| {
            let body = l.trim_start().trim_start_matches(';').trim();
            let (k, v) = body.split_once(':')?;
            k.trim().eq_ignore_ascii_case(key).then(|| v.trim())
        })
    }

    /// The header's `Partition: N name` lines, as (number, name).
    pub fn partitions(&self) -> Vec<(i64, String)> {
        self.header
            .iter()
            .filter_map(|l| {
                let body = l.trim_start().trim_start_matches(';').trim();
                let (k, v) = body.split_once(':')?;
                if !k.trim().eq_ignore_ascii_case("Partition") {
                    return None;
                }
                let mut parts = v.split_whitespace();
                let n = parts.next()?.parse().ok()?;
                Some((n, parts.collect::<Vec<_>>().join(" ")))
            })
            .collect()
    }

    /// The machine size the header declares (`MaxProcs`, else `MaxNodes`).
    pub fn max_procs(&self) -> Option<i64> {
        self.header_value("MaxProcs")
            .or_else(|| self.header_value("MaxNodes"))
            .and_then(|v| v.parse().ok())
    }
}

fn parse_line(text: &str, line: usize) -> Result<SwfJob, SwfError> {
    let fields: Vec<&str> = text.split_ascii_whitespace().collect();
    if fields.len() != 18 {
        return Err(SwfError::Malformed {
            line,
            field: 0,
            message: format!("expected 18 fields, found {}", fields.len()),
        });
    }
    let int = |i: usize| -> Result<i64, SwfError> {
        fields[i].parse().map_err(|_| SwfError::Malformed {
            line,
            field: i + 1,
            message: format!("field {} must be an integer, found `{}`", i + 1, fields[i]),
        })
    };
    let real = |i: usize| -> Result<f64, SwfError> {
        fields[i]
            .parse()
            .ok()
            .filter(|v: &f64| v.is_finite())
            .ok_or_else(|| SwfError::Malformed {
                line,
                field: i + 1,
                message: format!("field {} must be a number, found `{}`", i + 1, fields[i]),
            })
    };
    Ok(SwfJob {
        id: int(0)?,
        submit: int(1)?,
        wait: int(2)?,
        run: int(3)?,
        procs: int(4)?,
        avg_cpu: real(5)?,
        used_memory: real(6)?,
        req_procs: int(7)?,
        req_time: int(8)?,
        req_memory: int(9)?,
        status: int(10)?,
        user: int(11)?,
        group: int(12)?,
        executable: int(13)?,
        queue: int(14)?,
        partition: int(15)?,
        preceding: int(16)?,
        think: int(17)?,
    })
}

/// Reads a workload. With `lenient`, malformed lines are skipped and counted in
/// [`Swf::skipped`] instead of ending the read.
pub fn read(input: impl BufRead, lenient: bool) -> Result<Swf, SwfError> {
    let mut swf = Swf::default();
    for (i, line) in input.lines().enumerate() {
        let line = line?;
        let t = line.trim();
        if t.is_empty() {
            continue;
        }
        if t.starts_with(';') {
            swf.header.push(line);
            continue;
        }
        match parse_line(t, i + 1) {
            Ok(job) => swf.jobs.push(job),
            Err(_) if lenient => swf.skipped += 1,
            Err(e) => return Err(e),
        }
    }
    Ok(swf)
}

/// Reads a workload file, gzip-compressed when its name ends in `.gz`.
pub fn read_path(path: &Path, lenient: bool) -> Result<Swf, SwfError> {
    let file = std::fs::File::open(path)?;
    let input: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::MultiGzDecoder::new(file))
    } else {
        Box::new(file)
    };
    read(BufReader::new(input), lenient)
}

/// A real field: whole numbers without a decimal point, as the archive
/// writes them.
fn real(line: &mut String, v: f64) {
    let _ = if v.fract() == 0.0 && v.abs() < 1e15 {
        write!(line, " {}", v as i64)
    } else {
        write!(line, " {v}")
    };
}

/// Writes a workload: the header as read, then one line per job.
pub fn write(swf: &Swf, mut out: impl Write) -> io::Result<()> {
    for h in &swf.header {
        writeln!(out, "{h}")?;
    }
    let mut line = String::new();
    for j in &swf.jobs {
        line.clear();
        let _ = write!(line, "{} {} {} {} {}", j.id, j.submit, j.wait, j.run, j.procs);
        real(&mut line, j.avg_cpu);
        real(&mut line, j.used_memory);
        let _ = write!(
            line,
            " {} {} {} {} {} {} {} {} {} {} {}",
            j.req_procs,
            j.req_time,
            j.req_memory,
            j.status,
            j.user,
            j.group,
            j.executable,
            j.queue,
            j.partition,
            j.preceding,
            j.think
        );
        writeln!(out, "{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "; Version: 2.2\n; MaxProcs: 100\n\n  1 0 5 100 4 -1 12.5 4 3600 -1 1 7 7 -1 -1 -1 -1 -1\n";

    #[test]
    fn reads_header_and_records_and_writes_them_back() {
        let swf = read(SAMPLE.as_bytes(), false).unwrap();
        assert_eq!(swf.max_procs(), Some(100));
        assert_eq!(swf.jobs[0].used_memory, 12.5);
        assert_eq!((swf.jobs[0].run, swf.jobs[0].req_time), (100, 3600));
        let mut out = Vec::new();
        write(&swf, &mut out).unwrap();
        assert_eq!(read(out.as_slice(), false).unwrap(), swf);
    }

    #[test]
    fn a_malformed_line_names_its_line_and_field_or_is_skipped() {
        let text = format!("{SAMPLE}2 x 0 1 1 -1 -1 1 1 -1 1 1 1 -1 -1 -1 -1 -1\n3 0 0\n");
        match read(text.as_bytes(), false) {
            Err(SwfError::Malformed { line, field, .. }) => assert_eq!((line, field), (5, 2)),
            other => panic!("{other:?}"),
        }
        let swf = read(text.as_bytes(), true).unwrap();
        assert_eq!((swf.jobs.len(), swf.skipped), (1, 2));
    }
}
