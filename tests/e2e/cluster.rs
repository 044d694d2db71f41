//! Running as a cluster member (`--cluster kafka://…`): every keyed edge
//! goes through an exchange topic, and a member killed with SIGKILL and
//! started again writes exactly what one plain process writes.
//!
//! Brokers: tansu (a real Kafka-protocol broker) creates the internal
//! topics and carries a whole run; the kills run against librdkafka's mock
//! cluster (reached over TCP), because tansu 0.6's idempotent-producer
//! path panics its storage task under a member's restarts (`more or less
//! than one row` in `idempotent_message_check`) and then stops answering.

use crate::cluster_topology::{self, Sinks};
use crate::kafka::broker::Broker;
use crate::kafka::mock::TrackedMock;
use crate::support::{
    Scratch, assert_exit, crash_seed, kill_at_random_moments, next_random, test_step_wasm,
};

/// The shared topology with file sinks and 300 ms checkpoints.
fn topology(name: &str, events: u64, rate: u64) -> String {
    cluster_topology::topology(name, events, rate, "300ms", Sinks::Files)
}

/// What one plain process writes: (top lines, alert lines), sorted.
fn reference(events: u64) -> (Vec<String>, Vec<String>) {
    let s = Scratch::new();
    s.write("t.toml", &topology("reference", events, 0));
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    (s.output_lines("out/top"), s.output_lines("out/alerts"))
}

/// The status record's exchanges.
fn exchanges(s: &Scratch, name: &str) -> Vec<serde_json::Value> {
    let path = s.path().join(".fvhost").join(name).join("status.json");
    let text = std::fs::read_to_string(&path).expect("status record");
    let record: serde_json::Value = serde_json::from_str(&text).expect("status JSON");
    record["exchanges"].as_array().cloned().unwrap_or_default()
}

/// Per manifest: (generation, exchange offsets).
fn manifests(s: &Scratch, name: &str) -> Vec<(u64, serde_json::Value)> {
    let dir = s.path().join(".fvhost").join(name).join("manifests");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.sort();
    names
        .iter()
        .map(|p| {
            let m: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(p).expect("manifest")).expect("json");
            (
                m["generation"]
                    .as_u64()
                    .expect("a member's manifest names its generation"),
                m["exchanges"].clone(),
            )
        })
        .collect()
}

#[test]
fn a_member_killed_at_random_moments_and_restarted_writes_what_one_plain_process_writes() {
    let broker = TrackedMock::untracked();
    let cluster = format!("kafka://{}", broker.brokers());
    // Small enough for the mock cluster, which keeps at most 5 MB per
    // partition (a reader that falls further behind finds records gone:
    // the run fails naming the gap rather than count a window short).
    const EVENTS: u64 = 100_000;
    let (top, alerts) = reference(EVENTS);
    assert!(
        top.len() > 20 && alerts.len() > 50,
        "the reference writes enough to compare: {} top rows, {} alerts",
        top.len(),
        alerts.len()
    );
    let mut state = crash_seed("cluster member kills");
    let mut dropped_after_a_kill = 0;
    for round in 0..3 {
        let s = Scratch::new();
        let name = format!("member_{round}");
        // The mock cluster has no CreateTopics: the topics a member would
        // create, made beforehand (tansu creates them in the test below).
        for edge in [
            "cards.counts.1x2",
            "cards.flagged.1x2",
            "counts.busiest.2x1",
        ] {
            broker.create_topic(&format!("fv.{name}.exchange.{edge}"), 2);
        }
        // Paced to ~5 s of input, so that kills land mid-stream.
        s.write("t.toml", &topology(&name, EVENTS, 20_000));
        let args = ["run", "t.toml", "--no-progress", "--cluster", &cluster];
        let kills = 1 + (next_random(&mut state) % 2) as u32;
        kill_at_random_moments(&s, &args, kills, (600, 1500), &mut state, |_| {});
        let run = s.fvhost(&args);
        assert_exit(&run, 0);
        assert!(
            run.stderr.contains("running as a cluster member"),
            "{}",
            run.stderr
        );
        assert_eq!(
            s.output_lines("out/top"),
            top,
            "round {round}: the top-N per window equals one plain process's after {kills} kill(s)"
        );
        assert_eq!(
            s.output_lines("out/alerts"),
            alerts,
            "round {round}: the keyed Wasm step's alerts equal one plain process's"
        );
        // Every start claimed a generation of its own; the manifests name
        // theirs and where each exchange partition resumes.
        let manifests = manifests(&s, &name);
        let newest = manifests.last().expect("a manifest");
        assert_eq!(
            newest.0,
            u64::from(kills) + 1,
            "round {round}: one generation per start"
        );
        let offsets = newest.1.as_object().expect("exchange offsets");
        assert_eq!(offsets.len(), 3, "three keyed edges: {offsets:?}");
        for (topic, partitions) in offsets {
            assert!(
                topic.starts_with(&format!("fv.{name}.exchange.")),
                "{topic}"
            );
            assert_eq!(
                partitions.as_object().map(|p| p.len()),
                Some(2),
                "{topic}: one partition per (producing, consuming) task: {partitions:?}"
            );
        }
        let status = exchanges(&s, &name);
        assert_eq!(status.len(), 3, "{status:?}");
        for e in &status {
            assert_eq!(e["generation"].as_u64(), Some(u64::from(kills) + 1));
            assert!(e["records_out"].as_u64() > Some(0), "{e}");
            assert_eq!(e["lag"].as_u64(), Some(0), "all read back: {e}");
            dropped_after_a_kill += e["dropped_other_generations"].as_u64().unwrap_or(0);
        }
    }
    // What a killed incarnation wrote after its last committed barrier is
    // in the topics and was skipped by generation (each restart reads from
    // the newest manifest's offsets).
    assert!(
        dropped_after_a_kill > 0,
        "some restart dropped records of a killed generation"
    );
}

