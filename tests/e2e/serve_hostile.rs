//! A hostile tenant against one real `fvhost serve` on 127.0.0.1 (admin
//! and read tokens, an allowed root, one lent secret, a watcher limit of
//! two): every attack of the threat model in turn. Each is refused or
//! bounded with a clear message, the server stays up, and another
//! tenant's topology runs through all of it and ends with every row
//! exactly once.
//!
//! The outcomes are printed as a table (`--nocapture`).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::serve::{ADMIN, READER, Server, output_of, sequence, start_with_roles};
use crate::support::{Scratch, int_column, test_step_wasm};

/// What each attack met, for the table printed at the end.
struct Outcomes {
    rows: Vec<(String, String)>,
}

impl Outcomes {
    fn record(&mut self, attack: &str, status: u16, body: &str) {
        let answer = serde_json::from_str::<serde_json::Value>(body).ok();
        if let Some(state) = answer.as_ref().and_then(|v| v["state"].as_str()) {
            let name = answer.as_ref().and_then(|v| v["name"].as_str());
            self.rows.push((
                attack.to_string(),
                format!("{status}: `{}` {state}", name.unwrap_or("?")),
            ));
            return;
        }
        let reason = answer
            .and_then(|v| {
                let errors = v["errors"].as_array().map(|e| {
                    e.iter()
                        .filter_map(|e| e.as_str())
                        .collect::<Vec<_>>()
                        .join("; ")
                });
                errors
                    .filter(|e| !e.is_empty())
                    .or_else(|| v["error"].as_str().map(str::to_string))
            })
            .unwrap_or_else(|| body.trim().to_string());
        self.rows
            .push((attack.to_string(), format!("{status}: {reason}")));
    }
}

