//! Projection pushdown: a topology that reads some columns of a source
//! gives, row for row, what it gives reading all of them (`push_down =
//! false`) — for every file format, the generator, and a source built for
//! fv:plugin 0.3 (which the host narrows itself).

use std::path::Path;

use crate::support::{Scratch, assert_exit, int_column};

/// The source to read, then `SELECT auction, price … WHERE price > 10000`
/// into a file sink.
fn query(push_down: bool, source: &str) -> String {
    format!(
        r#"name = "projection"
push_down = {push_down}

{source}

[stages.pick]
input = "bids"
sql = "SELECT auction, price FROM bids WHERE price > 10000"

[sinks.out]
input = "pick"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#
    )
}

/// Run `topology` with and without pushdown; the committed rows must be
/// equal (and not empty). Returns the pushdown run's log.
fn same_rows_either_way(s: &Scratch, source: &str) -> String {
    s.write("off.toml", &query(false, source));
    let off = s.fvhost(&["run", "off.toml", "--no-progress"]);
    assert_exit(&off, 0);
    let unprojected = s.output_lines("out");
    std::fs::remove_dir_all(s.path().join("out")).expect("clear out/");
    std::fs::remove_dir_all(s.path().join(".fvhost")).ok();
    s.write("on.toml", &query(true, source));
    let on = s.fvhost(&["run", "on.toml", "--no-progress"]);
    assert_exit(&on, 0);
    let projected = s.output_lines("out");
    assert!(
        unprojected.len() > 100,
        "the query keeps rows: {}",
        unprojected.len()
    );
    assert_eq!(projected, unprojected, "row for row");
    on.stderr
}

/// 30 000 Nexmark bids written by the file sink as `format`.
fn write_bids(s: &Scratch, format: &str) {
    s.write(
        "write.toml",
        &format!(
            r#"name = "write"
[sources.bids]
plugin = "generator"
config = {{ events = 30000 }}

[sinks.data]
input = "bids"
plugin = "file-sink"
allow_write = ["data"]
config = {{ path = "data", format = "{format}" }}
"#
        ),
    );
    assert_exit(&s.fvhost(&["run", "write.toml", "--no-progress"]), 0);
    std::fs::remove_dir_all(s.path().join(".fvhost")).ok();
}

fn file_source(pattern: &str) -> String {
    format!(
        r#"[sources.bids]
plugin = "file-source"
allow_read = ["data"]
config = {{ path = "{pattern}" }}"#
    )
}

fn assert_pushed(log: &str, source: &str) {
    assert!(
        log.contains("the source reads only what the topology needs")
            && log.contains(&format!("source={source}"))
            && log.contains("columns=auction, price"),
        "{log}"
    );
}

#[test]
fn csv_read_for_two_columns_gives_the_rows_of_a_full_read() {
    let s = Scratch::new();
    write_bids(&s, "csv");
    let log = same_rows_either_way(&s, &file_source("data/*.csv"));
    assert_pushed(&log, "bids");
}

#[test]
fn json_lines_read_for_two_columns_give_the_rows_of_a_full_read() {
    let s = Scratch::new();
    write_bids(&s, "jsonl");
    let log = same_rows_either_way(&s, &file_source("data/*.jsonl"));
    assert_pushed(&log, "bids");
}

#[test]
fn parquet_read_for_two_columns_gives_the_rows_of_a_full_read() {
    let s = Scratch::new();
    write_bids(&s, "parquet");
    let log = same_rows_either_way(&s, &file_source("data/*.parquet"));
    assert_pushed(&log, "bids");
    // The WHERE clause is offered to the only consumer's source.
    assert!(log.contains("filters=1"), "{log}");
}

#[test]
fn the_generator_builds_only_the_columns_read() {
    let s = Scratch::new();
    let log = same_rows_either_way(
        &s,
        r#"[sources.bids]
plugin = "generator"
config = { events = 30000 }"#,
    );
    assert_pushed(&log, "bids");
}

/// A source built for 0.3 cannot be told; the host narrows its batches,
/// and its event-time column (read for watermarks) stays.
#[test]
fn a_source_built_for_contract_0_3_still_runs_and_the_host_narrows_it() {
    let s = Scratch::new();
    let wasm = Path::new(env!("FV_PLUGIN_DIR")).join("source_v0_3.wasm");
    let inspect = s.fvhost(&["plugin", "inspect", wasm.to_str().expect("utf-8")]);
    assert_exit(&inspect, 0);
    assert!(
        inspect.stdout.contains("fv:plugin/source-plugin@0.3.0"),
        "{}",
        inspect.stdout
    );
    s.write(
        "t.toml",
        &format!(
            r#"name = "legacy"
[sources.old]
path = "{wasm}"
config = {{ rows = 5000 }}
watermark = {{ column = "ts", delay = "1s" }}

[stages.pick]
input = "old"
sql = "SELECT seq FROM old WHERE seq % 7 = 0"

[sinks.out]
input = "pick"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
            wasm = wasm.display()
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert!(
        run.stderr.contains("columns=seq, ts") && run.stderr.contains("native=false"),
        "{}",
        run.stderr
    );
    let rows = s.output_lines("out");
    let mut seq = int_column(&rows, "seq");
    seq.sort_unstable();
    assert_eq!(seq, (0..5000).filter(|i| i % 7 == 0).collect::<Vec<i64>>());
    assert!(rows.iter().all(|r| !r.contains("word")), "{rows:?}");
}
