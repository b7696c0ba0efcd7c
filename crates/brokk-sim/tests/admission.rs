//! Workflow admission experiments: determinism, the grid preset, load
//! against rejections, and the critical path by hand.

use brokk_broker::reoptimize::Search;
use brokk_model::workflow::{Edge, Task, Workflow};
use brokk_model::Duration;
use brokk_sim::admission::{critical_path, ediscom, AdmissionExperiment};

const SMALL: &str = r#"
name = "small"
seeds = [1, 2]
workflows = 150
schedulers = ["heftsync", "single"]
inter_arrival = [20, 200]
[grid]
preset = "ediscom"
heterogeneous = true
[workflow]
"#;

#[test]
fn the_same_file_gives_the_same_report_whatever_the_threads() {
    let e = AdmissionExperiment::from_toml(SMALL).unwrap();
    let one = serde_json::to_string(&e.sweep(1, &|| ()).unwrap()).unwrap();
    let two = serde_json::to_string(&e.sweep(2, &|| ()).unwrap()).unwrap();
    assert_eq!(one, two);
}

#[test]
fn more_load_means_more_rejections_and_more_use() {
    let e = AdmissionExperiment::from_toml(SMALL).unwrap();
    let r = e.sweep(2, &|| ()).unwrap();
    for s in ["heftsync", "single"] {
        let at = |a: f64| {
            r.aggregates
                .iter()
                .find(|g| g.setting.scheduler.name() == s && g.setting.inter_arrival == a)
                .unwrap()
        };
        let (busy, calm) = (at(20.0), at(200.0));
        assert!(busy.offered_load.mean > 5.0 * calm.offered_load.mean);
        assert!(busy.rejection_rate.mean > calm.rejection_rate.mean, "{s}");
        assert!(busy.utilization.mean > calm.utilization.mean, "{s}");
        assert!(calm.probes_per_task.mean >= 1.0, "every task is probed somewhere");
    }
    for p in &r.points {
        assert_eq!(p.submitted, 150);
        assert_eq!(p.submitted - p.admitted, p.reasons.values().sum::<usize>());
        assert!((0.0..=1.0).contains(&p.utilization));
    }
}

#[test]
fn bad_experiments_are_refused_with_the_key() {
    let bad = SMALL.replace("inter_arrival = [20, 200]", "inter_arrival = [0]");
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("inter_arrival"), "{e}");
    let bad = SMALL.replace("preset = \"ediscom\"", "preset = \"nowhere\"");
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("nowhere"), "{e}");
    let bad = SMALL.replace("[\"heftsync\", \"single\"]", "[\"heft\"]");
    assert!(AdmissionExperiment::from_toml(&bad).is_err());
    let bad = SMALL.replace("heterogeneous = true", "heterogeneous = true\npaths = [1, 0]");
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("grid.paths"), "{e}");
}

#[test]
fn the_ediscom_grid_has_eight_cities_and_twelve_links() {
    let (sites, links) = ediscom(true);
    assert_eq!(sites.len(), 8);
    assert_eq!(sites.iter().map(|s| s.capacity).sum::<u32>(), 1_664);
    assert_eq!(links.len(), 12);
    assert_eq!(sites[0].speed, 2.0);
    assert!(ediscom(false).0.iter().all(|s| s.speed == 1.0));
}

#[test]
fn the_critical_path_is_the_longest_chain_of_run_times() {
    let t = |id: &str, r: i64| Task {
        id: id.into(),
        runtime: Duration(r),
        ..Task::default()
    };
    let e = |p: &str, c: &str| Edge {
        parent: p.into(),
        child: c.into(),
        bytes: 0,
    };
    let wf = Workflow {
        tasks: vec![t("a", 10), t("b", 50), t("c", 20), t("d", 5)],
        edges: vec![e("a", "b"), e("a", "c"), e("b", "d"), e("c", "d")],
        ..Workflow::default()
    };
    assert_eq!(critical_path(&wf), 65);
}

