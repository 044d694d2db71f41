//! The scale-out issue's stateful topology, shared by the cluster tests
//! and the cluster bench (`#[path]`), so both measure the same thing.

/// Bids → `cards` (SQL: a string card per bidder) → `flagged` (the keyed
/// Wasm step `velocity-check`, keyed by card, two tasks).
pub const CARDS_AND_FLAGGED: &str = r#"
[stages.cards]
input = "bids"
sql = "SELECT auction, bidder, CAST(bidder % 50 AS VARCHAR) AS card, price, date_time FROM bids WHERE price > 500"

[stages.flagged]
input = "cards"
plugin = "velocity-check"
key = ["card"]
config = { key_column = "card", time = "date_time", within = "2s", max_events = 6 }
parallelism = 2
"#;

/// Where the two sinks write.
#[derive(Clone, Copy)]
pub enum Sinks {
    /// JSON-lines files under `out/top` and `out/alerts`.
    Files,
    /// Nowhere (`blackhole-sink`).
    Blackhole,
}

/// Seeded bids (`events`, paced at `rate`/s, 0 = unpaced) → SQL → a keyed
/// hopping window with `count(DISTINCT …)` → top-N per window → sink
/// `top`, and beside it a keyed Wasm step (`velocity-check`) → sink
/// `alerts`. Three keyed edges (one per stateful stage), each with two
/// consuming tasks; checkpoints every `interval`.
pub fn topology(name: &str, events: u64, rate: u64, interval: &str, sinks: Sinks) -> String {
    let sink = |sink: &str| match sinks {
        Sinks::Files => format!(
            "plugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = {{ path = \"out/{sink}\", format = \"jsonl\" }}"
        ),
        Sinks::Blackhole => "plugin = \"blackhole-sink\"".to_string(),
    };
    let (top, alerts) = (sink("top"), sink("alerts"));
    format!(
        r#"
name = "{name}"

[checkpoint]
interval = "{interval}"

[sources.bids]
plugin = "generator"
config = {{ stream = "bid", events = {events}, rate = {rate}, seed = 11 }}
watermark = {{ column = "date_time" }}

{CARDS_AND_FLAGGED}

[stages.counts]
input = "cards"
window = {{ time = "date_time", size = "10s", slide = "2s" }}
key = ["auction"]
aggregates = ["count(*) AS bids", "count(DISTINCT bidder) AS bidders"]
parallelism = 2

[stages.busiest]
input = "counts"
window = {{ time = "window_end", size = "2s" }}
top_n = {{ n = 3, order_by = ["bidders DESC", "bids DESC", "auction"] }}

[sinks.top]
input = "busiest"
{top}

[sinks.alerts]
input = "flagged"
{alerts}
"#
    )
}

/// The internal topics of [`topology`] as a job of several members named
/// `name`, with their partitions: control (one partition per task: bids
/// 1, cards 1, flagged 2, counts 2, busiest 1, top 1, alerts 1), commands,
/// acks, and one exchange topic per edge. The mock cluster cannot create
/// topics, so the tests and the bench make them first.
pub fn member_topics(name: &str) -> Vec<(String, i32)> {
    let mut topics = vec![
        (format!("fv.{name}.control"), 9),
        (format!("fv.{name}.commands"), 1),
        (format!("fv.{name}.acks"), 1),
    ];
    for (edge, partitions) in [
        ("bids.cards.1x1", 1),
        ("cards.counts.1x2", 2),
        ("cards.flagged.1x2", 2),
        ("counts.busiest.2x1", 2),
        ("busiest.top.1x1", 1),
        ("flagged.alerts.2x1", 2),
    ] {
        topics.push((format!("fv.{name}.exchange.{edge}"), partitions));
    }
    topics
}

/// Generation claims of a job of several members whose epoch store is
/// `dir/store`: (number, members in its round), oldest first.
pub fn claims(dir: &std::path::Path) -> Vec<(u64, usize)> {
    let gens = dir.join("store").join("cluster").join("generations");
    let paths: Vec<std::path::PathBuf> = std::fs::read_dir(&gens)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    let mut out: Vec<(u64, usize)> = paths
        .iter()
        // A put in progress is a temporary file beside its target.
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|p| {
            let v: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()?;
            Some((
                v["generation"]["number"].as_u64()?,
                v["round"]["members"].as_object().map_or(0, |m| m.len()),
            ))
        })
        .collect();
    out.sort();
    out
}
