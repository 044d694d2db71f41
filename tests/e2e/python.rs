//! Plugins written in Python (`plugins/sdk-python`), built into components
//! with componentize-py: the example step goes scaffold → build → package →
//! publish → resolve by `ns:name@version` → run, its rows checked against
//! the input; a row-at-a-time step that raises on some rows has exactly
//! those rows dead-lettered; a Python source runs, resumes and rejects
//! records; the compiled-component cache makes the second start fast; a
//! step reaches a local server over HTTP (`fv_plugin.http`, `--network`)
//! and over TCP (Python's `socket`) only through its node's grants.
//!
//! componentize-py comes from `tests/run` (pinned, into its tool cache):
//! `$FVHOST_COMPONENTIZE_PY`, else `$FVHOST_TOOLS/componentize-py/bin/`,
//! else `componentize-py` on `PATH`. Each component is built once per
//! source content (a hash of the SDK and the plugin module) under
//! `CARGO_TARGET_TMPDIR`, so later runs skip the ~12 s build.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hash;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::guest_sdk::{
    BIDS, assert_answers_only_under_its_grant, assert_exactly_the_poison_rows_are_dead_lettered,
    assert_fetches_only_under_its_http_grant, assert_price_filter_output,
    assert_the_second_start_is_cached, build_once, fvhost, hash_tree, hello_server, json,
    write_raw_bids,
};
use crate::support::{Scratch, assert_exit, int_column, repo};

/// The pinned componentize-py `tests/run` installs.
const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

fn sdk_dir() -> PathBuf {
    repo().join("plugins/sdk-python")
}

fn componentize_py() -> PathBuf {
    if let Some(p) = std::env::var_os("FVHOST_COMPONENTIZE_PY") {
        return PathBuf::from(p);
    }
    let tools = std::env::var_os("FVHOST_TOOLS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))
                .map(|c| c.join("fvhost/tools"))
        })
        .expect("HOME or FVHOST_TOOLS");
    let candidate = tools.join("componentize-py/bin/componentize-py");
    if candidate.exists() {
        return candidate;
    }
    PathBuf::from("componentize-py")
}

/// Build `module` (a path under `plugins/sdk-python`) as a `kind` component,
/// once per content of the SDK and the module.
fn build(module: &str, kind: &str) -> PathBuf {
    build_with(module, kind, &[])
}

/// [`build`] with more `python -m fv_plugin build` flags (`--network`).
fn build_with(module: &str, kind: &str, flags: &[&str]) -> PathBuf {
    let sdk = sdk_dir();
    let mut h = DefaultHasher::new();
    hash_tree(&sdk.join("fv_plugin"), &mut h, &["__pycache__"]);
    std::fs::read(sdk.join(module))
        .expect("module")
        .hash(&mut h);
    kind.hash(&mut h);
    flags.hash(&mut h);
    COMPONENTIZE_PY_VERSION.hash(&mut h);
    build_once("python-plugins", module, &h, "componentize-py", |out| {
        // Checked only when building: a cached component needs no toolchain.
        let tool = componentize_py();
        let version = Command::new(&tool).arg("--version").output();
        match version {
            Ok(v) if String::from_utf8_lossy(&v.stdout).contains(COMPONENTIZE_PY_VERSION) => {}
            Ok(v) => panic!(
                "{} is not componentize-py {COMPONENTIZE_PY_VERSION} (it says {:?}); run the tests with tests/run, which installs it",
                tool.display(),
                String::from_utf8_lossy(&v.stdout).trim()
            ),
            Err(e) => panic!(
                "componentize-py ({}) cannot run: {e}; run the tests with tests/run, which installs componentize-py=={COMPONENTIZE_PY_VERSION}",
                tool.display()
            ),
        }
        let mut command = Command::new("python3");
        command
            .args(["-m", "fv_plugin", "build"])
            .arg(sdk.join(module))
            .args(["--kind", kind, "-o"])
            .arg(out)
            .arg("--componentize-py")
            .arg(&tool)
            .args(flags)
            .env("PYTHONPATH", &sdk);
        command
    })
}

