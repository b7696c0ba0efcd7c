use super::*;

/// Links of 50 units and requests of up to 50: the network fills within a
/// few hundred requests.
const SMALL: &str = r#"
name = "net"
seeds = [1, 2]
requests = 500
max_bandwidth = 50
inter_arrival = [0.25]

[grid]
preset = "ediscom"
bandwidth = 50
"#;

#[test]
fn the_same_file_and_seed_give_the_same_report_byte_for_byte() {
    let exp = NetworkExperiment::from_toml(&SMALL.replace("requests = 500", "requests = 200")).unwrap();
    let (a, _) = exp.sweep(2, &|| {}).unwrap();
    let (b, _) = exp.sweep(1, &|| {}).unwrap();
    assert!(a.points.iter().any(|p| p.rerouted > 0), "{:?}", a.points);
    assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
}

#[test]
fn requests_follow_the_proposal() {
    let exp = NetworkExperiment::from_toml(SMALL).unwrap();
    let rs = exp.requests(8, 4.0, 7);
    assert_eq!(rs.len(), 500);
    let mut last = 0;
    for (arrival, t) in &rs {
        assert!(*arrival >= last, "in arrival order");
        last = *arrival;
        assert!(t.start >= *arrival && t.end > t.start && t.end - t.start <= 1440);
        assert!(t.from != t.to && t.from < 8 && t.to < 8);
        assert!((1..=50).contains(&t.bandwidth));
    }
    let mean_gap = rs.last().unwrap().0 as f64 / 500.0;
    assert!((3.0..5.0).contains(&mean_gap), "mean inter-arrival {mean_gap}");
}

#[test]
fn rerouting_saves_requests_and_accepts_more_under_load() {
    // Both managers see the same requests; on this stream the rerouting
    // one saves some and accepts more in all.
    let exp = NetworkExperiment::from_toml(SMALL).unwrap();
    let (p, _) = exp.run(3, 0.25, 1).unwrap();
    assert!(
        p.accepted_min_hop < p.requests,
        "the stream must load the network: {p:?}"
    );
    assert!(p.saved > 0 && p.rerouted > 0, "{p:?}");
    assert!(p.accepted_rerouting > p.accepted_min_hop, "{p:?}");
}

#[test]
fn bad_values_are_named() {
    let bad = |from: &str, to: &str| match NetworkExperiment::from_toml(&SMALL.replace(from, to)) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{to} accepted"),
    };
    assert!(bad("inter_arrival = [0.25]", "inter_arrival = [0.0]").contains("inter_arrival"));
    assert!(bad("requests = 500", "requests = 500\npaths = [2, 0]").contains("paths"));
    assert!(bad("requests = 500", "requests = 500\nepsilon = 0.9").contains("epsilon"));
    assert!(bad("\nbandwidth = 50", "\nbandwidth = 0").contains("link"));
    assert!(bad("requests = 500", "requests = 500\nwindows = 3").contains("windows"));
}
