//! The command line surface: plugin list/inspect, validate, the compile cache.

use crate::support::{Scratch, assert_exit, int_column, repo, test_step_wasm};

/// The value of `name:` in `fvhost plugin inspect` output.
fn field<'a>(stdout: &'a str, name: &str) -> &'a str {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}:")))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no `{name}:` in\n{stdout}"))
}

#[test]
fn plugin_list_names_every_first_party_plugin_with_its_kind() {
    let s = Scratch::new();
    let run = s.fvhost(&["plugin", "list"]);
    assert_exit(&run, 0);
    for (name, kind) in [
        ("file-source", "source"),
        ("generator", "source"),
        ("file-sink", "sink"),
        ("stdout-sink", "sink"),
        ("blackhole-sink", "sink"),
        ("pii-redactor", "step"),
    ] {
        let line = run
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("fv:{name} ")))
            .unwrap_or_else(|| panic!("{name} missing:\n{}", run.stdout));
        assert!(line.split_whitespace().nth(1) == Some(kind), "{line}");
    }
}

#[test]
fn plugin_inspect_reads_metadata_world_and_imports_of_a_file() {
    let s = Scratch::new();
    let wasm = test_step_wasm();
    let run = s.fvhost(&["plugin", "inspect", wasm.to_str().expect("utf-8 path")]);
    assert_exit(&run, 0);
    assert_eq!(field(&run.stdout, "name"), "test-step", "{}", run.stdout);
    assert_eq!(field(&run.stdout, "kind"), "step");
    assert_eq!(field(&run.stdout, "world"), "fv:plugin/step-plugin@0.4.1");
    assert_eq!(
        field(&run.stdout, "capabilities"),
        "files (allow_read / allow_write), network (allow_connect / allow_http)"
    );
    let schema = run
        .stdout
        .split("config schema:")
        .nth(1)
        .expect("config schema section");
    assert!(schema.contains("\"mode\""), "{}", run.stdout);
    assert!(
        run.stdout.contains("fv:plugin/step@0.4.1"),
        "exports: {}",
        run.stdout
    );
    for import in [
        "wasi:filesystem/preopens",
        "wasi:sockets/tcp",
        "wasi:http/outgoing-handler",
    ] {
        assert!(run.stdout.contains(import), "imports: {}", run.stdout);
    }
}

#[test]
fn plugin_inspect_by_name_shows_the_log_import_of_a_plugin_that_logs() {
    let s = Scratch::new();
    let run = s.fvhost(&["plugin", "inspect", "file-sink"]);
    assert_exit(&run, 0);
    assert_eq!(field(&run.stdout, "kind"), "sink", "{}", run.stdout);
    let imports = run
        .stdout
        .split("imports:")
        .nth(1)
        .expect("imports section");
    assert!(imports.contains("fv:plugin/log@0.4.1"), "{}", run.stdout);
}

#[test]
fn plugin_inspect_refuses_a_file_that_is_not_a_component() {
    let s = Scratch::new();
    let path = s.write("not.wasm", "hello");
    let run = s.fvhost(&["plugin", "inspect", path.to_str().expect("utf-8")]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("not a WebAssembly component"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_second_run_loads_compiled_components_from_the_cache() {
    let s = Scratch::new();
    let cache = s.path().join("cache");
    let topo = s.write("t.toml", "[sources.n]\nplugin = \"generator\"\nconfig = { kind = \"sequence\", events = 10 }\n[sinks.b]\ninput = \"n\"\nplugin = \"blackhole-sink\"\n");
    let env = [
        ("FVHOST_CACHE_DIR", cache.to_str().expect("utf-8")),
        ("RUST_LOG", "fvhost=debug"),
    ];
    let first = s.fvhost_env(&["validate", topo.to_str().expect("utf-8")], &env);
    assert_exit(&first, 0);
    assert!(
        first.stderr.contains("compiling component"),
        "{}",
        first.stderr
    );
    let second = s.fvhost_env(&["validate", topo.to_str().expect("utf-8")], &env);
    assert_exit(&second, 0);
    assert!(
        !second.stderr.contains("compiling component"),
        "recompiled:\n{}",
        second.stderr
    );
    assert!(
        second.stderr.contains("loaded from cache"),
        "{}",
        second.stderr
    );
}

#[test]
fn every_example_validates() {
    let s = Scratch::new();
    let mut examples = vec![
        repo().join("examples/quickstart/topology.toml"),
        repo().join("examples/csv-orders/topology.toml"),
    ];
    for entry in std::fs::read_dir(repo().join("examples/nexmark")).expect("nexmark examples") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "toml" || e == "sql") {
            examples.push(path);
        }
    }
    assert!(examples.len() >= 18, "{examples:?}");
    for path in examples {
        let run = s.fvhost(&["validate", path.to_str().expect("utf-8")]);
        assert_exit(&run, 0);
    }
}

/// Every sink says how fresh its output is: read → write per batch and,
/// for an epoch, read of its oldest row → commit. A commit follows every
/// write of its epoch, whose rows were read no earlier than the epoch's
/// oldest, so the slowest commit is never quicker than the slowest write.
#[test]
fn the_summary_and_the_status_say_how_fresh_each_sinks_output_is() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        r#"name = "fresh"
batch_size = 500
[checkpoint]
interval = "100ms"
[sources.n]
plugin = "generator"
config = { kind = "sequence", events = 20000, rate = 40000 }
[sinks.out]
input = "n"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#,
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("out ") && l.contains("read → write p50"))
        .unwrap_or_else(|| panic!("a freshness line for `out`: {}", run.stderr));
    assert!(line.contains("read → commit p50"), "{line}");
    let status = s.fvhost(&["status", ".fvhost/fresh"]);
    assert_exit(&status, 0);
    let record: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    let sink = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .find(|st| st["name"] == "out")
        .expect("sink out");
    let (write, commit) = (&sink["read_to_write"], &sink["read_to_commit"]);
    assert!(write["count"].as_u64().is_some_and(|n| n >= 40), "{sink}");
    assert!(commit["count"].as_u64().is_some_and(|n| n >= 2), "{sink}");
    assert!(
        commit["max_micros"].as_u64() >= write["max_micros"].as_u64(),
        "{sink}"
    );
}

