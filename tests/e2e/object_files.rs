//! `file-source` reading a bucket through the host's object storage
//! (`fv:host/objects`) on a real S3-compatible server (moto's, as in
//! `object_store.rs`): the rows equal the same files read from disk,
//! object grants are held to their prefix, and a store that never
//! answers is cut at the plugin's call budget.

use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use crate::s3_server::S3Server;
use crate::support::{Scratch, assert_exit};

/// Three CSV files (one in a subdirectory) of `id,name,amount` rows,
/// written under `dir` in `s`: their paths relative to `dir`.
fn write_csv(s: &Scratch, dir: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (f, rows) in [("a.csv", 1500), ("b.csv", 700), ("more/c.csv", 2300)] {
        let mut text = String::from("id,name,amount\n");
        for i in 0..rows {
            let id = names.len() * 10_000 + i;
            text.push_str(&format!(
                "{id},name-{},{}.{}\n",
                id % 97,
                id % 1000,
                id % 100
            ));
        }
        s.write(&format!("{dir}/{f}"), &text);
        names.push(f.to_string());
    }
    names
}

/// A file source over `path` (granted `grant`) into a file sink `out`,
/// through `stage` (SQL over `input`) when given.
fn topology(path: &str, grant: &str, stage: Option<&str>) -> String {
    let (sink_input, stage) = match stage {
        Some(sql) => (
            "pick",
            format!("[stages.pick]\ninput = \"input\"\nsql = \"{sql}\"\n"),
        ),
        None => ("input", String::new()),
    };
    format!(
        r#"
[sources.input]
plugin = "file-source"
parallelism = 2
allow_read = ["{grant}"]
config = {{ path = "{path}", split_bytes = 8192 }}

{stage}
[sinks.out]
input = "{sink_input}"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#
    )
}

/// Run `toml` in a fresh output directory with `env`: the rows written.
fn rows_of(s: &Scratch, toml: &str, env: &[(&str, &str)]) -> Vec<String> {
    let _ = std::fs::remove_dir_all(s.path().join("out"));
    let _ = std::fs::remove_dir_all(s.path().join(".fvhost"));
    s.write("t.toml", toml);
    assert_exit(&s.fvhost_env(&["run", "t.toml", "--no-progress"], env), 0);
    s.output_lines("out")
}

#[cfg(unix)]
#[test]
fn a_bucket_of_csv_and_parquet_reads_like_the_same_files_on_disk() {
    let server = S3Server::start();
    server.create_bucket("lake");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Scratch::new();
    for name in write_csv(&s, "data") {
        let bytes = std::fs::read(s.path().join("data").join(&name)).expect("csv");
        server.put_object("lake", &format!("in/csv/{name}"), &bytes);
    }
    // Outside the grant, and matching the glob if the grant were ignored.
    server.put_object("lake", "in/csv-private/x.csv", b"id,name,amount\n1,x,1.0\n");

    // CSV: byte ranges of 8 KiB over two tasks, a glob across
    // directories.
    let local = rows_of(&s, &topology("data/**/*.csv", "data", None), &env);
    assert_eq!(local.len(), 4500, "every local row");
    let remote = rows_of(
        &s,
        &topology("s3://lake/in/csv/**/*.csv", "s3://lake/in/csv", None),
        &env,
    );
    assert_eq!(remote, local, "the bucket's rows are the files' rows");

    // Parquet written locally, read back from the bucket with a
    // projection and a filter pushed down.
    s.write(
        "to_parquet.toml",
        r#"
[sources.input]
plugin = "file-source"
allow_read = ["data"]
config = { path = "data/**/*.csv" }

[sinks.pq]
input = "input"
plugin = "file-sink"
allow_write = ["pq"]
config = { path = "pq", format = "parquet" }
"#,
    );
    assert_exit(&s.fvhost(&["run", "to_parquet.toml", "--no-progress"]), 0);
    let parquet: Vec<String> = s
        .files("pq")
        .into_iter()
        .filter(|f| f.ends_with(".parquet"))
        .collect();
    assert!(!parquet.is_empty(), "{:?}", s.files("pq"));
    for name in &parquet {
        let bytes = std::fs::read(s.path().join("pq").join(name)).expect("parquet");
        server.put_object("lake", &format!("in/pq/{name}"), &bytes);
    }
    let sql = "SELECT id, amount FROM input WHERE amount > 900";
    let local = rows_of(&s, &topology("pq/*.parquet", "pq", Some(sql)), &env);
    assert!(local.len() > 100, "{}", local.len());
    let remote = rows_of(
        &s,
        &topology("s3://lake/in/pq/*.parquet", "s3://lake/in/pq", Some(sql)),
        &env,
    );
    assert_eq!(
        remote, local,
        "Parquet from the bucket, projected and filtered"
    );

    // The node's network use counts the object requests and bytes.
    let status =
        std::fs::read_to_string(s.path().join(".fvhost/t/status.json")).expect("status record");
    let record: serde_json::Value = serde_json::from_str(&status).expect("json");
    let input = record["stages"]
        .as_array()
        .and_then(|stages| stages.iter().find(|st| st["name"] == "input"))
        .unwrap_or_else(|| panic!("the source's stage in {record}"));
    assert!(
        input["network"]["object_requests"].as_u64() > Some(2)
            && input["network"]["object_bytes_read"].as_u64() > Some(1000),
        "{input}"
    );
}

