//! What the broker would do with a job if it were submitted now, asked
//! without submitting it (`brokk submit --dry-run`, `brokk validate
//! --broker`), as `sbatch --test-only` and `condor_q -better-analyze` answer:
//! each site's answer, decided by the same filter, predictor and selector
//! a decision uses, against the same information, and nothing changed.

use brokk_model::{Duration, Job, JobPreferences, Time};

use super::BrokerCore;
use crate::predict::STANDARD_PREDICTOR;
use crate::select::rank;

/// One site's answer for a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SiteAnswer {
    /// It can run the job: the predicted wait to start and time to
    /// delivery (start, run and stage-out), from now.
    Takes {
        /// Predicted time to start.
        tts: Duration,
        /// Predicted time to delivery.
        ttd: Duration,
    },
    /// It never could, with every reason ([`crate::select::mismatches`]).
    Cannot(Vec<String>),
    /// The broker cannot ask it now: it does not answer, has not answered
    /// yet, or its health is critical.
    Unavailable(String),
}

/// Every site's answer for one job, those that take it best first (the
/// first is where a decision now would send it), then those that cannot,
/// then those the broker cannot ask, each group in the configuration's
/// order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Site name and its answer.
    pub sites: Vec<(String, SiteAnswer)>,
}

impl Verdict {
    /// The site a decision now would choose, if any takes the job.
    pub fn chosen(&self) -> Option<&str> {
        match self.sites.first() {
            Some((name, SiteAnswer::Takes { .. })) => Some(name),
            _ => None,
        }
    }
}

impl BrokerCore {
    /// What each site would answer for `job` with `prefs` at `now`, from
    /// the information in hand and the broker's bookings since; nothing
    /// is recorded or sent. A job that would be delegated to a
    /// neighbouring broker or reserved still shows the sites as a plain
    /// decision ranks them.
    pub fn verdict(&self, job: &Job, prefs: &JobPreferences, now: Time) -> Verdict {
        let at_hand = self.at_hand();
        let ranking = rank(job, prefs, &at_hand.infos, now, &STANDARD_PREDICTOR);
        let name = |k: usize| self.sites[at_hand.site_of[k]].name.clone();
        let mut sites: Vec<(String, SiteAnswer)> = ranking
            .ranked
            .iter()
            .map(|r| {
                let answer = SiteAnswer::Takes {
                    tts: r.prediction.tts(),
                    ttd: r.prediction.ttd(),
                };
                (name(r.index), answer)
            })
            .collect();
        // `excluded` holds the others in the order given, the ranked ones
        // left out.
        let ranked: std::collections::HashSet<usize> = ranking.ranked.iter().map(|r| r.index).collect();
        let others = (0..at_hand.infos.len()).filter(|k| !ranked.contains(k));
        for (k, (_, why)) in others.zip(ranking.excluded) {
            sites.push((
                name(k),
                SiteAnswer::Cannot(why.iter().map(ToString::to_string).collect()),
            ));
        }
        for (site, e) in &at_hand.failed {
            sites.push((site.clone(), SiteAnswer::Unavailable(e.to_string())));
        }
        Verdict { sites }
    }
}
