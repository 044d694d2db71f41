//! The README's two commands share one build: every dependency the run
//! command (`cargo run --release`, the host alone) compiles is also a unit
//! of the test command's graph (`cargo test --release --workspace`), with
//! the same features, profile and dependencies — so the test command
//! compiles only the workspace's own crates.
//!
//! Cargo unifies features over the packages it builds, so a feature that a
//! plugin's native test build asks for (and the host's graph does not)
//! gives arrow, DataFusion or wasmtime another hash and compiles them a
//! second time (issue 20: 21 minutes on two cores). The check reads both
//! unit graphs (`--unit-graph`, which plans without compiling; unstable,
//! so enabled with `RUSTC_BOOTSTRAP=1` on the same toolchain that builds)
//! and compares each dependency unit by an identity that covers its
//! dependencies too, exactly as cargo's own fingerprint does.
//!
//! The same graphs show each unit's opt-level: the crates the host runs
//! only to plan (DataFusion's planner, sqlparser) are compiled at 1 to
//! shorten the first build, and a second check keeps every crate a row
//! passes through at 3, and every crate of `cargo bench` (whose baselines
//! run DataFusion's own plans) at 3.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::Command;

use sha2::Digest;

use crate::support::repo;

/// One unit of a unit graph, as far as its compiled artifact depends on it.
struct Unit {
    /// `name@version` for a registry crate, `None` for a workspace member.
    package: Option<String>,
    /// The unit's own settings: target, features, mode, platform, profile.
    own: String,
    /// Short form for messages: package, target kind, features.
    label: String,
    deps: Vec<usize>,
}

/// Plan `args` with `--unit-graph` (no compiling) and return cargo's JSON.
fn graph_json(args: &[&str]) -> serde_json::Value {
    let scratch = tempfile::tempdir().expect("tempdir");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(repo())
        .args(args)
        .args(["--unit-graph", "-Z", "unstable-options", "--target-dir"])
        .arg(scratch.path())
        .env("RUSTC_BOOTSTRAP", "1")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo {args:?} --unit-graph failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("unit graph JSON")
}

