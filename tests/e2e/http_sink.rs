//! `http-sink` against a receiver that deduplicates by `Idempotency-Key`
//! (the contract the sink is exactly-once for): every row arrives once
//! after dedup, through retries of a failing receiver and SIGKILLs of
//! fvhost at random moments.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use crate::http_server::{HttpServer, Reply};
use crate::support::{
    Scratch, assert_exit, crash_seed, kill_after_first_checkpoint, kill_at_random_moments,
};

/// What the receiver holds: the body of each key, the POSTs it saw
/// (answered or failed) and how many it still fails on purpose.
#[derive(Default)]
struct Received {
    bodies: BTreeMap<String, Vec<u8>>,
    posts: u32,
    duplicates: u32,
    fail_next: u32,
    content_types: Vec<String>,
}

/// A receiver on loopback: `POST /ingest` keeps the body of each new
/// `Idempotency-Key` (a repeated key is answered 200 and dropped); the
/// first `fail` POSTs get 503.
fn receiver(fail: u32) -> (HttpServer, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received {
        fail_next: fail,
        ..Received::default()
    }));
    let state = Arc::clone(&received);
    let server = HttpServer::start(move |request| {
        let mut r = state.lock().expect("lock");
        r.posts += 1;
        if request.method != "POST" || request.path != "/ingest" {
            return Reply::Answer("404 Not Found", String::new(), Vec::new());
        }
        if r.fail_next > 0 {
            r.fail_next -= 1;
            return Reply::Answer("503 Service Unavailable", String::new(), b"busy".to_vec());
        }
        let Some(key) = request.header("idempotency-key") else {
            return Reply::Answer("400 Bad Request", String::new(), b"no key".to_vec());
        };
        if let Some(t) = request.header("content-type") {
            r.content_types.push(t.to_string());
        }
        if r.bodies.contains_key(key) {
            r.duplicates += 1;
        } else {
            r.bodies.insert(key.to_string(), request.body.clone());
        }
        Reply::Answer("200 OK", String::new(), b"ok".to_vec())
    });
    (server, received)
}

/// generator (`events` numbers, `rate` per second; 0: as fast as it
/// can) → http-sink on two tasks posting to `url` (`extra`: more config
/// keys, `, key = value`).
fn topology(events: u64, rate: u64, url: &str, grant: &str, extra: &str) -> String {
    spooling_topology(events, rate, url, grant, extra, "")
}

/// [`topology`] with more keys on the sink node (`node`: whole lines).
fn spooling_topology(
    events: u64,
    rate: u64,
    url: &str,
    grant: &str,
    extra: &str,
    node: &str,
) -> String {
    let rate = match rate {
        0 => String::new(),
        r => format!(", rate = {r}"),
    };
    format!(
        r#"
name = "posts"
batch_size = 50

[checkpoint]
interval = "200ms"

[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events}{rate} }}

[sinks.post]
input = "nums"
plugin = "http-sink"
parallelism = 2
allow_http = ["{grant}"]
{node}
config = {{ url = "{url}"{extra} }}
"#
    )
}

/// Every `seq` the receiver holds, over the bodies of distinct keys.
fn sequence_numbers(received: &Received) -> Vec<u64> {
    let mut seqs: Vec<u64> = received
        .bodies
        .values()
        .flat_map(|body| {
            String::from_utf8_lossy(body)
                .into_owned()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
            row["seq"].as_u64().expect("seq")
        })
        .collect();
    seqs.sort_unstable();
    seqs
}

