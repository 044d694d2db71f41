//! Misbehaving steps: poison rows are dead-lettered and the rest flows;
//! endless loops and memory hogs stop the run with a clear error. Rows
//! `file-source` cannot parse are dead-lettered by file and line too.

use crate::support::{Scratch, assert_exit, int_column, test_step_wasm};

fn topology(step_config: &str, limits: &str, dead_letter: bool) -> String {
    let wasm = test_step_wasm();
    let dlq = if dead_letter {
        "dead_letter = \"rejects\"\n[sinks.rejects]\nplugin = \"file-sink\"\nallow_write = [\"rejects\"]\nconfig = { path = \"rejects\" }\n"
    } else {
        ""
    };
    format!(
        r#"{dlq}
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 1000 }}

[stages.prices]
input = "nums"
sql = "SELECT seq, seq * 10 AS price FROM nums"

[stages.step]
input = "prices"
path = "{wasm}"
config = {step_config}
{limits}

[sinks.out]
input = "step"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
        wasm = wasm.display()
    )
}

fn seqs(s: &Scratch, dir: &str) -> Vec<i64> {
    int_column(&s.output_lines(dir), "seq")
}

#[test]
fn rows_a_step_names_as_bad_go_to_the_dead_letter_sink_and_the_rest_flows() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("{ mode = \"bad-rows\", value = 4200 }", "", true),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        seqs(&s, "out"),
        (0..1000).filter(|n| *n != 420).collect::<Vec<i64>>()
    );
    let rejects = s.output_lines("rejects");
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    let r: serde_json::Value = serde_json::from_str(&rejects[0]).expect("json");
    assert_eq!(r["stage"], "step");
    assert_eq!(r["plugin"], "test-step");
    assert_eq!(r["error"], "value 4200 is poison");
    let row: serde_json::Value =
        serde_json::from_str(r["row"].as_str().expect("row")).expect("row json");
    assert_eq!(row["seq"], 420);
    assert_eq!(row["price"], 4200);
}

#[test]
fn a_row_that_makes_the_step_trap_is_isolated_by_bisection() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("{ mode = \"trap-on\", value = 7770 }", "", true),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        seqs(&s, "out"),
        (0..1000).filter(|n| *n != 777).collect::<Vec<i64>>()
    );
    let rejects = s.output_lines("rejects");
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    assert!(
        rejects[0].contains("trapped") && rejects[0].contains("poison value 7770"),
        "{}",
        rejects[0]
    );
}

#[test]
fn without_a_dead_letter_sink_poison_rows_are_counted_and_logged() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("{ mode = \"bad-rows\", value = 4200 }", "", false),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(seqs(&s, "out").len(), 999);
    assert!(run.stderr.contains("poison row dropped"), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("warning: 1 poison row(s) were dropped, not kept: the topology has no `dead_letter` sink"),
        "{}",
        run.stderr
    );
    let step_line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("step "))
        .expect("summary line");
    assert!(
        step_line.trim_end().ends_with(" 1"),
        "dead-lettered count: {step_line}"
    );
}

/// A column the step returns but its output schema does not declare used
/// to vanish without a word: the run fails naming it and the fix.
#[test]
fn a_column_the_step_did_not_declare_fails_the_run_naming_it() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("{ mode = \"undeclared-column\" }", "", false),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    for needle in [
        "plugin `test-step` in step[0], in `process`: returned column `surprise` (Int64), which its output schema does not declare",
        "declared: seq: Int64, price: Int64",
        "append_fields",
    ] {
        assert!(run.stderr.contains(needle), "{needle}:\n{}", run.stderr);
    }
    // The advice is in the plugin's language (its metadata says Rust).
    assert!(!run.stderr.contains("Python:"), "{}", run.stderr);
    assert!(s.output_lines("out").is_empty(), "no row went through");
}

#[test]
fn a_step_that_loops_forever_is_stopped_by_its_cpu_guard() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("{ mode = \"loop\" }", "call_timeout = \"1s\"", false),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr
            .contains("plugin `test-step` in step[0], in `process`: exceeded its call_timeout"),
        "{}",
        run.stderr
    );
    assert!(s.output_lines("out").is_empty());
    let status = s.fvhost(&["status", ".fvhost/t"]);
    assert_exit(&status, 0);
    let record: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    assert_eq!(record["state"], "FAILED");
    assert!(
        record["error"]
            .as_str()
            .is_some_and(|e| e.contains("exceeded its call_timeout")),
        "{record}"
    );
}

#[test]
fn a_step_that_exhausts_its_memory_is_stopped() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology("{ mode = \"hog\" }", "memory_limit = \"64MiB\"", false),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr
            .contains("plugin `test-step` in step[0], in `process`: exceeded its memory limit"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("over its memory_limit of 64MiB"),
        "{}",
        run.stderr
    );
}

