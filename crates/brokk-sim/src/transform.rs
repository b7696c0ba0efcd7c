//! Workload transformations: which processor count sizes a job, a time
//! window, load scaling by compressing or stretching inter-arrival times,
//! and job filters. Each takes records and returns new ones, so they
//! compose in any order.

use crate::swf::SwfJob;

/// Which of a trace job's processor counts is its size
/// (`[workload] processors`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Processors {
    /// What the user asked for (SWF field 8), the allocated count where
    /// the trace has none: the job as a scheduler saw it when it was
    /// submitted. The default.
    #[default]
    Requested,
    /// What the machine gave it (SWF field 5), as Alea and GridSim read a
    /// trace ([`allocated`]).
    Allocated,
}

/// The jobs sized by the processors the machine allocated them (SWF field
/// 5, which then stands for the request too, field 8, so every later step
/// reads one size). A job the trace records no allocation for, most of
/// them cancelled before they started, is left out.
pub fn allocated(jobs: &[SwfJob]) -> Vec<SwfJob> {
    jobs.iter()
        .filter(|j| j.procs > 0)
        .map(|j| SwfJob {
            req_procs: j.procs,
            ..*j
        })
        .collect()
}

/// The jobs submitted in `[from, to)`, with submit times shifted so the window
/// starts at 0.
pub fn window(jobs: &[SwfJob], from: i64, to: i64) -> Vec<SwfJob> {
    jobs.iter()
        .filter(|j| j.submit >= from && j.submit < to)
        .map(|j| SwfJob {
            submit: j.submit - from,
            ..*j
        })
        .collect()
}

/// Scales the offered load by `factor` by dividing every submit time, measured
/// from the first, by it (so inter-arrival gaps shrink for a factor above 1);
/// sizes and run times are kept. Times are rounded to the nearest second.
pub fn scale_load(jobs: &[SwfJob], factor: f64) -> Vec<SwfJob> {
    if !(factor.is_finite() && factor > 0.0) {
        return jobs.to_vec();
    }
    let first = jobs.iter().map(|j| j.submit).min().unwrap_or(0);
    jobs.iter()
        .map(|j| SwfJob {
            submit: first + ((j.submit - first) as f64 / factor).round() as i64,
            ..*j
        })
        .collect()
}

/// Which jobs to keep; every bound that is set must hold. Experiments read it
/// from TOML (`filter = { min_size = 2, statuses = [1] }`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Filter {
    /// Smallest size (requested processors, else allocated).
    pub min_size: Option<i64>,
    /// Largest size.
    pub max_size: Option<i64>,
    /// Shortest run time, seconds.
    pub min_run: Option<i64>,
    /// Longest run time, seconds.
    pub max_run: Option<i64>,
    /// Keep only these statuses (SWF field 11), if any are given.
    pub statuses: Vec<i64>,
    /// Keep only these partitions (SWF field 16), if any are given.
    pub partitions: Vec<i64>,
    /// Keep only these users (SWF field 12), if any are given.
    pub users: Vec<i64>,
}

impl Filter {
    /// Whether `job` passes.
    pub fn keeps(&self, job: &SwfJob) -> bool {
        let size = if job.req_procs > 0 { job.req_procs } else { job.procs };
        let within = |v: i64, lo: Option<i64>, hi: Option<i64>| lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
        let listed = |v: i64, list: &[i64]| list.is_empty() || list.contains(&v);
        within(size, self.min_size, self.max_size)
            && within(job.run, self.min_run, self.max_run)
            && listed(job.status, &self.statuses)
            && listed(job.partition, &self.partitions)
            && listed(job.user, &self.users)
    }

    /// The jobs that pass.
    pub fn apply(&self, jobs: &[SwfJob]) -> Vec<SwfJob> {
        jobs.iter().filter(|j| self.keeps(j)).copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: i64, submit: i64, run: i64, size: i64) -> SwfJob {
        SwfJob {
            id,
            submit,
            run,
            procs: size,
            req_procs: -1,
            status: 1,
            partition: 1,
            ..SwfJob::default()
        }
    }

    #[test]
    fn a_window_keeps_its_jobs_and_starts_at_zero() {
        let js = [job(1, 5, 1, 1), job(2, 10, 1, 1), job(3, 20, 1, 1)];
        let w = window(&js, 10, 20);
        assert_eq!(w.len(), 1);
        assert_eq!((w[0].id, w[0].submit), (2, 0));
    }

    #[test]
    fn doubling_the_load_halves_the_gaps_and_keeps_the_work() {
        let js = [job(1, 100, 50, 4), job(2, 110, 60, 2), job(3, 131, 70, 1)];
        let s = scale_load(&js, 2.0);
        assert_eq!(s.iter().map(|j| j.submit).collect::<Vec<_>>(), vec![100, 105, 116]);
        assert_eq!(
            s.iter().map(|j| (j.run, j.procs)).collect::<Vec<_>>(),
            vec![(50, 4), (60, 2), (70, 1)]
        );
        assert_eq!(scale_load(&js, 0.0), js.to_vec());
    }

    #[test]
    fn filters_combine_their_bounds() {
        let mut js = vec![job(1, 0, 10, 1), job(2, 0, 100, 8), job(3, 0, 1000, 64)];
        js[2].status = 5;
        let f = Filter {
            min_size: Some(2),
            statuses: vec![1],
            ..Filter::default()
        };
        assert_eq!(f.apply(&js).iter().map(|j| j.id).collect::<Vec<_>>(), vec![2]);
        let f = Filter {
            max_run: Some(100),
            ..Filter::default()
        };
        assert_eq!(f.apply(&js).len(), 2);
    }
}