#[test]
fn every_row_is_posted_once_per_key_through_a_failing_receiver() {
    let (server, received) = receiver(3);
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            1000,
            0,
            &server.url("/ingest"),
            &server.url("/"),
            ", backoff_ms = 20",
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let r = received.lock().expect("lock");
    assert_eq!(sequence_numbers(&r), (0..1000).collect::<Vec<_>>());
    assert_eq!(r.fail_next, 0, "the receiver's 503s were retried");
    assert!(
        run.stderr.contains("503") && run.stderr.contains("retrying"),
        "{}",
        run.stderr
    );
    assert!(
        r.content_types.iter().all(|t| t == "application/x-ndjson"),
        "{:?}",
        r.content_types
    );
    // Keys name the topology, the sink, the task and the epoch.
    assert!(
        r.bodies
            .keys()
            .all(|k| k.starts_with("posts/post/0/") || k.starts_with("posts/post/1/")),
        "{:?}",
        r.bodies.keys().collect::<Vec<_>>()
    );
}

/// Random SIGKILLs, then a run to the end: every row arrives under one
/// key. `spool`: epochs wait in files of a granted directory instead of
/// the checkpoint; none is left once the run ends.
fn killed_at_random_moments(spool: bool) {
    let (server, received) = receiver(0);
    let seed = crash_seed("http-sink crash harness");
    let mut state = seed;
    let s = Scratch::new();
    eprintln!("(seed {seed}, spool {spool})");
    let (extra, node) = match spool {
        true => (r#", spool = "spool""#, r#"allow_write = ["spool"]"#),
        false => ("", ""),
    };
    // ~4 s of input: every kill lands mid-stream.
    let text = spooling_topology(
        4000,
        1000,
        &server.url("/ingest"),
        &server.url("/"),
        extra,
        node,
    );
    s.write("t.toml", &text);
    let args = ["run", "t.toml", "--no-progress"];
    kill_after_first_checkpoint(&s, &args, "posts");
    kill_at_random_moments(&s, &args, 4, (150, 500), &mut state, |_| {});
    let last = s.fvhost(&args);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    let r = received.lock().expect("lock");
    let seqs = sequence_numbers(&r);
    let distinct: std::collections::BTreeSet<u64> = seqs.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        4000,
        "every row arrived (seed {seed}); {} POSTs",
        r.posts
    );
    assert_eq!(
        seqs.len(),
        4000,
        "no row arrived under two keys (seed {seed}): {} rows in {} keys",
        seqs.len(),
        r.bodies.len()
    );
    if spool {
        let left: Vec<String> = s
            .files("spool")
            .into_iter()
            .filter(|f| f.ends_with(".pending"))
            .collect();
        assert!(left.is_empty(), "epochs left unsent: {left:?}");
    }
}

#[test]
fn a_sink_killed_at_random_moments_posts_every_row_once_per_key() {
    killed_at_random_moments(false);
}

#[test]
fn a_spooling_sink_killed_at_random_moments_posts_every_row_once_and_leaves_no_file() {
    killed_at_random_moments(true);
}

#[test]
fn an_arrow_body_decodes_to_the_rows() {
    let (server, received) = receiver(0);
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(
            300,
            0,
            &server.url("/ingest"),
            &server.url("/ingest"),
            r#", format = "arrow""#,
        ),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let r = received.lock().expect("lock");
    let mut seqs = Vec::new();
    for body in r.bodies.values() {
        let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body), None)
            .expect("an Arrow stream");
        for batch in reader {
            let batch = batch.expect("a batch");
            let column = batch
                .column_by_name("seq")
                .expect("seq")
                .as_any()
                .downcast_ref::<arrow::array::Int64Array>()
                .expect("int64")
                .clone();
            seqs.extend(column.values().iter().copied());
        }
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (0..300).collect::<Vec<_>>());
    assert!(
        r.content_types
            .iter()
            .all(|t| t == "application/vnd.apache.arrow.stream")
    );
}

#[test]
fn a_receiver_that_refuses_fails_the_run_naming_its_answer() {
    let server =
        HttpServer::start(|_| Reply::Answer("403 Forbidden", String::new(), b"bad token".to_vec()));
    let s = Scratch::new();
    s.write(
        "t.toml",
        &topology(10, 0, &server.url("/ingest"), &server.url("/"), ""),
    );
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains("answered 403") && run.stderr.contains("bad token"),
        "{}",
        run.stderr
    );
}
