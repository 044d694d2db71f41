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

/// Plan `args` with `--unit-graph` and return its units.
fn unit_graph(args: &[&str]) -> Vec<Unit> {
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
    let graph: serde_json::Value = serde_json::from_slice(&out.stdout).expect("unit graph JSON");
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
