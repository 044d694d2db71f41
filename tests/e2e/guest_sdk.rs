//! What the Python and JavaScript plugin tests (`python.rs`, `js.rs`)
//! share: hashing an SDK's sources (a component is rebuilt only when they
//! change), `fvhost` with the scratch's registry and plugin cache, and the
//! checks both SDKs' example and poison steps must pass — the same
//! expectations for every guest language.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;

use crate::support::{Run, Scratch, assert_exit, int_column};

/// Every file under `dir` (sorted; directories named in `skip` left out),
/// hashed into `h`.
pub fn hash_tree(dir: &Path, h: &mut DefaultHasher, skip: &[&str]) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read sdk dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| !skip.iter().any(|s| p.ends_with(s)))
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            hash_tree(&path, h, skip);
        } else {
            path.hash(h);
            std::fs::read(&path).expect("read").hash(h);
        }
    }
}

/// Serializes component builds: two tests wanting the same component build
/// it once.
static BUILDS: Mutex<()> = Mutex::new(());

/// The component of `source` (`plugins/<sdk>/…`) built once per content:
/// `hash` (the SDK's sources, the file, the kind, the toolchain) names it
/// under `CARGO_TARGET_TMPDIR/<cache>`; when absent, `command(partial)`
/// writes it to `partial`, then it is renamed into place, so a failed
/// build leaves nothing behind. The build time and size are printed.
pub fn build_once(
    cache: &str,
    source: &str,
    hash: &DefaultHasher,
    toolchain: &str,
    command: impl FnOnce(&Path) -> Command,
) -> PathBuf {
    let _guard = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let stem = Path::new(source)
        .file_stem()
        .expect("a source file")
        .to_string_lossy();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(cache);
    std::fs::create_dir_all(&dir).expect("mkdir");
    let out = dir.join(format!("{stem}-{:016x}.wasm", hash.finish()));
    if out.exists() {
        return out;
    }
    let partial = out.with_extension("partial.wasm");
    let started = Instant::now();
    let result = command(&partial)
        .output()
        .unwrap_or_else(|e| panic!("building {source}: cannot start {toolchain}: {e}"));
    assert!(
        result.status.success(),
        "building {source}:\n{}\n{}",
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    std::fs::rename(&partial, &out).expect("rename");
    eprintln!(
        "built {source} with {toolchain} in {:.1} s: {} bytes",
        started.elapsed().as_secs_f64(),
        std::fs::metadata(&out).expect("size").len()
    );
    out
}

/// `fvhost` with the registry and the plugin cache inside the scratch.
pub fn fvhost(s: &Scratch, args: &[&str]) -> Run {
    let registry = s.path().join("registry").display().to_string();
    let cache = s.path().join("plugin-cache").display().to_string();
    s.fvhost_env(
        args,
        &[
            ("FVHOST_REGISTRY", registry.as_str()),
            ("FVHOST_PLUGIN_CACHE", cache.as_str()),
        ],
    )
}

pub fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// The bids both SDKs' example step filters.
pub const BIDS: &str = r#"[sources.bids]
plugin = "generator"
config = { kind = "nexmark", stream = "bid", events = 3000, seed = 11 }
"#;

/// Write the unfiltered bids to `raw/`, to check a step's output against.
pub fn write_raw_bids(s: &Scratch) {
    s.write(
        "raw.toml",
        &format!(
            "name = \"raw\"\n{BIDS}\n[sinks.raw]\ninput = \"bids\"\nplugin = \"file-sink\"\nallow_write = [\"raw\"]\nconfig = {{ path = \"raw\" }}\n"
        ),
    );
    assert_exit(&fvhost(s, &["run", "raw.toml", "--no-progress"]), 0);
}

/// `out/` holds exactly the rows of `raw/` whose price is above 5,000,000,
/// each with `price_eur = price * 0.5` (the examples' `{ min_price =
/// 5000000, rate = 0.5 }`).
pub fn assert_price_filter_output(s: &Scratch) {
    let mut expected: Vec<serde_json::Value> = s
        .output_lines("raw")
        .iter()
        .map(|l| json(l))
        .filter(|r| r["price"].as_i64().expect("price") > 5_000_000)
        .map(|mut r| {
            let eur = r["price"].as_i64().expect("price") as f64 * 0.5;
            r["price_eur"] = serde_json::json!(eur);
            r
        })
        .collect();
    let mut actual: Vec<serde_json::Value> =
        s.output_lines("out").iter().map(|l| json(l)).collect();
    let key = |v: &serde_json::Value| v.to_string();
    expected.sort_by_key(key);
    actual.sort_by_key(key);
    assert!(
        expected.len() > 100 && expected.len() < 2900,
        "{} rows pass the filter: a poor test",
        expected.len()
    );
    assert_eq!(actual, expected);
}

/// Run the poison-rows step `wasm` (it raises on `seq % 97 == 13`) over
/// 1,000 numbers with a dead-letter sink, and check that exactly those rows
/// are dead-lettered, each with the reason `error(seq)` begins with, and
/// that the others flow on with `half = seq / 2`.
pub fn assert_exactly_the_poison_rows_are_dead_lettered(
    wasm: &Path,
    error: impl Fn(i64) -> String,
) {
    let s = Scratch::new();
    s.write(
        "t.toml",
        &format!(
            r#"name = "poison"
dead_letter = "rejects"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 1000 }}

[stages.step]
input = "nums"
path = "{}"
config = {{ modulus = 97, poison = 13 }}

[sinks.out]
input = "step"
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
        int_column(&lines, "seq"),
        (0..1000).filter(|n| n % 97 != 13).collect::<Vec<i64>>()
    );
    for l in &lines {
        let r = json(l);
        assert_eq!(
            r["half"].as_f64(),
            Some(r["seq"].as_i64().expect("seq") as f64 / 2.0),
            "{l}"
        );
    }
    let mut rejected: Vec<i64> = s
        .output_lines("rejects")
        .iter()
        .map(|l| {
            let r = json(l);
            assert_eq!(r["stage"], "step", "{l}");
            let reason = r["error"].as_str().expect("error");
            let row = json(r["row"].as_str().expect("row"));
            let seq = row["seq"].as_i64().expect("seq");
            assert!(reason.starts_with(&error(seq)), "{reason}");
            seq
        })
        .collect();
    rejected.sort();
    assert_eq!(
        rejected,
        (0..1000).filter(|n| n % 97 == 13).collect::<Vec<i64>>()
    );
}