#[test]
fn a_python_step_is_packaged_published_resolved_and_runs() {
    let s = Scratch::new();
    let built = build("examples/price_filter.py", "step");
    let wasm = s.path().join("price_filter.wasm");
    std::fs::copy(&built, &wasm).expect("copy");
    let wasm_arg = wasm.to_str().expect("utf-8");

    // Without metadata, publish refuses it and says why.
    let bare = fvhost(&s, &["plugin", "publish", wasm_arg]);
    assert_exit(&bare, 2);
    assert!(
        bare.stderr.contains("carries no package metadata"),
        "{}",
        bare.stderr
    );

    // A kind other than the exported world is refused by `package`.
    let schema = sdk_dir().join("examples/price_filter.schema.json");
    let schema_arg = schema.to_str().expect("utf-8");
    let wrong = fvhost(
        &s,
        &[
            "plugin",
            "package",
            wasm_arg,
            "--package",
            "acme:price-filter",
            "--version",
            "0.1.0",
            "--kind",
            "source",
        ],
    );
    assert_exit(&wrong, 2);
    assert!(
        wrong
            .stderr
            .contains("--kind source: the component implements the step world"),
        "{}",
        wrong.stderr
    );

    let packaged = fvhost(
        &s,
        &[
            "plugin",
            "package",
            wasm_arg,
            "--package",
            "acme:price-filter",
            "--version",
            "0.1.0",
            "--kind",
            "step",
            "--capabilities",
            "",
            "--config-schema",
            schema_arg,
            "--license",
            "Apache-2.0",
            "--description",
            "keeps bids above a price, adds price_eur",
        ],
    );
    assert_exit(&packaged, 0);
    let inspect = fvhost(&s, &["plugin", "inspect", wasm_arg]);
    assert_exit(&inspect, 0);
    for line in [
        "package:      acme:price-filter",
        "version:      0.1.0",
        "kind:         step",
        "world:        fv:plugin/step-plugin@0.4.1",
        "capabilities: none",
        "min_price",
    ] {
        assert!(
            inspect.stdout.contains(line),
            "no {line:?} in\n{}",
            inspect.stdout
        );
    }
    let publish = fvhost(&s, &["plugin", "publish", wasm_arg]);
    assert_exit(&publish, 0);
    assert!(
        publish.stdout.contains("published acme:price-filter@0.1.0"),
        "{}",
        publish.stdout
    );

    // The raw input, to check the step's output against.
    write_raw_bids(&s);

    let topology = |config: &str| {
        format!(
            "name = \"py\"\n{BIDS}\n[stages.expensive]\ninput = \"bids\"\nplugin = \"acme:price-filter@^0.1\"\nconfig = {config}\n\n[sinks.out]\ninput = \"expensive\"\nplugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = {{ path = \"out\" }}\n"
        )
    };
    // The config is checked against the packaged schema before any plugin code runs.
    s.write("bad.toml", &topology("{ min_price = \"high\" }"));
    let bad = fvhost(&s, &["validate", "bad.toml"]);
    assert_exit(&bad, 2);
    assert!(
        bad.stderr.contains("stages.expensive.config.min_price")
            && bad.stderr.contains("acme:price-filter@0.1.0"),
        "{}",
        bad.stderr
    );

    s.write("t.toml", &topology("{ min_price = 5000000, rate = 0.5 }"));
    assert_exit(&fvhost(&s, &["validate", "t.toml"]), 0);
    let lock = std::fs::read_to_string(s.path().join("t.lock")).expect("lock written");
    assert!(
        lock.contains("acme:price-filter") && lock.contains("0.1.0"),
        "{lock}"
    );
    let run = fvhost(&s, &["run", "t.toml", "--locked", "--no-progress"]);
    assert_exit(&run, 0);

    assert_price_filter_output(&s);
}

#[test]
fn a_python_step_that_raises_on_some_rows_has_exactly_those_dead_lettered() {
    let wasm = build("tests/plugins/poison_rows.py", "step");
    assert_exactly_the_poison_rows_are_dead_lettered(&wasm, |seq| {
        format!("ValueError: seq {seq} is poison (at poison_rows.py:")
    });
}

/// An exception in a batch `Step` isolates the rows it raises on, as a
/// Rust step's trap does (it failed the whole run).
#[test]
fn a_python_batch_step_that_raises_on_some_rows_has_exactly_those_dead_lettered() {
    let wasm = build("tests/plugins/poison_batch.py", "step");
    assert_exactly_the_poison_rows_are_dead_lettered(&wasm, |seq| {
        format!("ValueError: seq {seq} is poison (at poison_batch.py:")
    });
}

/// A step built with `--network` sends requests with `fv_plugin.http`
/// through the host's wasi:http under the node's `allow_http`; outside it
/// the request raises `HttpError("HTTP-request-denied")`.
#[test]
fn a_python_step_fetches_under_its_http_grant_only() {
    let wasm = build_with("tests/plugins/fetcher.py", "step", &["--network"]);
    assert_fetches_only_under_its_http_grant(&wasm, "HTTP-request-denied");
}

