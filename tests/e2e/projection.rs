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

/// `test-source` answering its projection in `mode`, read for `seq` and
/// `n` by a SQL stage into a file sink.
fn misbehaving(s: &Scratch, mode: &str) -> crate::support::Run {
    let wasm = Path::new(env!("FV_PLUGIN_DIR")).join("test_source.wasm");
    s.write(
        "t.toml",
        &format!(
            r#"name = "answers"
[sources.src]
path = "{wasm}"
config = {{ rows = 3000, push_down = "{mode}" }}

[stages.even]
input = "src"
sql = "SELECT n FROM src WHERE seq % 2 = 0"

[sinks.out]
input = "even"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
            wasm = wasm.display()
        ),
    );
    s.fvhost(&["run", "t.toml", "--no-progress"])
}

/// A source that narrows as asked, and one that ignores the request (the
/// host narrows its batches), give the same rows.
#[test]
fn a_source_that_ignores_its_projection_is_narrowed_by_the_host() {
    for (mode, native) in [("honour", "native=true"), ("ignore", "native=true")] {
        let s = Scratch::new();
        let run = misbehaving(&s, mode);
        assert_exit(&run, 0);
        assert!(
            run.stderr.contains("columns=seq, n") && run.stderr.contains(native),
            "{mode}: {}",
            run.stderr
        );
        let expected: Vec<i64> = (0..3000).filter(|i| i % 2 == 0).map(|i| i * 3).collect();
        assert_eq!(int_column(&s.output_lines("out"), "n"), expected, "{mode}");
    }
}

/// A source that refuses its projection, or answers it with a column
/// missing or of another type, stops the run before any row moves, and
/// the message names the source, the plugin and what was wrong.
#[test]
fn a_source_that_answers_its_projection_wrongly_is_refused_by_name() {
    for (mode, says) in [
        ("refuse", "cannot narrow what it reads"),
        ("drop", "without the requested column `seq`"),
        ("retype", "answered a projection with column `seq: Utf8`"),
    ] {
        let s = Scratch::new();
        let run = misbehaving(&s, mode);
        assert_exit(&run, 2);
        assert!(
            run.stderr.contains("sources.src")
                && run.stderr.contains("test-source")
                && run.stderr.contains(says),
            "{mode}: {}",
            run.stderr
        );
        assert!(s.output_lines("out").is_empty(), "{mode}: no row written");
    }
}

fn declared_sink(s: &Scratch, reads: &str) -> crate::support::Run {
    let dir = Path::new(env!("FV_PLUGIN_DIR"));
    s.write(
        "t.toml",
        &format!(
            r#"name = "declared"
[sources.src]
path = "{source}"
config = {{ rows = 2000 }}

[sinks.out]
input = "src"
path = "{sink}"
config = {{ reads = {reads} }}
"#,
            source = dir.join("test_source.wasm").display(),
            sink = dir.join("test_sink.wasm").display()
        ),
    );
    s.fvhost(&["run", "t.toml", "--no-progress"])
}

/// A sink is sent exactly the columns it declares, in its order, and the
/// source reads only those; a sink that declares a column its input does
/// not have is refused before the run, by name.
#[test]
fn a_sink_gets_exactly_the_columns_it_declares() {
    let s = Scratch::new();
    let run = declared_sink(&s, r#"["n", "seq"]"#);
    assert_exit(&run, 0);
    assert!(
        run.stderr.contains("columns=seq, n") && run.stderr.contains("2000 rows so far"),
        "{}",
        run.stderr
    );
    let s = Scratch::new();
    let run = declared_sink(&s, r#"["n", "missing"]"#);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("sinks.out")
            && run
                .stderr
                .contains("column `missing`, which its input does not have"),
        "{}",
        run.stderr
    );
}
