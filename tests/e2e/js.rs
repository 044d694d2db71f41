//! Plugins written in JavaScript (`plugins/sdk-js`), built into components
//! with esbuild + componentize-js: the SDK's own Node tests; the README's
//! walkthrough from `plugin new --lang js` to a locked run; the example
//! step packaged, published, resolved and run with its rows checked; a
//! row-at-a-time step that throws on some rows has exactly those rows
//! dead-lettered; a JS source and a JS sink run; the compile cache makes
//! the second start fast (both times printed).
//!
//! The SDK's npm packages come from `tests/run` (`npm ci` in
//! `plugins/sdk-js`, pinned by its package-lock.json). Each component is
//! built once per source content (a hash of the SDK and the plugin file)
//! under `CARGO_TARGET_TMPDIR`, so later runs skip the ~20 s build.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hash;
use std::path::PathBuf;
use std::process::Command;

use crate::guest_sdk::{
    BIDS, assert_exactly_the_poison_rows_are_dead_lettered,
    assert_fetches_only_under_its_http_grant, assert_price_filter_output,
    assert_the_second_start_is_cached, build_once, fvhost, hash_tree, write_raw_bids,
};
use crate::support::{Scratch, assert_exit, repo};

fn sdk_dir() -> PathBuf {
    repo().join("plugins/sdk-js")
}

/// Panics, saying how to get them, if the SDK's npm packages are missing.
fn require_node_modules() {
    let probe = sdk_dir().join("node_modules/@bytecodealliance/componentize-js/package.json");
    assert!(
        probe.is_file(),
        "{} is missing: run the tests with tests/run, which runs `npm ci` in plugins/sdk-js",
        probe.display()
    );
}

/// Build `file` (a path under `plugins/sdk-js`) as a `kind` component, once
/// per content of the SDK and the file.
fn build(file: &str, kind: &str) -> PathBuf {
    require_node_modules();
    let sdk = sdk_dir();
    let mut h = DefaultHasher::new();
    for part in ["src", "wit", "build.mjs", "package-lock.json"] {
        let path = sdk.join(part);
        if path.is_dir() {
            hash_tree(&path, &mut h, &["node_modules"]);
        } else {
            std::fs::read(&path).expect("sdk file").hash(&mut h);
        }
    }
    std::fs::read(sdk.join(file))
        .expect("plugin file")
        .hash(&mut h);
    kind.hash(&mut h);
    build_once("js-plugins", file, &h, "componentize-js", |out| {
        let mut command = Command::new("node");
        command
            .arg(sdk.join("build.mjs"))
            .arg(sdk.join(file))
            .args(["--kind", kind, "-o"])
            .arg(out);
        command
    })
}

#[test]
fn the_js_sdk_unit_tests_pass() {
    require_node_modules();
    let run = Command::new("node")
        .args(["--test", "test/"])
        .current_dir(sdk_dir())
        .output()
        .expect("run node --test");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "node --test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(
        stdout.contains("# fail 0") && stdout.contains("# skipped 0"),
        "{stdout}"
    );
}

/// `plugins/sdk-js/wit` is a copy of the contract: it must not drift.
#[test]
fn the_js_sdk_carries_the_repository_s_wit() {
    for rel in ["plugin.wit", "deps/host/kafka.wit", "deps/host/decode.wit"] {
        let ours = std::fs::read_to_string(repo().join("wit").join(rel)).expect("wit");
        let theirs = std::fs::read_to_string(sdk_dir().join("wit").join(rel)).expect("sdk wit");
        assert!(
            ours == theirs,
            "plugins/sdk-js/wit/{rel} differs from wit/{rel}: copy it over"
        );
    }
}

/// The README's "Writing a plugin in JavaScript" walkthrough, as written:
/// `plugin new --lang js` → `npm install` → `npm test` → `plugin build` →
/// `plugin test` → `inspect` → `publish` → `validate` → a `--locked` run
/// whose rows are checked.
#[test]
fn the_readme_js_walkthrough_runs_from_plugin_new_to_a_locked_run() {
    require_node_modules();
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    crate::walkthrough::run_guest_walkthrough(
        &s,
        &mut shell,
        "### Writing a plugin in JavaScript",
        "above-min-js",
        "npm test",
        |run| run.stdout.contains("# fail 0"),
    );
}

/// Every kind `plugin new --lang js` makes passes its own `npm test`,
/// builds into a component of its kind, and its `topology.toml` runs.
#[test]
fn js_scaffolds_of_every_kind_test_build_and_run() {
    require_node_modules();
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    crate::walkthrough::scaffolds_of_every_kind_run(
        &s,
        &mut shell,
        "js",
        &["npm install", "npm test"],
    );
}