/// Python's own `socket.create_connection` (a host name given as `str`,
/// which needs the SDK's ASCII `idna` codec in a component) reaches a
/// granted host:port through wasi:sockets, name resolved by the host; a
/// port no grant names is refused, the host logging what and why.
#[test]
fn a_python_step_connects_over_tcp_under_its_connect_grant_only() {
    let wasm = build("tests/plugins/tcp_fetcher.py", "step");
    let server = hello_server();
    let port = server.port;
    assert_answers_only_under_its_grant(
        &wasm,
        "allow_connect",
        (
            &format!("localhost:{port}"),
            &format!("localhost:{}", port.wrapping_add(1)),
        ),
        &format!(r#"{{ host = "localhost", port = {port}, path = "/v1/hello" }}"#),
        &[
            &format!("the sandbox refused a TCP connection to 127.0.0.1:{port}"),
            "Permission denied",
        ],
    );
}

#[test]
fn a_python_source_runs_resumes_and_rejects_records() {
    let s = Scratch::new();
    let wasm = build("tests/plugins/counter.py", "source");
    s.write(
        "t.toml",
        &format!(
            r#"name = "counter"
dead_letter = "rejects"

[sources.count]
path = "{}"
config = {{ count = 1000, batch = 64, reject_every = 100 }}

[sinks.out]
input = "count"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}

[sinks.rejects]
plugin = "file-sink"
allow_write = ["rejects"]
config = {{ path = "rejects" }}
"#,
            wasm.display()
        ),
    );
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let lines = s.output_lines("out");
    assert_eq!(
        int_column(&lines, "n"),
        (0..1000).filter(|n| n % 100 != 0).collect::<Vec<i64>>()
    );
    for l in &lines {
        let r = json(l);
        let n = r["n"].as_i64().expect("n");
        let label = if n % 5 == 0 {
            serde_json::Value::Null
        } else {
            format!("#{n}").into()
        };
        assert_eq!(r["label"], label, "{l}");
        assert!(
            r["at"]
                .as_str()
                .is_some_and(|t| t.starts_with("2023-11-14T22:13:20")),
            "{l}"
        );
    }
    let rejects = s.output_lines("rejects");
    assert_eq!(rejects.len(), 10, "{rejects:?}");
    assert!(
        rejects.iter().all(|l| l.contains("divisible")),
        "{rejects:?}"
    );

    // Drained and checkpointed: a second run resumes at the end.
    let again = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&again, 0);
    assert_eq!(int_column(&s.output_lines("out"), "n").len(), 990);
}

#[test]
fn the_compile_cache_makes_the_second_start_of_a_python_plugin_fast() {
    let wasm = build("examples/price_filter.py", "step");
    assert_the_second_start_is_cached(&wasm, "Python");
}

#[test]
fn the_python_sdk_unit_tests_pass() {
    // The IPC reader/writer against pyarrow-written fixtures, config
    // parsing, the adapters and the example step, under the host's CPython.
    let run = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s", "tests", "-v"])
        .current_dir(sdk_dir())
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3 -m unittest");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "python3 -m unittest failed:\n{stderr}"
    );
    assert!(
        !stderr.contains("skipped"),
        "a Python SDK test was skipped:\n{stderr}"
    );
}

/// The README's "Writing a plugin in Python" walkthrough, as written:
/// `plugin new --lang python` → the project's own unit tests under
/// CPython → `plugin build` (componentize-py + plugin.toml's metadata) →
/// `plugin test` → `inspect` → `publish` → `validate` (writes the lock)
/// → a `--locked` run whose rows are checked; then a config its schema
/// refuses is named at its line and key.
#[test]
fn the_readme_python_walkthrough_runs_from_plugin_new_to_a_locked_run() {
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    let tool = componentize_py();
    shell.set_env("FVHOST_COMPONENTIZE_PY", tool.to_str().expect("utf-8"));
    let walkthrough = crate::walkthrough::run_guest_walkthrough(
        &s,
        &mut shell,
        "### Writing a plugin in Python",
        "above-min-py",
        "python3 -m unittest",
        |run| run.stderr.contains("OK"),
    );

    // The schema plugin.toml packaged is enforced before any Python runs.
    let bad = walkthrough.topology.replace("min = 94", "min = \"high\"");
    std::fs::write(shell.file("topology.toml"), &bad).expect("write");
    let line = bad
        .lines()
        .position(|l| l.contains("min = \"high\""))
        .expect("the line")
        + 1;
    let registry = s.path().join("registry").display().to_string();
    let cache = s.path().join("plugin-cache").display().to_string();
    let refused = s.fvhost_at(
        &shell.cwd,
        &["validate", "topology.toml"],
        &[
            ("FVHOST_REGISTRY", registry.as_str()),
            ("FVHOST_PLUGIN_CACHE", cache.as_str()),
        ],
    );
    assert_exit(&refused, 2);
    assert!(
        refused.stderr.contains(&format!("topology.toml:{line}:"))
            && refused.stderr.contains("`stages.big.config.min`")
            && refused.stderr.contains("not of type \"integer\""),
        "{}",
        refused.stderr
    );
}

/// Every kind `plugin new --lang python` makes passes its own unit tests,
/// builds into a component of its kind, and its `topology.toml` runs.
#[test]
fn python_scaffolds_of_every_kind_test_build_and_run() {
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    let tool = componentize_py();
    shell.set_env("FVHOST_COMPONENTIZE_PY", tool.to_str().expect("utf-8"));
    crate::walkthrough::scaffolds_of_every_kind_run(
        &s,
        &mut shell,
        "python",
        &["python3 -m unittest"],
    );
}

/// `plugin new --lang python --example http`: a source reading a URL's
/// lines and a sink POSTing each committed epoch, their unit tests against
/// a local server, built, run against this test's server under their
/// grant, and refused outside it.
#[test]
fn python_http_scaffolds_test_build_and_talk_to_a_server_under_their_grant() {
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    let tool = componentize_py();
    shell.set_env("FVHOST_COMPONENTIZE_PY", tool.to_str().expect("utf-8"));
    crate::walkthrough::http_scaffolds_run(&s, &mut shell, "python", &[], &["python3 -m unittest"]);
}