/// Plan `args` with `--unit-graph` and return its units.
fn unit_graph(args: &[&str]) -> Vec<Unit> {
    let graph = graph_json(args);
    let units = graph["units"].as_array().expect("units");
    units
        .iter()
        .map(|u| {
            let pkg_id = u["pkg_id"].as_str().expect("pkg_id");
            // Registry ids end in `#name@version`; path ids name a workspace member.
            let package = (!pkg_id.starts_with("path+"))
                .then(|| pkg_id.rsplit('#').next().unwrap_or(pkg_id).to_string());
            let mut features: Vec<&str> = u["features"]
                .as_array()
                .expect("features")
                .iter()
                .filter_map(|f| f.as_str())
                .collect();
            features.sort_unstable();
            let own = serde_json::json!([
                u["target"]["name"],
                u["target"]["kind"],
                features,
                u["mode"],
                u["platform"],
                u["profile"],
            ])
            .to_string();
            let label = format!(
                "{} ({} {}) features {:?}",
                package.as_deref().unwrap_or(pkg_id),
                u["target"]["kind"],
                u["mode"],
                features
            );
            let deps = u["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter_map(|d| d["index"].as_u64())
                .map(|i| i as usize)
                .collect();
            Unit {
                package,
                own,
                label,
                deps,
            }
        })
        .collect()
}

/// The identity of each registry unit: its own settings and, recursively,
/// its dependencies' identities (a dependency built another way changes
/// the unit's hash, so it compiles again).
fn identities(units: &[Unit]) -> BTreeMap<String, &str> {
    fn identity(i: usize, units: &[Unit], memo: &mut HashMap<usize, String>) -> String {
        if let Some(id) = memo.get(&i) {
            return id.clone();
        }
        let unit = &units[i];
        let mut deps: Vec<String> = unit
            .deps
            .iter()
            .map(|&d| identity(d, units, memo))
            .collect();
        deps.sort_unstable();
        let name = unit.package.as_deref().unwrap_or("<workspace member>");
        let id = format!("{name} {} [{}]", unit.own, deps.join(","));
        // Keep identities short: a digest stands for the whole subtree.
        let id = hex::encode(sha2::Sha256::digest(id.as_bytes()));
        memo.insert(i, id.clone());
        id
    }
    let mut memo = HashMap::new();
    (0..units.len())
        .filter(|&i| units[i].package.is_some())
        .map(|i| (identity(i, units, &mut memo), units[i].label.as_str()))
        .collect()
}

#[test]
fn the_test_command_compiles_no_dependency_the_run_command_built_differently() {
    let run = unit_graph(&["build", "--release"]);
    let test = unit_graph(&["test", "--release", "--workspace", "--no-run"]);
    let run_ids = identities(&run);
    let test_ids = identities(&test);
    let rebuilt: BTreeSet<&str> = run_ids
        .iter()
        .filter(|(id, _)| !test_ids.contains_key(*id))
        .map(|(_, label)| *label)
        .collect();
    // The root causes are the units whose own settings (features, mostly)
    // appear in neither form in the other graph; the rest only cascade.
    let test_own: BTreeSet<(&Option<String>, &str)> =
        test.iter().map(|u| (&u.package, u.own.as_str())).collect();
    let causes: BTreeSet<&str> = run
        .iter()
        .filter(|u| u.package.is_some() && !test_own.contains(&(&u.package, u.own.as_str())))
        .map(|u| u.label.as_str())
        .collect();
    assert!(
        run_ids.len() > 100,
        "the host's graph has {} registry units: the check read the wrong graph",
        run_ids.len()
    );
    assert!(
        rebuilt.is_empty(),
        "`cargo test --release --workspace` would compile {} dependencies again after \
         `cargo run --release`. Units of the run graph built with other settings than in \
         the test graph (align their features in host/Cargo.toml):\n  {}\n\
         Cascaded from them: {:?}",
        rebuilt.len(),
        causes.into_iter().collect::<Vec<_>>().join("\n  "),
        rebuilt
    );
}

/// The packages every row of a topology passes through (Arrow's kernels,
/// DataFusion's expression evaluation, the Wasm runtime, state, I/O).
/// `[profile.release.package.*]` in Cargo.toml lowers the opt-level of
/// crates the host runs only to plan or to compile a component; none of
/// these may be among them.
const ROW_PATH: &[&str] = &[
    "arrow-arith",
    "arrow-array",
    "arrow-buffer",
    "arrow-cast",
    "arrow-csv",
    "arrow-data",
    "arrow-ipc",
    "arrow-json",
    "arrow-ord",
    "arrow-row",
    "arrow-select",
    "arrow-string",
    "parquet",
    "datafusion-common",
    "datafusion-expr-common",
    "datafusion-functions",
    "datafusion-functions-nested",
    "datafusion-physical-expr",
    "datafusion-physical-expr-common",
    "wasmtime",
    "wasmtime-wasi",
    "wasmtime-wasi-io",
    "wasmtime-wasi-http",
    "tokio",
    "fjall",
    "lsm-tree",
    "mimalloc",
    "rdkafka",
    "object_store",
    "foldhash",
    "crossbeam-channel",
];

/// `(package name, opt-level)` of each registry library unit of a graph.
fn opt_levels(args: &[&str]) -> Vec<(String, String)> {
    let graph = graph_json(args);
    graph["units"]
        .as_array()
        .expect("units")
        .iter()
        .filter(|u| !u["pkg_id"].as_str().unwrap_or("path+").starts_with("path+"))
        .filter(|u| u["mode"] == "build" && u["target"]["kind"] == serde_json::json!(["lib"]))
        .map(|u| {
            let id = u["pkg_id"].as_str().unwrap_or_default();
            let name = id.rsplit('#').next().unwrap_or(id);
            let name = name.split('@').next().unwrap_or(name).to_string();
            (
                name,
                u["profile"]["opt_level"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn rows_pass_only_through_fully_optimised_crates_and_the_benches_baselines_too() {
    let run = opt_levels(&["build", "--release"]);
    let lowered: BTreeSet<&str> = run
        .iter()
        .filter(|(_, level)| level == "1")
        .map(|(name, _)| name.as_str())
        .collect();
    // The setting is in force (else this test would pass vacuously).
    assert!(
        lowered.contains("sqlparser") && lowered.contains("datafusion-optimizer"),
        "the planning crates are not at opt-level 1 in the run graph: {lowered:?}"
    );
    // A crate also built for a build script or proc macro has a second
    // unit at 0 (cargo's build-override): the one linked into the binary
    // is the one at 3.
    let slowed: Vec<&str> = ROW_PATH
        .iter()
        .copied()
        .filter(|row_crate| {
            let levels: Vec<&str> = run
                .iter()
                .filter(|(name, _)| name == row_crate)
                .map(|(_, level)| level.as_str())
                .collect();
            !levels.is_empty()
                && (!levels.contains(&"3") || levels.iter().any(|l| *l != "3" && *l != "0"))
        })
        .collect();
    assert!(
        slowed.is_empty(),
        "crates on every row's path compiled below opt-level 3 by `cargo run --release`: {slowed:?}"
    );
    for row_crate in ["arrow-select", "datafusion-physical-expr", "wasmtime"] {
        assert!(
            run.iter().any(|(name, _)| name == row_crate),
            "{row_crate} is not in the run graph: the check read the wrong graph"
        );
    }
    // Libraries built for build scripts and proc macros are at 0 (cargo's
    // build-override); every other library of the benches, their
    // DataFusion baselines included, at 3.
    let bench = opt_levels(&["bench", "--workspace", "--no-run"]);
    let below: BTreeSet<String> = bench
        .iter()
        .filter(|(_, level)| level != "3" && level != "0")
        .map(|(name, level)| format!("{name} at opt-level {level}"))
        .collect();
    assert!(
        below.is_empty(),
        "`cargo bench` would compile these below opt-level 3 (add them to [profile.bench.package.*]): {below:?}"
    );
}