#[test]
fn status_reports_the_final_state_epoch_and_rows_of_a_run() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        "name = \"st\"\n[sources.n]\nplugin = \"generator\"\nconfig = { kind = \"sequence\", events = 1234 }\n[sinks.b]\ninput = \"n\"\nplugin = \"blackhole-sink\"\n",
    );
    // A cache of its own: this run compiles its components, so the main
    // thread's CPU ("other") is well above the 10 ms tick of /proc even
    // when everything else is quick.
    let cache = s.path().join("component-cache").display().to_string();
    assert_exit(
        &s.fvhost_env(
            &["run", "t.toml", "--no-progress"],
            &[("FVHOST_CACHE_DIR", cache.as_str())],
        ),
        0,
    );
    let run = s.fvhost(&["status", ".fvhost/st"]);
    assert_exit(&run, 0);
    let record: serde_json::Value = serde_json::from_str(&run.stdout).expect("status JSON");
    assert_eq!(record["state"], "STOPPED");
    assert_eq!(record["topology"], "st");
    assert!(
        record["last_committed_epoch"]
            .as_u64()
            .is_some_and(|e| e >= 1),
        "{record}"
    );
    assert!(
        record["last_checkpoint_bytes"]
            .as_u64()
            .is_some_and(|b| b > 0),
        "{record}"
    );
    let sink = record["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .find(|st| st["name"] == "b")
        .expect("sink b");
    assert_eq!(sink["rows_out"], 1234);
    // Plugins ran (the generator and the sink are Wasm): their CPU shows.
    let cpu = &record["cpu"];
    for family in [
        "runtime_tasks_ms",
        "plugin_execution_ms",
        "epoch_store_io_ms",
        "kafka_client_ms",
        "other_ms",
    ] {
        assert!(cpu[family].is_u64(), "{family} in {record}");
    }
    assert!(
        cpu["other_ms"].as_u64().is_some_and(|ms| ms > 0),
        "planning and compiling take CPU: {record}"
    );
    let missing = s.fvhost(&["status", "nowhere"]);
    assert_exit(&missing, 2);
    assert!(
        missing
            .stderr
            .contains("no readable status record in nowhere"),
        "{}",
        missing.stderr
    );
}

/// A first-party or test plugin's component, as built for the tests.
fn plugin_wasm(file: &str) -> String {
    std::path::Path::new(env!("FV_PLUGIN_DIR"))
        .join(file)
        .display()
        .to_string()
}