#[test]
fn a_broker_that_does_not_probe_sends_only_reservations_and_a_second_broker_takes_the_rest() {
    let text = r#"
name = "probes"
seeds = [1]
workflows = 300
schedulers = ["heftsyncbt"]
inter_arrival = [20]
shares = [0.25, 1.0]
probing = [true, false]
[grid]
preset = "ediscom"
heterogeneous = false
[workflow]
tasks = [2, 4]
width = 4
regularity = 1.0
coallocation_density = 1.0
"#;
    let r = AdmissionExperiment::from_toml(text).unwrap().sweep(2, &|| ()).unwrap();
    assert_eq!(r.points.len(), 4);
    for p in &r.points {
        let s = &p.setting;
        // The split does not depend on probing; the monitored broker gets about its share.
        let got = p.monitored[0] as f64 / p.submitted as f64;
        assert!((got - s.share).abs() < 0.08, "{s:?}: {got}");
        assert!(p.monitored[1] <= p.monitored[0]);
        // Every task needs at least one reservation attempt.
        assert!(p.attempts_per_task[0] >= 1.0, "{s:?}");
        if s.probing {
            assert!(
                p.messages_per_task[0] > p.attempts_per_task[0],
                "{s:?}: probes are messages too"
            );
        } else {
            assert_eq!(
                p.messages_per_task, p.attempts_per_task,
                "{s:?}: nothing but reservations"
            );
        }
    }
    let same_split = |share: f64| {
        let of: Vec<_> = r.points.iter().filter(|p| p.setting.share == share).collect();
        of[0].monitored[0] == of[1].monitored[0]
    };
    assert!(same_split(0.25) && same_split(1.0));
    // With every workflow its own, the second broker is idle and sends nothing.
    let alone = r
        .points
        .iter()
        .find(|p| p.setting.share == 1.0 && !p.setting.probing)
        .unwrap();
    assert_eq!(alone.monitored[0], alone.submitted);
    assert_eq!(alone.probes_per_task, 0.0);
}

/// [`SMALL`] with its admitted workflows run (`[course]`), one scheduler.
fn with_course(course: &str) -> AdmissionExperiment {
    let text = SMALL.replace("[\"heftsync\", \"single\"]", "[\"heftsync\"]") + "[course]\n" + course;
    AdmissionExperiment::from_toml(&text).unwrap()
}

#[test]
fn admitted_workflows_run_their_course_to_the_end() {
    // Runs as long as booked, none failing: every workflow run finishes.
    let r = with_course("runtime = [1, 1]\n").sweep(2, &|| ()).unwrap();
    for p in &r.points {
        let c = p.course.as_ref().unwrap();
        assert_eq!(c.ran, p.admitted, "every admitted accepter's workflow runs");
        assert!(c.ran > 0);
        assert_eq!((c.finished, c.failed, c.failures, c.retries), (c.ran, 0, 0, 0));
        assert_eq!(c.rescues, [0, 0]);
        assert!(c.runs >= c.ran as u64, "every task of every workflow ran");
    }
    // Runs shorter than booked: children move up and workflows end sooner.
    let r = with_course("runtime = [0.3, 0.7]\n").sweep(2, &|| ()).unwrap();
    for p in &r.points {
        let c = p.course.as_ref().unwrap();
        assert_eq!(c.finished, c.ran);
        assert!(c.moved > 0, "{c:?}");
        assert!(c.gain > 0.0, "{c:?}");
    }
}

#[test]
fn failed_tasks_retry_are_rescued_or_fail_their_workflow() {
    let e = with_course("runtime = [0.5, 1]\nfailure = 0.1\nretries = 1\n");
    let one = e.sweep(1, &|| ()).unwrap();
    let two = e.sweep(2, &|| ()).unwrap();
    assert_eq!(
        serde_json::to_string(&one).unwrap(),
        serde_json::to_string(&two).unwrap(),
        "the courses draw from the seed alone"
    );
    let sum = |f: fn(&brokk_sim::course::CourseFigures) -> u64| -> u64 {
        one.points.iter().map(|p| f(p.course.as_ref().unwrap())).sum()
    };
    for p in &one.points {
        let c = p.course.as_ref().unwrap();
        assert_eq!(c.finished + c.failed, c.ran, "{c:?}");
        assert!(c.rescues[1] <= c.rescues[0]);
    }
    assert!(sum(|c| c.failures) > 0);
    assert!(sum(|c| c.retries) > 0, "a failed task ran again in its slack");
    assert!(
        sum(|c| c.rescues[0]) > 0,
        "a failure without slack had the rest planned again"
    );
    assert!(sum(|c| c.finished as u64) > sum(|c| c.failed as u64));
    // Without retries every failure fails its workflow at once.
    let none = with_course("runtime = [0.5, 1]\nfailure = 0.1\n")
        .sweep(2, &|| ())
        .unwrap();
    for p in &none.points {
        let c = p.course.as_ref().unwrap();
        assert_eq!((c.retries, c.rescues[0]), (0, 0));
        assert!(c.failed > 0 && c.failed as u64 <= c.failures, "{c:?}");
    }
    let bad = SMALL.to_string() + "[course]\nruntime = [0.5, 2]\n";
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("course.runtime"), "{e}");
}