/// `plugin new --lang js --example http`: a source reading a URL's lines
/// (an async `poll` awaiting fetch()) and a sink POSTing each committed
/// epoch, their `npm test` against a local server, built, run against
/// this test's server under their grant, and refused outside it.
#[test]
fn js_http_scaffolds_test_build_and_talk_to_a_server_under_their_grant() {
    require_node_modules();
    let s = Scratch::new();
    let mut shell = crate::walkthrough::Shell::new(&s);
    crate::walkthrough::http_scaffolds_run(&s, &mut shell, "js", &[], &["npm install", "npm test"]);
}

#[test]
fn a_js_step_is_packaged_published_resolved_and_runs() {
    let s = Scratch::new();
    let built = build("examples/price_filter.js", "step");
    let wasm = s.path().join("price_filter.wasm");
    std::fs::copy(&built, &wasm).expect("copy");
    let wasm_arg = wasm.to_str().expect("utf-8");
    let schema = sdk_dir().join("examples/price_filter.schema.json");
    let packaged = fvhost(
        &s,
        &[
            "plugin",
            "package",
            wasm_arg,
            "--package",
            "acme:price-filter-js",
            "--version",
            "0.1.0",
            "--kind",
            "step",
            "--capabilities",
            "",
            "--config-schema",
            schema.to_str().expect("utf-8"),
        ],
    );
    assert_exit(&packaged, 0);
    assert_exit(&fvhost(&s, &["plugin", "publish", wasm_arg]), 0);
    write_raw_bids(&s);
    let topology = |config: &str| {
        format!(
            "name = \"js\"\n{BIDS}\n[stages.expensive]\ninput = \"bids\"\nplugin = \"acme:price-filter-js@^0.1\"\nconfig = {config}\n\n[sinks.out]\ninput = \"expensive\"\nplugin = \"file-sink\"\nallow_write = [\"out\"]\nconfig = {{ path = \"out\" }}\n"
        )
    };
    // Checked against the packaged schema before any JavaScript runs.
    s.write("bad.toml", &topology("{ min_price = \"high\" }"));
    let bad = fvhost(&s, &["validate", "bad.toml"]);
    assert_exit(&bad, 2);
    assert!(
        bad.stderr.contains("bad.toml:")
            && bad.stderr.contains("stages.expensive.config.min_price")
            && bad.stderr.contains("acme:price-filter-js@0.1.0"),
        "{}",
        bad.stderr
    );
    s.write("t.toml", &topology("{ min_price = 5000000, rate = 0.5 }"));
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_price_filter_output(&s);
}

/// A throw in a batch `Step` isolates the rows it throws on, as a Rust
/// step's trap does (it failed the whole run).
#[test]
fn a_js_batch_step_that_throws_on_some_rows_has_exactly_those_dead_lettered() {
    let wasm = build("tests/plugins/poison_batch.js", "step");
    assert_exactly_the_poison_rows_are_dead_lettered(&wasm, |seq| {
        format!("Error: seq {seq} is poison (at poison_batch.js:")
    });
}

#[test]
fn a_js_step_that_throws_on_some_rows_has_exactly_those_dead_lettered() {
    let wasm = build("tests/plugins/poison_rows.js", "step");
    assert_exactly_the_poison_rows_are_dead_lettered(&wasm, |seq| {
        format!("Error: seq {seq} is poison (at poison_rows.js:")
    });
}

/// An async step's `fetch()` goes through the host's wasi:http under the
/// node's `allow_http`; outside it fetch() rejects.
#[test]
fn a_js_step_fetches_under_its_http_grant_only() {
    let wasm = build("tests/plugins/fetcher.js", "step");
    assert_fetches_only_under_its_http_grant(&wasm, "TypeError: NetworkError");
}

/// A JS source feeding a JS sink: the source's rows all arrive, and the
/// sink logs each committed epoch's count; the same with a sink whose
/// `prepare` and `commit` are async (their promises settle in the call).
#[test]
fn a_js_source_feeds_a_js_sink() {
    let source = build("tests/plugins/counter.js", "source");
    for file in [
        "tests/plugins/row_counter.js",
        "tests/plugins/async_row_counter.js",
    ] {
        let s = Scratch::new();
        let sink = build(file, "sink");
        s.write(
            "t.toml",
            &format!(
                r#"name = "js-ends"
[sources.count]
path = "{}"
config = {{ count = 1000, batch = 64, reject_every = 100 }}
[sinks.counted]
input = "count"
path = "{}"
config = {{}}
"#,
                source.display(),
                sink.display()
            ),
        );
        let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
        assert_exit(&run, 0);
        let counted = crate::walkthrough::logged_epoch_rows(&run.stderr);
        // Every 100th number is rejected by the source (dead-lettered), the rest arrive.
        assert_eq!(counted, 990, "{file}: {}", run.stderr);
    }
}

#[test]
fn the_compile_cache_makes_the_second_start_of_a_js_plugin_fast() {
    let wasm = build("examples/price_filter.js", "step");
    assert_the_second_start_is_cached(&wasm, "JavaScript");
}