#[cfg(unix)]
#[test]
fn object_paths_outside_the_grant_are_refused_naming_it() {
    let server = S3Server::start();
    server.create_bucket("lake");
    server.put_object("lake", "secret/keys.csv", b"id,name,amount\n1,x,1.0\n");
    server.put_object("lake", "in/ok.csv", b"id,name,amount\n1,x,1.0\n");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Scratch::new();
    for (path, grant, says) in [
        // Another prefix of the same bucket.
        (
            "s3://lake/secret/keys.csv",
            "s3://lake/in",
            "`s3://lake/secret/keys.csv` is outside this node's object grants",
        ),
        // A prefix that only starts like the grant.
        (
            "s3://lake/inside/*.csv",
            "s3://lake/in",
            "outside this node's object grants",
        ),
        // Another bucket.
        (
            "s3://other/in/ok.csv",
            "s3://lake/in",
            "outside this node's object grants",
        ),
    ] {
        s.write("t.toml", &topology(path, grant, None));
        let run = s.fvhost_env(&["run", "t.toml", "--no-progress"], &env);
        assert_ne!(run.code, 0, "{path} under {grant}: {}", run.stderr);
        assert!(
            run.stderr.contains(says) && run.stderr.contains("allow_read"),
            "{path} under {grant}: {}",
            run.stderr
        );
    }
    // A grant that is not an object prefix is refused at validation,
    // naming its key.
    s.write(
        "t.toml",
        &topology("s3://lake/in/ok.csv", "s3://lake/in/../secret", None),
    );
    let run = s.fvhost_env(&["validate", "t.toml"], &env);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr.contains("allow_read") && run.stderr.contains("`..`"),
        "{}",
        run.stderr
    );
    // The credentials never reach the log.
    s.write(
        "t.toml",
        &topology("s3://lake/secret/keys.csv", "s3://lake/in", None),
    );
    let secret = "s3cr3t-never-logged";
    let mut env = env.clone();
    env.retain(|(k, _)| *k != "AWS_SECRET_ACCESS_KEY");
    env.push(("AWS_SECRET_ACCESS_KEY", secret));
    let run = s.fvhost_env(&["run", "t.toml", "--no-progress"], &env);
    assert!(!run.stderr.contains(secret), "{}", run.stderr);
}

#[cfg(unix)]
#[test]
fn a_store_that_never_answers_is_cut_at_the_call_budget() {
    // A peer that accepts connections and never says a word.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let endpoint = format!("http://127.0.0.1:{port}");
    let env = [
        ("AWS_ENDPOINT", endpoint.as_str()),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "test"),
        ("AWS_SECRET_ACCESS_KEY", "test"),
        ("AWS_REGION", "us-east-1"),
    ];
    let s = Scratch::new();
    let mut toml = topology("s3://lake/in/*.csv", "s3://lake/in", None);
    toml = toml.replace(
        "parallelism = 2\n",
        "parallelism = 1\ncall_timeout = \"2s\"\n",
    );
    s.write("t.toml", &toml);
    let started = std::time::Instant::now();
    let mut child = s.spawn_fvhost_env(&["run", "t.toml", "--no-progress"], &env);
    // Far past the budget (and past object_store's own timeouts, which
    // the budget must not wait for), the run has ended.
    let deadline = started + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the run still waits on a store that never answers"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut stderr);
    }
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("within the call's budget") || stderr.contains("call_timeout"),
        "{stderr}"
    );
}

/// generator (`events` rows, one batch) → test-step `objects-upload`
/// towards `prefix` with `grants` → file-sink.
fn upload_topology(prefix: &str, grants: &str, abort: bool) -> String {
    format!(
        r#"
name = "t"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = 3 }}

[stages.step]
input = "nums"
path = "{wasm}"
call_timeout = "10s"
{grants}
config = {{ mode = "objects-upload", path = "{prefix}", value = {abort} }}

