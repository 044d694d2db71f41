//! Every Nexmark topology of `examples/nexmark`, run end to end by the real
//! `fvhost` binary, against an independent oracle: DataFusion batch SQL over
//! the very events the run consumed.
//!
//! Per query, in one scratch directory:
//!
//! 1. the example as `nexmark::for_test` runs it (the golden test's
//!    variant: a bounded event count, the sink writing JSON lines to
//!    `out/`; the stages untouched), at full speed — once on the
//!    generator's default event times and once with every generator at
//!    [`SLOW_EVENT_RATE`] events per second of event time, where the
//!    windows' and joins' bounds bind (see [`EventTime`]);
//! 2. a second topology built from the first one's own `[sources]` (the
//!    same plugin and `config` tables, so the same seed, event count,
//!    event rate and stream) and `[tables]` (read as sources), each
//!    written by file-sink to `raw/<name>/` as Parquet, which keeps the
//!    generator's Arrow types (`date_time` and `expires` are
//!    `Timestamp(Millisecond)`);
//! 3. those files registered in a DataFusion `SessionContext` under the
//!    source names, and the query written as batch SQL: a tumbling or
//!    hopping window is a `GROUP BY` over window starts computed in epoch
//!    milliseconds (`floor(t / slide) * slide` and the `size / slide − 1`
//!    starts before it, as the window stage assigns them), top-N and dedup
//!    are `ROW_NUMBER()` with the stage's full tie-break (its order, then
//!    every input column ascending, in schema order), a session window is
//!    a gaps-and-islands query (`LAG`, a running `SUM`; a gap of exactly
//!    `gap` starts a new session), an interval join is a join with the
//!    interval condition (both ends inclusive), a window join is an
//!    equi-join on the window too, a lookup an inner join.
//!
//! The committed output (hidden `.claim`/`.pending`/`.inprogress` files
//! skipped) and the oracle's rows are compared as multisets, by column name
//! (both sides must have the same columns); timestamps compare as instants
//! whatever their unit, floats (q4's `avg_final`) within a relative
//! [`FLOAT_TOLERANCE`]. A mismatch prints the missing and extra rows.
//!
//! **Late rows cannot occur here, and the test asserts it.** The generator
//! has no out-of-order mode: event times are a non-decreasing function of
//! the event number and each generator task emits its events in order, so
//! a source's watermark (the newest time it read, `delay` 0) never passes a
//! row it has still to send; it never goes idle either (it always has rows
//! until it finishes). Downstream every stage forwards a watermark no later
//! than the rows it may still emit (windows and top-N fire at the watermark
//! and forward it after their rows; interval joins hold it back by their
//! upper bound), and a task's watermark is the minimum over its inputs. So
//! the oracle computes every window over all of its rows, with no
//! lateness (no example sets `allowed_lateness` either); and since fvhost
//! drops and counts a late row, each run's summary must report no "late
//! rows dropped" — should that ever change, the test says so before
//! comparing rows.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use serde_json::Value;

use crate::nexmark::for_test;
use crate::support::{Scratch, assert_exit, copy_example};

/// Relative tolerance of float columns: fvhost folds `avg` as an `f64` sum
/// in arrival order, DataFusion in its own order.
const FLOAT_TOLERANCE: f64 = 1e-9;

/// Rows shown per side of a mismatch.
const SHOWN: usize = 10;