const RESCUE: &str = r#"
name = "rescue"
seeds = [1, 2, 3, 4, 5, 6]
workflows = 1500
schedulers = ["heftsync"]
inter_arrival = [4]
local_share = 0.0
[grid]
preset = "ediscom"
[workflow]
tasks = [1, 1]
[rescue]
strategies = ["a1", "all", "optimal", "oracle:0.5", "load:0.5", "feedback:0.9"]
downtime = [300]
"#;

#[test]
fn rescue_strategies_order_as_their_horizons_say() {
    let e = AdmissionExperiment::from_toml(RESCUE).unwrap();
    let r = e.sweep(2, &|| ()).unwrap();
    let of = |s: &str| {
        r.aggregates
            .iter()
            .find(|g| g.setting.strategy.map(|x| x.to_string()).as_deref() == Some(s))
            .unwrap()
    };
    let points = |s: &str| {
        r.points
            .iter()
            .filter(|p| p.setting.strategy.map(|x| x.to_string()).as_deref() == Some(s))
            .map(|p| p.rescue.clone().unwrap())
            .collect::<Vec<_>>()
    };
    // Every strategy of a seed sees the same failure: the same jobs are
    // affected and the same are lost running, whatever happens after.
    for seed in 0..6 {
        let at = |s: &str| points(s)[seed].clone();
        for s in ["a1", "all", "oracle:0.5", "load:0.5", "feedback:0.9"] {
            assert_eq!(at(s).affected, at("optimal").affected, "{s}, seed {seed}");
            assert_eq!(at(s).lost_running, at("optimal").lost_running, "{s}, seed {seed}");
        }
    }
    let affected: usize = points("optimal").iter().map(|p| p.affected).sum();
    assert!(affected > 50, "the failure finds jobs booked: {affected}");
    // A1 and the oracles never move a job booked to start after the
    // recovery; Aall books nothing at the resource while it is down.
    for s in ["a1", "optimal", "oracle:0.5"] {
        assert_eq!(of(s).overhead.unwrap().mean, 0.0, "{s}");
    }
    assert!(points("all").iter().all(|p| p.later == 0));
    // Knowing the downtime loses the fewest; Aall, which moves everything
    // at once, as few; moving at the last moment (A1) more; the oracle
    // that halves the downtime and does nothing more loses the most.
    let term = |s: &str| of(s).termination.unwrap().mean;
    assert!(term("optimal") <= term("a1"), "{} {}", term("optimal"), term("a1"));
    assert!(term("all") <= term("a1"));
    assert!(term("oracle:0.5") > 2.0 * term("a1"));
    assert!(term("load:0.5") < term("oracle:0.5") && term("feedback:0.9") < term("oracle:0.5"));
    assert!(of("all").overhead.unwrap().mean > 0.0);
}

