//! Misbehaving steps: poison rows are dead-lettered and the rest flows;
//! endless loops and memory hogs stop the run with a clear error.

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
    assert!(run.stderr.contains("64 MiB"), "{}", run.stderr);
}
