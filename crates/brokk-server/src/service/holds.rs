//! The holds a workflow admission makes at the sites, written down as the
//! sites grant them, so that a broker killed in the middle of an admission
//! lets them go when it starts again instead of leaving them to block the
//! sites until they lapse.
//!
//! One file per admission in progress (`ADMISSION.holds`): its owner on the
//! first line, then a `SITE RESERVATION` line per grant. The file goes when
//! the admission ends either way (its guard is dropped); a process killed
//! meanwhile leaves it behind, and a line written before the kill is in the
//! file (a write reaches the kernel at once; only a crash of the host loses
//! it, and the holds then lapse on their own).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use brokk_core::ReservationId;

/// The directory of the admissions in progress.
#[derive(Debug, Clone)]
pub struct HoldJournal {
    dir: PathBuf,
}

/// What a killed admission left: its id, its owner and its grants.
#[derive(Debug, Clone, PartialEq)]
pub struct Leftover {
    /// The admission (the workflow's id).
    pub admission: String,
    /// Whose holds they are.
    pub owner: String,
    /// The grants: (site, reservation).
    pub holds: Vec<(String, ReservationId)>,
}

impl HoldJournal {
    /// The journal kept in `dir` (made when first needed).
    pub fn new(dir: PathBuf) -> HoldJournal {
        HoldJournal { dir }
    }

    fn path(&self, admission: &str) -> PathBuf {
        self.dir.join(format!("{admission}.holds"))
    }

    /// Starts writing down admission `admission` of `owner`; the file goes
    /// with the returned guard.
    pub fn start(&self, admission: &str, owner: &str) -> std::io::Result<AdmissionHolds> {
        std::fs::create_dir_all(&self.dir)?;
        let path = self.path(admission);
        let mut file = std::fs::OpenOptions::new().create_new(true).append(true).open(&path)?;
        file.write_all(format!("{owner}\n").as_bytes())?;
        Ok(AdmissionHolds {
            path,
            file: Mutex::new(file),
        })
    }

    /// The admissions a killed process left, oldest name first.
    pub fn leftovers(&self) -> Vec<Leftover> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out: Vec<Leftover> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_str()?.strip_suffix(".holds")?.to_string();
                Some(read(&e.path(), name))
            })
            .collect();
        out.sort_by(|a, b| a.admission.cmp(&b.admission));
        out
    }

    /// Forgets what admission `admission` left.
    pub fn forget(&self, admission: &str) {
        let _ = std::fs::remove_file(self.path(admission));
    }
}

/// A leftover file read back; a line cut short by the kill is skipped.
fn read(path: &Path, admission: String) -> Leftover {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
    let mut lines = whole.split_terminator('\n');
    let owner = lines.next().unwrap_or_default().to_string();
    let holds = lines
        .filter_map(|l| {
            let (site, id) = l.rsplit_once(' ')?;
            Some((site.to_string(), ReservationId(id.parse().ok()?)))
        })
        .collect();
    Leftover {
        admission,
        owner,
        holds,
    }
}

/// One admission's grants being written down; its file goes when this is
/// dropped (the admission committed or released what it holds).
#[derive(Debug)]
pub struct AdmissionHolds {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl AdmissionHolds {
    /// Site `site` granted reservation `id`. A line that cannot be written
    /// costs only the early release of that hold (it lapses instead).
    pub fn granted(&self, site: &str, id: ReservationId) {
        if let Ok(mut f) = self.file.lock() {
            // One write per line, so a kill cuts at most the last one short.
            if let Err(e) = f.write_all(format!("{site} {}\n", id.0).as_bytes()) {
                tracing::warn!("writing down a workflow hold at {site}: {e}");
            }
        }
    }
}

impl Drop for AdmissionHolds {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_killed_admission_leaves_its_grants_and_an_ended_one_nothing() {
        let dir = std::env::temp_dir().join(format!("brokk-holds-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let journal = HoldJournal::new(dir.clone());
        let ended = journal.start("w1", "ann").unwrap();
        ended.granted("hpc", ReservationId(4));
        drop(ended);
        let killed = journal.start("w2", "bob").unwrap();
        killed.granted("hpc", ReservationId(7));
        killed.granted("site two", ReservationId(9));
        // As a kill leaves it: no drop, and a line cut short.
        std::mem::forget(killed);
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("w2.holds"))
            .unwrap()
            .write_all(b"hpc 1")
            .unwrap();
        let left = journal.leftovers();
        assert_eq!(
            left,
            vec![Leftover {
                admission: "w2".into(),
                owner: "bob".into(),
                holds: vec![("hpc".into(), ReservationId(7)), ("site two".into(), ReservationId(9)),],
            }]
        );
        journal.forget("w2");
        assert!(journal.leftovers().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