/// Open a tail stream as a browser would (token in the query); the
/// stream's first line is its HTTP status.
fn watch(server: &Server, path: &str) -> (String, TcpStream) {
    let mut stream = TcpStream::connect(&server.addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    write!(
        stream,
        "GET {path}?token={READER} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
        server.addr
    )
    .expect("request");
    let mut status = String::new();
    BufReader::new(stream.try_clone().expect("clone"))
        .read_line(&mut status)
        .expect("status line");
    (status, stream)
}

/// A file-source reading `path` under the grant `grant`.
fn reader(name: &str, grant: &str, path: &str) -> String {
    format!(
        r#"name = "{name}"
[sources.rows]
plugin = "file-source"
allow_read = ["{grant}"]
config = {{ path = "{path}", format = "csv", header = false, columns = ["n:int64", "s:utf8"] }}
[sinks.out]
input = "rows"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out" }}
"#
    )
}

/// `seq` of a stopped topology's output: 0, 1, 2, … each once.
fn assert_exactly_once(s: &Scratch, name: &str) -> usize {
    let seqs = int_column(&output_of(s, name), "seq");
    let expected: Vec<i64> = (0..seqs.len() as i64).collect();
    assert!(
        seqs == expected,
        "`{name}`'s output is not 0..{} each once (first rows: {:?})",
        seqs.len(),
        &seqs[..seqs.len().min(20)]
    );
    seqs.len()
}

#[test]
fn a_hostile_tenant_is_refused_or_bounded_and_another_tenant_runs_on_exactly_once() {
    let s = Scratch::new();
    let root = s.path().join("shared");
    std::fs::create_dir_all(root.join("data")).expect("root");
    std::fs::write(root.join("data/x.csv"), "1,a\n2,b\n3,c\n").expect("csv");
    std::os::unix::fs::symlink("/etc", root.join("evil")).expect("symlink");
    let outside = s.path().join("outside");
    std::fs::create_dir_all(&outside).expect("outside");
    std::fs::copy(test_step_wasm(), outside.join("step.wasm")).expect("a real plugin outside");
    let root_arg = root.display().to_string();
    let server = start_with_roles(
        &s,
        &[
            "--allow-root",
            &root_arg,
            "--allow-secret-env",
            "FV_LENT",
            "--max-watchers",
            "2",
        ],
    );
    let mut outcomes = Outcomes { rows: Vec::new() };

    // The other tenant: runs from before the first attack to after the last.
    let (status, body) = server.post(
        "/topologies",
        &sequence("bystander", 10_000_000, 2_000),
        Some(ADMIN),
    );
    assert_eq!(status, 201, "{body}");
    server.wait_until(
        || server.json("/topologies/bystander")["status"]["last_committed_epoch"].is_u64(),
        "the bystander's first checkpoint",
    );
    let committed_before = output_of(&s, "bystander").len();
    let still_up = |server: &Server, after: &str| {
        assert_eq!(
            server.get_as("/healthz", None).0,
            200,
            "the server is down after: {after}"
        );
        assert_eq!(
            server.state("bystander"),
            "RUNNING",
            "the bystander after: {after}"
        );
    };

    // --- submissions that try to reach outside -------------------------
    let escaped = s.path().join("escaped");
    let attacks: Vec<(&str, String, &str, &str)> = vec![
        (
            "read /etc/passwd: absolute grant",
            reader("r1", "/etc", "/etc/passwd"),
            "allow_read.0",
            "outside what this server allows",
        ),
        (
            "read /etc/passwd: `..` grant",
            reader("r2", "../../..", "../../../etc/passwd"),
            "allow_read.0",
            "climbs out",
        ),
        (
            "read /etc/passwd: symlink in an allowed root",
            reader(
                "r3",
                &format!("{root_arg}/evil"),
                &format!("{root_arg}/evil/passwd"),
            ),
            "allow_read.0",
            "through a symlink",
        ),
        (
            "write outside its directory",
            sequence("w1", 10, 0).replace(
                "allow_write = [\"out\"]",
                &format!("allow_write = [\"{}\"]", escaped.display()),
            ),
            "allow_write.0",
            "outside",
        ),
        (
            "load /bin/sh as a plugin",
            sequence("p1", 10, 0).replace("plugin = \"generator\"", "path = \"/bin/sh\""),
            "path",
            "outside",
        ),
        (
            "load a real plugin file from outside the roots",
            sequence("p2", 10, 0).replace(
                "[sinks.out]",
                &format!(
                    "[stages.s]\ninput = \"nums\"\npath = \"{}\"\n[sinks.out]",
                    outside.join("step.wasm").display()
                ),
            ),
            "path",
            "outside",
        ),
        (
            "read an environment variable not lent (allow_env)",
            sequence("e1", 10, 0).replace("[sinks.out]", "[sinks.out]\nallow_env = [\"HOME\"]"),
            "allow_env.0",
            "--allow-secret-env HOME",
        ),
        (
            "exfiltrate a secret through kafka_secrets",
            sequence("e2", 10, 0).replace(
                "[sources.nums]",
                "[sources.nums]\nallow_kafka = [\"127.0.0.1:9\"]\nkafka_secrets = { \"sasl.password\" = \"AWS_SECRET_ACCESS_KEY\" }",
            ),
            "kafka_secrets.sasl.password",
            "not one this server lends",
        ),
        (
            "parallelism = 1000000",
            sequence("big", 1_000_000, 2_000)
                .replace("[sources.nums]", "[sources.nums]\nparallelism = 1000000"),
            "",
            "--max-parallelism",
        ),
    ];
    for (attack, text, key, why) in &attacks {
        let started = Instant::now();
        let (status, body) = server.post("/topologies", text, Some(ADMIN));
        outcomes.record(attack, status, &body);
        assert_eq!(status, 400, "{attack}: {body}");
        assert!(
            body.contains(key) && body.contains(why),
            "{attack}: names `{key}` and says `{why}`: {body}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{attack}: refused at once"
        );
        still_up(&server, attack);
    }
    assert!(!escaped.exists(), "a refused grant created nothing");
    for name in ["r1", "r2", "r3", "w1", "p1", "p2", "e1", "e2", "big"] {
        assert!(
            !s.path().join("data/topologies").join(name).exists(),
            "the refused `{name}` left its directory behind"
        );
    }
    // What the operator allows still works: a file under an allowed root.
    let allowed = reader(
        "allowed",
        &format!("{root_arg}/data"),
        &format!("{root_arg}/data/x.csv"),
    );
    let (status, body) = server.post("/topologies", &allowed, Some(ADMIN));
    assert_eq!(status, 201, "{body}");
    server.wait_until(|| server.state("allowed") != "RUNNING", "the reader ends");
    assert_eq!(s.output_lines("data/topologies/allowed/out").len(), 3);

    // --- tokens ----------------------------------------------------------
    let tail = "/topologies/bystander/stages/nums/tail";
    for (attack, token, says) in [
        ("tail without a token", None, "needs a token"),
        (
            "tail with a guessed token",
            Some("guess"),
            "the token is wrong",
        ),
    ] {
        let (status, body) = server.get_as(tail, token);
        outcomes.record(attack, status, &body);
        assert_eq!(status, 401, "{attack}: {body}");
        assert!(body.contains(says), "{attack}: {body}");
    }
    for (attack, method, path) in [
        ("submit with the read token", "POST", "/topologies"),
        (
            "stop with the read token",
            "POST",
            "/topologies/bystander/stop",
        ),
        (
            "start with the read token",
            "POST",
            "/topologies/bystander/start",
        ),
        (
            "delete with the read token",
            "DELETE",
            "/topologies/bystander?purge=true",
        ),
    ] {
        let text = sequence("sneaky", 10, 0);
        let (status, body) = server.request(
            method,
            path,
            text.as_bytes(),
            "application/toml",
            Some(READER),
        );
        outcomes.record(attack, status, &body);
        assert_eq!(status, 403, "{attack}: {body}");
        assert!(body.contains("needs the admin token"), "{attack}: {body}");
        still_up(&server, attack);
    }
    assert!(!s.path().join("data/topologies/sneaky").exists());

    // --- watchers over the limit ------------------------------------------
    let (first, _w1) = watch(&server, tail);
    let (second, _w2) = watch(&server, tail);
    assert!(
        first.contains(" 200 ") && second.contains(" 200 "),
        "{first}{second}"
    );
    let (status, body) = server.get_as(tail, Some(READER));
    outcomes.record("a third watcher (limit 2)", status, &body);
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--max-watchers"), "{body}");
    drop((_w1, _w2));
    still_up(&server, "watchers over the limit");

    // --- races -----------------------------------------------------------
    let twin = sequence("twin", 1_000_000, 2_000);
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| server.post("/topologies", &twin, Some(ADMIN))))
            .collect();
        calls.into_iter().map(|c| c.join().expect("join")).collect()
    });
    let mut statuses: Vec<u16> = answers.iter().map(|(s, _)| *s).collect();
    statuses.sort_unstable();
    for (status, body) in &answers {
        outcomes.record("two concurrent submits of one name", *status, body);
    }
    assert_eq!(statuses, vec![201, 409], "{answers:?}");
    assert_eq!(server.state("twin"), "RUNNING");

    // A start during a stop waits for the stop's final checkpoint, then
    // resumes from it: the output stays exactly once.
    server.wait_until(
        || server.json("/topologies/twin")["status"]["last_committed_epoch"].is_u64(),
        "the twin's first checkpoint",
    );
    let (stopped, started) = std::thread::scope(|scope| {
        let stop = scope.spawn(|| {
            let answer = server.post("/topologies/twin/stop", "", Some(ADMIN));
            (answer, Instant::now())
        });
        std::thread::sleep(Duration::from_millis(30));
        let start = scope.spawn(|| {
            let answer = server.post("/topologies/twin/start", "", Some(ADMIN));
            (answer, Instant::now())
        });
        (stop.join().expect("stop"), start.join().expect("start"))
    });
    outcomes.record("start during a stop", started.0.0, &started.0.1);
    assert_eq!(stopped.0.0, 200, "{}", stopped.0.1);
    assert!(stopped.0.1.contains("\"STOPPED\""), "{}", stopped.0.1);
    assert_eq!(started.0.0, 200, "the start waited: {}", started.0.1);
    assert!(started.0.1.contains("\"RUNNING\""), "{}", started.0.1);
    assert!(started.1 >= stopped.1, "the start answered before the stop");
    assert_eq!(server.state("twin"), "RUNNING");
    assert_eq!(server.post("/topologies/twin/stop", "", Some(ADMIN)).0, 200);
    let twin_rows = assert_exactly_once(&s, "twin");
    assert!(twin_rows > 0, "the twin wrote nothing");

    // --- the other tenant: up throughout, and whole ------------------------
    still_up(&server, "every attack");
    let (status, body) = server.post("/topologies/bystander/stop", "", Some(ADMIN));
    assert_eq!(status, 200, "{body}");
    let rows = assert_exactly_once(&s, "bystander");
    assert!(
        rows > committed_before,
        "the bystander produced nothing during the attacks ({rows} rows)"
    );

    eprintln!("\n| attack | answer |\n|---|---|");
    for (attack, outcome) in &outcomes.rows {
        eprintln!("| {attack} | {} |", outcome.replace('|', "\\|"));
    }
    eprintln!("| (the other tenant) | RUNNING throughout; {rows} rows, each once |");
}
