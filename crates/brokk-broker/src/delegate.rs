//! Delegation between brokers ([DMM] sections 4.3 and 4.4): a broker whose
//! own sites cannot start a job soon enough delegates it to a neighbouring
//! broker (a parent, a child or a sibling), which takes it only when it can
//! start it at once itself or pass it on. The rules here are pure; the
//! broker core applies them to its jobs, the service carries the
//! delegation to the neighbour and back, and a simulated grid of brokers
//! runs the same core.
//!
//! How Brokk reads [DMM], where it leaves room:
//! - The local load measure is the soonest start the broker predicts for
//!   the job at its own sites: a job is delegated when no own site is
//!   predicted to start it within the delegation threshold (with threshold
//!   zero, whenever it would wait at all). A broker delegates the job,
//!   not a lease of processors: the neighbour places it at one of its
//!   sites and reports its progress back along the chain, as a site does.
//! - Targets are the neighbours, those with the most free processors
//!   first (their published figure, so a full neighbour is asked last);
//!   ties go to siblings, then the parent, then children, then by name. A
//!   broker already on the job's path is never asked.
//! - The path travels with the job (the brokers it passed through, the
//!   first being where it was submitted), and so does its time-to-live:
//!   each hop takes one, and a job that arrives with none left can only
//!   be taken for the receiving broker's own sites. A broker that finds
//!   itself on the path refuses at once, so a ring of siblings cannot
//!   loop.
//! - A neighbour that cannot take the job rejects it, and the sender asks
//!   the next; when every neighbour has rejected it, the job goes to the
//!   sender's own best site after all (it never starves, as [DMM] 5.4
//!   argues of its time-to-live). What the job held is released along the
//!   chain when it ends, since each hop follows it as a site's job.

use brokk_model::Duration;
use serde::{Deserialize, Serialize};

/// The HTTP header that carries a delegation to a neighbour.
pub const HEADER: &str = "Brokk-Delegation";

/// The time-to-live a delegation starts with when none is configured: the
/// fewest hops that join any two clusters of [DMM]'s two grids (a cluster,
/// its grid's root, the other root, a site there, its cluster).
pub const DEFAULT_TTL: u32 = 4;

/// How a neighbour is linked to a broker, in the order ties go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Relation {
    /// Another broker at the same level.
    Sibling,
    /// The broker above.
    Parent,
    /// A broker below.
    Child,
}

impl std::str::FromStr for Relation {
    type Err = String;
    fn from_str(s: &str) -> Result<Relation, String> {
        match s {
            "sibling" => Ok(Relation::Sibling),
            "parent" => Ok(Relation::Parent),
            "child" => Ok(Relation::Child),
            _ => Err(format!("`{s}` is not a relation: sibling, parent or child")),
        }
    }
}

/// What travels with a delegated job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Delegation {
    /// Hops it may still take.
    pub ttl: u32,
    /// The brokers it passed through, the one it was submitted at first.
    pub path: Vec<String>,
}

/// The most brokers a path may name: far beyond any time-to-live, so a
/// header cannot make a broker read an unbounded list.
pub const MAX_PATH: usize = 64;

impl Delegation {
    /// As the header carries it: `ttl=3; path=a,b`.
    pub fn to_header(&self) -> String {
        format!("ttl={}; path={}", self.ttl, self.path.join(","))
    }

    /// Reads the header, naming what is wrong with it.
    pub fn parse(text: &str) -> Result<Delegation, String> {
        let mut ttl = None;
        let mut path = None;
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            match part.split_once('=') {
                Some(("ttl", v)) => {
                    ttl = Some(
                        v.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("{HEADER}: ttl `{v}` is not a count"))?,
                    )
                }
                Some(("path", v)) => {
                    let names: Vec<String> = v.split(',').map(|n| n.trim().to_string()).collect();
                    if names.iter().any(|n| n.is_empty() || !n.chars().all(name_char)) {
                        return Err(format!("{HEADER}: path `{v}` is not a list of broker names"));
                    }
                    if names.len() > MAX_PATH {
                        return Err(format!(
                            "{HEADER}: a path of {} brokers is longer than {MAX_PATH}",
                            names.len()
                        ));
                    }
                    path = Some(names);
                }
                _ => return Err(format!("{HEADER}: `{part}` is neither ttl=N nor path=A,B")),
            }
        }
        match (ttl, path) {
            (Some(ttl), Some(path)) => Ok(Delegation { ttl, path }),
            _ => Err(format!("{HEADER}: give both ttl=N and path=A,B, not `{text}`")),
        }
    }

    /// What broker `me` sends on for a job that reached it with
    /// `arrived` (none: submitted here): itself added to the path, one
    /// hop less. `None` when no hop is left.
    pub fn onward(arrived: Option<&Delegation>, me: &str, ttl: u32) -> Option<Delegation> {
        let (ttl, mut path) = match arrived {
            Some(d) => (d.ttl, d.path.clone()),
            None => (ttl, Vec::new()),
        };
        if ttl == 0 {
            return None;
        }
        path.push(me.to_string());
        Some(Delegation { ttl: ttl - 1, path })
    }

    /// Whether broker `name` is on the path.
    pub fn passed(&self, name: &str) -> bool {
        self.path.iter().any(|p| p == name)
    }
}

