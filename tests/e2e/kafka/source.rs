//! The Kafka source: exact resume after SIGKILL, group offsets, new
//! partitions, malformed messages.

use std::time::{Duration, Instant};

use super::broker::Broker;
use super::{id_records, source_topology};
use crate::support::{Scratch, assert_exit, crash_seed, int_column, kill_at_random_moments};

#[test]
fn kafka_source_resumes_exactly_after_sigkill_and_commits_group_offsets() {
    let seed = crash_seed("kafka source");
    let mut state = seed;
    let broker = Broker::start();
    broker.create_topic("events", 3);
    let mut total = 6000;
    broker.produce("events", &id_records(0, total, 3));
    let s = Scratch::new();
    source_topology(&s, &broker.addr(), "events", "");
    kill_at_random_moments(
        &s,
        &["run", "t.toml", "--no-progress"],
        4,
        (400, 1600),
        &mut state,
        |kill| {
            let ids = int_column(&s.output_lines("out"), "id");
            let mut unique = ids.clone();
            unique.dedup();
            assert_eq!(
                ids.len(),
                unique.len(),
                "after kill {kill} (seed {seed}): no id is committed twice"
            );
            // More data arrives while the topology is down.
            broker.produce("events", &id_records(total, total + 1000, 3));
            total += 1000;
        },
    );
    source_topology(&s, &broker.addr(), "events", ", stop_at_end = true");
    let last = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&last, 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "id"),
        (0..total).collect::<Vec<i64>>(),
        "every message exactly once after 4 kills (seed {seed})"
    );
    // The committed epoch's offsets are in the consumer group, so lag shows
    // in the usual Kafka tools: the end of every partition.
    assert_eq!(
        broker.committed("fvhost-kin-events", "events", 3),
        (0..3)
            .map(|p| (0..total).filter(|i| i % 3 == p).count() as i64)
            .collect::<Vec<i64>>(),
        "group offsets after the final epoch"
    );
}