/// Each example's batch SQL, over tables named after the topology's
/// sources and tables (`bids`, `auctions`, `persons`, `side_input`).
/// Event times are compared and bucketed as epoch milliseconds
/// (`CAST(date_time AS BIGINT)`), window bounds turned back into
/// timestamps with `to_timestamp_millis`.
fn oracle_sql(query: &str) -> &'static str {
    match query {
        // Pass-through: every bid, every column.
        "q0" => "SELECT * FROM bids",
        "q1" => {
            "SELECT auction, bidder, CAST(price * 0.908 AS BIGINT) AS price, date_time FROM bids"
        }
        "q2" => "SELECT auction, price FROM bids WHERE auction % 123 = 0",
        // Interval join: the auction's time within [person's, person's + 60 s],
        // both ends inclusive.
        "q3" => {
            "SELECT p.name, p.city, p.state, a.id
             FROM persons p JOIN auctions a ON a.seller = p.id
             WHERE p.state IN ('OR', 'ID', 'CA') AND a.category = 10
               AND CAST(a.date_time AS BIGINT) >= CAST(p.date_time AS BIGINT)
               AND CAST(a.date_time AS BIGINT) <= CAST(p.date_time AS BIGINT) + 60000"
        }
        // Interval join (bid within [auction, auction + 20 s]), the bids
        // before expiry, the highest per auction per 10 s window of the
        // auction's time, then per category a 10 s window on the first
        // window's end (which is a multiple of 10 s: its own window start).
        "q4" => {
            "WITH open_bids AS (
               SELECT a.id, a.category, b.price, CAST(a.date_time AS BIGINT) AS t
               FROM auctions a JOIN bids b ON b.auction = a.id
               WHERE CAST(b.date_time AS BIGINT) >= CAST(a.date_time AS BIGINT)
                 AND CAST(b.date_time AS BIGINT) <= CAST(a.date_time AS BIGINT) + 20000
                 AND b.date_time <= a.expires),
             buckets AS (SELECT t / 10000 * 10000 AS ws, id, category, price FROM open_bids),
             winning AS (
               SELECT ws + 10000 AS first_end, id, category, max(price) AS final
               FROM buckets GROUP BY ws, id, category),
             second AS (SELECT first_end / 10000 * 10000 AS ws, category, final FROM winning)
             SELECT to_timestamp_millis(ws) AS window_start,
                    to_timestamp_millis(ws + 10000) AS window_end,
                    category, avg(final) AS avg_final, count(*) AS auctions
             FROM second GROUP BY ws, category"
        }
        // Hopping windows of 10 s every 2 s: a bid is in the 5 windows
        // starting at its 2 s bucket and the 4 before; then the top count
        // per window (ties: lowest auction), rank 1.
        "q5" => {
            "WITH hops AS (SELECT column1 AS i FROM (VALUES (0), (1), (2), (3), (4))),
             starts AS (SELECT auction, (CAST(date_time AS BIGINT) / 2000 - i) * 2000 AS ws
                        FROM bids CROSS JOIN hops),
             counts AS (SELECT ws, auction, count(*) AS bids FROM starts GROUP BY ws, auction),
             ranked AS (SELECT *, ROW_NUMBER() OVER (PARTITION BY ws ORDER BY bids DESC, auction) AS r
                        FROM counts)
             SELECT to_timestamp_millis(ws) AS window_start,
                    to_timestamp_millis(ws + 10000) AS window_end,
                    auction, bids, r AS \"rank\"
             FROM ranked WHERE r = 1"
        }
        // Top-1 per 10 s window: price DESC, auction, bidder, then every
        // input column ascending.
        "q7" => {
            "SELECT auction, bidder, price, date_time, to_timestamp_millis(ws + 10000) AS window_end
             FROM (SELECT *, CAST(date_time AS BIGINT) / 10000 * 10000 AS ws,
                          ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 10000
                                             ORDER BY price DESC, auction, bidder, channel, url, date_time) AS r
                   FROM bids)
             WHERE r = 1"
        }
        // Window join (person and auction in the same 10 s window), then
        // one row per person and window.
        "q8" => {
            "SELECT DISTINCT p.id, p.name,
                    to_timestamp_millis(CAST(p.date_time AS BIGINT) / 10000 * 10000) AS starttime
             FROM persons p JOIN auctions a ON a.seller = p.id
             WHERE CAST(p.date_time AS BIGINT) / 10000 = CAST(a.date_time AS BIGINT) / 10000"
        }
        // Sessions per bidder: a new one where the gap to the bidder's
        // previous bid is 10 s or more; [first bid, last bid + 10 s).
        "q11" => {
            "WITH o AS (SELECT bidder, CAST(date_time AS BIGINT) AS t FROM bids),
             l AS (SELECT *, CASE WHEN t - LAG(t) OVER (PARTITION BY bidder ORDER BY t) < 10000
                                  THEN 0 ELSE 1 END AS fresh FROM o),
             s AS (SELECT *, SUM(fresh) OVER (PARTITION BY bidder ORDER BY t
                                  ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS sid FROM l)
             SELECT to_timestamp_millis(MIN(t)) AS window_start,
                    to_timestamp_millis(MAX(t) + 10000) AS window_end,
                    bidder, COUNT(*) AS bid_count
             FROM s GROUP BY bidder, sid"
        }
        // Lookup (inner): the side input row keyed by auction % 1000.
        "q13" => {
            "SELECT b.auction, b.bidder, b.price, b.date_time, b.auction % 1000 AS side_key,
                    s.key, s.value
             FROM bids b JOIN side_input s ON b.auction % 1000 = s.key"
        }
        // Dedup last per (bidder, auction) and 10 s window: date_time DESC,
        // then every input column ascending.
        "q18" => {
            "SELECT auction, bidder, price, channel, url, date_time,
                    to_timestamp_millis(ws) AS window_start,
                    to_timestamp_millis(ws + 10000) AS window_end
             FROM (SELECT *, CAST(date_time AS BIGINT) / 10000 * 10000 AS ws,
                          ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 10000, bidder, auction
                                             ORDER BY date_time DESC, price, channel, url) AS r
                   FROM bids)
             WHERE r = 1"
        }
        // Top-10 per auction and 10 s window: price DESC, then every input
        // column ascending; ranked from 1.
        "q19" => {
            "SELECT auction, bidder, price, channel, url, date_time,
                    to_timestamp_millis(ws) AS window_start,
                    to_timestamp_millis(ws + 10000) AS window_end,
                    r AS rank_number
             FROM (SELECT *, CAST(date_time AS BIGINT) / 10000 * 10000 AS ws,
                          ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 10000, auction
                                             ORDER BY price DESC, bidder, channel, url, date_time) AS r
                   FROM bids)
             WHERE r <= 10"
        }
        other => panic!("no oracle for {other}"),
    }
}

