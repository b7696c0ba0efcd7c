//! Record and replay: what `brokk serve` accepted, written to its record,
//! run again by `brokk sim` on another platform.

mod common;

use std::time::{Duration, Instant};

use brokk_proto::broker::BrokerClient;
use brokk_proto::wire::BrokerState;

#[test]
fn what_the_broker_recorded_replays_in_the_simulator() {
    let dir = common::scratch("replay", "record");
    std::fs::write(
        dir.join("broker.toml"),
        "database = \"broker.db\"\nstate_dir = \"sites\"\nrecord = \"record.jsonl\"\n[tokens]\n\"t\" = \"ann\"\n\
         [[embedded]]\nname = \"a\"\ncapacity = 4\n",
    )
    .unwrap();
    let server = common::serve(&dir);
    let client = BrokerClient::new(&server.url, "t");
    let ids: Vec<String> = (1..=3)
        .map(|k| {
            let d = format!(r#"{{"executable": "/bin/sleep", "arguments": ["1"], "cpus": {k}, "wall_time": 30}}"#);
            client
                .submit(&brokk_proto::wire::SubmitRequest {
                    description: d.clone(),
                    format: Some("json".into()),
                    ..Default::default()
                })
                .unwrap()
                .id
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let lines = loop {
        let text = std::fs::read_to_string(dir.join("record.jsonl")).unwrap_or_default();
        if text.matches(r#""event":"ended""#).count() >= 3 {
            break text;
        }
        assert!(Instant::now() < deadline, "the record did not fill: {text}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(lines.matches(r#""event":"accepted""#).count(), 3);
    // The site as the broker heard from it, once: its size did not change.
    assert_eq!(lines.matches(r#""event":"site""#).count(), 1, "{lines}");
    assert!(
        lines.contains(r#""site":"a""#) && lines.contains(r#""total_slots":4"#),
        "{lines}"
    );
    assert_eq!(lines.matches(r#""event":"ended""#).count(), 3);
    for id in &ids {
        assert_eq!(client.job(id).unwrap().state(), BrokerState::Finished);
        assert!(lines.contains(id.as_str()), "{id} is not in the record");
    }
    drop(server);

    std::fs::write(
        dir.join("replay.toml"),
        "name = \"replay\"\npolicies = [\"easy\"]\n[workload]\nrecord = \"record.jsonl\"\n\
         [platform]\nclusters = [{ name = \"other\", procs = 2 }]\n",
    )
    .unwrap();
    let sim = |experiment: &str| -> serde_json::Value {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_brokk"))
            .args(["sim", "run", "--json", "--out"])
            .arg(dir.join("results"))
            .arg(dir.join(experiment))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let report = sim("replay.toml");
    let point = &report["points"][0];
    // Three jobs submitted; the 3-CPU one is larger than the 2-processor
    // platform and is left out, the other two ran for their recorded second.
    assert_eq!(point["overall"]["submitted"], 3, "{point}");
    assert_eq!(point["overall"]["finished"], 2, "{point}");

    // The same jobs on the recorded platform, each at the site it ran at:
    // site a with the 4 slots it reported, all three jobs fit.
    std::fs::write(
        dir.join("as-recorded.toml"),
        "name = \"as-recorded\"\npolicies = [\"conservative\"]\n[workload]\nrecord = \"record.jsonl\"\n\
         [platform]\nfrom_partitions = true\nrouting = \"partition\"\n",
    )
    .unwrap();
    let report = sim("as-recorded.toml");
    let point = &report["points"][0];
    assert_eq!(point["overall"]["finished"], 3, "{point}");
    assert_eq!(point["clusters"][0]["name"], "a", "{point}");
    let _ = std::fs::remove_dir_all(&dir);
}
