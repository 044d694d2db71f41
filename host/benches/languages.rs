//! Python and JavaScript plugins against Rust ones (figures are printed,
//! never asserted): the same filter-and-derive step — keep `price > 5000`,
//! add `price_eur = price * 0.5`, answer with a new batch of every column —
//! as the Python SDK's example (`plugins/sdk-python/examples/price_filter.py`,
//! built with componentize-py), the JavaScript SDK's
//! (`plugins/sdk-js/examples/price_filter.js`, esbuild + componentize-js)
//! and the Rust `test-step` in `filter-derive` mode, on the same 6-column
//! bid batches of 1,024 / 8,192 / 65,536 rows: time per batch, rows/s and
//! the ratio to Rust. Then each component's size, its build time, the
//! first start (compiling the component) and a cached start (loading the
//! compiled code).
//!
//! `cargo bench --workspace --bench languages`; needs componentize-py
//! 0.25.1 (`$FVHOST_COMPONENTIZE_PY`, or the one `tests/run` installs) and
//! `npm ci` in `plugins/sdk-js` (`tests/run` runs it).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, Float64Array, RecordBatch};

use fvhost::plugin::{
    Catalog, LoadedPlugin, PluginEngine, SandboxPolicy, StepInstance, StepReply, TaskIdentity,
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn componentize_py() -> PathBuf {
    if let Some(p) = std::env::var_os("FVHOST_COMPONENTIZE_PY") {
        return PathBuf::from(p);
    }
    let tools = std::env::var_os("FVHOST_TOOLS")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/fvhost/tools")))
        .expect("HOME");
    tools.join("componentize-py/bin/componentize-py")
}

/// Build the Python example into `dir`; its path and the build time.
fn build_python(dir: &Path) -> (PathBuf, Duration) {
    let sdk = repo().join("plugins/sdk-python");
    let out = dir.join("price_filter.wasm");
    let started = Instant::now();
    let run = Command::new("python3")
        .args(["-m", "fv_plugin", "build"])
        .arg(sdk.join("examples/price_filter.py"))
        .args(["--kind", "step", "-o"])
        .arg(&out)
        .arg("--componentize-py")
        .arg(componentize_py())
        .env("PYTHONPATH", &sdk)
        .output()
        .expect("python3 -m fv_plugin build");
    assert!(
        run.status.success(),
        "building the Python step (componentize-py 0.25.1 installed? tests/run installs it):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    (out, started.elapsed())
}

/// Build the JavaScript example into `dir`; its path and the build time.
fn build_js(dir: &Path) -> (PathBuf, Duration) {
    let sdk = repo().join("plugins/sdk-js");
    let out = dir.join("price_filter_js.wasm");
    let started = Instant::now();
    let run = Command::new("node")
        .arg(sdk.join("build.mjs"))
        .arg(sdk.join("examples/price_filter.js"))
        .args(["--kind", "step", "-o"])
        .arg(&out)
        .output()
        .expect("node build.mjs");
    assert!(
        run.status.success(),
        "building the JavaScript step (`npm ci` in plugins/sdk-js done? tests/run does it):\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    (out, started.elapsed())
}

fn open(engine: &PluginEngine, plugin: &LoadedPlugin, config: &str) -> StepInstance {
    let identity = TaskIdentity {
        topology: "bench".into(),
        stage: "filter-derive".into(),
        task_index: 0,
        parallelism: 1,
    };
    StepInstance::open(
        engine,
        plugin,
        &SandboxPolicy::default(),
        &identity,
        config,
        Arc::new(common::bid_schema()),
    )
    .expect("open step")
}

fn rows_of(reply: StepReply) -> RecordBatch {
    match reply {
        StepReply::Rows(out) => out,
        StepReply::BadRows(_) => panic!("unexpected bad rows"),
    }
}

/// Load `path` with a fresh engine on `cache`: the time it took.
fn start(cache: &Path, path: &Path) -> Duration {
    let engine = PluginEngine::new(Some(cache.to_path_buf())).expect("engine");
    let started = Instant::now();
    Catalog::new(&engine).load_path(path).expect("load");
    started.elapsed()
}

fn main() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (python_path, python_build) = build_python(dir.path());
    let (js_path, js_build) = build_js(dir.path());
    let rust_path = Path::new(env!("FV_PLUGIN_DIR")).join("test_step.wasm");

    let engine = common::engine();
    let catalog = Catalog::new(&engine);
    let load = |path: &Path| catalog.load_path(path).expect("load step");
    let (rust, python, js) = (load(&rust_path), load(&python_path), load(&js_path));
    let guest = r#"{"min_price":5000,"rate":0.5}"#;
    let mut steps = [
        (
            "rust",
            open(&engine, &rust, r#"{"mode":"filter-derive","value":5000}"#),
        ),
        ("python", open(&engine, &python, guest)),
        ("js", open(&engine, &js, guest)),
    ];

    println!("per batch: keep price > 5000 and add price_eur = price * 0.5 (new batch, median)");
    println!(
        "{:>8} {:>8} {:>12} {:>14} {:>10}",
        "rows", "step", "per batch", "rows/s", "vs rust"
    );
    for rows in [1024, 8192, 65536] {
        let batch = common::bids(rows);
        let eur = |o: &RecordBatch| {
            o.column_by_name("price_eur")
                .and_then(|c| c.as_any().downcast_ref::<Float64Array>().cloned())
                .expect("price_eur")
        };
        let reference = rows_of(steps[0].1.call(&batch).expect("rust"));
        let mut rust_time = None;
        for (label, step) in steps.iter_mut() {
            let out = rows_of(step.call(&batch).expect(label));
            assert_eq!(
                out.num_rows(),
                reference.num_rows(),
                "{label} and Rust disagree"
            );
            assert_eq!(
                eur(&out),
                eur(&reference),
                "{label} and Rust disagree on price_eur"
            );
            let t = common::time_per_call(1, Duration::from_secs(2), 5, || {
                std::hint::black_box(step.call(&batch).expect("call"));
            });
            let base = *rust_time.get_or_insert(t);
            println!(
                "{rows:>8} {label:>8} {:>10.2}ms {:>14.0} {:>9.1}x",
                t.as_secs_f64() * 1e3,
                rows as f64 / t.as_secs_f64(),
                t.as_secs_f64() / base.as_secs_f64(),
            );
        }
    }

    println!();
    println!(
        "{:<8} {:>12} {:>14} {:>14} {:>14}",
        "step", "size", "build", "first start", "cached start"
    );
    for (label, path, build) in [
        ("rust", &rust_path, None),
        ("python", &python_path, Some(python_build)),
        ("js", &js_path, Some(js_build)),
    ] {
        let cache = tempfile::tempdir().expect("cache dir");
        let first = start(cache.path(), path);
        let cached = start(cache.path(), path);
        println!(
            "{label:<8} {:>10.1}MB {:>14} {:>13.2}s {:>13.3}s",
            std::fs::metadata(path).expect("size").len() as f64 / 1e6,
            build.map_or("(cargo)".to_string(), |b| format!(
                "{:.1}s",
                b.as_secs_f64()
            )),
            first.as_secs_f64(),
            cached.as_secs_f64(),
        );
    }
}
