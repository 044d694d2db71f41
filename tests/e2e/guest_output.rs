//! What plugins print: a guest's stdout and stderr go to fvhost's log,
//! tagged and rate-limited, never to fvhost's stdout; a plugin that writes
//! megabytes to stderr and traps on every row keeps the host's memory and
//! its error message bounded; one that keeps writing is never
//! re-instantiated; trap-driven re-instantiations are counted in the status
//! record and in `/metrics`.

use std::time::{Duration, Instant};

use crate::support::{Scratch, assert_exit, int_column, run_measuring_peak_rss, test_step_wasm};

/// `events` sequence rows in batches of `batch_size` → test-step with
/// `step_config` → `sink` (a TOML table body for the sink).
fn topology(events: u32, batch_size: u32, step_config: &str, sink: &str) -> String {
    format!(
        r#"
batch_size = {batch_size}

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events} }}

[stages.step]
input = "nums"
path = "{wasm}"
config = {step_config}

[sinks.out]
input = "step"
{sink}
"#,
        wasm = test_step_wasm().display()
    )
}

const FILE_SINK: &str =
    "plugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = { path = \"out\" }";

/// The status record of the run in `.fvhost/t`, as JSON.
fn status(s: &Scratch) -> serde_json::Value {
    let status = s.fvhost(&["status", ".fvhost/t"]);
    assert_exit(&status, 0);
    serde_json::from_str(&status.stdout).expect("status JSON")
}

fn stage<'a>(record: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    record["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|st| st["name"] == name))
        .unwrap_or_else(|| panic!("no stage `{name}` in {record}"))
}

#[test]
fn a_guest_println_goes_to_the_log_tagged_and_never_to_stdout() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(30, 10, "{ mode = \"print\" }", "plugin = \"stdout-sink\""),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    // stdout holds stdout-sink's rows and nothing else.
    let rows: Vec<String> = run.stdout.lines().map(str::to_string).collect();
    assert_eq!(int_column(&rows, "seq"), (0..30).collect::<Vec<i64>>());
    assert!(!run.stdout.contains("test-step print"), "{}", run.stdout);
    // The log has each printed line, tagged with the plugin and the task.
    let printed: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.contains("test-step print: a batch of 10 rows"))
        .collect();
    assert_eq!(printed.len(), 3, "{}", run.stderr);
    for line in printed {
        assert!(
            line.contains("INFO")
                && line.contains("test-step")
                && line.contains("step[0]")
                && line.contains("stdout"),
            "{line}"
        );
    }
}

/// The issue's case: a step writes 4 MiB to stderr, then panics, on every
/// row. The bisection traps about twice per row; each trap report keeps
/// only the last 4 KiB of stderr and the batch keeps one report, so the
/// host's memory stays flat (it used to hold a 4 MiB report per row: 8 GB
/// for 2000 rows) and the run's error is a few KiB.
#[test]
fn a_step_that_writes_megabytes_to_stderr_then_panics_on_every_row_keeps_memory_and_errors_bounded()
{
    const ROWS: u32 = 2000;
    const PEAK_RSS_LIMIT_KIB: u64 = 600 << 10;
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            ROWS,
            ROWS,
            "{ mode = \"stderr-then-panic\", column = \"seq\", value = 1, bytes = 4194304 }",
            FILE_SINK,
        ),
    );
    let started = Instant::now();
    let (run, peak_kib) = run_measuring_peak_rss(&s, &["run", "t.toml", "--no-progress"], &[]);
    println!(
        "{ROWS} rows trapped in {:?}, peak RSS {} MiB, {} bytes of log",
        started.elapsed(),
        peak_kib >> 10,
        run.stderr.len()
    );
    assert_exit(&run, 1);
    assert!(
        peak_kib < PEAK_RSS_LIMIT_KIB,
        "peak RSS {} MiB (limit {} MiB)",
        peak_kib >> 10,
        PEAK_RSS_LIMIT_KIB >> 10
    );
    let record = status(&s);
    assert_eq!(record["state"], "FAILED");
    let error = record["error"].as_str().expect("an error");
    assert!(
        error.contains(&format!("trapped on every row of a batch of {ROWS} rows"))
            && error.contains("a multiple of 1 in this batch")
            && error.contains("(the last 4096 of"),
        "{error}"
    );
    assert!(error.len() < 6 << 10, "{} bytes: {error}", error.len());
    let error_line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_else(|| panic!("no error line in {}", run.stderr));
    assert!(error_line.len() < 6 << 10, "{} bytes", error_line.len());
    // Every trap re-created the instance, and was counted.
    let restarts = stage(&record, "step")["restarts"]
        .as_u64()
        .expect("restarts");
    assert!(restarts >= u64::from(ROWS), "{restarts} restarts");
    // The log: one summary of the batch's traps, and the guest's lines cut
    // to 2 KiB and rate-limited (the 4 MiB line of each instance would
    // otherwise be 8 GB of log).
    let summaries = run
        .stderr
        .lines()
        .filter(|l| l.contains("was re-instantiated"))
        .count();
    assert_eq!(summaries, 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("more bytes of this line not logged]"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.len() < 16 << 20,
        "{} bytes of log",
        run.stderr.len()
    );
}