/// The characters of a broker's name on a path.
fn name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')
}

/// The chain of parents broker `me` publishes: its `parent`, then the
/// chain that parent published (`published`), cut where it comes back to
/// `me` (a cycle, named once) and at [`MAX_PATH`] names, so a cycle of
/// parents cannot grow the chain without end.
pub fn ancestors(me: &str, parent: &str, published: &[String]) -> Vec<String> {
    let mut chain = vec![parent.to_string()];
    for a in published {
        if chain.len() >= MAX_PATH || chain.last().is_some_and(|l| l == me) {
            break;
        }
        chain.push(a.clone());
    }
    chain
}

/// Why broker `me`'s `parent` cannot be used: the chain of parents it
/// published (`published`) leads back to `me`, so the configured parent
/// links form a cycle (the paper's hierarchy is a tree). `None` when not.
pub fn cycle(me: &str, parent: &str, published: &[String]) -> Option<String> {
    let back = published.iter().position(|a| a == me)?;
    let mut chain = vec![me, parent];
    chain.extend(published[..=back].iter().map(String::as_str));
    Some(format!(
        "parent links form a cycle ({}): each broker has its parent in its configuration; \
         make one of them the root",
        chain.join(" → ")
    ))
}

/// Whether a job is delegated: no own site is predicted to start it within
/// `threshold` (`local_wait` is the soonest predicted wait at the own
/// sites; `None` when none can run it).
pub fn should_delegate(local_wait: Option<Duration>, threshold: Duration) -> bool {
    local_wait.is_none_or(|w| w > threshold)
}

/// A neighbour as the target ordering sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target<'a> {
    /// Its name.
    pub name: &'a str,
    /// How it is linked.
    pub relation: Relation,
    /// The processors it publishes free now.
    pub free: u32,
}

/// The order neighbours are asked in (see the module's documentation):
/// the positions of `targets` to ask, neighbours on `path` left out.
pub fn order(targets: &[Target<'_>], path: &[String]) -> Vec<usize> {
    let mut ask: Vec<usize> = (0..targets.len())
        .filter(|&i| !path.iter().any(|p| p == targets[i].name))
        .collect();
    ask.sort_by(|&a, &b| {
        let (a, b) = (&targets[a], &targets[b]);
        b.free
            .cmp(&a.free)
            .then(a.relation.cmp(&b.relation))
            .then(a.name.cmp(b.name))
    });
    ask
}

/// Why a broker refuses a delegated job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Reject {
    /// It passed through this broker already.
    #[error("delegation loop: the job already passed through {0}")]
    Loop(String),
    /// Its own sites cannot start it soon enough and it may not go on.
    #[error("{0} cannot start it within its delegation threshold and has no neighbour to pass it to")]
    NoRoom(String),
}

