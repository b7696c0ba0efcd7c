//! How a site runs its jobs, behind one seam: the embedded process runner,
//! a Slurm cluster, or (for benchmarks only) nothing at all. The runner
//! stages a job in, hands it to the backend, and stages it out; the agent
//! asks the backend to carry reservations into the resource manager.

pub(crate) mod local;
mod null;

use std::path::Path;
use std::sync::Arc;

use brokk_core::{Reservation, ReservationId};
use brokk_proto::wire::ClusterView;

use crate::config::Config;
use crate::launch::{End, Launch, Progress};
use crate::slurm::cli::SlurmError;
use crate::slurm::Slurm;

/// A site's backend.
#[derive(Debug, Clone)]
pub enum Backend {
    /// Local processes under their supervisors.
    Processes,
    /// A Slurm cluster.
    Slurm(Arc<Slurm>),
    /// An ARC compute element.
    Arc(Arc<crate::arc::ArcCe>),
    /// A Globus GRAM5 gatekeeper.
    Gram(Arc<crate::gram::GramCe>),
    /// Runs nothing: a job is marked running at its planned start and
    /// finishes at once with status 0. For measuring the broker and the
    /// agent without processes; never for real work.
    NullForBenchmarks,
}

impl Backend {
    /// Runs the staged job to its end.
    pub(crate) async fn execute<P: Progress>(&self, site: &P, config: &Config, launch: Launch, sandbox: &Path) -> End {
        match self {
            Backend::Processes => local::run(site, config, launch, sandbox).await,
            Backend::Slurm(s) => crate::slurm::exec::execute(site, s, launch, sandbox).await,
            Backend::Arc(a) => crate::arc::exec::execute(site, a, launch, sandbox).await,
            Backend::Gram(g) => crate::gram::exec::execute(site, g, launch, sandbox).await,
            Backend::NullForBenchmarks => null::run(site, launch).await,
        }
    }

    /// Whether jobs really run (and so need a sandbox and their files).
    pub fn runs_jobs(&self) -> bool {
        !matches!(self, Backend::NullForBenchmarks)
    }

    /// The Slurm cluster that holds the site's reservations: the backend
    /// itself, or the cluster behind an ARC CE.
    pub fn slurm(&self) -> Option<&Arc<Slurm>> {
        match self {
            Backend::Slurm(s) => Some(s),
            Backend::Arc(a) => a.slurm.as_ref(),
            _ => None,
        }
    }

    /// Why the resource manager does not answer; `None` while it does.
    pub fn down(&self) -> Option<String> {
        match self {
            Backend::Slurm(s) => s.down(),
            Backend::Arc(a) => a.down(),
            Backend::Gram(g) => g.down(),
            _ => None,
        }
    }

    /// The ARC CE, when the backend is one.
    pub fn arc(&self) -> Option<&Arc<crate::arc::ArcCe>> {
        match self {
            Backend::Arc(a) => Some(a),
            _ => None,
        }
    }

    /// The GRAM gatekeeper, when the backend is one.
    pub fn gram(&self) -> Option<&Arc<crate::gram::GramCe>> {
        match self {
            Backend::Gram(g) => Some(g),
            _ => None,
        }
    }

    /// The resource manager's view of its cluster, where it has one.
    pub fn cluster(&self) -> Option<ClusterView> {
        self.slurm().and_then(|s| s.cluster())
    }

    /// A Slurm cluster's health from its nodes, GLUE 2's `HealthState`
    /// ([`crate::slurm::health`]); an ARC CE publishes its own
    /// ([`Backend::published`]).
    pub fn health(&self) -> Option<String> {
        match self {
            Backend::Slurm(s) => s
                .cluster()
                .and_then(|c| crate::slurm::health(&c.nodes))
                .map(str::to_string),
            _ => None,
        }
    }

    /// The grid endpoints the site fronts, as HTCondor's `grid_resource`
    /// names them: an ARC CE's A-REX URL, a GRAM gatekeeper's contact, a
    /// Slurm cluster as a batch system (what a grid-universe job naming
    /// one needs, [`brokk_model::Environment::fronts`]).
    pub fn endpoints(&self) -> Vec<String> {
        match self {
            Backend::Arc(a) => vec![format!("arc {}", a.config.url)],
            Backend::Gram(g) => vec![format!("gt5 {}", g.config.contact)],
            Backend::Slurm(_) => vec!["batch slurm".into()],
            _ => Vec::new(),
        }
    }

    /// Whether the resource manager moves the file at `url` itself (an ARC
    /// CE's data staging), so the agent neither stages it in nor out.
    pub fn stages(&self, url: &str) -> bool {
        self.arc().is_some_and(|a| a.config.stages(url))
    }