/// A step that writes to stderr on every batch (12 MiB in all: three times
/// the 4 MiB that used to fill its pipe and kill it) runs to the end with
/// one instance; its lines reach the log at a bounded rate and the rest
/// are counted.
#[test]
fn a_step_that_keeps_writing_to_stderr_runs_to_completion_without_re_instantiation() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            2000,
            10,
            "{ mode = \"stderr-flood\", bytes = 65536 }",
            FILE_SINK,
        ),
    );
    let started = Instant::now();
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    let elapsed = started.elapsed();
    assert_exit(&run, 0);
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..2000).collect::<Vec<i64>>()
    );
    let record = status(&s);
    assert_eq!(stage(&record, "step")["restarts"], 0, "{record}");
    let logged = run
        .stderr
        .lines()
        .filter(|l| l.contains("test-step flood: batch"))
        .count();
    // 200 at once, then 50 a second.
    let allowed = 200 + 50 * (elapsed.as_secs() as usize + 1);
    assert!(
        (200..=allowed).contains(&logged),
        "{logged} lines logged in {elapsed:?}"
    );
    assert!(
        run.stderr.contains("lines of guest output were not logged"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .lines()
            .any(|l| l.contains("WARN") && l.contains("step[0]") && l.contains("stderr")),
        "tagged: {}",
        run.stderr
    );
}

#[test]
fn re_instantiations_after_traps_are_counted_in_the_status_record_and_metrics() {
    let s = Scratch::new();
    // The test plugins are loaded by path: the operator allows their directory.
    let plugins = env!("FV_PLUGIN_DIR");
    let server = crate::serve::Server::start_with(&s, &[], &["--allow-root", plugins], None);
    let toml = format!(
        "name = \"traps\"\ndead_letter = \"rejects\"\n{}\n[sinks.rejects]\nplugin = \"file-sink\"\nallow_write = [\"rejects\"]\nconfig = {{ path = \"rejects\" }}\n",
        topology(
            100,
            100,
            "{ mode = \"trap-on\", column = \"seq\", value = 42 }",
            FILE_SINK
        )
    );
    let (status, body) = server.post("/topologies", &toml, None);
    assert_eq!(status, 201, "{body}");
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        let v = server.json("/topologies/traps");
        if v["state"] != "RUNNING" {
            break v;
        }
        assert!(Instant::now() < deadline, "still running: {v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(status["state"], "STOPPED", "{status}");
    // Bisecting a batch down to row 42 traps (and re-instantiates) once
    // per level: 8 times for a batch of 100 rows.
    let restarts = stage(&status["status"], "step")["restarts"]
        .as_u64()
        .expect("restarts");
    assert!((1..=20).contains(&restarts), "{restarts}: {status}");
    let (_, metrics) = server.get("/metrics");
    let line = format!(
        "fvhost_stage_plugin_restarts_total{{topology=\"traps\",stage=\"step\",kind=\"step\"}} {restarts}"
    );
    assert!(metrics.contains(&line), "{line} in {metrics}");
    assert!(
        metrics.contains("# TYPE fvhost_stage_plugin_restarts_total counter"),
        "{metrics}"
    );
}