/// At broker `me`, whether a job delegated with `d` is taken: not when it
/// passed through `me` already; yes when an own site is predicted to start
/// it within `threshold` (`local_wait`), or when it may go on (hops left)
/// to a neighbour not on its path with room for it (`onward`).
pub fn admit(
    me: &str,
    d: &Delegation,
    local_wait: Option<Duration>,
    threshold: Duration,
    onward: impl FnOnce(&[String]) -> bool,
) -> Result<(), Reject> {
    if d.passed(me) {
        return Err(Reject::Loop(me.to_string()));
    }
    if !should_delegate(local_wait, threshold) || (d.ttl > 0 && onward(&d.path)) {
        return Ok(());
    }
    Err(Reject::NoRoom(me.to_string()))
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_chain_of_parents_names_each_once_and_a_cycle_is_found() {
        let v = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        // A tree: alpha's parent is gamma, whose parent is root.
        assert_eq!(ancestors("alpha", "gamma", &v(&["root"])), v(&["gamma", "root"]));
        assert_eq!(cycle("alpha", "gamma", &v(&["root"])), None);
        // A cycle alpha → gamma → beta → alpha: gamma publishes beta and
        // alpha (and what alpha published, cut where it came back).
        let published = v(&["beta", "alpha", "gamma"]);
        let why = cycle("alpha", "gamma", &published).unwrap();
        assert!(why.contains("alpha → gamma → beta → alpha"), "{why}");
        assert_eq!(ancestors("alpha", "gamma", &published), v(&["gamma", "beta", "alpha"]));
        // Two brokers each the other's parent.
        assert!(cycle("a", "b", &v(&["a"])).is_some());
        // However long the chain read, what is published is bounded.
        let long: Vec<String> = (0..200).map(|k| format!("b{k}")).collect();
        assert_eq!(ancestors("me", "p", &long).len(), MAX_PATH);
    }
    use super::*;

    #[test]
    fn the_header_carries_hops_and_path_and_names_what_is_wrong() {
        let d = Delegation {
            ttl: 3,
            path: vec!["a".into(), "b-2".into()],
        };
        assert_eq!(d.to_header(), "ttl=3; path=a,b-2");
        assert_eq!(Delegation::parse(&d.to_header()), Ok(d));
        for (bad, says) in [
            ("ttl=x; path=a", "ttl `x`"),
            ("ttl=1", "give both"),
            ("ttl=1; path=a,,b", "not a list"),
            ("ttl=1; path=a b", "not a list"),
            ("ttl=1; path=a; hops=2", "`hops=2`"),
        ] {
            let e = Delegation::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        let long = vec!["n"; MAX_PATH + 1].join(",");
        assert!(Delegation::parse(&format!("ttl=1; path={long}"))
            .unwrap_err()
            .contains("longer"));
    }

    #[test]
    fn each_hop_adds_itself_and_takes_one_from_the_time_to_live() {
        let first = Delegation::onward(None, "a", 2).unwrap();
        assert_eq!((first.ttl, first.path.clone()), (1, vec!["a".to_string()]));
        let second = Delegation::onward(Some(&first), "b", 9).unwrap();
        assert_eq!(
            (second.ttl, second.path.clone()),
            (0, vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(Delegation::onward(Some(&second), "c", 9), None, "no hop left");
        assert_eq!(Delegation::onward(None, "a", 0), None, "delegation off");
    }

    #[test]
    fn a_job_is_delegated_only_when_no_own_site_starts_it_within_the_threshold() {
        let t = Duration(60);
        assert!(!should_delegate(Some(Duration(0)), t));
        assert!(!should_delegate(Some(Duration(60)), t));
        assert!(should_delegate(Some(Duration(61)), t));
        assert!(should_delegate(None, t), "no own site can run it");
        assert!(should_delegate(Some(Duration(1)), Duration(0)));
    }

    #[test]
    fn neighbours_are_asked_most_free_first_siblings_before_parent_and_children() {
        let t = |name, relation, free| Target { name, relation, free };
        let targets = [
            t("child", Relation::Child, 8),
            t("parent", Relation::Parent, 8),
            t("sib-b", Relation::Sibling, 8),
            t("sib-a", Relation::Sibling, 8),
            t("big", Relation::Child, 64),
            t("home", Relation::Sibling, 100),
        ];
        // `home` is on the path: never asked back.
        assert_eq!(order(&targets, &["home".to_string()]), [4, 3, 2, 1, 0]);
    }

    #[test]
    fn a_chain_of_three_takes_forwards_or_rejects() {
        let t = Duration(0);
        let room = |_: &[String]| true;
        let none = |_: &[String]| false;
        // a delegates to b with two hops; b is full but c has room: b takes
        // it to pass on, and c, full itself with no hop left, rejects it.
        let to_b = Delegation::onward(None, "a", 2).unwrap();
        assert_eq!(admit("b", &to_b, Some(Duration(300)), t, room), Ok(()));
        let to_c = Delegation::onward(Some(&to_b), "b", 2).unwrap();
        assert_eq!(to_c.path, ["a", "b"]);
        assert_eq!(
            admit("c", &to_c, Some(Duration(300)), t, room),
            Err(Reject::NoRoom("c".into()))
        );
        // With room of its own, c takes it whatever the hops.
        assert_eq!(admit("c", &to_c, Some(Duration(0)), t, none), Ok(()));
        // A ring: c sending it back to a is refused there at once.
        let back = Delegation::onward(Some(&to_b), "c", 2).unwrap();
        assert_eq!(
            admit("a", &back, Some(Duration(0)), t, room),
            Err(Reject::Loop("a".into()))
        );
        // b with no neighbour to pass it to rejects.
        assert_eq!(
            admit("b", &to_b, Some(Duration(300)), t, none),
            Err(Reject::NoRoom("b".into()))
        );
    }
}
