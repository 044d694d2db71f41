//! Kafka throughput: Kafka → SQL stage → Kafka through the `kafka-source`
//! and `kafka-sink` plugins, against the ceiling measured in the same run
//! — a plain rdkafka consume → produce loop moving the same messages on the
//! same local broker (tansu). Printed, never asserted
//! (`cargo bench --workspace --bench kafka`; `FV_BENCH_EVENTS` sets the
//! message count, default 500,000). Needs tansu: `FVHOST_TANSU`, the CI's
//! cache (`/var/tmp/fvhost-tools/bin/tansu`) or the PATH.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fvhost::epoch::EpochStore;
use fvhost::plugin::PluginEngine;
use fvhost::runtime::{self, RunControl, StageMetrics};
use fvhost::topology::Topology;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

// The tests' broker harness (tansu on a free port), shared rather than
// repeated; the bench uses part of it.
#[path = "../../tests/e2e/kafka/broker.rs"]
#[allow(dead_code)]
mod broker;
use broker::{Broker, send_retrying};

const PARTITIONS: i32 = 4;
const TIMEOUT: Duration = Duration::from_secs(30);

/// `events` Nexmark-shaped bids as JSON, spread over the partitions.
fn fill(broker: &Broker, events: u64) {
    let producer: ThreadedProducer<DefaultProducerContext> = broker
        .config()
        .set("linger.ms", "20")
        .create()
        .expect("producer");
    for i in 0..events {
        let payload = format!(
            "{{\"auction\":{},\"bidder\":{},\"price\":{},\"channel\":\"channel-{}\",\"date_time\":\"2015-07-15T00:{:02}:{:02}.{:03}\"}}",
            1000 + i % 997,
            2000 + i % 7919,
            100 + (i * 7) % 100_000,
            i % 10,
            (i / 60_000) % 60,
            (i / 1000) % 60,
            i % 1000
        );
        let key = (i % 997).to_string();
        let record = BaseRecord::to("in")
            .partition((i % PARTITIONS as u64) as i32)
            .key(key.as_bytes())
            .payload(payload.as_bytes());
        send_retrying(&producer, record);
    }
    producer.flush(TIMEOUT).expect("flush");
}

/// The ceiling: consume `in` on one thread and produce every message to
/// `out` on another (pipelined, as the plugins' source and sink tasks are).
fn ceiling(broker: &Broker, events: u64, out: &str) -> Duration {
    let started = Instant::now();
    let consumer: BaseConsumer = broker
        .config()
        .set("group.id", "bench-ceiling")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let producer: ThreadedProducer<DefaultProducerContext> = broker
        .config()
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset("in", p, Offset::Beginning)
            .expect("partition");
    }
    consumer.assign(&tpl).expect("assign");
    type Owned = (i32, Vec<u8>, Vec<u8>);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<Owned>>(8);
    let reader = std::thread::spawn(move || {
        let mut moved = 0u64;
        while moved < events {
            let mut batch = Vec::with_capacity(8192);
            while batch.len() < 8192 && moved < events {
                let Some(m) = consumer.poll(Duration::from_millis(100)) else {
                    break;
                };
                let m = m.expect("message");
                batch.push((
                    m.partition(),
                    m.key().unwrap_or_default().to_vec(),
                    m.payload().unwrap_or_default().to_vec(),
                ));
                moved += 1;
            }
            if tx.send(batch).is_err() {
                return;
            }
        }
    });
    for batch in rx {
        for (partition, key, payload) in &batch {
            let record = BaseRecord::to(out)
                .partition(*partition)
                .key(key.as_slice())
                .payload(payload.as_slice());
            send_retrying(&producer, record);
        }
    }
    reader.join().expect("reader");
    producer.flush(TIMEOUT).expect("flush");
    started.elapsed()
}

/// Kafka → SQL → Kafka through the plugins, in process.
fn through_plugins(engine: &PluginEngine, dir: &Path, addr: &str) -> Duration {
    let text = format!(
        r#"name = "kafka_bench"
[checkpoint]
interval = "10s"
[sources.bids]
plugin = "kafka-source"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topics = ["in"], stop_at_end = true, metadata_columns = [], schema = [
    {{ name = "auction", type = "int64" }}, {{ name = "bidder", type = "int64" }},
    {{ name = "price", type = "int64" }}, {{ name = "channel", type = "string" }},
    {{ name = "date_time", type = "timestamp_ms" }} ] }}
[stages.euros]
input = "bids"
sql = "SELECT auction, bidder, price * 908 / 1000 AS price, date_time FROM bids"
[sinks.out]
input = "euros"
plugin = "kafka-sink"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topic = "fv-out", key = "auction", delivery = "at_least_once" }}
"#
    );
    let state = tempfile::tempdir().expect("state");
    let topology =
        Topology::parse(&dir.join("bench.toml"), &text).unwrap_or_else(|d| panic!("{d}"));
    let started = Instant::now();
    let plan = runtime::plan(topology, engine).unwrap_or_else(|d| panic!("{d}"));
    let metrics = StageMetrics::for_plan(&plan);
    let store = EpochStore::open(&state.path().display().to_string()).expect("store");
    runtime::run(plan, Arc::new(RunControl::default()), &metrics, store, None).expect("run");
    started.elapsed()
}

fn main() {
    if broker::tansu_binary().is_none() {
        println!(
            "kafka bench skipped: no tansu binary (FVHOST_TANSU, /var/tmp/fvhost-tools/bin or PATH)"
        );
        return;
    }
    let events: u64 = std::env::var("FV_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(500_000);
    let dir = tempfile::tempdir().expect("dir");
    let broker = Broker::start();
    let addr = broker.addr();
    for topic in ["in", "ceiling-out", "ceiling-out-2", "fv-out"] {
        broker.create_topic(topic, PARTITIONS);
    }
    fill(&broker, events);
    let engine = PluginEngine::new(PluginEngine::default_cache_dir()).expect("engine");
    // Warm the component cache so compiling is not measured.
    let _ = fvhost::plugin::Catalog::new(&engine).load_named("kafka-source");
    let _ = fvhost::plugin::Catalog::new(&engine).load_named("kafka-sink");
    // The ceiling runs before and after the plugins (the broker's caches
    // warm up); the faster of the two counts.
    let first = ceiling(&broker, events, "ceiling-out");
    let plugins = through_plugins(&engine, dir.path(), &addr);
    let base = first.min(ceiling(&broker, events, "ceiling-out-2"));
    let rate = |d: Duration| events as f64 / d.as_secs_f64();
    println!(
        "kafka → kafka, {events} JSON messages, {PARTITIONS} partitions, tansu (sqlite) on 127.0.0.1"
    );
    println!("{:<44} {:>12} {:>10}", "path", "events/s", "ratio");
    println!(
        "{:<44} {:>12.0} {:>10}",
        "rdkafka consume → produce loop (ceiling)",
        rate(base),
        "1.00x"
    );
    println!(
        "{:<44} {:>12.0} {:>9.2}x",
        "kafka-source → SQL → kafka-sink (plugins)",
        rate(plugins),
        rate(plugins) / rate(base)
    );
}