/// A topology reading `data/<file>` with `file-source` (`bad_rows`) into
/// `out`, with a dead-letter sink writing `rejects`.
fn file_topology(file: &str, columns: &str, bad_rows: &str) -> String {
    format!(
        r#"dead_letter = "rejects"

[sources.orders]
plugin = "file-source"
allow_read = ["data"]
config = {{ path = "data/{file}", {columns} bad_rows = "{bad_rows}" }}

[sinks.out]
input = "orders"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}

[sinks.rejects]
plugin = "file-sink"
allow_write = ["rejects"]
config = {{ path = "rejects" }}
"#
    )
}

/// The dead-letter records of a run by line: (error, row), after checking
/// each names the source and plugin.
fn rejects_of_orders(s: &Scratch) -> Vec<(String, String)> {
    let mut rejects: Vec<(String, String)> = s
        .output_lines("rejects")
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("json");
            assert_eq!(v["stage"], "orders", "{l}");
            assert_eq!(v["plugin"], "file-source", "{l}");
            let text = |k: &str| v[k].as_str().unwrap_or_default().to_string();
            (text("error"), text("row"))
        })
        .collect();
    // `data/x:10` after `data/x:9`.
    rejects.sort_by_key(|(e, _)| {
        e.split(':')
            .nth(1)
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or(0)
    });
    rejects
}

#[test]
fn csv_rows_file_source_cannot_parse_go_to_the_dead_letter_sink_by_file_and_line() {
    // Decoded by the host, and inside the plugin: the same rows and
    // rejects, each bad row found alone whoever decoded its block.
    for decode in ["host", "guest"] {
        csv_rejects(decode);
    }
}