#[test]
fn a_failed_resource_whose_domain_is_loaded_more_has_more_jobs_to_rescue() {
    let strategies = "strategies = [\"a1\", \"all\", \"optimal\", \"oracle:0.5\", \"load:0.5\", \"feedback:0.9\"]";
    let text = RESCUE.replace(strategies, "strategies = [\"all\"]\nimbalance = [-0.5, 0.5]");
    let e = AdmissionExperiment::from_toml(&text).unwrap();
    let r = e.sweep(2, &|| ()).unwrap();
    let at = |x: f64| -> Vec<_> {
        r.points
            .iter()
            .filter(|p| p.setting.imbalance == Some(x))
            .map(|p| p.rescue.clone().unwrap())
            .collect()
    };
    let (less, more) = (at(-0.5), at(0.5));
    assert_eq!((less.len(), more.len()), (6, 6));
    // Its own domain's jobs go to it first: loaded half as much again, it
    // holds more of them when it fails than loaded half as much.
    let affected = |f: &[brokk_sim::rescue::RescueFigures]| f.iter().map(|p| p.affected).sum::<usize>();
    assert!(
        affected(&more) > affected(&less) * 3 / 2,
        "{} against {}",
        affected(&more),
        affected(&less)
    );
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"imbalance\":0.5"));
    // Shares of the jobs by domain: the failed site's as asked, the rest
    // by processors.
    let shares = brokk_sim::rescue::RescueConfig::domain_shares(&[100, 300, 100], 1, 0.5).unwrap();
    assert!(
        (shares[1] - 0.9).abs() < 1e-12 && (shares[0] - 0.05).abs() < 1e-12,
        "{shares:?}"
    );
    for bad in ["imbalance = [-1]", "imbalance = [3]"] {
        let e = AdmissionExperiment::from_toml(&text.replace("imbalance = [-0.5, 0.5]", bad)).unwrap_err();
        assert!(e.to_string().contains("imbalance"), "{e}");
    }
}

#[test]
fn a_resource_that_loses_half_its_processors_has_fewer_jobs_rescued_and_none_lost_running() {
    let strategies = "strategies = [\"a1\", \"all\", \"optimal\", \"oracle:0.5\", \"load:0.5\", \"feedback:0.9\"]";
    let whole = RESCUE.replace(strategies, "strategies = [\"all\"]");
    let half = whole.replace("downtime = [300]", "downtime = [300]\nlost = 0.5");
    let run = |text: &str| {
        let e = AdmissionExperiment::from_toml(text).unwrap();
        let r = e.sweep(2, &|| ()).unwrap();
        r.points.iter().map(|p| p.rescue.clone().unwrap()).collect::<Vec<_>>()
    };
    let (all, part) = (run(&whole), run(&half));
    for (seed, (a, p)) in all.iter().zip(&part).enumerate() {
        // Only what the rest cannot hold is reached, and what runs goes on.
        assert!(p.affected < a.affected, "seed {seed}: {p:?} against {a:?}");
        assert_eq!(p.lost_running, 0, "seed {seed}");
        // The resource goes on taking work into the rest: nothing is
        // counted as booked there by mistake.
        assert_eq!(p.later, 0, "seed {seed}");
        assert!(p.terminated <= p.affected + p.moved, "seed {seed}: {p:?}");
    }
    let affected: usize = part.iter().map(|p| p.affected).sum();
    let moved: usize = part.iter().map(|p| p.moved).sum();
    assert!(
        affected > 0 && moved > 0,
        "half a resource lost still reaches jobs: {part:?}"
    );
    // The same run again gives the same figures.
    assert_eq!(run(&half), part);
    let bad = half.replace("lost = 0.5", "lost = 1.5");
    assert!(AdmissionExperiment::from_toml(&bad)
        .unwrap_err()
        .to_string()
        .contains("rescue.lost"));
}

#[test]
fn a_rescue_needs_atomic_jobs() {
    let bad = RESCUE.replace("tasks = [1, 1]", "tasks = [1, 3]");
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("atomic"), "{e}");
    let bad = RESCUE.replace("downtime = [300]", "downtime = [0]");
    assert!(AdmissionExperiment::from_toml(&bad).is_err());
    let bad = RESCUE.replace("\"a1\",", "\"a2\",");
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("a2"), "{e}");
    let bad = RESCUE.replace("[rescue]", "[rescue]\nsite = \"Paris\"");
    let e = AdmissionExperiment::from_toml(&bad).unwrap_err();
    assert!(e.to_string().contains("Paris"), "{e}");
}

const REOPTIMIZE: &str = r#"
name = "reoptimize"
seeds = [1, 2]
workflows = 400
schedulers = ["heftsync"]
inter_arrival = [2]
book_ahead = 1000
[grid]
sites = [{ name = "a", capacity = 64, speed = 1.0 }, { name = "b", capacity = 64, speed = 1.0 }]
links = [["a", "b"]]
[workflow]
tasks = [1, 1]
[reoptimize]
windows = [0, 400]
"#;

