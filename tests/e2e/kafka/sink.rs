//! The Kafka sink against tansu: at-least-once output complete after
//! crashes, deterministic partitioning by key, and the grant.

use std::collections::BTreeSet;

use super::broker::Broker;
use crate::support::{Scratch, assert_exit, crash_seed, kill_at_random_moments};

fn sink_topology(addr: &str, grant: &str, events: u32, rate: u32) -> String {
    super::generator_into_kafka(
        "kout",
        addr,
        grant,
        (events, rate),
        r#"delivery = "at_least_once", key = "seq""#,
    )
}

fn seqs(payloads: &[(i32, i64, String)]) -> Vec<i64> {
    payloads
        .iter()
        .map(|(_, _, p)| {
            let v: serde_json::Value = serde_json::from_str(p).expect("json payload");
            v["seq"].as_i64().expect("seq")
        })
        .collect()
}

#[test]
fn the_at_least_once_sink_delivers_every_row_across_crashes() {
    let seed = crash_seed("kafka sink");
    let mut state = seed;
    let broker = Broker::start();
    broker.create_topic("out", 4);
    let s = Scratch::new();
    let grant = format!("allow_kafka = [\"{}\"]", broker.addr());
    s.write(
        "t.toml",
        &sink_topology(&broker.addr(), &grant, 20000, 4000),
    );
    kill_at_random_moments(
        &s,
        &["run", "t.toml", "--no-progress"],
        3,
        (500, 1500),
        &mut state,
        |_| {},
    );
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    let records = broker.read_all("out", 4);
    let distinct: BTreeSet<i64> = seqs(&records).into_iter().collect();
    assert_eq!(
        distinct,
        (0..20000).collect::<BTreeSet<i64>>(),
        "every row delivered at least once after 3 kills (seed {seed})"
    );
    // Partitioning is deterministic: a key always lands on one partition.
    let mut partition_of = std::collections::BTreeMap::new();
    for (partition, _, payload) in &records {
        let seq = seqs(&[(0, 0, payload.clone())])[0];
        let before = partition_of.insert(seq, *partition);
        assert!(
            before.is_none_or(|p| p == *partition),
            "seq {seq} went to two partitions"
        );
    }
}

#[test]
fn without_a_grant_the_plugin_is_refused_and_brokers_outside_the_grant_are_refused() {
    let broker = Broker::start();
    broker.create_topic("out", 1);
    let s = Scratch::new();
    s.write("t.toml", &sink_topology(&broker.addr(), "", 10, 0));
    let run = s.fvhost(&["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("Kafka capability") && run.stderr.contains("allow_kafka"),
        "{}",
        run.stderr
    );
    s.write(
        "t.toml",
        &sink_topology(&broker.addr(), "allow_kafka = [\"127.0.0.1:1\"]", 10, 0),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("not in this plugin's grant") && run.stderr.contains(&broker.addr()),
        "{}",
        run.stderr
    );
}

#[test]
fn kafka_secrets_never_appear_in_logs_or_status() {
    let broker = Broker::start();
    broker.create_topic("out", 1);
    let s = Scratch::new();
    let secret = "s3cr3t-Pa55w0rd-9731";
    let grant = format!(
        "allow_kafka = [\"{}\"]\nkafka_client = {{ \"sasl.username\" = \"fv\" }}\nkafka_secrets = {{ \"sasl.password\" = \"FV_TEST_KAFKA_PASSWORD\" }}",
        broker.addr()
    );
    s.write("t.toml", &sink_topology(&broker.addr(), &grant, 100, 0));
    let run = s.fvhost_env(
        &["run", "t.toml", "--no-progress"],
        &[("FV_TEST_KAFKA_PASSWORD", secret), ("RUST_LOG", "debug")],
    );
    assert_exit(&run, 0);
    assert!(
        !run.stderr.contains(secret) && !run.stdout.contains(secret),
        "the secret leaked into the output"
    );
    let status = s.fvhost(&["status", ".fvhost/kout"]);
    assert_exit(&status, 0);
    assert!(!status.stdout.contains(secret) && !status.stderr.contains(secret));
    for entry in walk(s.path()) {
        let bytes = std::fs::read(&entry).unwrap_or_default();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "the secret was written to {}",
            entry.display()
        );
    }
    // A missing secret variable is named, its value never.
    let run = s.fvhost(&["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("FV_TEST_KAFKA_PASSWORD") && run.stderr.contains("kafka_secrets"),
        "{}",
        run.stderr
    );
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn a_changelog_becomes_an_upsert_log_whose_table_is_the_aggregate() {
    // Per auction its bids, then per bid count its auctions: an aggregate
    // over a changelog, whose groups empty as auctions move up (-D). The
    // sink writes it as an upsert log by `n`: read back,
    // the last record per key, tombstones removing keys, is the table
    // computed here from the same bids.
    let broker = Broker::start();
    broker.create_topic("per_count", 3);
    let s = Scratch::new();
    let addr = broker.addr();
    s.write(
        "t.toml",
        &format!(
            r#"
name = "upserts"
[checkpoint]
interval = "200ms"
[sources.bids]
plugin = "generator"
config = {{ stream = "bid", events = 20000 }}
[stages.per_auction]
input = "bids"
updating = true
key = ["auction"]
aggregates = ["count(*) AS n"]
[stages.per_count]
input = "per_auction"
updating = true
key = ["n"]
aggregates = ["count(*) AS auctions"]
[sinks.kafka]
input = "per_count"
plugin = "kafka-sink"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topic = "per_count", key = "n", op_column = "op", delivery = "at_least_once" }}
[sinks.bids_out]
input = "bids"
plugin = "file-sink"
allow_write = ["bids"]
config = {{ path = "bids", format = "jsonl" }}
"#
        ),
    );
    assert_exit(&s.fvhost(&["run", "t.toml", "--no-progress"]), 0);
    let mut per_auction: std::collections::BTreeMap<i64, i64> = Default::default();
    for line in s.output_lines("bids") {
        let b: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        *per_auction
            .entry(b["auction"].as_i64().expect("auction"))
            .or_default() += 1;
    }
    let mut expected: std::collections::BTreeMap<String, String> = Default::default();
    for n in per_auction.values() {
        let auctions = expected
            .entry(n.to_string())
            .or_insert_with(|| "0".to_string());
        *auctions = (auctions.parse::<i64>().unwrap_or(0) + 1).to_string();
    }
    let expected: std::collections::BTreeMap<String, String> = expected
        .into_iter()
        .map(|(n, auctions)| {
            let row = format!(r#"{{"n":{n},"auctions":{auctions}}}"#);
            (n, row)
        })
        .collect();
    let (table, tombstones) = broker.read_upserts("per_count", 3);
    assert!(tombstones > 0, "some bid count loses its last auction");
    assert_eq!(table, expected);
}
