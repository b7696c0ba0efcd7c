//! The change feed: every job under the version of its latest change, so a
//! broker can follow many jobs with one request.

use std::collections::{BTreeMap, HashMap};

use crate::record::JobId;

/// The jobs changed since a version, and the version to ask from next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FeedPage {
    /// Ids of the caller's changed jobs, oldest change first.
    pub(crate) jobs: Vec<JobId>,
    /// Ask after this version next time.
    pub(crate) version: u64,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Feed {
    changes: BTreeMap<u64, JobId>,
    versions: HashMap<JobId, u64>,
    version: u64,
}

impl Feed {
    /// Records that job `id` changed.
    pub(crate) fn touch(&mut self, id: JobId) {
        self.restore(id, self.version + 1);
    }

    /// Puts job `id` back under the version of its latest change, as a
    /// restart found it; later changes get later versions.
    pub(crate) fn restore(&mut self, id: JobId, version: u64) {
        if let Some(old) = self.versions.insert(id, version) {
            self.changes.remove(&old);
        }
        self.changes.insert(version, id);
        self.version = self.version.max(version);
    }

    /// Versions continue after `version` (the latest of the jobs a restart
    /// did not load).
    pub(crate) fn continue_after(&mut self, version: u64) {
        self.version = self.version.max(version);
    }

    /// Drops job `id` from the feed; the version of its latest change.
    pub(crate) fn forget(&mut self, id: JobId) -> Option<u64> {
        let v = self.versions.remove(&id)?;
        self.changes.remove(&v);
        Some(v)
    }

    /// The version of job `id`'s latest change (0 if none).
    pub(crate) fn version_of(&self, id: JobId) -> u64 {
        self.versions.get(&id).copied().unwrap_or(0)
    }

    /// The latest version.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// Jobs that `mine` keeps, changed after `after`, at most `limit`.
    pub(crate) fn page(&self, after: u64, limit: usize, mine: impl Fn(JobId) -> bool) -> FeedPage {
        let mut jobs = Vec::new();
        let mut version = after;
        for (&v, &id) in self.changes.range(after + 1..) {
            if jobs.len() >= limit {
                break;
            }
            version = v;
            if mine(id) {
                jobs.push(id);
            }
        }
        FeedPage {
            version: if jobs.len() < limit {
                self.version.max(version)
            } else {
                version
            },
            jobs,
        }
    }
}