    /// The URL schemes the site stages: the agent's own (HTTP's, WebDAV's
    /// as HTTP, and `grid`'s, those its grid clients move) and those its
    /// resource manager moves itself.
    pub fn staging(&self, grid: &[String]) -> Vec<String> {
        let mut all: Vec<String> = brokk_model::Environment::STAGING.map(String::from).to_vec();
        all.extend(["dav", "davs"].map(String::from));
        let manager = self.arc().map(|a| a.config.staging.clone()).unwrap_or_default();
        for s in grid.iter().cloned().chain(manager) {
            if !all.iter().any(|x| x.eq_ignore_ascii_case(&s)) {
                all.push(s);
            }
        }
        all
    }

    /// What the resource manager publishes of itself, where it does: an
    /// ARC CE's GLUE 2 reading.
    pub fn published(&self) -> Option<crate::arc::glue2::Glue2> {
        self.arc().map(|a| a.latest())
    }

    /// The delay the resource manager adds before a job starts and again
    /// before its end is known.
    pub fn lag(&self) -> brokk_model::Duration {
        brokk_model::Duration(self.arc().map_or(0, |a| a.config.state_lag_s as i64))
    }

    /// The least time from now to a reservation's start: an ARC CE on Slurm
    /// hands a job to Slurm at its own cycle, up to its state lag later.
    pub fn lead(&self) -> brokk_model::Duration {
        match self {
            Backend::Arc(a) if a.slurm.is_some() => self.lag(),
            _ => brokk_model::Duration(0),
        }
    }

    /// Why the site cannot promise a start, where it cannot: an ARC CE and
    /// a GRAM gatekeeper have no reservations, so jobs sent there may wait
    /// in their queue past their planned start.
    pub fn cannot_reserve(&self) -> Option<&'static str> {
        match self {
            Backend::Arc(a) if a.slurm.is_none() => {
                Some("this site cannot reserve: its ARC compute element has no advance reservations")
            }
            Backend::Gram(_) => Some("this site cannot reserve: its GRAM gatekeeper has no advance reservations"),
            _ => None,
        }
    }

    /// Why `user`'s job may not go to this site's grid CE, if it may not:
    /// where `[accounts]` keeps users apart (`users_apart`), a user without
    /// a credential of their own would reach the CE as the site's one
    /// identity, mapped there to the same account as every such user, who
    /// could then read each other's files; so the job is refused.
    pub fn shared_identity_refusal(&self, user: &str, users_apart: bool) -> Option<String> {
        let (own, table) = match self {
            Backend::Arc(a) => (a.has_own_identity(user), "[arc.users]"),
            Backend::Gram(g) => (g.has_own_identity(user), "[gram.users]"),
            _ => return None,
        };
        (users_apart && !own).then(|| {
            format!(
                "{user} has no grid credential of their own at this site ({table}), and its CE would run the job \
                 under the site's one identity, shared with other users; the job"
            )
        })
    }

    /// Whether reservations must be made in the resource manager too.
    pub fn reserves(&self) -> bool {
        self.slurm().is_some()
    }

    /// Makes the resource manager's reservation for grant `r`.
    pub async fn reserve(&self, r: &Reservation) -> Result<(), SlurmError> {
        match self.slurm() {
            Some(s) => s.create_reservation_checked(r).await,
            None => Ok(()),
        }
    }

    /// Changes the resource manager's reservation from `old` to `new`.
    pub async fn modify(&self, old: &Reservation, new: &Reservation) -> Result<(), SlurmError> {
        match self.slurm() {
            Some(s) => s.change_reservation(old, new).await,
            None => Ok(()),
        }
    }

    /// Deletes the resource manager's reservations of `ids`; what fails
    /// now, the backend's tidying deletes later.
    pub async fn release(&self, ids: &[ReservationId]) {
        if let Some(s) = self.slurm() {
            s.delete_reservations(ids).await;
        }
    }

    /// Why the site cannot hold a job it has taken, where it cannot: an
    /// ARC CE and a GRAM gatekeeper have no hold a client may use.
    pub fn cannot_hold(&self) -> Option<&'static str> {
        match self {
            Backend::Arc(_) => Some("this site's ARC compute element cannot hold a job it has taken"),
            Backend::Gram(_) => Some("this site's GRAM gatekeeper cannot hold a job it has taken"),
            _ => None,
        }
    }

    /// Holds (or releases) the resource manager's job `id`: Slurm's
    /// `scontrol uhold` and `release`. The embedded runner needs nothing:
    /// a held job's start is moved away.
    pub async fn hold_job(&self, id: u64, hold: bool) -> Result<(), SlurmError> {
        match self {
            Backend::Slurm(s) if hold => s.cli.hold(id).await,
            Backend::Slurm(s) => s.cli.release(id).await,
            _ => Ok(()),
        }
    }

    /// Takes note of a failure to reach the resource manager.
    pub fn note(&self, e: &SlurmError) {
        if let Some(s) = self.slurm() {
            s.note(e);
        }
    }
}