fn csv_rejects(decode: &str) {
    let s = Scratch::new();
    let mut data = b"id,name,amount\n1,a,1.5\n2,b,eleven\n3,c,3.5\n4,d,4.5,extra\n".to_vec();
    data.extend_from_slice(b"5,e,5.5\n6,f\n7,\xff\xfe,7.5\n8,h,8.5\n9,truncated");
    std::fs::create_dir_all(s.path().join("data")).expect("mkdir");
    std::fs::write(s.path().join("data/orders.csv"), &data).expect("write");
    s.write(
        "t.toml",
        &file_topology(
            "orders.csv",
            &format!(
                r#"columns = ["id:int64", "name:utf8", "amount:float64"], decode = "{decode}","#
            ),
            "skip",
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        s.output_lines("out"),
        [
            r#"{"id":1,"name":"a","amount":1.5}"#,
            r#"{"id":3,"name":"c","amount":3.5}"#,
            r#"{"id":5,"name":"e","amount":5.5}"#,
            r#"{"id":8,"name":"h","amount":8.5}"#,
        ]
    );
    let rejects = rejects_of_orders(&s);
    let expected = [
        (
            "data/orders.csv:3: Error while parsing value 'eleven' as type 'Float64' for column `amount`",
            "2,b,eleven",
        ),
        (
            "data/orders.csv:5: incorrect number of fields, expected 3 got 4",
            "4,d,4.5,extra",
        ),
        (
            "data/orders.csv:7: incorrect number of fields, expected 3 got 2",
            "6,f",
        ),
        (
            "data/orders.csv:8: Encountered invalid UTF-8 data for field `name`",
            "7,\u{fffd}\u{fffd},7.5",
        ),
        (
            "data/orders.csv:10: incorrect number of fields, expected 3 got 2",
            "9,truncated",
        ),
    ];
    let got: Vec<(&str, &str)> = rejects
        .iter()
        .map(|(e, r)| (e.as_str(), r.as_str()))
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn json_lines_file_source_cannot_parse_go_to_the_dead_letter_sink_by_file_and_line() {
    // Decoded by the host, and inside the plugin: the same rows and
    // rejects, each bad row found alone whoever decoded its block.
    for decode in ["host", "guest"] {
        json_rejects(decode);
    }
}

fn json_rejects(decode: &str) {
    let s = Scratch::new();
    let mut data = Vec::new();
    data.extend_from_slice(b"{\"id\":1,\"name\":\"a\"}\n"); // 1
    data.extend_from_slice(b"{\"id\":\"two\",\"name\":\"b\"}\n"); // 2 wrong type
    data.extend_from_slice(b"{\"id\":3,\"name\":\n"); // 3 malformed
    data.extend_from_slice(b"{\"id\":4,\"name\":\"d\"}\n"); // 4
    data.extend_from_slice(b"{\"id\":5}{\"id\":55}\n"); // 5 two objects
    data.extend_from_slice(b"{\"id\":6,\"name\":\"\xff\"}\n"); // 6 not UTF-8
    data.extend_from_slice(b"{\"id\":7,\"name\":\"g\"}\n"); // 7
    data.extend_from_slice(b"{\"id\":8,\"na"); // 8 truncated
    std::fs::create_dir_all(s.path().join("data")).expect("mkdir");
    std::fs::write(s.path().join("data/orders.jsonl"), &data).expect("write");
    s.write(
        "t.toml",
        &file_topology(
            "orders.jsonl",
            &format!(r#"columns = ["id:int64", "name:utf8"], decode = "{decode}","#),
            "skip",
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        s.output_lines("out"),
        [
            r#"{"id":1,"name":"a"}"#,
            r#"{"id":4,"name":"d"}"#,
            r#"{"id":7,"name":"g"}"#,
        ]
    );
    let rejects = rejects_of_orders(&s);
    let lines: Vec<&str> = rejects
        .iter()
        .map(|(e, _)| e.split(": ").next().unwrap_or_default())
        .collect();
    assert_eq!(
        lines,
        [
            "data/orders.jsonl:2",
            "data/orders.jsonl:3",
            "data/orders.jsonl:5",
            "data/orders.jsonl:6",
            "data/orders.jsonl:8",
        ]
    );
    let rows: Vec<&str> = rejects.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        rows,
        [
            r#"{"id":"two","name":"b"}"#,
            r#"{"id":3,"name":"#,
            r#"{"id":5}{"id":55}"#,
            "{\"id\":6,\"name\":\"\u{fffd}\"}",
            r#"{"id":8,"na"#,
        ]
    );
    for (error, reason) in rejects.iter().zip([
        "failed to parse \"two\" as Int64",
        "Truncated record",
        "the line holds 2 JSON values, not one",
        "non-UTF-8",
        "Truncated record",
    ]) {
        assert!(error.0.contains(reason), "{error:?} should say {reason:?}");
    }
}

/// A line over the maximum (8 MiB) is rejected with its first 64 KiB and
/// skipped; the rows around it flow.
#[test]
fn a_line_longer_than_the_maximum_is_dead_lettered_not_fatal() {
    let scratch = |bad_rows: &str| {
        let s = Scratch::new();
        let mut data = b"id,name\n1,a\n2,".to_vec();
        data.extend(std::iter::repeat_n(b'x', 9 << 20));
        data.extend_from_slice(b"\n3,c\n");
        std::fs::create_dir_all(s.path().join("data")).expect("mkdir");
        std::fs::write(s.path().join("data/orders.csv"), &data).expect("write");
        s.write(
            "t.toml",
            &file_topology(
                "orders.csv",
                r#"columns = ["id:int64", "name:utf8"],"#,
                bad_rows,
            ),
        );
        s
    };
    let s = scratch("skip");
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        s.output_lines("out"),
        [r#"{"id":1,"name":"a"}"#, r#"{"id":3,"name":"c"}"#]
    );
    let rejects = rejects_of_orders(&s);
    assert_eq!(rejects.len(), 1);
    let (error, row) = &rejects[0];
    let len = 2 + (9 << 20);
    assert_eq!(
        error,
        &format!(
            "data/orders.csv:3: a line longer than 8 MiB (the row is {len} bytes; its first 64 KiB are kept)"
        )
    );
    assert_eq!(row.len(), 64 << 10);
    assert!(row.starts_with("2,xxx"), "{}", &row[..10]);

    // Under `fail` it fails the run, naming the line.
    let s = scratch("fail");
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr
            .contains("malformed row in `data/orders.csv` line 3: a line longer than 8 MiB"),
        "{}",
        run.stderr
    );
}

/// Inference leaves out an early line that does not parse, and says so.
#[test]
fn schema_inference_skips_a_malformed_early_json_line_and_says_so() {
    let s = Scratch::new();
    s.write(
        "data/orders.jsonl",
        "{\"id\":1,\"name\":\"a\"}\n{\"id\":2,\"name\n{\"id\":3,\"name\":\"c\"}\n",
    );
    s.write("t.toml", &file_topology("orders.jsonl", "", "skip"));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        s.output_lines("out"),
        [r#"{"id":1,"name":"a"}"#, r#"{"id":3,"name":"c"}"#]
    );
    let logged = run
        .stderr
        .lines()
        .find(|l| l.contains("schema inference skipped"))
        .unwrap_or_else(|| panic!("inference says what it skipped:\n{}", run.stderr));
    assert!(
        logged.contains("skipped 1 of the first 3 rows of `data/orders.jsonl`")
            && logged.contains("line 2"),
        "{logged}"
    );
    let rejects = rejects_of_orders(&s);
    assert_eq!(rejects.len(), 1, "{rejects:?}");
    assert!(
        rejects[0].0.starts_with("data/orders.jsonl:2: "),
        "{rejects:?}"
    );
}