[sinks.out]
input = "step"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#,
        wasm = crate::support::test_step_wasm().display(),
        abort = u8::from(abort),
    )
}

#[cfg(unix)]
#[test]
fn multipart_uploads_appear_only_once_complete_and_never_once_aborted() {
    let server = S3Server::start();
    server.create_bucket("lake");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Scratch::new();
    // Completed (twice: a replayed commit), then read back.
    s.write(
        "t.toml",
        &upload_topology("s3://lake/up", "allow_write = [\"s3://lake/up\"]", false),
    );
    assert_exit(&s.fvhost_env(&["run", "t.toml", "--no-progress"], &env), 0);
    let lines = s.output_lines("out");
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains(r#""content":"rows="#)),
        "{lines:?}"
    );
    let keys = server.keys("lake", "up/");
    assert!(
        !keys.is_empty() && keys.iter().all(|k| k.starts_with("up/batch-")),
        "{keys:?}"
    );
    let network = {
        let text = std::fs::read_to_string(s.path().join(".fvhost/t/status.json")).expect("status");
        let record: serde_json::Value = serde_json::from_str(&text).expect("json");
        record["stages"]
            .as_array()
            .and_then(|stages| stages.iter().find(|st| st["name"] == "step"))
            .map(|st| st["network"].clone())
            .expect("stage step")
    };
    let written = network["object_bytes_written"].as_u64().unwrap_or(0);
    assert!(written >= 6, "{network}");
    assert_eq!(
        network["object_bytes_read"].as_u64(),
        Some(written),
        "{network}"
    );

    // Aborted: nothing to read, nothing listed.
    let _ = std::fs::remove_dir_all(s.path().join("out"));
    let _ = std::fs::remove_dir_all(s.path().join(".fvhost"));
    s.write(
        "t.toml",
        &upload_topology("s3://lake/gone", "allow_write = [\"s3://lake/gone\"]", true),
    );
    assert_exit(&s.fvhost_env(&["run", "t.toml", "--no-progress"], &env), 0);
    let lines = s.output_lines("out");
    assert!(
        lines.iter().all(|l| l.contains(r#""content":"absent: "#)),
        "{lines:?}"
    );
    assert!(server.keys("lake", "gone/").is_empty());

    // A read grant does not let a plugin write.
    let _ = std::fs::remove_dir_all(s.path().join(".fvhost"));
    s.write(
        "t.toml",
        &upload_topology("s3://lake/up", "allow_read = [\"s3://lake/up\"]", false),
    );
    let run = s.fvhost_env(&["run", "t.toml", "--no-progress"], &env);
    assert_ne!(run.code, 0);
    assert!(
        run.stderr
            .contains("outside this node's writable object grants")
            && run.stderr.contains("allow_write"),
        "{}",
        run.stderr
    );
}

#[cfg(unix)]
#[test]
fn file_sink_objects_appear_once_per_committed_epoch_through_random_sigkills() {
    use crate::stateful::{reference, windows};
    use crate::support::{crash_seed, kill_at_random_moments_env};
    let server = S3Server::start();
    server.create_bucket("lake");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let to_bucket = |t: String| {
        t.replace(
            "allow_write = [\"out\"]\nconfig = { path = \"out\" }",
            "allow_write = [\"s3://lake/win\"]\nconfig = { path = \"s3://lake/win\" }",
        )
    };
    let s = Scratch::new();
    s.write("t.toml", &to_bucket(windows(4000)));
    assert!(
        std::fs::read_to_string(s.path().join("t.toml"))
            .expect("toml")
            .contains("s3://lake/win"),
        "the sink writes to the bucket"
    );
    let seed = crash_seed("file-sink objects");
    let mut state = seed;
    let args = ["run", "t.toml", "--no-progress"];
    kill_at_random_moments_env(&s, &args, &env, 6, (300, 700), &mut state, |_| {});
    assert_exit(&s.fvhost_env(&args, &env), 0);
    // Every object holds committed rows: together, each row once.
    let keys = server.keys("lake", "win/");
    assert!(keys.len() > 3, "{keys:?}");
    let mut lines: Vec<String> = keys
        .iter()
        .flat_map(|k| {
            let body = server.get_object("lake", k);
            String::from_utf8(body)
                .expect("utf-8")
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort();
    let reference = reference();
    assert_eq!(
        lines.len(),
        reference.len(),
        "rows in the bucket after 6 kills (seed {seed})"
    );
    assert!(
        lines == reference,
        "the bucket holds what one uninterrupted run writes (seed {seed})"
    );

    // Parquet objects read back through file-source from the bucket.
    let s = Scratch::new();
    s.write(
        "t.toml",
        &to_bucket(windows(0).replace(", rate = 0", ""))
            .replace(
                "s3://lake/win\" }",
                "s3://lake/pq\", format = \"parquet\" }",
            )
            .replace(
                "allow_write = [\"s3://lake/win\"]",
                "allow_write = [\"s3://lake/pq\"]",
            ),
    );
    assert_exit(&s.fvhost_env(&args, &env), 0);
    let back = rows_of(
        &s,
        &topology("s3://lake/pq/*.parquet", "s3://lake/pq", None),
        &env,
    );
    assert_eq!(back.len(), reference.len(), "Parquet objects read back");
}

#[cfg(unix)]
#[test]
fn the_s3_parquet_example_runs_as_its_comments_say() {
    use crate::support::copy_example;
    let server = S3Server::start();
    // `curl -X PUT …/lake`
    server.create_bucket("lake");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Scratch::new();
    copy_example(&s, "s3-parquet");
    assert_exit(
        &s.fvhost_env(&["run", "to-bucket.toml", "--no-progress"], &env),
        0,
    );
    let objects = server.keys("lake", "bids/");
    assert!(
        !objects.is_empty() && objects.iter().all(|k| k.ends_with(".parquet")),
        "{objects:?}"
    );
    let run = s.fvhost_env(&["run", "topology.toml", "--no-progress"], &env);
    assert_exit(&run, 0);
    assert!(
        run.stderr.contains("reads only what the topology needs"),
        "{}",
        run.stderr
    );
    let from_bucket = s.output_lines("out");
    // The same query straight over the generator.
    let direct = std::fs::read_to_string(s.path().join("topology.toml"))
        .expect("topology")
        .replace(
            "plugin = \"file-source\"\nallow_read = [\"s3://lake/bids\"]\nconfig = { path = \"s3://lake/bids/*.parquet\" }",
            "plugin = \"generator\"\nconfig = { kind = \"nexmark\", stream = \"bid\", events = 500000, seed = 7 }",
        )
        .replace("name = \"s3_parquet\"", "name = \"direct\"")
        .replace("path = \"out\"", "path = \"direct\"")
        .replace("[\"out\"]", "[\"direct\"]");
    assert!(direct.contains("generator"), "{direct}");
    s.write("direct.toml", &direct);
    assert_exit(&s.fvhost(&["run", "direct.toml", "--no-progress"]), 0);
    let direct = s.output_lines("direct");
    assert!(direct.len() > 100, "{}", direct.len());
    assert_eq!(
        from_bucket, direct,
        "the bucket's bids give the generator's answer"
    );
}

/// The same exactly-once and read-back path on Azure Blob Storage
/// (Azurite), through the same grants: `az://container/prefix`.
#[cfg(unix)]
#[test]
fn azure_blob_storage_takes_the_epochs_once_through_sigkills_and_reads_them_back() {
    use crate::azurite_server::AzuriteServer;
    use crate::stateful::{reference, windows};
    use crate::support::{crash_seed, kill_at_random_moments_env};
    let server = AzuriteServer::start();
    server.create_container("lake");
    let env = server.env();
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s = Scratch::new();
    s.write(
        "t.toml",
        &windows(4000).replace(
            "allow_write = [\"out\"]\nconfig = { path = \"out\" }",
            "allow_write = [\"az://lake/win\"]\nconfig = { path = \"az://lake/win\" }",
        ),
    );
    let seed = crash_seed("file-sink on Azure");
    let mut state = seed;
    let args = ["run", "t.toml", "--no-progress"];
    kill_at_random_moments_env(&s, &args, &env, 3, (300, 900), &mut state, |_| {});
    assert_exit(&s.fvhost_env(&args, &env), 0);
    let back = rows_of(
        &s,
        &topology("az://lake/win/*.jsonl", "az://lake/win", None),
        &env,
    );
    let reference = reference();
    assert_eq!(
        back.len(),
        reference.len(),
        "rows after 3 kills (seed {seed})"
    );
    // Read back, the columns come in the inferred schema's order: compare
    // rows as maps.
    let rows = |lines: &[String]| {
        let mut rows: Vec<std::collections::BTreeMap<String, String>> = lines
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("a JSON row");
                v.as_object()
                    .expect("an object")
                    .iter()
                    .map(|(k, v)| (k.clone(), v.to_string()))
                    .collect()
            })
            .collect();
        rows.sort();
        rows
    };
    let (back, reference) = (rows(&back), rows(reference));
    let differs = back.iter().zip(&reference).find(|(a, b)| a != b);
    assert!(
        differs.is_none(),
        "the container holds what one uninterrupted run writes (seed {seed}): {differs:?}"
    );
}
