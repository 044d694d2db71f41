//! `http-source` against a loopback API that pages items by cursor
//! (`?cursor=<last id>`): every item arrives once into `file-sink`, also
//! across SIGKILLs of fvhost at random moments; an object that does not
//! decode is dead-lettered, the rest flow on.

use std::time::Duration;

use crate::http_server::{HttpServer, Reply};
use crate::support::{
    Scratch, assert_exit, crash_seed, int_column, kill_after_first_checkpoint,
    kill_at_random_moments,
};

/// Items 1..=`items`, 10 per answer after `?cursor=<id>`, each answer
/// after `delay`; item `bad` (if any) has a name that is not a string.
fn api(items: i64, delay: Duration, bad: Option<i64>) -> HttpServer {
    HttpServer::start(move |request| {
        let after: i64 = request
            .path
            .split_once("cursor=")
            .and_then(|(_, c)| c.parse().ok())
            .unwrap_or(0);
        std::thread::sleep(delay);
        let body: String = (after + 1..=items.min(after + 10))
            .map(|id| match Some(id) == bad {
                true => format!("{{\"id\":{id},\"name\":{{\"not\":\"text\"}}}}\n"),
                false => format!("{{\"id\":{id},\"name\":\"item {id}\"}}\n"),
            })
            .collect();
        Reply::Answer("200 OK", String::new(), body.into_bytes())
    })
}

fn topology(server: &HttpServer, extra: &str) -> String {
    format!(
        r#"
name = "items"
dead_letter = "rejects"
batch_size = 4

[checkpoint]
interval = "100ms"

[sources.items]
plugin = "http-source"
allow_http = ["{prefix}"]
config = {{ url = "{url}", columns = ["id:int64", "name:utf8"], cursor_field = "id", stop_when_empty = true, interval_ms = 10{extra} }}

[sinks.out]
input = "items"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}

[sinks.rejects]
plugin = "file-sink"
allow_write = ["rejects"]
config = {{ path = "rejects" }}
"#,
        prefix = server.url("/"),
        url = server.url("/items"),
    )
}

#[test]
fn every_item_of_a_paged_api_arrives_once_and_a_bad_one_is_dead_lettered() {
    let server = api(95, Duration::ZERO, Some(42));
    let s = Scratch::new();
    s.write("t.toml", &topology(&server, ""));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 0);
    let mut ids = int_column(&s.output_lines("out"), "id");
    ids.sort_unstable();
    let expected: Vec<i64> = (1..=95).filter(|id| *id != 42).collect();
    assert_eq!(ids, expected);
    let rejects = s.output_lines("rejects");
    assert!(
        rejects.len() == 1 && rejects[0].contains("\\\"id\\\":42"),
        "{rejects:?}"
    );
}

#[test]
fn a_source_killed_at_random_moments_reads_every_item_once() {
    let server = api(600, Duration::from_millis(25), None);
    let seed = crash_seed("http-source crash harness");
    let mut state = seed;
    let s = Scratch::new();
    eprintln!("(seed {seed})");
    s.write("t.toml", &topology(&server, ""));
    let args = ["run", "t.toml", "--no-progress"];
    kill_after_first_checkpoint(&s, &args, "items");
    kill_at_random_moments(&s, &args, 3, (100, 300), &mut state, |_| {});
    let last = s.fvhost(&args);
    assert_exit(&last, 0);
    assert!(
        last.stderr.contains("resumed after epoch"),
        "{}",
        last.stderr
    );
    let mut ids = int_column(&s.output_lines("out"), "id");
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=600).collect::<Vec<i64>>(),
        "every item once (seed {seed})"
    );
}

#[test]
fn an_api_that_keeps_failing_fails_the_source_naming_its_answer() {
    let server = HttpServer::start(|_| {
        Reply::Answer(
            "500 Internal Server Error",
            String::new(),
            b"db down".to_vec(),
        )
    });
    let s = Scratch::new();
    s.write("t.toml", &topology(&server, ", retries = 2"));
    let run = s.fvhost(&["run", "t.toml", "--no-progress"]);
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains("answered 500: db down")
            && run.stderr.contains("3 failed requests in a row"),
        "{}",
        run.stderr
    );
}
