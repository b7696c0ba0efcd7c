//! The broker's figures per site, for `/metrics`: how its information
//! fetches went (latency and failures) and how many jobs it sent there,
//! taken or refused.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

use brokk_site::metrics::Histogram;

/// One site's figures.
#[derive(Debug, Clone, Default)]
struct SiteFigures {
    fetch: Histogram,
    fetch_failures: u64,
    taken: u64,
    refused: u64,
}

/// Every site's figures, by name.
#[derive(Debug, Default)]
pub struct PerSite {
    sites: Mutex<BTreeMap<String, SiteFigures>>,
}

impl PerSite {
    fn with(&self, site: &str, f: impl FnOnce(&mut SiteFigures)) {
        let mut sites = self.sites.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        f(sites.entry(site.to_string()).or_default());
    }

    /// A fetch of `site`'s information that took `took` and succeeded or not.
    pub fn fetched(&self, site: &str, took: Duration, ok: bool) {
        self.with(site, |s| {
            s.fetch.observe(took.as_secs_f64());
            s.fetch_failures += u64::from(!ok);
        });
    }

    /// A job sent to `site`, taken or not.
    pub fn sent(&self, site: &str, taken: bool) {
        self.with(site, |s| match taken {
            true => s.taken += 1,
            false => s.refused += 1,
        });
    }

    /// Their lines in Prometheus's text exposition.
    pub fn write(&self, out: &mut String) {
        use brokk_site::metrics::family;
        let sites = self
            .sites
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        family(
            out,
            "brokk_site_info_fetch_duration_seconds",
            "histogram",
            "Time to fetch a site's information, by site.",
        );
        for (name, s) in &sites {
            s.fetch.write(
                out,
                "brokk_site_info_fetch_duration_seconds",
                &format!("site=\"{name}\""),
            );
        }
        family(
            out,
            "brokk_site_info_fetch_failures_total",
            "counter",
            "Fetches of a site's information that failed, by site.",
        );
        for (name, s) in &sites {
            let _ = writeln!(
                out,
                "brokk_site_info_fetch_failures_total{{site=\"{name}\"}} {}",
                s.fetch_failures
            );
        }
        family(
            out,
            "brokk_site_dispatches_total",
            "counter",
            "Jobs sent to a site, by site and whether it took them.",
        );
        for (name, s) in &sites {
            let _ = writeln!(
                out,
                "brokk_site_dispatches_total{{site=\"{name}\",outcome=\"taken\"}} {}",
                s.taken
            );
            let _ = writeln!(
                out,
                "brokk_site_dispatches_total{{site=\"{name}\",outcome=\"refused\"}} {}",
                s.refused
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fetches_and_dispatches_are_counted_per_site() {
        let p = PerSite::default();
        p.fetched("a", Duration::from_millis(2), true);
        p.fetched("a", Duration::from_secs(2), false);
        p.sent("a", true);
        p.sent("b", false);
        let mut out = String::new();
        p.write(&mut out);
        for line in [
            "brokk_site_info_fetch_duration_seconds_count{site=\"a\"} 2",
            "brokk_site_info_fetch_duration_seconds_bucket{site=\"a\",le=\"0.0025\"} 1",
            "brokk_site_info_fetch_failures_total{site=\"a\"} 1",
            "brokk_site_dispatches_total{site=\"a\",outcome=\"taken\"} 1",
            "brokk_site_dispatches_total{site=\"b\",outcome=\"refused\"} 1",
        ] {
            assert!(out.lines().any(|l| l == line), "{line} not in:\n{out}");
        }
    }
}
