//! `examples/kafka`: generator → kafka-sink fills `bids`; kafka-source →
//! tumbling window per auction → kafka-sink writes `bid-stats`. Run
//! against tansu, and checked against the same aggregate computed here
//! from the messages of `bids`.

use std::collections::BTreeMap;

use super::broker::Broker;
use crate::support::{Scratch, assert_exit, copy_example};

#[test]
fn the_kafka_example_aggregates_every_bid_of_the_topic_into_bid_stats() {
    let broker = Broker::start();
    broker.create_topic("bids", 4);
    broker.create_topic("bid-stats", 4);
    let s = Scratch::new();
    copy_example(&s, "kafka");
    for file in ["fill.toml", "topology.toml"] {
        let path = s.path().join(file);
        let text = std::fs::read_to_string(&path).expect("example");
        let text = text
            .replace("127.0.0.1:9092", &broker.addr())
            // Bounded for the test: finish at the end of the topic. The
            // idle stop (3 s by default, for offsets that transaction
            // markers take) is lengthened: under a full parallel test run
            // the broker's first fetch can take longer than that, and the
            // source finished with no rows (seen once in CI).
            .replace(
                "metadata_columns = [] }",
                "metadata_columns = [], stop_at_end = true, stop_idle_ms = 20000 }",
            )
            // A partition the broker starves for a while on a loaded test
            // machine must not idle out and let the watermark pass its
            // rows: the oracle has no late rows.
            .replace(
                "watermark = { column = \"date_time\", delay = \"2s\" }",
                "watermark = { column = \"date_time\", delay = \"2s\", idle_timeout = \"10m\" }",
            );
        std::fs::write(&path, text).expect("write");
    }
    assert_exit(&s.fvhost(&["run", "fill.toml", "--no-progress"]), 0);
    assert_exit(&s.fvhost(&["run", "topology.toml", "--no-progress"]), 0);

    // The oracle: (auction, 10 s window) → (count, max price) from `bids`.
    let mut expected: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    let bids = broker.read_all("bids", 4);
    // 200,000 Nexmark events, of which 46 in 50 are bids.
    assert_eq!(bids.len(), 184_000, "the fill wrote every bid");
    for (_, _, payload) in &bids {
        let v: serde_json::Value = serde_json::from_str(payload).expect("bid json");
        let auction = v["auction"].as_i64().expect("auction");
        let price = v["price"].as_i64().expect("price");
        let at = v["date_time"].as_str().expect("date_time");
        let ms = millis(at);
        let e = expected
            .entry((auction, ms - ms.rem_euclid(10_000)))
            .or_insert((0, i64::MIN));
        e.0 += 1;
        e.1 = e.1.max(price);
    }
    let mut got: BTreeMap<(i64, i64), (i64, i64)> = BTreeMap::new();
    for (_, _, payload) in broker.read_all("bid-stats", 4) {
        let v: serde_json::Value = serde_json::from_str(&payload).expect("stat json");
        let key = (
            v["auction"].as_i64().expect("auction"),
            millis(v["window_start"].as_str().expect("window_start")),
        );
        let value = (
            v["bids"].as_i64().expect("bids"),
            v["top_price"].as_i64().expect("top_price"),
        );
        // At-least-once output may repeat a row, never change it.
        if let Some(before) = got.insert(key, value) {
            assert_eq!(before, value, "a repeated row differs for {key:?}");
        }
    }
    assert_eq!(got.len(), expected.len(), "one row per auction and window");
    assert_eq!(got, expected);
}

/// Milliseconds since the epoch of `2015-07-15T00:00:10` or
/// `2015-07-15T00:00:10.123` (arrow-json's timestamp text, no zone).
fn millis(text: &str) -> i64 {
    let (date, time) = text.split_once('T').expect("a timestamp");
    let d: Vec<i64> = date.split('-').map(|p| p.parse().expect("date")).collect();
    let time = time.trim_end_matches('Z');
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let t: Vec<i64> = hms.split(':').map(|p| p.parse().expect("time")).collect();
    let frac_ms: i64 = format!("{frac:0<3}")[..3].parse().expect("fraction");
    days_from_civil(d[0], d[1], d[2]) * 86_400_000
        + (t[0] * 3600 + t[1] * 60 + t[2]) * 1000
        + frac_ms
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