/// The test topology's sources and tables, each written whole by file-sink
/// as Parquet to `raw/<name>/`: the same events the query reads.
fn raw_topology(query: &str, test_toml: &str) -> String {
    let topology: toml::Table = toml::from_str(test_toml).expect("the test topology parses");
    let mut sources = toml::Table::new();
    for section in ["sources", "tables"] {
        if let Some(nodes) = topology.get(section).and_then(toml::Value::as_table) {
            for (name, node) in nodes {
                sources.insert(name.clone(), node.clone());
            }
        }
    }
    assert!(!sources.is_empty(), "{query} has no sources");
    let mut sinks = toml::Table::new();
    for name in sources.keys() {
        let mut config = toml::Table::new();
        config.insert("path".into(), format!("raw/{name}").into());
        config.insert("format".into(), "parquet".into());
        let mut sink = toml::Table::new();
        sink.insert("input".into(), name.clone().into());
        sink.insert("plugin".into(), "file-sink".into());
        sink.insert("allow_write".into(), toml::Value::Array(vec!["raw".into()]));
        sink.insert("config".into(), config.into());
        sinks.insert(format!("raw_{name}"), sink.into());
    }
    let mut raw = toml::Table::new();
    raw.insert("name".into(), format!("{query}_raw_events").into());
    raw.insert("sources".into(), sources.into());
    raw.insert("sinks".into(), sinks.into());
    toml::to_string(&raw).expect("raw topology")
}

/// The committed Parquet files of `dir` (hidden files are not committed).
fn parquet_batches(dir: &std::path::Path) -> (SchemaRef, Vec<RecordBatch>) {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .flatten()
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no committed file in {}", dir.display());
    let mut schema = None;
    let mut batches = Vec::new();
    for file in files {
        let builder = ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&file).expect("open raw events"),
        )
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        schema.get_or_insert_with(|| Arc::clone(builder.schema()));
        let reader = builder
            .build()
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for batch in reader {
            batches.push(batch.unwrap_or_else(|e| panic!("{}: {e}", file.display())));
        }
    }
    (schema.expect("a schema"), batches)
}

/// Run `sql` over the raw events in `scratch/raw/<table>/`.
fn run_oracle(scratch: &Scratch, tables: &[String], sql: &str) -> Vec<RecordBatch> {
    let ctx = SessionContext::new();
    for name in tables {
        let (schema, batches) = parquet_batches(&scratch.path().join("raw").join(name));
        let table = MemTable::try_new(schema, vec![batches]).expect("table");
        ctx.register_table(name.as_str(), Arc::new(table))
            .expect("register");
    }
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(async { ctx.sql(sql).await?.collect().await })
        .unwrap_or_else(|e| panic!("oracle query failed: {e}\n{sql}"))
}