/// A slow consumer behind a keyed edge: bids (unpaced, small batches) →
/// SQL → `velocity-check` keyed by card (the shared stages) → a step that sleeps 2 ms per
/// batch → files.
fn slow_consumer(name: &str) -> String {
    format!(
        r#"
name = "{name}"
batch_size = 256

[sources.bids]
plugin = "generator"
config = {{ stream = "bid", events = 600000, seed = 11 }}
watermark = {{ column = "date_time" }}

{cards_and_flagged}

[stages.slow]
input = "flagged"
path = "{wasm}"
config = {{ mode = "slow", value = 2 }}

[sinks.alerts]
input = "slow"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out/alerts", format = "jsonl" }}
"#,
        wasm = test_step_wasm().display(),
        cards_and_flagged = cluster_topology::CARDS_AND_FLAGGED,
    )
}

/// The producer outruns the slow consumer by far; the topic must hold no
/// more than a bounded backlog. (The mock cluster keeps 5 MB per
/// partition: a reader further behind finds records gone and the run
/// fails on the gap, which is what happened before writers waited.)
#[test]
fn a_slow_consumer_slows_its_producer_through_the_exchange() {
    let plain = Scratch::new();
    plain.write("t.toml", &slow_consumer("plain"));
    assert_exit(&plain.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let alerts = plain.output_lines("out/alerts");
    let broker = TrackedMock::untracked();
    let s = Scratch::new();
    broker.create_topic("fv.backlog.exchange.cards.flagged.1x2", 2);
    s.write("t.toml", &slow_consumer("backlog"));
    let cluster = format!("kafka://{}", broker.brokers());
    let run = s.fvhost(&["run", "t.toml", "--no-progress", "--cluster", &cluster]);
    assert_exit(&run, 0);
    assert_eq!(s.output_lines("out/alerts"), alerts);
    let exchange = &exchanges(&s, "backlog")[0];
    let per_partition = exchange["bytes_out"].as_u64().unwrap_or(0) / 2;
    assert!(
        per_partition > 10_000_000,
        "each partition carried more ({per_partition} bytes) than the mock keeps at once: {exchange}"
    );
}

#[test]
fn a_member_creates_its_exchange_topics_and_writes_what_one_plain_process_writes() {
    const EVENTS: u64 = 30_000;
    let (top, alerts) = reference(EVENTS);
    let broker = Broker::start();
    let s = Scratch::new();
    // tansu 0.6 panics on DeleteRecords (`not yet implemented`): no trim.
    s.write(
        "t.toml",
        &format!(
            "{}\n[cluster]\nbrokers = \"kafka://unused:1\"\ntrim = false\n",
            topology("created", EVENTS, 0)
        ),
    );
    let cluster = format!("kafka://{}", broker.addr());
    let run = s.fvhost(&["run", "t.toml", "--no-progress", "--cluster", &cluster]);
    assert_exit(&run, 0);
    assert_eq!(s.output_lines("out/top"), top);
    assert_eq!(s.output_lines("out/alerts"), alerts);
    let mut topics: Vec<(String, u64)> = exchanges(&s, "created")
        .iter()
        .map(|e| {
            (
                e["topic"].as_str().unwrap_or_default().to_string(),
                e["partitions"].as_u64().unwrap_or_default(),
            )
        })
        .collect();
    topics.sort();
    assert_eq!(
        topics,
        vec![
            ("fv.created.exchange.cards.counts.1x2".to_string(), 2),
            ("fv.created.exchange.cards.flagged.1x2".to_string(), 2),
            ("fv.created.exchange.counts.busiest.2x1".to_string(), 2),
        ]
    );
    // The broker has them, with one partition per task pair.
    let admin = broker.config();
    let consumer: rdkafka::consumer::BaseConsumer = admin.create().expect("client");
    use rdkafka::consumer::Consumer;
    let metadata = consumer
        .fetch_metadata(
            Some("fv.created.exchange.counts.busiest.2x1"),
            std::time::Duration::from_secs(10),
        )
        .expect("metadata");
    assert_eq!(metadata.topics()[0].partitions().len(), 2);
}

#[test]
fn an_exchange_topic_with_another_layout_is_refused_naming_it() {
    let broker = Broker::start();
    broker.create_topic("fv.layout.exchange.cards.counts.1x2", 3);
    let s = Scratch::new();
    s.write("t.toml", &topology("layout", 1_000, 0));
    let cluster = format!("kafka://{}", broker.addr());
    let run = s.fvhost(&["run", "t.toml", "--no-progress", "--cluster", &cluster]);
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains(
            "the exchange topic `fv.layout.exchange.cards.counts.1x2` exists with 3 partitions, this topology needs 2"
        ),
        "{}",
        run.stderr
    );
}

#[test]
fn a_cluster_address_that_is_not_one_is_refused_with_the_expected_form() {
    let s = Scratch::new();
    s.write("t.toml", &topology("address", 10, 0));
    let run = s.fvhost(&["run", "t.toml", "--cluster", "127.0.0.1:9092"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("does not start with kafka://")
            && run.stderr.contains("kafka://host:port"),
        "{}",
        run.stderr
    );
    s.write(
        "u.toml",
        &format!(
            "{}\n[cluster]\nbrokers = \"kafka://broker\"\n",
            topology("table", 10, 0)
        ),
    );
    let run = s.fvhost(&["validate", "u.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("cluster.brokers") && run.stderr.contains("has no :port"),
        "{}",
        run.stderr
    );
}