/// `fvhost plugin test`: a step on generated rows (its output on stdout,
/// its dead letters on stderr), a config its schema refuses (named by
/// key), a source stopped after the rows asked for, a sink fed a JSON-lines
/// file, and a missing component — with no topology written by the user.
#[test]
fn plugin_test_runs_a_plugin_on_sample_rows_without_a_topology() {
    let s = Scratch::new();
    let step = test_step_wasm().display().to_string();
    let trial = s.fvhost(&[
        "plugin",
        "test",
        &step,
        "--generator",
        "sequence",
        "--rows",
        "50",
        "--config",
        r#"{"mode": "bad-rows", "column": "seq", "value": 7}"#,
    ]);
    assert_exit(&trial, 0);
    let rows: Vec<String> = trial.stdout.lines().map(str::to_string).collect();
    assert_eq!(
        int_column(&rows, "seq"),
        (0..50).filter(|n| *n != 7).collect::<Vec<i64>>(),
        "{}",
        trial.stderr
    );
    assert!(
        trial.stderr.contains("dead-lettered (1 rows):")
            && trial.stderr.contains("value 7 is poison"),
        "{}",
        trial.stderr
    );
    assert!(
        trial.stderr.contains("rows/s"),
        "the summary: {}",
        trial.stderr
    );

    // Nexmark bids: exactly `--rows` of them, the same for the same seed.
    let bids = |seed: &str| {
        let run = s.fvhost(&[
            "plugin",
            "test",
            &step,
            "--generator",
            "bid",
            "--rows",
            "7",
            "--seed",
            seed,
            "--config",
            r#"{"mode": "print"}"#,
        ]);
        assert_exit(&run, 0);
        // The step was fed one batch of exactly 7 rows.
        assert!(
            run.stderr.contains("a batch of 7 rows") && !run.stderr.contains("a batch of 8"),
            "{}",
            run.stderr
        );
        run.stdout.lines().map(str::to_string).collect::<Vec<_>>()
    };
    let seven = bids("3");
    assert_eq!(seven.len(), 7, "{seven:?}");
    assert_eq!(bids("3"), seven, "the same seed, the same rows");
    assert_ne!(bids("4"), seven, "another seed, other rows");

    let refused = s.fvhost(&["plugin", "test", &step, "--config", r#"{"mode": "nope"}"#]);
    assert_exit(&refused, 2);
    assert!(
        refused.stderr.contains("`stages.plugin.config.mode`")
            && refused.stderr.contains("\"nope\" is not one of")
            && refused.stderr.contains("its `config` is --config"),
        "{}",
        refused.stderr
    );

    // An unbounded source: stopped once 30 rows are printed.
    let source = s.fvhost(&[
        "plugin",
        "test",
        &plugin_wasm("generator.wasm"),
        "--rows",
        "30",
        "--config",
        r#"{"kind": "sequence"}"#,
    ]);
    assert_exit(&source, 0);
    assert_eq!(
        int_column(
            &source
                .stdout
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>(),
            "seq"
        ),
        (0..30).collect::<Vec<i64>>(),
        "{}",
        source.stderr
    );

    // A sink fed a JSON-lines file, writing where it is allowed to.
    s.write("rows.jsonl", "{\"n\": 1}\n{\"n\": 2}\n{\"n\": 3}\n");
    let out = s.path().join("written");
    let sink = s.fvhost(&[
        "plugin",
        "test",
        &plugin_wasm("file_sink.wasm"),
        "--input",
        "rows.jsonl",
        "--allow-write",
        out.to_str().expect("utf-8"),
        "--config",
        &format!(r#"{{"path": "{}"}}"#, out.display()),
    ]);
    assert_exit(&sink, 0);
    assert_eq!(int_column(&s.output_lines("written"), "n"), vec![1, 2, 3]);

    let missing = s.fvhost(&["plugin", "test", "nowhere.wasm"]);
    assert_exit(&missing, 2);
    assert!(
        missing.stderr.contains("nowhere.wasm: no such component"),
        "{}",
        missing.stderr
    );
}

/// A bounded topology run again after it finished: nothing is read twice,
/// and the run says why it did nothing and how to start over.
#[test]
fn a_finished_run_started_again_says_there_is_nothing_new() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        r#"name = "once"
[sources.nums]
plugin = "generator"
config = { kind = "sequence", events = 100 }
[sinks.out]
input = "nums"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out" }
"#,
    );
    let first = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&first, 0);
    assert!(!first.stderr.contains("nothing new"), "{}", first.stderr);
    let again = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&again, 0);
    assert!(
        again.stderr.contains("nothing new to read")
            && again.stderr.contains("fvhost run t.toml --from-scratch"),
        "{}",
        again.stderr
    );
    assert_eq!(
        int_column(&s.output_lines("out"), "seq"),
        (0..100).collect::<Vec<i64>>(),
        "the output is the first run's, once"
    );
}

/// `plugin inspect` shows what rows a first-party source makes: each of
/// the generator's streams, or a source opened with `--config`; a source
/// that needs a config says so.
#[test]
fn plugin_inspect_shows_the_rows_a_source_makes() {
    let s = Scratch::new();
    let generator = s.fvhost(&["plugin", "inspect", "generator"]);
    assert_exit(&generator, 0);
    let out = &generator.stdout;
    for (stream, column) in [
        (r#"{"stream": "bid"}"#, "  price: Int64 not null"),
        (r#"{"stream": "person"}"#, "  name: Utf8"),
        (r#"{"kind": "sequence"}"#, "  seq: Int64"),
    ] {
        let at = out
            .find(&format!("output schema with config {stream}:"))
            .unwrap_or_else(|| panic!("{stream}:\n{out}"));
        assert!(out[at..].contains(column), "{stream} → {column}:\n{out}");
    }
    let file_source = s.fvhost(&["plugin", "inspect", "fv:file-source"]);
    assert_exit(&file_source, 0);
    assert!(
        file_source
            .stdout
            .contains("output schema: depends on its config"),
        "{}",
        file_source.stdout
    );
    let step = s.fvhost(&["plugin", "inspect", "pii-redactor"]);
    assert!(
        step.stdout.contains("output schema: depends on its input"),
        "{}",
        step.stdout
    );
}