/// Load `wasm` twice with one compile cache; print both start times and
/// check that the cached one is much faster.
pub fn assert_the_second_start_is_cached(wasm: &Path, language: &str) {
    let s = Scratch::new();
    let cache = s.path().join("components");
    let cache_arg = cache.display().to_string();
    let wasm_arg = wasm.to_str().expect("utf-8");
    let start = |label: &str| {
        let started = Instant::now();
        let run = s.fvhost_env(
            &["plugin", "inspect", wasm_arg],
            &[("FVHOST_CACHE_DIR", cache_arg.as_str())],
        );
        let took = started.elapsed();
        assert_exit(&run, 0);
        eprintln!(
            "{label} start of the {language} step ({} bytes): {:.2} s",
            std::fs::metadata(wasm).expect("component").len(),
            took.as_secs_f64()
        );
        took
    };
    let first = start("first (compiles)");
    let cached = start("cached");
    assert!(
        cached * 4 < first,
        "the cached start ({cached:?}) is not much faster than the first ({first:?})"
    );
}

/// A loopback server answering `GET /v1/hello` with `200 hello` (and 404
/// elsewhere), for the network-grant tests of every language.
pub fn hello_server() -> crate::http_server::HttpServer {
    use crate::http_server::{HttpServer, Reply};
    HttpServer::start(|request| match request.path.as_str() {
        "/v1/hello" => Reply::Answer("200 OK", String::new(), b"hello".to_vec()),
        _ => Reply::Answer("404 Not Found", String::new(), b"no".to_vec()),
    })
}

/// `wasm` (a step that fetches `/v1/hello` from [`hello_server`] once per
/// batch, as its `config` says, appending `<status> <body>` as a column
/// `answer`) reaches the server when its node's `grant` key (`allow_http`,
/// `allow_connect`) is `[granted]`, and is refused under `[ungranted]`: the
/// run fails and its log holds each of `refused` (the host's refusal, the
/// plugin's own error).
pub fn assert_answers_only_under_its_grant(
    wasm: &Path,
    grant: &str,
    (granted, ungranted): (&str, &str),
    config: &str,
    refused: &[&str],
) {
    let topology = |allowed: &str| {
        format!(
            r#"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 3 }}

[stages.fetch]
input = "nums"
path = "{wasm}"
{grant} = ["{allowed}"]
config = {config}

[sinks.out]
input = "fetch"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
            wasm = wasm.display(),
        )
    };
    let s = Scratch::new();
    s.write("t.toml", &topology(granted));
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let lines = s.output_lines("out");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines.iter().all(|l| json(l)["answer"] == "200 hello"),
        "{lines:?}"
    );
    let s = Scratch::new();
    s.write("t.toml", &topology(ungranted));
    let run = fvhost(&s, &["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    for says in refused {
        assert!(run.stderr.contains(says), "{says:?} in {}", run.stderr);
    }
}

/// `wasm` (a step whose config `url` it GETs once per batch) reaches a
/// loopback server under its `allow_http` grant, and is refused outside
/// it: the plugin sees the refusal as its language's network error
/// (`refused_says`), the host's log names it.
pub fn assert_fetches_only_under_its_http_grant(wasm: &Path, refused_says: &str) {
    let server = hello_server();
    assert_answers_only_under_its_grant(
        wasm,
        "allow_http",
        (&server.url("/v1/"), &server.url("/v2/")),
        &format!("{{ url = \"{}\" }}", server.url("/v1/hello")),
        &["the sandbox refused an HTTP GET to ", refused_says],
    );
}