#[test]
fn a_reoptimization_moves_admitted_jobs_and_is_measured_against_the_same_stream_without() {
    let e = AdmissionExperiment::from_toml(REOPTIMIZE).unwrap();
    let r = e.sweep(2, &|| ()).unwrap();
    assert_eq!(
        serde_json::to_string(&r).unwrap(),
        serde_json::to_string(&e.sweep(1, &|| ()).unwrap()).unwrap()
    );
    for seed in [1, 2] {
        let at = |w: i64| {
            r.points
                .iter()
                .find(|p| p.seed == seed && p.setting.window == Some(w))
                .and_then(|p| p.reoptimized.clone())
                .unwrap()
        };
        let (none, some) = (at(0), at(400));
        // Both see the same later stream; only one re-places jobs.
        assert_eq!(none.submitted_after, some.submitted_after);
        assert_eq!(none.submitted_after, 80);
        assert_eq!((none.considered, none.windows), (0, 0));
        assert!(
            some.considered > 0 && some.moved > 0 && some.moved <= some.considered,
            "{some:?}"
        );
    }
    let base = r.aggregates.iter().find(|g| g.setting.window == Some(0)).unwrap();
    assert_eq!(base.gain.unwrap().mean, 0.0);
    // Without a baseline there is nothing to measure against.
    let bad = REOPTIMIZE.replace("windows = [0, 400]", "windows = [400]");
    assert!(AdmissionExperiment::from_toml(&bad)
        .unwrap_err()
        .to_string()
        .contains("baseline"));
    let bad = REOPTIMIZE.replace("tasks = [1, 1]", "tasks = [2, 3]");
    assert!(AdmissionExperiment::from_toml(&bad)
        .unwrap_err()
        .to_string()
        .contains("atomic"));
}

#[test]
fn with_a_trigger_only_the_windows_the_grid_rates_below_it_are_optimized() {
    let with = |trigger: f64| {
        let text = REOPTIMIZE.replace(
            "windows = [0, 400]",
            &format!("windows = [0, 400]\ntrigger = {trigger}"),
        );
        let r = AdmissionExperiment::from_toml(&text).unwrap().sweep(2, &|| ()).unwrap();
        r.points
            .iter()
            .filter(|p| p.setting.window == Some(400))
            .map(|p| p.reoptimized.clone().unwrap())
            .collect::<Vec<_>>()
    };
    // Nothing rates below the least rating: every window is left alone.
    for f in with(0.01) {
        assert_eq!(f.skipped, f.windows, "{f:?}");
        assert_eq!((f.considered, f.moved), (0, 0), "{f:?}");
    }
    // Everything rates below 1 but the windows no job cuts: some are
    // optimized, some not.
    let all = with(1.0);
    assert!(all.iter().all(|f| f.skipped < f.windows), "{all:?}");
    assert!(all.iter().any(|f| f.considered > 0), "{all:?}");
    let bad = REOPTIMIZE.replace("windows = [0, 400]", "windows = [0, 400]\ntrigger = 1.5");
    assert!(AdmissionExperiment::from_toml(&bad)
        .unwrap_err()
        .to_string()
        .contains("trigger"));
}