/// Neither local broker can add partitions to a topic (tansu and the mock
/// cluster both lack CreatePartitions), so new splits arrive as a new
/// topic matching `topic_pattern`: the same discovery path (metadata
/// re-read every `discovery_interval_ms`, new splits read from their
/// beginning and checkpointed from then on).
#[test]
fn splits_that_appear_while_running_are_read_from_their_beginning() {
    let broker = Broker::start();
    broker.create_topic("grow-a", 1);
    broker.produce("grow-a", &id_records(0, 100, 1));
    let s = Scratch::new();
    source_topology(&s, &broker.addr(), "unused", "");
    let text = std::fs::read_to_string(s.path().join("t.toml")).expect("topology");
    s.write(
        "t.toml",
        &text.replace("topics = [\"unused\"]", "topic_pattern = \"grow-.*\""),
    );
    let mut child = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
    let wait_for = |n: usize| {
        let started = Instant::now();
        while s.output_lines("out").len() < n {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "only {} of {n} rows arrived",
                s.output_lines("out").len()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    wait_for(100);
    broker.create_topic("grow-b", 2);
    broker.produce("grow-b", &id_records(100, 300, 2));
    wait_for(300);
    child.kill().expect("SIGKILL");
    let _ = child.wait();
    // Restarted, the new splits resume from their checkpointed positions.
    broker.produce("grow-b", &id_records(300, 310, 2));
    let text = std::fs::read_to_string(s.path().join("t.toml")).expect("topology");
    s.write(
        "t.toml",
        &text.replace(
            "discovery_interval_ms = 300",
            "discovery_interval_ms = 300, stop_at_end = true",
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let lines = s.output_lines("out");
    assert_eq!(int_column(&lines, "id"), (0..310).collect::<Vec<i64>>());
}

#[test]
fn malformed_messages_go_to_the_dead_letter_sink_with_their_offsets_and_the_rest_flows() {
    let broker = Broker::start();
    broker.create_topic("mixed", 1);
    let payloads = [
        "{\"id\":0}",
        "{not json",
        "{\"id\":2}",
        "{\"id\":\"three\"}",
        "{\"id\":4}",
    ];
    let records: Vec<(i32, String, String)> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| (0, format!("k{i}"), p.to_string()))
        .collect();
    broker.produce("mixed", &records);
    let s = Scratch::new();
    source_topology(&s, &broker.addr(), "mixed", ", stop_at_end = true");
    let text = std::fs::read_to_string(s.path().join("t.toml")).expect("topology");
    s.write(
        "t.toml",
        &format!(
            "dead_letter = \"rejects\"\n{text}\n[sinks.rejects]\nplugin = \"file-sink\"\nallow_write = [\"rejects\"]\nconfig = {{ path = \"rejects\" }}\n"
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(int_column(&s.output_lines("out"), "id"), vec![0, 2, 4]);
    let rejects = s.output_lines("rejects");
    assert_eq!(rejects.len(), 2, "{rejects:?}");
    let errors: Vec<String> = rejects
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            assert_eq!(v["stage"], "events", "{l}");
            assert_eq!(v["plugin"], "kafka-source", "{l}");
            v["error"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    assert!(
        errors.iter().any(|e| e.starts_with("mixed/0@1")),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.starts_with("mixed/0@3")),
        "{errors:?}"
    );
    assert!(
        rejects.iter().any(|l| l.contains("{not json")),
        "the record itself is kept: {rejects:?}"
    );
}

#[test]
fn avro_round_trips_through_the_sink_and_the_source_and_bad_datums_are_dead_lettered() {
    let broker = Broker::start();
    broker.create_topic("avro", 2);
    let addr = broker.addr();
    let schema = r#"{"type":"record","name":"Seq","fields":[{"name":"seq","type":"long"},{"name":"ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}"#;
    let s = Scratch::new();
    s.write(
        "write.toml",
        &format!(
            r#"name = "avro_out"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 1000 }}
[sinks.kafka]
input = "nums"
plugin = "kafka-sink"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topic = "avro", format = "avro", avro_schema = '{schema}', key = "seq", delivery = "at_least_once" }}
"#
        ),
    );
    assert_exit(&s.fvhost(&["run", "write.toml", "--no-progress"]), 0);
    // Two datums that do not fit the schema: a truncated varint and an
    // empty payload.
    broker.produce(
        "avro",
        &[
            (
                0,
                "bad1".into(),
                String::from_utf8_lossy(&[0x80]).into_owned(),
            ),
            (1, "bad2".into(), String::new()),
        ],
    );
    s.write(
        "read.toml",
        &format!(
            r#"name = "avro_in"
dead_letter = "rejects"
[sources.events]
plugin = "kafka-source"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topics = ["avro"], format = "avro", avro_schema = '{schema}', metadata_columns = [], stop_at_end = true }}
[sinks.out]
input = "events"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
[sinks.rejects]
plugin = "file-sink"
allow_write = ["rejects"]
config = {{ path = "rejects" }}
"#
        ),
    );
    let run = s.fvhost(&["run", "read.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..1000).collect::<Vec<i64>>(),
        "every datum the sink wrote reads back"
    );
    let rejects = s.output_lines("rejects");
    assert_eq!(rejects.len(), 2, "{rejects:?}");
    assert!(
        rejects.iter().all(|r| r.contains("avro/")),
        "each names its topic/partition@offset: {rejects:?}"
    );
}

/// A query that reads `id` alone: the source decodes only `id` (and the
/// offset it reports), and the rows equal those of a run that decodes
/// every field (`push_down = false`), row for row. A value of the wrong
/// type under a key nobody reads no longer rejects its message.
#[test]
fn a_query_of_one_field_decodes_only_that_field_and_gives_the_same_rows() {
    let broker = Broker::start();
    broker.create_topic("wide", 2);
    let records: Vec<(i32, String, String)> = (0..400)
        .map(|i| {
            let name = if i == 7 {
                "7".to_string()
            } else {
                format!("\"n{i}\"")
            };
            (
                i % 2,
                format!("k{i}"),
                format!(
                    "{{\"id\":{i},\"name\":{name},\"pad\":\"{}\"}}",
                    "x".repeat(64)
                ),
            )
        })
        .collect();
    broker.produce("wide", &records);
    let run = |push_down: bool| {
        let s = Scratch::new();
        s.write(
            "t.toml",
            &format!(
                r#"name = "wide"
push_down = {push_down}
[sources.events]
plugin = "kafka-source"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topics = ["wide"], schema = [{{ name = "id", type = "int64" }}, {{ name = "name", type = "utf8" }}, {{ name = "pad", type = "utf8" }}], stop_at_end = true, commit_offsets = false }}

[stages.even]
input = "events"
sql = "SELECT id FROM events WHERE id % 2 = 0"

[sinks.out]
input = "even"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
                addr = broker.addr()
            ),
        );
        let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
        assert_exit(&run, 0);
        (int_column(&s.output_lines("out"), "id"), run.stderr)
    };
    let (all, _) = run(false);
    let (some, log) = run(true);
    assert!(log.contains("source=events columns=id"), "{log}");
    let evens: Vec<i64> = (0..400).filter(|i| i % 2 == 0).collect();
    assert_eq!(some, evens, "every even id once");
    // Decoding `name`, message 7 (a number for a string) is rejected; it is
    // odd, so the query's rows are the same either way.
    assert_eq!(all, some, "row for row");
}
