//! Misbehaving sources and sinks are contained: `test-source` and
//! `test-sink` (built from `tests/plugins/`) trap, spin, exhaust their
//! memory or sleep for an hour in each of their calls. Every time the
//! run stops with an error naming the plugin, the task and the call, the
//! host exits on its own (no hang, no crash), and nothing it committed is
//! lost.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::support::{Run, Scratch};

/// What each misbehaviour is reported as.
const HOWS: &[(&str, &str)] = &[
    ("trap", "trapped"),
    ("loop", "call_timeout"),
    ("hog", "memory_limit"),
    ("sleep", "call_timeout"),
];

/// A test source into a test sink, one of them misbehaving as told.
fn topology(source: &str, sink: &str) -> String {
    let dir = Path::new(env!("FV_PLUGIN_DIR"));
    format!(
        r#"name = "contained"

[checkpoint]
interval = "200ms"

[sources.src]
path = "{source_wasm}"
config = {{ rows = 100000 {source} }}
call_timeout = "1s"
memory_limit = "64MiB"

[sinks.out]
input = "src"
path = "{sink_wasm}"
config = {{ reads = ["seq", "word", "n"] {sink} }}
call_timeout = "1s"
memory_limit = "64MiB"
"#,
        source_wasm = dir.join("test_source.wasm").display(),
        sink_wasm = dir.join("test_sink.wasm").display(),
    )
}

/// Run with `side`'s plugin misbehaving `how` in `call` at `at`; the run
/// must end by itself within `limit` (a liveness bound, generous: a hang
/// is what it catches, not slowness).
fn misbehave(side: &str, call: &str, how: &str, at: u64) -> Run {
    let s = Scratch::new();
    let m = format!(r#", misbehave = {{ call = "{call}", how = "{how}", at = {at} }}"#);
    let text = match side {
        "source" => topology(&m, ""),
        _ => topology("", &m),
    };
    s.write("t.toml", &text);
    let started = Instant::now();
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{side} misbehaving ({how}) in {call} took {:?}",
        started.elapsed()
    );
    run
}

/// Every misbehaviour in `call` of `side` stops the run with an error that
/// names plugin, task, call and what happened.
fn contained(side: &str, call: &str, at: u64) {
    let (plugin, task) = match side {
        "source" => ("test-source", "src[0]"),
        _ => ("test-sink", "out[0]"),
    };
    for (how, said) in HOWS {
        let run = misbehave(side, call, how, at);
        let context = format!("{side} {how} in {call}: exit {}: {}", run.code, run.stderr);
        assert!(run.code == 1 || run.code == 2, "{context}");
        assert!(
            run.stderr.contains(&format!("plugin `{plugin}` in {task}")),
            "names plugin and task: {context}"
        );
        assert!(
            run.stderr.contains(&format!("in `{call}`")),
            "names the call: {context}"
        );
        assert!(run.stderr.contains(said), "says what happened: {context}");
        assert!(
            !run.stderr.contains("panicked at") || *how == "trap",
            "the host did not panic: {context}"
        );
    }
}

#[test]
fn a_source_misbehaving_in_open_is_contained() {
    contained("source", "open", 0);
}

#[test]
fn a_source_misbehaving_in_poll_is_contained() {
    contained("source", "poll", 2);
}

#[test]
fn a_source_misbehaving_in_committed_is_contained() {
    contained("source", "committed", 1);
}

#[test]
fn a_sink_misbehaving_in_open_is_contained() {
    contained("sink", "open", 0);
}

#[test]
fn a_sink_misbehaving_in_write_is_contained() {
    contained("sink", "write", 2);
}

#[test]
fn a_sink_misbehaving_in_prepare_is_contained() {
    contained("sink", "prepare", 1);
}

#[test]
fn a_sink_misbehaving_in_commit_is_contained() {
    contained("sink", "commit", 1);
}

/// A sink that misbehaves in `abort` — called because the source failed —
/// cannot hold the run up: it ends with the source's error, and the
/// sink's is logged naming the call.
#[test]
fn a_sink_misbehaving_in_abort_does_not_hold_up_a_failing_run() {
    for (how, said) in HOWS {
        let s = Scratch::new();
        s.write(
            "t.toml",
            &topology(
                r#", misbehave = { call = "poll", how = "trap", at = 2 }"#,
                &format!(r#", misbehave = {{ call = "abort", how = "{how}", at = 1 }}"#),
            ),
        );
        let started = Instant::now();
        let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
        let context = format!("abort {how}: exit {}: {}", run.code, run.stderr);
        assert!(started.elapsed() < Duration::from_secs(120), "{context}");
        assert_eq!(run.code, 1, "{context}");
        assert!(
            run.stderr
                .contains("plugin `test-source` in src[0], in `poll`: trapped"),
            "the run's error is the source's: {context}"
        );
        assert!(
            run.stderr.contains("in `abort`") && run.stderr.contains(said),
            "the sink's abort is reported: {context}"
        );
    }
}

/// A guest blocked in an hour-long sleep is cut off at its `call_timeout`,
/// and a SIGTERM meanwhile ends the run — it does not wait the hour.
#[cfg(unix)]
#[test]
fn sigterm_during_a_plugin_sleep_ends_the_run() {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            "",
            r#", misbehave = { call = "write", how = "sleep", at = 1 }"#,
        )
        .replace("call_timeout = \"1s\"", "call_timeout = \"5s\""),
    );
    let mut child = s.spawn_fvhost(&["run", "t.toml", "--no-progress"]);
    std::thread::sleep(Duration::from_millis(1500));
    let ok = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(ok.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the run did not end after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut stderr);
    }
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("call_timeout") && stderr.contains("test-sink"),
        "{stderr}"
    );
}

/// Under `fvhost serve`, stopping a topology whose sink sleeps for an hour
/// in `write` returns once the call is cut off at its `call_timeout`: the
/// topology ends FAILED with the reason, and the server stays up.
#[test]
fn stopping_a_hosted_topology_during_a_plugin_sleep_returns() {
    let s = Scratch::new();
    // The test plugins are loaded by path: the operator allows their directory.
    let plugins = env!("FV_PLUGIN_DIR");
    let server = crate::serve::Server::start_with(&s, &[], &["--allow-root", plugins], None);
    let topology = topology(
        "",
        r#", misbehave = { call = "write", how = "sleep", at = 1 }"#,
    )
    .replace("call_timeout = \"1s\"", "call_timeout = \"3s\"");
    let (status, body) = server.post("/topologies", &topology, None);
    assert_eq!(status, 201, "{body}");
    std::thread::sleep(Duration::from_millis(500));
    let started = Instant::now();
    let (status, body) = server.post("/topologies/contained/stop", "", None);
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "the stop took {:?}",
        started.elapsed()
    );
    assert!(status == 200 || status == 409, "{status}: {body}");
    server.wait_until(
        || server.state("contained") != "RUNNING",
        "the topology ended",
    );
    let v = server.json("/topologies/contained");
    assert_eq!(v["state"], "FAILED", "{v}");
    assert!(
        v["status"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("in `write`") && e.contains("call_timeout")),
        "{v}"
    );
    assert_eq!(server.get("/healthz").0, 200, "the server is up");
}