/// How a column's values compare.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Exactly, as JSON text.
    Exact,
    /// As instants: `2024-01-01T00:00:00.100000` = `2024-01-01T00:00:00.1`.
    Timestamp,
    /// Within [`FLOAT_TOLERANCE`].
    Float,
}

/// The columns of the oracle's result, and how each compares.
fn columns(schema: &Schema) -> Vec<(String, Kind)> {
    schema
        .fields()
        .iter()
        .map(|f| {
            let kind = match f.data_type() {
                DataType::Timestamp(_, _) => Kind::Timestamp,
                DataType::Float16
                | DataType::Float32
                | DataType::Float64
                | DataType::Decimal128(_, _)
                | DataType::Decimal256(_, _) => Kind::Float,
                _ => Kind::Exact,
            };
            (f.name().clone(), kind)
        })
        .collect()
}

/// One row: the exact cells (timestamps normalised) as one key, and the
/// float cells; plus the row as text for messages.
struct Row {
    key: String,
    floats: Vec<Option<f64>>,
    text: String,
}

/// A timestamp as JSON text without trailing zeros in its fraction, so
/// that milli- and microsecond columns of the same instant agree.
fn instant(v: &Value) -> String {
    match v.as_str() {
        Some(s) if s.contains('.') => s.trim_end_matches('0').trim_end_matches('.').to_string(),
        _ => v.to_string(),
    }
}

