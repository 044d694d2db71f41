//! Nexmark throughput: every topology of `examples/nexmark` run in process
//! on a fixed number of events, with checkpoints off and every 10 s, and
//! the same query run by DataFusion batch execution on the same events in
//! memory — the practical ceiling — in the same run. Figures are printed,
//! never asserted (`cargo bench --workspace --bench nexmark`;
//! `FV_BENCH_EVENTS` sets the event count, default 2,000,000;
//! `FV_BENCH_QUERIES=q5,q7` runs some).
//!
//! An example with a `.sql` twin runs a second time from the SQL, planned
//! onto the same operators: the `sql/toml` column is its events per core
//! over the TOML topology's in the same run (1.00: the same work).
//!
//! events/s per core = events / CPU seconds of the whole process (all
//! threads: Wasm source, operators, sink, epoch I/O), so the figure does
//! not depend on how many cores the machine has. Streaming includes
//! generating the events in the Wasm source; the batch side reads them
//! from memory.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use fvhost::topology::Topology;

use common::{measure, run_topology};
use fvhost::plugin::{
    Catalog, PluginEngine, SandboxPolicy, SourceInstance, SourcePoll, TaskIdentity,
};

/// One query: the example's name and its batch SQL over tables `person`,
/// `auction`, `bid` and `side_input`.
struct Query {
    name: &'static str,
    batch_sql: &'static str,
}

const QUERIES: &[Query] = &[
    Query {
        name: "q0",
        batch_sql: "SELECT auction, bidder, price, date_time FROM bid",
    },
    Query {
        name: "q1",
        batch_sql: "SELECT auction, bidder, CAST(price * 0.908 AS BIGINT) AS price, date_time FROM bid",
    },
    Query {
        name: "q2",
        batch_sql: "SELECT auction, price FROM bid WHERE auction % 123 = 0",
    },
    Query {
        name: "q3",
        batch_sql: "SELECT p.name, p.city, p.state, a.id FROM auction a JOIN person p ON a.seller = p.id
                    WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')",
    },
    Query {
        name: "q4",
        batch_sql: "SELECT category, avg(final) FROM (
                      SELECT a.id, a.category, max(b.price) AS final FROM auction a JOIN bid b ON a.id = b.auction
                      WHERE b.date_time BETWEEN a.date_time AND a.expires GROUP BY a.id, a.category)
                    GROUP BY category",
    },
    Query {
        name: "q5",
        batch_sql: "WITH hops AS (SELECT * FROM (VALUES (0), (1), (2), (3), (4)) AS h(i)),
                    counts AS (SELECT (CAST(date_time AS BIGINT) / 2000 - h.i) AS ws, auction, count(*) AS n
                               FROM bid CROSS JOIN hops h GROUP BY 1, auction)
                    SELECT ws, auction, n FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY ws ORDER BY n DESC, auction) AS r FROM counts)
                    WHERE r = 1",
    },
    Query {
        name: "q7",
        batch_sql: "SELECT auction, bidder, price, date_time FROM (
                      SELECT *, ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 10000
                                                   ORDER BY price DESC, auction, bidder) AS r FROM bid)
                    WHERE r = 1",
    },
    Query {
        name: "q8",
        batch_sql: "SELECT DISTINCT p.id, p.name, CAST(p.date_time AS BIGINT) / 10000 AS w
                    FROM person p JOIN auction a ON p.id = a.seller
                     AND CAST(p.date_time AS BIGINT) / 10000 = CAST(a.date_time AS BIGINT) / 10000",
    },
    Query {
        name: "q11",
        batch_sql: "WITH l AS (SELECT bidder, CAST(date_time AS BIGINT) AS t,
                      CASE WHEN CAST(date_time AS BIGINT) - LAG(CAST(date_time AS BIGINT)) OVER (PARTITION BY bidder ORDER BY date_time) < 10000
                           THEN 0 ELSE 1 END AS fresh FROM bid),
                    s AS (SELECT *, SUM(fresh) OVER (PARTITION BY bidder ORDER BY t ROWS UNBOUNDED PRECEDING) AS sid FROM l)
                    SELECT bidder, min(t), max(t), count(*) FROM s GROUP BY bidder, sid",
    },
    Query {
        name: "q13",
        batch_sql: "SELECT b.auction, b.bidder, b.price, b.date_time, s.value FROM bid b JOIN side_input s ON b.auction % 1000 = s.key",
    },
    Query {
        name: "q18",
        batch_sql: "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 10000, bidder, auction
                                                           ORDER BY date_time DESC) AS r FROM bid) WHERE r = 1",
    },
    Query {
        name: "q19",
        batch_sql: "SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY CAST(date_time AS BIGINT) / 10000, auction
                                                           ORDER BY price DESC) AS r FROM bid) WHERE r <= 10",
    },
];

/// The example's text with `events` events and a blackhole sink.
fn bench_topology(text: &str, events: u64, checkpoint: &str) -> String {
    let mut out = format!("[checkpoint]\ninterval = \"{checkpoint}\"\n");
    let mut sink_input = None;
    let mut in_sink = false;
    let mut in_checkpoint = false;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('[') {
            in_checkpoint = trimmed == "[checkpoint]";
            // One sink per example (`out` in TOML; the table's name in SQL).
            in_sink = trimmed.starts_with("[sinks.");
        }
        if in_sink {
            if let Some(input) = trimmed.strip_prefix("input = ") {
                sink_input = Some(input.to_string());
            }
            continue;
        }
        if in_checkpoint || trimmed.starts_with("name = ") {
            continue;
        }
        let line = match line.find("events = ") {
            Some(i) => {
                let end = line[i + 9..]
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or(line.len(), |e| i + 9 + e);
                format!("{}events = {events}{}", &line[..i], &line[end..])
            }
            None => line.to_string(),
        };
        out.push_str(&line);
        out.push('\n');
    }
    let input = sink_input.expect("the example's sink input");
    format!("name = \"bench\"\n{out}[sinks.out]\ninput = {input}\nplugin = \"blackhole-sink\"\n")
}