#[test]
fn a_full_search_is_a_series_of_its_own_measured_against_the_one_baseline() {
    let text = REOPTIMIZE.replace(
        "windows = [0, 400]",
        "windows = [0, 100]\nsearches = [\"each\", \"full\"]\nbudget = 500",
    );
    let e = AdmissionExperiment::from_toml(&text).unwrap();
    let r = e.sweep(2, &|| ()).unwrap();
    // One baseline, then the window under each search.
    let series: Vec<(Option<i64>, Search)> = r
        .aggregates
        .iter()
        .map(|g| (g.setting.window, g.setting.search))
        .collect();
    assert_eq!(
        series,
        [
            (Some(0), Search::Each),
            (Some(100), Search::Each),
            (Some(100), Search::Full)
        ]
    );
    for seed in [1, 2] {
        let at = |search: Search| {
            r.points
                .iter()
                .find(|p| p.seed == seed && p.setting.window == Some(100) && p.setting.search == search)
                .and_then(|p| p.reoptimized.clone())
                .unwrap()
        };
        let (each, full) = (at(Search::Each), at(Search::Full));
        // The same windows over the same schedule; what is taken up in a
        // window depends on where the windows before it moved jobs.
        assert_eq!(each.windows, full.windows, "{each:?} {full:?}");
        assert!(full.considered > 0, "{full:?}");
        assert!(full.moved > 0 && full.moved <= full.considered, "{full:?}");
    }
    // `search` is written only where it is not the default.
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"search\":\"full\""));
    assert!(!json.contains("\"search\":\"each\""));
    let bad = text.replace("\"full\"]", "\"all\"]");
    assert!(AdmissionExperiment::from_toml(&bad).is_err());
    let bad = text.replace("budget = 500", "budget = 0");
    assert!(AdmissionExperiment::from_toml(&bad)
        .unwrap_err()
        .to_string()
        .contains("budget"));
}

#[test]
fn a_switch_that_waits_while_others_book_is_refused_where_they_took_its_places() {
    let text = REOPTIMIZE
        .replace("windows = [0, 400]", "windows = [0, 100]\ndelays = [0, 20]")
        .replace("book_ahead = 1000", "book_ahead = 1000\nlocal_share = 0.8")
        .replace("seeds = [1, 2]", "seeds = [1, 2, 3]");
    let e = AdmissionExperiment::from_toml(&text).unwrap();
    let r = e.sweep(2, &|| ()).unwrap();
    let series: Vec<(Option<i64>, i64)> = r
        .aggregates
        .iter()
        .map(|g| (g.setting.window, g.setting.delay))
        .collect();
    assert_eq!(series, [(Some(0), 0), (Some(100), 0), (Some(100), 20)]);
    let of = |delay: i64| -> Vec<_> {
        r.points
            .iter()
            .filter(|p| p.setting.window == Some(100) && p.setting.delay == delay)
            .map(|p| p.reoptimized.clone().unwrap())
            .collect()
    };
    // At once, nothing books between the search and the switch.
    for f in of(0) {
        assert_eq!(f.vetoed, 0, "{f:?}");
    }
    // Waiting, the local jobs and workflows booked meanwhile take some of
    // the places the searches chose: those switches are refused.
    let waited = of(20);
    assert!(waited.iter().any(|f| f.vetoed > 0), "{waited:?}");
    for f in &waited {
        assert!(f.vetoed + f.skipped <= f.windows && f.moved <= f.considered, "{f:?}");
    }
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"delay\":20") && !json.contains("\"delay\":0"));
    let bad = text.replace("delays = [0, 20]", "delays = [-1]");
    assert!(AdmissionExperiment::from_toml(&bad)
        .unwrap_err()
        .to_string()
        .contains("delays"));
}

#[test]
fn more_routes_between_sites_refuse_fewer_workflows_for_the_network() {
    // The busy load of the small experiment, its fewest-hop routes alone
    // and up to three routes a pair: the same stream, fewer workflows
    // refused because a transfer found no room.
    let text = SMALL
        .replace("inter_arrival = [20, 200]", "inter_arrival = [40]")
        .replace("[\"heftsync\", \"single\"]", "[\"heftsync\"]")
        .replace("seeds = [1, 2]", "seeds = [1, 2, 3]")
        .replace("heterogeneous = true", "heterogeneous = true\npaths = [1, 3]");
    let r = AdmissionExperiment::from_toml(&text).unwrap().sweep(2, &|| ()).unwrap();
    let network = |paths: usize| -> usize {
        r.points
            .iter()
            .filter(|p| p.setting.paths == paths)
            .map(|p| p.reasons.get("network").copied().unwrap_or(0))
            .sum()
    };
    let (one, three) = (network(1), network(3));
    assert!(
        one > 0 && three < one,
        "refused for the network: {one} with one route, {three} with three"
    );
    assert_eq!(r.aggregates.len(), 2);
    // `paths` is written only where it is not 1.
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"paths\":3") && !json.contains("\"paths\":1"));
}
