//! Kafka in and out through the `kafka-source` and `kafka-sink` plugins
//! over the host's Kafka capability, against a real broker (tansu) for the
//! data path and librdkafka's mock cluster for transactions.

pub(crate) mod broker;
mod example;
pub(crate) mod mock;
mod sink;
mod source;
mod transactions;

use crate::support::Scratch;

/// A topology `name`: `events` sequence rows (`rate`/s, 0 = unpaced) into
/// the Kafka sink on topic `out`, checkpointing every 200 ms; `grant` is
/// the sink's `allow_kafka` line (empty for none), `options` the rest of
/// its config.
fn generator_into_kafka(
    name: &str,
    brokers: &str,
    grant: &str,
    (events, rate): (u32, u32),
    options: &str,
) -> String {
    format!(
        r#"
name = "{name}"

[checkpoint]
interval = "200ms"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events}, rate = {rate} }}

[sinks.kafka]
input = "nums"
plugin = "kafka-sink"
{grant}
config = {{ brokers = "{brokers}", topic = "out", {options} }}
"#
    )
}

/// `{"id": i}` payloads for ids `from..to`, spread over `partitions`.
fn id_records(from: i64, to: i64, partitions: i32) -> Vec<(i32, String, String)> {
    (from..to)
        .map(|i| {
            (
                (i % i64::from(partitions)) as i32,
                format!("k{i}"),
                format!("{{\"id\":{i}}}"),
            )
        })
        .collect()
}

/// Write a topology reading `topic` (ids as int64) into `out/`.
fn source_topology(s: &Scratch, addr: &str, topic: &str, extra: &str) {
    s.write(
        "t.toml",
        &format!(
            r#"
name = "kin"

[checkpoint]
interval = "200ms"

[sources.events]
plugin = "kafka-source"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topics = ["{topic}"], schema = [{{ name = "id", type = "int64", nullable = false }}], metadata_columns = ["partition", "offset"], discovery_interval_ms = 300{extra} }}

[sinks.out]
input = "events"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#
        ),
    );
}
