//! Bad input gets a clear error naming file, line and key, and exit code 2
//! (nothing ran) — or, for bad data at run time, exit code 1 naming the row.

use crate::support::{Run, Scratch, assert_exit};

fn validate(s: &Scratch, toml: &str) -> Run {
    s.write("t.toml", toml);
    s.fvhost(&["validate", "t.toml"])
}

const SINK: &str = "\n[sinks.out]\ninput = \"n\"\nplugin = \"blackhole-sink\"\n";

#[test]
fn malformed_toml_names_the_line() {
    let s = Scratch::new();
    let run = validate(
        &s,
        "name = \"x\"\n[sources.n]\nplugin = \"generator\nconfig = {}\n",
    );
    assert_exit(&run, 2);
    assert!(run.stderr.contains("t.toml:3:"), "{}", run.stderr);
}

#[test]
fn unknown_keys_are_refused_with_their_line() {
    let s = Scratch::new();
    let run = validate(
        &s,
        &format!("[sources.n]\nplugin = \"generator\"\nparalelism = 2\n{SINK}"),
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("t.toml:3:") && run.stderr.contains("paralelism"),
        "{}",
        run.stderr
    );
}

#[test]
fn unknown_plugin_lists_the_known_ones() {
    let s = Scratch::new();
    let run = validate(&s, &format!("[sources.n]\nplugin = \"genrator\"\n{SINK}"));
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("t.toml:2:") && run.stderr.contains("`sources.n.plugin`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("unknown plugin `genrator`") && run.stderr.contains("generator"),
        "{}",
        run.stderr
    );
}

#[test]
fn missing_input_is_named() {
    let s = Scratch::new();
    let run = validate(
        &s,
        "[sources.n]\nplugin = \"generator\"\n[sinks.out]\ninput = \"m\"\nplugin = \"blackhole-sink\"\n",
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("`sinks.out.input`")
            && run.stderr.contains("no source or stage named `m`"),
        "{}",
        run.stderr
    );
}

#[test]
fn cycles_are_reported_as_a_path() {
    let s = Scratch::new();
    let run = validate(
        &s,
        &format!(
            "[sources.n]\nplugin = \"generator\"\n[stages.a]\ninput = \"b\"\nsql = \"SELECT * FROM b\"\n[stages.b]\ninput = \"a\"\nsql = \"SELECT * FROM a\"\n{SINK}"
        ),
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("cycle: a → b → a") || run.stderr.contains("cycle: b → a → b"),
        "{}",
        run.stderr
    );
}

