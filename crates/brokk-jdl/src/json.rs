//! Brokk's canonical JSON: one job object, or an array of them.

use brokk_model::Job;

use crate::diag::{Diagnostic, Severity};
use crate::{ParseError, Parsed, Written};

/// Reads canonical JSON.
pub(crate) fn read(src: &str) -> Result<Parsed, ParseError> {
    // Parse to a value first so that a structural error is reported where it is,
    // then map to jobs so that a field error names the field.
    let value: serde_json::Value = serde_json::from_str(src).map_err(|e| diag(&e))?;
    let jobs = match value {
        serde_json::Value::Array(_) => serde_json::from_str::<Vec<Job>>(src),
        _ => serde_json::from_str::<Job>(src).map(|j| vec![j]),
    }
    .map_err(|e| diag(&e))?;
    Ok(Parsed {
        jobs,
        warnings: Vec::new(),
        together: false,
    })
}

fn diag(e: &serde_json::Error) -> ParseError {
    let msg = e.to_string();
    // serde_json appends " at line L column C"; the diagnostic carries those itself.
    let message = msg
        .rsplit_once(" at line ")
        .map_or(msg.as_str(), |(m, _)| m)
        .to_string();
    ParseError::from(Diagnostic {
        severity: Severity::Error,
        line: e.line().max(1),
        column: e.column().max(1),
        message,
    })
}

/// Writes one job as an object, several as an array, pretty-printed.
pub(crate) fn write(jobs: &[Job]) -> Written {
    let text = if jobs.len() == 1 {
        serde_json::to_string_pretty(&jobs[0])
    } else {
        serde_json::to_string_pretty(jobs)
    }
    .unwrap_or_default();
    Written {
        text: text + "\n",
        dropped: Vec::new(),
    }
}