/// The events of one Nexmark stream, read from the generator plugin.
fn events_of(engine: &PluginEngine, stream: &str, events: u64) -> Vec<RecordBatch> {
    let catalog = Catalog::new(engine);
    let plugin = catalog.load_named("generator").expect("generator");
    let id = TaskIdentity {
        topology: "bench".into(),
        stage: stream.into(),
        task_index: 0,
        parallelism: 1,
    };
    let config = format!("{{\"stream\": \"{stream}\", \"events\": {events}}}");
    let mut source = SourceInstance::open(engine, &plugin, &SandboxPolicy::default(), &id, &config)
        .unwrap_or_else(|e| panic!("generator: {e:?}"));
    let mut batches = Vec::new();
    loop {
        match source.poll(8192).expect("poll") {
            SourcePoll::Batch(b, _, _, _) => batches.push(b),
            SourcePoll::Idle => {}
            SourcePoll::Finished => return batches,
        }
    }
}

/// The TOML topology the example's `.sql` twin at `path` translates to,
/// if it has one.
fn sql_twin(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let topology = Topology::parse(path, &text).unwrap_or_else(|d| panic!("{d}"));
    Some(topology.translated.expect("a .sql file is translated"))
}

fn side_input() -> RecordBatch {
    let keys: Vec<i64> = (0..1000).collect();
    let values: Vec<String> = keys
        .iter()
        .map(|k| format!("side-{:03}", (k * 7919) % 1000))
        .collect();
    RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("key", DataType::Int64, false),
            Field::new("value", DataType::Utf8, false),
        ])),
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(StringArray::from(values)),
        ],
    )
    .expect("side input")
}

/// Run `sql` with DataFusion over the in-memory tables; rows out, wall and CPU.
fn batch(
    ctx: &SessionContext,
    runtime: &tokio::runtime::Runtime,
    sql: &str,
) -> (usize, Duration, f64) {
    let (rows, wall, cpu) = measure(|| {
        runtime.block_on(async {
            let batches = ctx.sql(sql).await?.collect().await?;
            Ok::<_, datafusion::error::DataFusionError>(batches.iter().map(|b| b.num_rows()).sum())
        })
    });
    (
        rows.unwrap_or_else(|e| panic!("batch {sql}: {e}")),
        wall,
        cpu,
    )
}

fn main() {
    let engine = common::engine();
    let events: u64 = std::env::var("FV_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let only: Option<Vec<String>> = std::env::var("FV_BENCH_QUERIES")
        .ok()
        .map(|v| v.split(',').map(str::to_string).collect());
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/nexmark");
    let dir = tempfile::tempdir().expect("tempdir");
    // The examples' relative paths (q13's side input) resolve here.
    std::fs::create_dir_all(dir.path().join("data")).expect("data dir");
    std::fs::copy(
        examples.join("data/side_input.csv"),
        dir.path().join("data/side_input.csv"),
    )
    .expect("side input");

    let ctx = SessionContext::new();
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio");
    for stream in ["person", "auction", "bid"] {
        let batches = events_of(&engine, stream, events);
        let schema = batches[0].schema();
        let table = MemTable::try_new(schema, vec![batches]).expect("table");
        ctx.register_table(stream, Arc::new(table))
            .expect("register");
    }
    let side = side_input();
    ctx.register_table(
        "side_input",
        Arc::new(MemTable::try_new(side.schema(), vec![vec![side]]).expect("side")),
    )
    .expect("register");

    println!(
        "Nexmark, {events} events (2 cores; per core = events / CPU seconds of the process)\n"
    );
    println!(
        "{:<5} {:>14} {:>14} {:>14} {:>14} {:>9} {:>10} {:>9}",
        "query",
        "ckpt off ev/s",
        "per core",
        "ckpt 10s /core",
        "batch /core",
        "stream/",
        "ckpt cost",
        "sql/toml"
    );
    println!(
        "{:<5} {:>14} {:>14} {:>14} {:>14} {:>9} {:>10} {:>9}",
        "", "(wall)", "", "", "(DataFusion)", "batch", "", "per core"
    );
    for q in QUERIES {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == q.name))
        {
            continue;
        }
        let text =
            std::fs::read_to_string(examples.join(format!("{}.toml", q.name))).expect("example");
        let (wall, cpu) = run_topology(&engine, dir.path(), &bench_topology(&text, events, "1h"));
        let (_, cpu_on) = run_topology(&engine, dir.path(), &bench_topology(&text, events, "10s"));
        let (_, _, batch_cpu) = batch(&ctx, &tokio, q.batch_sql);
        let ev = events as f64;
        let per_core = ev / cpu;
        let batch_per_core = ev / batch_cpu.max(1e-6);
        let sql = examples.join(format!("{}.sql", q.name));
        let sql_vs_toml = match sql_twin(&sql) {
            Some(toml) => {
                let (_, sql_cpu) =
                    run_topology(&engine, dir.path(), &bench_topology(&toml, events, "1h"));
                format!("{:>8.2}x", (ev / sql_cpu) / per_core)
            }
            None => format!("{:>9}", "-"),
        };
        println!(
            "{:<5} {:>14.0} {:>14.0} {:>14.0} {:>14.0} {:>8.2}x {:>9.2}x {sql_vs_toml}",
            q.name,
            ev / wall.as_secs_f64(),
            per_core,
            ev / cpu_on,
            batch_per_core,
            per_core / batch_per_core,
            (ev / cpu_on) / per_core,
        );
    }
}