/// `line` (a JSON object) as a [`Row`] over `columns`; panics on a column
/// the oracle does not have.
fn row(line: &str, columns: &[(String, Kind)], side: &str) -> Row {
    let object: serde_json::Map<String, Value> = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{side} row is not a JSON object ({e}): {line}"));
    for name in object.keys() {
        assert!(
            columns.iter().any(|(c, _)| c == name),
            "{side} has a column `{name}` the other side lacks (columns: {}): {line}",
            columns
                .iter()
                .map(|(c, _)| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let (mut key, mut floats, mut text) = (String::new(), Vec::new(), String::new());
    for (name, kind) in columns {
        let v = object.get(name).unwrap_or(&Value::Null);
        let _ = write!(text, "{}{name}={v}", if text.is_empty() { "" } else { " " });
        match kind {
            Kind::Exact => {
                let _ = write!(key, "{v}\u{1f}");
            }
            Kind::Timestamp => {
                let _ = write!(key, "{}\u{1f}", instant(v));
            }
            Kind::Float => floats.push(v.as_f64()),
        }
    }
    Row { key, floats, text }
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= FLOAT_TOLERANCE * a.abs().max(b.abs()).max(1.0),
        (None, None) => true,
        _ => false,
    }
}

/// Compare `got` (fvhost's JSON lines) with `want` (the oracle's) as
/// multisets; a readable diff if they differ.
fn diff(got: &[String], want: &[String], columns: &[(String, Kind)]) -> Option<String> {
    let mut by_key: BTreeMap<String, (Vec<Row>, Vec<Row>)> = BTreeMap::new();
    for line in got {
        let r = row(line, columns, "fvhost's output");
        by_key.entry(r.key.clone()).or_default().0.push(r);
    }
    for line in want {
        let r = row(line, columns, "the oracle");
        by_key.entry(r.key.clone()).or_default().1.push(r);
    }
    let (mut missing, mut extra): (Vec<String>, Vec<String>) = (Vec::new(), Vec::new());
    let order = |a: &Row, b: &Row| {
        a.floats
            .iter()
            .zip(&b.floats)
            .map(|(x, y)| match (x, y) {
                (Some(x), Some(y)) => x.total_cmp(y),
                _ => x.is_some().cmp(&y.is_some()),
            })
            .find(|o| o.is_ne())
            .unwrap_or(std::cmp::Ordering::Equal)
    };
    for (_, (mut g, mut w)) in by_key {
        // Equal exact cells: pair the float cells in sorted order.
        g.sort_by(order);
        w.sort_by(order);
        let (mut i, mut j) = (0, 0);
        while i < g.len() && j < w.len() {
            if g[i]
                .floats
                .iter()
                .zip(&w[j].floats)
                .all(|(a, b)| close(*a, *b))
            {
                i += 1;
                j += 1;
            } else if order(&g[i], &w[j]).is_lt() {
                extra.push(g[i].text.clone());
                i += 1;
            } else {
                missing.push(w[j].text.clone());
                j += 1;
            }
        }
        extra.extend(g[i..].iter().map(|r| r.text.clone()));
        missing.extend(w[j..].iter().map(|r| r.text.clone()));
    }
    if missing.is_empty() && extra.is_empty() {
        return None;
    }
    let mut text = format!(
        "fvhost wrote {} rows, the oracle has {}: {} missing from fvhost's output, {} extra in it\n",
        got.len(),
        want.len(),
        missing.len(),
        extra.len()
    );
    for (label, rows) in [("missing", &missing), ("extra", &extra)] {
        for r in rows.iter().take(SHOWN) {
            let _ = writeln!(text, "  {label}: {r}");
        }
        if rows.len() > SHOWN {
            let _ = writeln!(text, "  … and {} more {label}", rows.len() - SHOWN);
        }
    }
    Some(text)
}

/// The oracle's rows as JSON lines (arrow's writer, as file-sink's).
fn json_lines(batches: &[RecordBatch]) -> Vec<String> {
    let mut buf = Vec::new();
    {
        let mut writer = arrow::json::LineDelimitedWriter::new(&mut buf);
        for b in batches {
            writer.write(b).expect("oracle rows as JSON");
        }
        writer.finish().expect("oracle rows as JSON");
    }
    String::from_utf8(buf)
        .expect("UTF-8")
        .lines()
        .map(str::to_string)
        .collect()
}

/// The test topology with every generator source at `rate` events per
/// second of event time.
fn with_event_rate(test_toml: &str, rate: u64) -> String {
    let mut topology: toml::Table = toml::from_str(test_toml).expect("the test topology parses");
    let sources = topology
        .get_mut("sources")
        .and_then(toml::Value::as_table_mut)
        .expect("sources");
    for (_, source) in sources.iter_mut() {
        if source.get("plugin").and_then(toml::Value::as_str) != Some("generator") {
            continue;
        }
        let config = source
            .get_mut("config")
            .and_then(toml::Value::as_table_mut)
            .expect("a generator's config");
        assert!(
            !config.contains_key("first_event_rate"),
            "the example sets first_event_rate: the slow variant would override it"
        );
        config.insert("first_event_rate".into(), toml::Value::Integer(rate as i64));
    }
    toml::to_string(&topology).expect("topology")
}

/// The event times a query runs on.
#[derive(Clone, Copy, Debug)]
enum EventTime {
    /// The generator's default, 10 000 events/s: 30 s of event time,
    /// about ten events per millisecond (ties in time, so the full
    /// tie-breaks of top-N and dedup matter).
    Default,
    /// [`SLOW_EVENT_RATE`] events/s: 6 000 s of event time, so that the
    /// windows' edges bind — persons older than q3's 60 s, bids later than
    /// q4's 20 s, gaps between a bidder's bids around q11's 10 s, many
    /// more windows and sessions.
    Slow,
}

/// Events per second of event time in the [`EventTime::Slow`] runs (one
/// event every 20 ms).
const SLOW_EVENT_RATE: u64 = 50;

/// Run example `query` and its raw events, and compare its output with the
/// oracle's, at both event rates.
fn check(query: &str) {
    for time in [EventTime::Default, EventTime::Slow] {
        check_at(query, time);
    }
}

fn check_at(query: &str, time: EventTime) {
    let s = Scratch::new();
    copy_example(&s, "nexmark");
    let text = std::fs::read_to_string(s.path().join(format!("{query}.toml"))).expect("example");
    let test_toml = match time {
        EventTime::Default => for_test(&text),
        EventTime::Slow => with_event_rate(&for_test(&text), SLOW_EVENT_RATE),
    };
    s.write("test.toml", &test_toml);
    s.write("raw.toml", &raw_topology(query, &test_toml));

    let raw = s.fvhost(&["run", "raw.toml", "--no-progress"]);
    assert_exit(&raw, 0);
    let run = s.fvhost(&["run", "test.toml", "--no-progress"]);
    assert_exit(&run, 0);
    // The oracle has no lateness (see the module's doc): fvhost must not
    // have dropped any row as late either (the end-of-run table says so).
    assert!(
        run.stderr.contains("dead-lettered"),
        "{query}: no end-of-run table on stderr:\n{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("late rows dropped") && !run.stdout.contains("late rows dropped"),
        "{query} ({time:?} event time): fvhost dropped late rows, which the oracle does not model:\n{}",
        run.stderr
    );
    let got = s.output_lines("out");
    assert!(
        !got.is_empty(),
        "{query} ({time:?} event time) wrote nothing"
    );

    let tables: Vec<String> = s
        .files("raw")
        .into_iter()
        .filter(|n| !n.starts_with('.'))
        .collect();
    let batches = run_oracle(&s, &tables, oracle_sql(query));
    let schema = batches
        .first()
        .map(|b| b.schema())
        .unwrap_or_else(|| panic!("{query} ({time:?} event time): the oracle has no rows"));
    let want = json_lines(&batches);
    if let Some(d) = diff(&got, &want, &columns(&schema)) {
        panic!(
            "{query} ({time:?} event time): fvhost's output differs from the batch SQL oracle\n{d}"
        );
    }
    println!(
        "{query} ({time:?} event time): {} rows, as the oracle's",
        got.len()
    );
}

#[test]
fn nexmark_q0_equals_batch_sql() {
    check("q0");
}

#[test]
fn nexmark_q1_equals_batch_sql() {
    check("q1");
}

#[test]
fn nexmark_q2_equals_batch_sql() {
    check("q2");
}

#[test]
fn nexmark_q3_interval_join_equals_batch_sql() {
    check("q3");
}

#[test]
fn nexmark_q4_join_and_two_windows_equal_batch_sql() {
    check("q4");
}

#[test]
fn nexmark_q5_hopping_window_top_1_equals_batch_sql() {
    check("q5");
}

#[test]
fn nexmark_q7_window_top_1_equals_batch_sql() {
    check("q7");
}

#[test]
fn nexmark_q8_window_join_dedup_equals_batch_sql() {
    check("q8");
}

#[test]
fn nexmark_q11_sessions_equal_batch_sql() {
    check("q11");
}

#[test]
fn nexmark_q13_lookup_equals_batch_sql() {
    check("q13");
}

#[test]
fn nexmark_q18_dedup_last_equals_batch_sql() {
    check("q18");
}

#[test]
fn nexmark_q19_window_top_10_equals_batch_sql() {
    check("q19");
}

/// The comparison itself: a float within tolerance matches, a changed
/// exact cell or a duplicate row does not, and the diff names them.
#[test]
fn nexmark_oracle_diff_reports_missing_and_extra_rows() {
    let columns = vec![
        ("k".to_string(), Kind::Exact),
        ("t".to_string(), Kind::Timestamp),
        ("avg".to_string(), Kind::Float),
    ];
    let lines = |rows: &[&str]| rows.iter().map(|r| r.to_string()).collect::<Vec<_>>();
    let want = lines(&[
        r#"{"k":1,"t":"2024-01-01T00:00:00.100","avg":2.5}"#,
        r#"{"k":2,"t":"2024-01-01T00:00:10","avg":1.0}"#,
    ]);
    let same = lines(&[
        r#"{"k":2,"t":"2024-01-01T00:00:10","avg":1.0000000000001}"#,
        r#"{"k":1,"t":"2024-01-01T00:00:00.100000","avg":2.5}"#,
    ]);
    assert_eq!(diff(&same, &want, &columns), None);
    let other = lines(&[
        r#"{"k":1,"t":"2024-01-01T00:00:00.100","avg":2.6}"#,
        r#"{"k":2,"t":"2024-01-01T00:00:10","avg":1.0}"#,
        r#"{"k":2,"t":"2024-01-01T00:00:10","avg":1.0}"#,
    ]);
    let d = diff(&other, &want, &columns).expect("a difference");
    assert!(d.contains("2 extra"), "{d}");
    assert!(d.contains("missing: k=1 "), "{d}");
    assert!(d.contains("extra: k=1 ") && d.contains("avg=2.6"), "{d}");
    assert!(d.contains("extra: k=2 "), "{d}");
}
