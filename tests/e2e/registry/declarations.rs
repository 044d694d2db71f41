//! What a plugin declares about itself is checked before it runs: the
//! contract it was built for, the world its metadata claims, the
//! capabilities a topology may grant it and the schema of its config.

use super::{fvhost, patched_step, patched_step_all, topology};
use crate::support::{Scratch, assert_exit};

#[test]
fn a_plugin_built_for_another_contract_is_refused_naming_both_versions() {
    let s = Scratch::new();
    let wasm = patched_step(
        &s,
        "future.wasm",
        "fv:plugin/step@0.4.1",
        "fv:plugin/step@0.9.0",
    );
    let wasm = wasm.to_str().expect("utf-8");
    s.write(
        "t.toml",
        &topology("local:x").replace("plugin = \"local:x\"", &format!("path = \"{wasm}\"")),
    );
    let run = fvhost(&s, &["validate", "t.toml"]);
    assert_exit(&run, 2);
    assert!(
        run.stderr.contains("stages.big.path")
            && run.stderr.contains("built for fv:plugin 0.9.0")
            && run.stderr.contains("supports fv:plugin 0.4.1"),
        "{}",
        run.stderr
    );
    let publish = fvhost(&s, &["plugin", "publish", wasm]);
    assert_exit(&publish, 2);
    assert!(
        publish.stderr.contains("fv:plugin 0.9.0"),
        "{}",
        publish.stderr
    );
}

/// 0.4.1 only added the keyed step world: a component built for 0.4.0
/// (its names and metadata patched back) links and runs as before.
#[test]
fn a_plugin_built_for_contract_0_4_0_still_runs() {
    let s = Scratch::new();
    let wasm = patched_step_all(
        &s,
        "older.wasm",
        &[("@0.4.1", "@0.4.0"), ("contract=0.4.1", "contract=0.4.0")],
    );
    let wasm = wasm.to_str().expect("utf-8");
    let inspect = fvhost(&s, &["plugin", "inspect", wasm]);
    assert_exit(&inspect, 0);
    assert!(
        inspect
            .stdout
            .contains("fv:plugin 0.4.0 (this host supports 0.4.1)")
            && inspect.stdout.contains("fv:plugin/step@0.4.0")
            && !inspect.stdout.contains("@0.4.1"),
        "{}",
        inspect.stdout
    );
    s.write(
        "t.toml",
        &topology("local:x").replace("plugin = \"local:x\"", &format!("path = \"{wasm}\"")),
    );
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    assert_eq!(
        s.output_lines("out").len(),
        10,
        "prices 90..=99 pass the filter"
    );
}

#[test]
fn a_plugin_whose_metadata_claims_another_world_is_not_published() {
    let s = Scratch::new();
    let wasm = patched_step(&s, "liar.wasm", "kind=step\n", "kind=sink\n");
    let publish = fvhost(&s, &["plugin", "publish", wasm.to_str().expect("utf-8")]);
    assert_exit(&publish, 2);
    assert!(
        publish.stderr.contains("says it is a sink")
            && publish.stderr.contains("implements the step world")
            && publish.stderr.contains("fv:plugin/step@0.4.1"),
        "{}",
        publish.stderr
    );
    assert!(
        !s.path().join("registry/local").exists(),
        "nothing published"
    );
}