#[test]
fn sql_with_an_unknown_column_is_refused_before_running() {
    let s = Scratch::new();
    let run = validate(
        &s,
        "[sources.bids]\nplugin = \"generator\"\n[stages.q]\ninput = \"bids\"\nsql = \"SELECT pricee FROM bids\"\n[sinks.out]\ninput = \"q\"\nplugin = \"blackhole-sink\"\n",
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("t.toml:5:")
            && run.stderr.contains("`stages.q.sql`")
            && run.stderr.contains("pricee"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_config_its_schema_refuses_points_at_the_key_before_the_plugin_runs() {
    let s = Scratch::new();
    let run = validate(
        &s,
        &format!(
            "[sources.n]\nplugin = \"generator\"\n\n[sources.n.config]\nstream = \"bids\"\n{SINK}"
        ),
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("t.toml:5:") && run.stderr.contains("`sources.n.config.stream`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("\"bids\" is not one of")
            && run.stderr.contains("(the config schema of `generator`)"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_config_the_plugin_itself_refuses_points_at_the_key() {
    // Valid by the schema (any column name); only the plugin, which sees
    // the input's columns, can refuse it.
    let s = Scratch::new();
    let run = validate(
        &s,
        "[sources.n]\nplugin = \"generator\"\nconfig = { kind = \"sequence\", events = 3 }\n\n[stages.r]\ninput = \"n\"\nplugin = \"pii-redactor\"\nconfig = { columns = [\"email\"] }\n\n[sinks.out]\ninput = \"r\"\nplugin = \"blackhole-sink\"\n",
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("`stages.r.config.columns.0`")
            && run.stderr.contains("no column `email` in the input"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_config_of_the_wrong_type_names_the_key() {
    let s = Scratch::new();
    let run = validate(
        &s,
        &format!("[sources.n]\nplugin = \"generator\"\nconfig = {{ events = \"many\" }}\n{SINK}"),
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("`sources.n.config.events`")
            && run.stderr.contains("\"many\" is not of type \"integer\""),
        "{}",
        run.stderr
    );
}

#[test]
fn a_source_used_as_a_step_is_refused() {
    let s = Scratch::new();
    let run = validate(
        &s,
        &format!(
            "[sources.n]\nplugin = \"generator\"\n[stages.s]\ninput = \"n\"\nplugin = \"file-source\"\n{SINK}"
        ),
    );
    assert_exit(&run, 2);
    assert!(
        run.stderr
            .contains("`file-source` is a source plugin, but `stages.s` needs a step"),
        "{}",
        run.stderr
    );
}

const CSV_TOPOLOGY: &str = r#"
[sources.orders]
plugin = "file-source"
allow_read = ["data"]
config = { path = "data/orders.csv", columns = ["id:int64", "amount:float64"], bad_rows = "BAD" }

[sinks.out]
input = "orders"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#;

#[test]
fn a_malformed_csv_row_fails_the_run_naming_file_and_line() {
    let s = Scratch::new();
    s.write("data/orders.csv", "id,amount\n1,10.5\n2,eleven\n3,12.0\n");
    s.write("t.toml", &CSV_TOPOLOGY.replace("BAD", "fail"));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains("data/orders.csv` line 3") && run.stderr.contains("eleven"),
        "{}",
        run.stderr
    );
    assert!(
        s.output_lines("out").is_empty(),
        "a failed run must not commit: {:?}",
        s.output_lines("out")
    );
}

#[test]
fn malformed_csv_rows_can_be_skipped_and_the_rest_flows() {
    let s = Scratch::new();
    s.write("data/orders.csv", "id,amount\n1,10.5\n2,eleven\n3,12.0\n");
    s.write("t.toml", &CSV_TOPOLOGY.replace("BAD", "skip"));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        s.output_lines("out"),
        vec![r#"{"id":1,"amount":10.5}"#, r#"{"id":3,"amount":12.0}"#]
    );
    // Without a dead-letter sink the host logs what it dropped, naming
    // the source, the file and line, and the reason.
    let logged = run
        .stderr
        .lines()
        .find(|l| l.contains("dropping records the source could not read"))
        .expect("the skipped row is logged");
    assert!(
        logged.contains("source=orders")
            && logged.contains("first: data/orders.csv:3: ")
            && logged.contains("eleven"),
        "{logged}"
    );
}

#[test]
fn a_malformed_json_line_fails_the_run_naming_file_and_line() {
    let s = Scratch::new();
    s.write(
        "data/orders.jsonl",
        "{\"id\":1,\"amount\":10.5}\n{\"id\":2,\"amount\":\n{\"id\":3,\"amount\":12.0}\n",
    );
    s.write(
        "t.toml",
        &CSV_TOPOLOGY
            .replace("orders.csv", "orders.jsonl")
            .replace("BAD", "fail"),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr
            .contains("malformed row in `data/orders.jsonl` line 2: Truncated record"),
        "{}",
        run.stderr
    );
    assert!(s.output_lines("out").is_empty());
}

#[test]
fn stateful_stages_whose_columns_do_not_fit_their_inputs_are_refused_before_running() {
    let s = Scratch::new();
    s.write("data/cats.csv", "id,category\n1,books\n2,toys\n");
    let run = validate(
        &s,
        r#"
[tables.cats]
plugin = "file-source"
allow_read = ["data"]
config = { path = "data/cats.csv" }

[sources.people]
plugin = "generator"
config = { stream = "person", events = 10 }
watermark = { column = "date_time" }

[sources.bids]
plugin = "generator"
config = { stream = "bid", events = 10 }
watermark = { column = "date_time" }

[stages.j]
input = ["people", "bids"]
join = { on = ["name = auction"], time = "date_time", window = "10s" }

[stages.top]
input = "bids"
window = { time = "date_time", size = "10s" }
top_n = { n = 3, order_by = "cost DESC" }

[stages.l]
input = "bids"
lookup = { table = "cats", on = ["auction = cat_id"] }

[stages.sess]
input = "bids"
session = { time = "price", gap = "1s" }
aggregates = ["count(*)"]

[sinks.out]
input = ["j", "top", "l", "sess"]
plugin = "blackhole-sink"
"#,
    );
    assert_exit(&run, 2);
    for expected in [
        "`stages.j.join.on.0`: `name` is Utf8 but `auction` is Int64; the key columns of a join must have the same type",
        "`stages.top.top_n.order_by.0`: no column `cost` in the input",
        "`stages.l.lookup.on.0`: table `cats` has no column `cat_id` (columns: id, category)",
        "`stages.sess.session.time`: `price` is Int64; the event-time column must be a timestamp",
    ] {
        assert!(
            run.stderr.contains(expected),
            "missing {expected:?} in:\n{}",
            run.stderr
        );
    }
}
