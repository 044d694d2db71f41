//! `fvhost serve`: the control plane over real HTTP on 127.0.0.1 — submit,
//! watch, stop, start, delete; bad submissions refused with nothing left
//! behind; one failing topology beside a running one; a server killed and
//! restarted resumes its topologies with no row lost or repeated.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::time::{Duration, Instant};

use crate::support::{Scratch, assert_exit, int_column};

const TOKEN: &str = "s3cret-token";

/// A running `fvhost serve` and its address.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) addr: String,
    /// The token its reads (`get`, `json`) carry.
    reader: Option<String>,
    /// Its stderr, line by line.
    log: ServerLog,
}

/// The log lines a server printed on stderr so far.
pub(crate) type ServerLog = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Start `fvhost serve` on a free loopback port with `env` and extra
/// `args`: the child, the URL it printed (`http://…` or `https://…`) and
/// its stderr, drained on a thread so it never blocks on a full pipe.
pub(crate) fn spawn_server(
    s: &Scratch,
    env: &[(&str, &str)],
    args: &[&str],
) -> (Child, String, ServerLog) {
    let mut argv = vec!["serve", "--bind", "127.0.0.1:0", "--data-dir", "data"];
    argv.extend(args);
    let mut child = s.spawn_fvhost_env(&argv, env);
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let log = ServerLog::default();
    let kept = std::sync::Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
            if let Ok(mut log) = kept.lock() {
                log.push(line);
            }
        }
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the server printed its address");
    (child, url, log)
}

/// SIGTERM `child` and wait up to 60 s for it to exit (`None`: it did not).
pub(crate) fn terminate(child: &mut Child) -> Option<std::process::ExitStatus> {
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(killed.success());
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(60) {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

impl Server {
    /// A server whose admin token is `token` (reads carry it too).
    pub(crate) fn start(s: &Scratch, token: Option<&str>) -> Server {
        let env: Vec<(&str, &str)> = token.map(|t| ("FVHOST_TOKEN", t)).into_iter().collect();
        Server::start_with(s, &env, &[], token)
    }

    /// A server with `env` and extra `args`, whose reads carry `reader`.
    pub(crate) fn start_with(
        s: &Scratch,
        env: &[(&str, &str)],
        args: &[&str],
        reader: Option<&str>,
    ) -> Server {
        let (child, url, log) = spawn_server(s, env, args);
        let addr = url
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("an http:// address, not {url}"))
            .to_string();
        let server = Server {
            child,
            addr,
            reader: reader.map(str::to_string),
            log,
        };
        server.wait_until(|| server.get("/readyz").0 == 200, "ready");
        server
    }

    /// What the server printed on stderr so far.
    pub(crate) fn log(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    pub(crate) fn request(
        &self,
        method: &str,
        path: &str,
        body: &[u8],
        content_type: &str,
        token: Option<&str>,
    ) -> (u16, String) {
        let mut stream = TcpStream::connect(&self.addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .expect("timeout");
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{auth}\r\n",
            self.addr,
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("write head");
        // A refused oversized body may close the connection early.
        let _ = stream.write_all(body);
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response);
        let text = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {text:?}"));
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_string()
        };
        (status, body)
    }

    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        self.get_as(path, self.reader.as_deref())
    }

    pub(crate) fn get_as(&self, path: &str, token: Option<&str>) -> (u16, String) {
        self.request("GET", path, b"", "text/plain", token)
    }

    pub(crate) fn post(&self, path: &str, body: &str, token: Option<&str>) -> (u16, String) {
        self.request("POST", path, body.as_bytes(), "application/toml", token)
    }

    pub(crate) fn json(&self, path: &str) -> serde_json::Value {
        let (status, body) = self.get(path);
        assert_eq!(status, 200, "GET {path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
    }

    pub(crate) fn state(&self, name: &str) -> String {
        self.json(&format!("/topologies/{name}"))["state"]
            .as_str()
            .expect("state")
            .to_string()
    }

    pub(crate) fn wait_until(&self, mut done: impl FnMut() -> bool, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(90);
        while !done() {
            assert!(Instant::now() < deadline, "timed out waiting for: {what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || tail.len() < n {
            break;
        }
        out.push_str(&tail[..n]);
        rest = tail[n..].trim_start_matches("\r\n");
    }
    out
}

/// A sequence of `events` rows at `rate` per second into JSON-lines files.
pub(crate) fn sequence(name: &str, events: u32, rate: u32) -> String {
    format!(
        r#"name = "{name}"
[checkpoint]
interval = "200ms"
[sources.nums]
plugin = "generator"
config = {{ kind = "sequence", events = {events}, rate = {rate} }}
[sinks.out]
input = "nums"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out", format = "jsonl" }}
"#
    )
}

/// A slow sequence through a SQL stage `evens` into files.
fn evens(name: &str) -> String {
    sequence(name, 1_000_000, 2_000)
        .replace(
            "[sinks.out]",
            "[stages.evens]\ninput = \"nums\"\nsql = \"SELECT seq FROM nums WHERE seq % 2 = 0\"\n[sinks.out]",
        )
        .replace(
            "input = \"nums\"\nplugin = \"file-sink\"",
            "input = \"evens\"\nplugin = \"file-sink\"",
        )
}

pub(crate) fn output_of(s: &Scratch, name: &str) -> Vec<String> {
    s.output_lines(&format!("data/topologies/{name}/out"))
}

#[test]
fn submit_watch_stop_start_and_delete_over_http() {
    let s = Scratch::new();
    let server = Server::start(&s, Some(TOKEN));
    let topology = sequence("counter", 12_000, 4_000);
    let (status, body) = server.post("/topologies", &topology, None);
    assert_eq!(status, 401, "no token: {body}");
    let (status, body) = server.post("/topologies", &topology, Some("wrong"));
    assert_eq!(status, 401, "wrong token: {body}");
    let (status, body) = server.post("/topologies", &topology, Some(TOKEN));
    assert_eq!(status, 201, "{body}");
    let created: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(created["state"], "RUNNING", "{body}");
    server.wait_until(
        || {
            let v = server.json("/topologies/counter");
            v["status"]["stages"][0]["rows_out"].as_u64().unwrap_or(0) > 0
        },
        "rows flowing",
    );
    let listed = server.json("/topologies");
    assert_eq!(listed[0]["name"], "counter", "{listed}");

    let (status, body) = server.post("/topologies/counter/stop", "", Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    let stopped: serde_json::Value = serde_json::from_str(&body).expect("json");
    assert_eq!(stopped["state"], "STOPPED", "{body}");
    assert!(
        stopped["status"]["last_committed_epoch"].as_u64().is_some(),
        "a final epoch: {body}"
    );
    let partial = output_of(&s, "counter").len();
    assert!(partial < 12_000, "stopped before the end ({partial} rows)");

    let (status, body) = server.post("/topologies/counter/start", "", Some(TOKEN));
    assert_eq!(status, 200, "{body}");
    server.wait_until(|| server.state("counter") == "STOPPED", "the run drains");
    // Resumed from the stop's checkpoint: every row exactly once.
    assert_eq!(
        int_column(&output_of(&s, "counter"), "seq"),
        (0..12_000).collect::<Vec<i64>>()
    );
    let (_, metrics) = server.get("/metrics");
    assert!(
        metrics.contains(
            "fvhost_stage_rows_out_total{topology=\"counter\",stage=\"out\",kind=\"sink\"}"
        ),
        "{metrics}"
    );
    assert!(
        metrics.contains("fvhost_topology_up{topology=\"counter\"} 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "fvhost_stage_batch_seconds_bucket{topology=\"counter\",stage=\"out\",le=\"+Inf\"}"
        ),
        "a batch-latency histogram per stage: {metrics}"
    );
    for per_plugin in [
        "fvhost_plugin_calls_total{plugin=\"generator\"}",
        "fvhost_plugin_cpu_seconds_total{plugin=\"file-sink\"}",
        "fvhost_plugin_failures_total{plugin=\"generator\"} 0",
    ] {
        assert!(metrics.contains(per_plugin), "{per_plugin} in {metrics}");
    }

    let (status, _) = server.request(
        "DELETE",
        "/topologies/counter?purge=true",
        b"",
        "text/plain",
        None,
    );
    assert_eq!(status, 401);
    let (status, body) = server.request(
        "DELETE",
        "/topologies/counter?purge=true",
        b"",
        "text/plain",
        Some(TOKEN),
    );
    assert_eq!(status, 204, "{body}");
    assert_eq!(server.get("/topologies/counter").0, 404);
    assert!(!s.path().join("data/topologies/counter").exists());
}

#[test]
fn bad_submissions_get_their_status_and_reason_and_leave_nothing_behind() {
    let s = Scratch::new();
    let server = Server::start(&s, None);
    let (status, body) = server.post(
        "/topologies",
        "name = \"x\"\n[sources.a\nplugin = 1\n",
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("topology.toml:2"), "names the line: {body}");
    let unknown = sequence("unknown", 10, 0).replace("\"file-sink\"", "\"no-such-sink\"");
    let (status, body) = server.post("/topologies", &unknown, None);
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("`sinks.out.plugin`: unknown plugin `no-such-sink`"),
        "{body}"
    );
    let huge = format!("# {}\n{}", "x".repeat(2 << 20), sequence("huge", 10, 0));
    let (status, body) = server.post("/topologies", &huge, None);
    assert_eq!(status, 413, "{body}");
    let (status, body) = server.request(
        "POST",
        "/topologies",
        b"{\"tom\": 1}",
        "application/json",
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("{\\\"toml\\\""), "{body}");
    // JSON with the TOML works.
    let json = serde_json::json!({ "toml": sequence("from_json", 10, 0) }).to_string();
    let (status, body) = server.request(
        "POST",
        "/topologies",
        json.as_bytes(),
        "application/json",
        None,
    );
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.post("/topologies", &sequence("from_json", 10, 0), None);
    assert_eq!(status, 409, "a second one of the same name: {body}");
    let names: Vec<String> = std::fs::read_dir(s.path().join("data/topologies"))
        .expect("topologies dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        vec!["from_json".to_string()],
        "nothing else left behind"
    );
    assert_eq!(server.get("/healthz").0, 200);
    let openapi = server.json("/openapi.json");
    for path in [
        "/topologies",
        "/topologies/{name}",
        "/topologies/{name}/stop",
        "/topologies/{name}/start",
        "/metrics",
        "/healthz",
        "/readyz",
    ] {
        assert!(openapi["paths"][path].is_object(), "{path} documented");
    }
}

#[test]
fn a_failing_topology_fails_alone() {
    let s = Scratch::new();
    let server = Server::start(&s, None);
    let (status, body) = server.post("/topologies", &sequence("steady", 1_000_000, 2_000), None);
    assert_eq!(status, 201, "{body}");
    // Rows the CSV source cannot parse fail its run (bad_rows = "fail");
    // the query reads the bad column (an unread one is not parsed).
    let broken = r#"name = "broken"
[sources.orders]
plugin = "file-source"
allow_read = ["data"]
config = { path = "data/orders.csv", columns = ["id:int64", "amount:float64"] }
[stages.big]
input = "orders"
sql = "SELECT id FROM orders WHERE amount > 1"
[sinks.out]
input = "big"
plugin = "blackhole-sink"
"#;
    s.write(
        "data/topologies/broken/data/orders.csv",
        "id,amount\n1,2.5\n2,not-a-number\n",
    );
    let (status, body) = server.post("/topologies", broken, None);
    assert_eq!(status, 201, "{body}");
    server.wait_until(
        || server.state("broken") == "FAILED",
        "the broken run fails",
    );
    let failed = server.json("/topologies/broken");
    let error = failed["status"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("orders.csv"),
        "the error names the file: {failed}"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(server.state("steady"), "RUNNING", "the other one runs on");
    let (status, _) = server.post("/topologies/steady/stop", "", None);
    assert_eq!(status, 200);
}

#[cfg(unix)]
#[test]
fn topologies_resume_when_a_killed_server_starts_again() {
    let s = Scratch::new();
    let first = Server::start(&s, None);
    let (status, body) = first.post("/topologies", &sequence("durable", 16_000, 4_000), None);
    assert_eq!(status, 201, "{body}");
    first.wait_until(
        || {
            first.json("/topologies/durable")["status"]["last_committed_epoch"]
                .as_u64()
                .is_some_and(|e| e >= 2)
        },
        "a few epochs committed",
    );
    drop(first); // SIGKILL: no final checkpoint.
    let second = Server::start(&s, None);
    assert_eq!(second.state("durable"), "RUNNING", "resumed at start");
    second.wait_until(|| second.state("durable") == "STOPPED", "the run drains");
    assert_eq!(
        int_column(&output_of(&s, "durable"), "seq"),
        (0..16_000).collect::<Vec<i64>>()
    );
}

#[test]
fn serving_beyond_loopback_needs_a_token() {
    let s = Scratch::new();
    let run = s.fvhost(&["serve", "--bind", "0.0.0.0:0", "--data-dir", "data"]);
    assert_exit(&run, 2);
    assert!(run.stderr.contains("without a token"), "{}", run.stderr);
}

/// Open `GET path` as an event stream and collect `data:` JSON rows until
/// `want` arrived.
fn tail(addr: &str, path: &str, want: usize) -> Vec<serde_json::Value> {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
    )
    .expect("request");
    let mut rows = Vec::new();
    let mut lines = BufReader::new(stream).lines();
    let status = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(status.contains(" 200 "), "{status}");
    for line in lines.map_while(Result::ok) {
        if let Some(data) = line.strip_prefix("data: ")
            && let Ok(row) = serde_json::from_str(data)
        {
            rows.push(row);
            if rows.len() >= want {
                break;
            }
        }
    }
    rows
}

#[test]
fn several_watchers_tail_the_rows_leaving_a_stage_live() {
    let s = Scratch::new();
    let server = Server::start(&s, None);
    let topology = evens("tailed");
    let (status, body) = server.post("/topologies", &topology, None);
    assert_eq!(status, 201, "{body}");
    let addr = server.addr.clone();
    let path = "/topologies/tailed/stages/evens/tail";
    let other = {
        let addr = addr.clone();
        std::thread::spawn(move || tail(&addr, path, 40))
    };
    let rows = tail(&addr, path, 40);
    let other = other.join().expect("second watcher");
    for watched in [&rows, &other] {
        assert_eq!(watched.len(), 40);
        let seqs: Vec<i64> = watched
            .iter()
            .map(|r| r["seq"].as_i64().expect("seq"))
            .collect();
        assert!(
            seqs.iter().all(|s| s % 2 == 0),
            "only the stage's rows: {seqs:?}"
        );
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in order: {seqs:?}");
    }
    assert_eq!(server.get("/topologies/tailed/stages/nope/tail").0, 404);
    let (status, _) = server.post("/topologies/tailed/stop", "", None);
    assert_eq!(status, 200);
    assert_eq!(
        server.get(path).0,
        409,
        "a stopped topology has nothing to tail"
    );
}

/// The evens of a slow sequence, as SQL statements.
fn evens_sql(name: &str, events: u32) -> String {
    format!(
        "SET 'name' = '{name}';
SET 'checkpoint.interval' = '200ms';
CREATE TABLE nums (seq BIGINT)
  WITH ('connector' = 'generator', 'config.kind' = 'sequence', 'config.events' = {events},
        'config.rate' = 4000);
CREATE TABLE out WITH ('connector' = 'file-sink', 'allow_write' = 'out', 'config.path' = 'out',
  'config.format' = 'jsonl');
INSERT INTO out SELECT seq FROM nums WHERE seq % 2 = 0;
"
    )
}

#[test]
fn a_sql_topology_is_hosted_like_a_toml_one() {
    // `fvhost submit p.sql` sends the statements as SQL; the server keeps
    // them as `topology.sql`, runs them, resumes them after a SIGKILL of
    // the server (every row once), and reports mistakes at their line and
    // column, leaving nothing behind.
    let s = Scratch::new();
    let server = Server::start(&s, None);
    let url = format!("http://{}", server.addr);
    s.write("p.sql", &evens_sql("evens_sql", 16_000));
    let submitted = s.fvhost_env(&["submit", "p.sql"], &[("FVHOST_SERVER", url.as_str())]);
    assert_exit(&submitted, 0);
    assert!(
        submitted.stdout.contains("\"RUNNING\""),
        "{}",
        submitted.stdout
    );
    assert!(
        s.path()
            .join("data/topologies/evens_sql/topology.sql")
            .is_file()
    );
    server.wait_until(
        || {
            server.json("/topologies/evens_sql")["status"]["last_committed_epoch"]
                .as_u64()
                .is_some_and(|e| e >= 2)
        },
        "a few epochs committed",
    );
    drop(server); // SIGKILL: no final checkpoint.
    let second = Server::start(&s, None);
    assert_eq!(second.state("evens_sql"), "RUNNING", "resumed at start");
    second.wait_until(|| second.state("evens_sql") == "STOPPED", "the run drains");
    assert_eq!(
        int_column(&output_of(&s, "evens_sql"), "seq"),
        (0..16_000).step_by(2).collect::<Vec<i64>>()
    );
    // A mistake at its line and column; nothing left behind.
    let bad = evens_sql("bad_sql", 10).replace("WHERE seq % 2 = 0", "WHERE nope = 0");
    let (status, body) = second.request(
        "POST",
        "/topologies",
        bad.as_bytes(),
        "application/sql",
        None,
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("topology.sql:8:") && body.contains("nope"),
        "{body}"
    );
    let json = serde_json::json!({ "sql": evens_sql("from_json_sql", 10) }).to_string();
    let (status, body) = second.request(
        "POST",
        "/topologies",
        json.as_bytes(),
        "application/json",
        None,
    );
    assert_eq!(status, 201, "{body}");
    let both = serde_json::json!({ "sql": "", "toml": "" }).to_string();
    let (status, body) = second.request(
        "POST",
        "/topologies",
        both.as_bytes(),
        "application/json",
        None,
    );
    assert_eq!(status, 400, "{body}");
    let mut names: Vec<String> = std::fs::read_dir(s.path().join("data/topologies"))
        .expect("topologies dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["evens_sql", "from_json_sql"],
        "nothing else left behind"
    );
}

#[test]
fn the_command_line_drives_a_server() {
    let s = Scratch::new();
    let server = Server::start(&s, Some(TOKEN));
    let url = format!("http://{}", server.addr);
    let env = [("FVHOST_SERVER", url.as_str()), ("FVHOST_TOKEN", TOKEN)];
    s.write("t.toml", &sequence("cli", 1_000_000, 2_000));
    let submitted = s.fvhost_env(&["submit", "t.toml"], &env);
    assert_exit(&submitted, 0);
    assert!(
        submitted.stdout.contains("\"RUNNING\""),
        "{}",
        submitted.stdout
    );
    let listed = s.fvhost_env(&["ls"], &env);
    assert_exit(&listed, 0);
    assert!(
        listed
            .stdout
            .lines()
            .any(|l| l.starts_with("cli") && l.contains("RUNNING")),
        "{}",
        listed.stdout
    );
    let tailed = s.fvhost_env(&["tail", "cli", "nums", "--limit", "5"], &env);
    assert_exit(&tailed, 0);
    let rows: Vec<&str> = tailed.stdout.lines().collect();
    assert_eq!(rows.len(), 5, "{}", tailed.stdout);
    assert!(rows.iter().all(|r| r.starts_with("{\"seq\":")), "{rows:?}");
    let refused = s.fvhost_env(&["stop", "cli"], &[("FVHOST_SERVER", url.as_str())]);
    assert_exit(&refused, 2);
    assert!(refused.stderr.contains("HTTP 401"), "{}", refused.stderr);
    assert_exit(&s.fvhost_env(&["stop", "cli"], &env), 0);
    let status = s.fvhost_env(&["status", "cli", "--server", &url], &env);
    assert_exit(&status, 0);
    assert!(status.stdout.contains("\"STOPPED\""), "{}", status.stdout);
    assert_exit(&s.fvhost_env(&["delete", "cli", "--purge"], &env), 0);
    let gone = s.fvhost_env(&["status", "cli", "--server", &url], &env);
    assert_exit(&gone, 2);
    let bad = s.write("bad.toml", "[sources.x]\nplugin = \"nope\"\n");
    let invalid = s.fvhost_env(&["submit", bad.to_str().expect("utf-8")], &env);
    assert_exit(&invalid, 2);
    assert!(
        invalid.stderr.contains("unknown plugin `nope`"),
        "{}",
        invalid.stderr
    );
}

/// Debian's Chromium (`.ci/run` installs it).
const CHROMIUM: &str = "/usr/bin/chromium";

/// The server's tokens in the role tests.
pub(crate) const ADMIN: &str = "admin-7f3e";
pub(crate) const READER: &str = "reader-91c2";

pub(crate) fn start_with_roles(s: &Scratch, args: &[&str]) -> Server {
    Server::start_with(
        s,
        &[("FVHOST_TOKEN", ADMIN), ("FVHOST_READ_TOKEN", READER)],
        args,
        Some(READER),
    )
}

/// With tokens, every route but the health checks needs one; the read
/// token reads (header or `?token=`), only the admin token changes things.
#[test]
fn reads_need_a_token_and_the_read_token_cannot_change_anything() {
    let s = Scratch::new();
    let server = start_with_roles(&s, &[]);
    for path in ["/healthz", "/readyz"] {
        assert_eq!(server.get_as(path, None).0, 200, "{path} is open");
    }
    for path in [
        "/topologies",
        "/metrics",
        "/",
        "/openapi.json",
        "/topologies/x/stages/y/tail",
    ] {
        let (status, body) = server.get_as(path, None);
        assert_eq!(status, 401, "{path} without a token: {body}");
        assert!(body.contains("needs a token"), "{body}");
        assert_eq!(
            server.get_as(path, Some("guess")).0,
            401,
            "{path}, wrong token"
        );
    }
    assert_eq!(server.get_as("/topologies", Some(READER)).0, 200);
    assert_eq!(server.get_as("/topologies", Some(ADMIN)).0, 200);
    assert_eq!(
        server
            .get_as(&format!("/topologies?token={READER}"), None)
            .0,
        200,
        "a browser's token in the query"
    );
    assert_eq!(server.get_as("/metrics", Some(READER)).0, 200);

    let topology = sequence("guarded", 1_000_000, 2_000);
    let (status, body) = server.post("/topologies", &topology, Some(READER));
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("needs the admin token"), "{body}");
    let (status, body) = server.post(&format!("/topologies?token={ADMIN}"), &topology, None);
    assert_eq!(status, 401, "no query token for a POST: {body}");
    let (status, body) = server.post("/topologies", &topology, Some(ADMIN));
    assert_eq!(status, 201, "{body}");
    assert_eq!(
        server.post("/topologies/guarded/stop", "", Some(READER)).0,
        403
    );
    assert_eq!(
        server.state("guarded"),
        "RUNNING",
        "the read token stopped nothing"
    );
    assert_eq!(
        server.post("/topologies/guarded/stop", "", Some(ADMIN)).0,
        200
    );
    assert_eq!(server.state("guarded"), "STOPPED");
}

#[test]
fn metrics_are_opened_to_scrapers_only_by_the_flag() {
    let s = Scratch::new();
    let server = start_with_roles(&s, &["--metrics-open"]);
    let (status, body) = server.get_as("/metrics", None);
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("# TYPE"), "{body}");
    assert_eq!(
        server.get_as("/topologies", None).0,
        401,
        "nothing else opens"
    );
}

/// SIGTERM with a watcher connected: the tail stream ends, every topology
/// stops with a final checkpoint (printed), and the server exits.
#[cfg(unix)]
#[test]
fn sigterm_ends_tail_streams_and_stops_every_topology_with_a_final_checkpoint() {
    let s = Scratch::new();
    let mut server = Server::start(&s, None);
    let (status, body) = server.post("/topologies", &sequence("watched", 1_000_000, 2_000), None);
    assert_eq!(status, 201, "{body}");
    server.wait_until(
        || server.json("/topologies/watched")["status"]["last_committed_epoch"].is_u64(),
        "a first checkpoint",
    );
    // A watcher that never hangs up.
    let mut watcher = TcpStream::connect(&server.addr).expect("connect");
    write!(
        watcher,
        "GET /topologies/watched/stages/nums/tail HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    )
    .expect("request");
    let mut first = [0u8; 64];
    let n = watcher.read(&mut first).expect("the stream started");
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));

    let status = terminate(&mut server.child)
        .unwrap_or_else(|| panic!("no exit with a watcher connected: {}", server.log()));
    assert!(status.success(), "{status:?}: {}", server.log());
    // The watcher's stream ended rather than being cut off mid-event.
    watcher
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut rest = Vec::new();
    let _ = watcher.read_to_end(&mut rest);
    std::thread::sleep(Duration::from_millis(200));
    let log = server.log();
    assert!(
        log.contains("`watched` stopped with a final checkpoint, epoch"),
        "{log}"
    );
}

/// A fan-out (`nums` to `evens` and `odds`) and a fan-in (both into the
/// window `per_second`) over generator rows whose event times start on
/// 2024-01-01: years behind the wall clock.
const FANNED: &str = r#"name = "fanned"
[checkpoint]
interval = "300ms"
[sources.nums]
plugin = "generator"
config = { kind = "sequence", rate = 2000, first_event_rate = 2000 }
watermark = { column = "ts" }
[stages.evens]
input = "nums"
sql = "SELECT seq % 2 AS parity, ts FROM nums WHERE seq % 2 = 0"
[stages.odds]
input = "nums"
sql = "SELECT seq % 2 AS parity, ts FROM nums WHERE seq % 2 = 1"
[stages.per_second]
input = ["evens", "odds"]
window = { time = "ts", size = "1s" }
key = ["parity"]
aggregates = ["count(*) AS n"]
parallelism = 2
[sinks.out]
input = "per_second"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out", format = "jsonl" }
"#;

/// Rows whose event times start now and keep pace with the wall clock.
fn live(now_ms: u128) -> String {
    format!(
        r#"name = "live"
[sources.ticks]
plugin = "generator"
config = {{ kind = "sequence", rate = 500, first_event_rate = 500, base_time = {now_ms} }}
watermark = {{ column = "ts" }}
[sinks.out]
input = "ticks"
plugin = "file-sink"
allow_write = ["out"]
config = {{ path = "out", format = "jsonl" }}
"#
    )
}

/// The UTC date `days` after 1970-01-01, as YYYY-MM-DD.
fn utc_date(days: i64) -> String {
    let (y, m, d) = crate::support::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The part of the page's DOM that shows topology `name` (topologies are
/// listed by name).
fn section<'a>(dom: &'a str, name: &str, next: Option<&str>) -> &'a str {
    let start = dom
        .find(&format!("data-topology=\"{name}\""))
        .unwrap_or_else(|| panic!("the page shows `{name}`:\n{dom}"));
    let end = next
        .and_then(|n| dom.find(&format!("data-topology=\"{n}\"")))
        .unwrap_or(dom.len());
    &dom[start..end]
}

/// Every value of attribute `attr` in `html`.
fn attr_values<'a>(html: &'a str, attr: &str) -> Vec<&'a str> {
    let key = format!("{attr}=\"");
    html.match_indices(&key)
        .filter_map(|(i, _)| html[i + key.len()..].split('"').next())
        .collect()
}

#[test]
fn the_status_page_draws_each_topology_as_its_dag_in_a_real_browser() {
    assert_eq!(utc_date(19_723), "2024-01-01");
    let s = Scratch::new();
    // Behind tokens: the page and its calls carry the read token.
    let server = start_with_roles(&s, &[]);
    let (status, body) = server.post("/topologies", FANNED, Some(ADMIN));
    assert_eq!(status, 201, "{body}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis();
    let (status, body) = server.post("/topologies", &live(now_ms), Some(ADMIN));
    assert_eq!(status, 201, "{body}");
    // Enough history for the page to draw: checkpoints, rate samples,
    // watermarks through the fan-in, every edge gauged.
    server.wait_until(
        || {
            let f = &server.json("/topologies/fanned")["status"];
            let stage = |name: &str| {
                f["stages"]
                    .as_array()
                    .and_then(|s| s.iter().find(|s| s["name"] == name))
                    .cloned()
                    .unwrap_or_default()
            };
            let l = &server.json("/topologies/live")["status"];
            f["checkpoints"].as_array().is_some_and(|c| c.len() >= 3)
                && stage("nums")["rows_per_second"]
                    .as_array()
                    .is_some_and(|r| r.len() >= 3)
                && stage("per_second")["watermark_ms"].is_i64()
                && f["edges"].as_array().is_some_and(|e| e.len() == 5)
                && l["stages"][0]["watermark_ms"].is_i64()
        },
        "checkpoints, rates, watermarks and edges in the status records",
    );
    let record = server.json("/topologies/fanned");
    let checkpoints = record["status"]["checkpoints"].as_array().expect("history");
    assert!(
        checkpoints
            .iter()
            .all(|c| c["error"].is_null() && c["bytes"].as_u64() > Some(0)),
        "{checkpoints:?}"
    );
    assert!(
        checkpoints
            .iter()
            .any(|c| c["state_bytes"].as_u64() > Some(0)),
        "the window's state is in the checkpoint sizes: {checkpoints:?}"
    );
    let profile = tempfile::tempdir().expect("profile");
    let shot = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let url = format!("http://{}/?token={READER}", server.addr);
    let browser = |extra: &str| {
        std::process::Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--virtual-time-budget=4000",
                "--window-size=1280,1400",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg(extra)
            .arg(&url)
            .output()
            .unwrap_or_else(|e| panic!("{CHROMIUM}: {e} (install Debian's chromium)"))
    };
    let dom = browser("--dump-dom");
    let dom = String::from_utf8_lossy(&dom.stdout).into_owned();
    assert!(dom.contains("2 topologies, 2 running"), "{dom}");
    let fanned = section(&dom, "fanned", Some("live"));
    let live = section(&dom, "live", None);
    for node in ["nums", "evens", "odds", "per_second", "out"] {
        assert!(
            fanned.contains(&format!("data-node=\"{node}\"")),
            "node {node}:\n{fanned}"
        );
    }
    assert!(fanned.contains(">RUNNING<"), "{fanned}");
    // The graph: exactly the edges of the fan-out and the fan-in, each
    // with its fill; no `← input` lists.
    let mut edges: Vec<String> = attr_values(fanned, "data-edge")
        .iter()
        .map(|e| e.replace("&gt;", ">"))
        .collect();
    edges.sort_unstable();
    assert_eq!(
        edges,
        [
            "evens->per_second",
            "nums->evens",
            "nums->odds",
            "odds->per_second",
            "per_second->out"
        ],
        "{fanned}"
    );
    let fills = attr_values(fanned, "data-fill");
    assert_eq!(fills.len(), 5, "every edge shows its fill: {fanned}");
    assert!(
        fills
            .iter()
            .all(|f| f.parse::<f64>().is_ok_and(|f| (0.0..=1.0).contains(&f))),
        "{fills:?}"
    );
    assert_eq!(
        attr_values(fanned, "data-edge-label").len(),
        5,
        "each edge labelled with its fill"
    );
    assert!(!fanned.contains("← "), "{fanned}");
    // A rows/s sparkline per node, drawn from several samples for the
    // source.
    let points: Vec<usize> = attr_values(fanned, "data-points")
        .iter()
        .filter_map(|p| p.parse().ok())
        .collect();
    assert_eq!(points.len(), 5, "a sparkline per node: {fanned}");
    assert!(points.iter().all(|p| *p >= 2), "{points:?}");
    assert!(fanned.contains("class=\"spark\""), "a drawn line: {fanned}");
    assert!(fanned.contains("rows/s"), "{fanned}");
    // The checkpoint history: one row per checkpoint, newest first.
    let epochs: Vec<u64> = attr_values(fanned, "data-epoch")
        .iter()
        .filter_map(|e| e.parse().ok())
        .collect();
    assert!(epochs.len() >= 3, "checkpoint rows: {fanned}");
    assert!(epochs.windows(2).all(|w| w[0] > w[1]), "{epochs:?}");
    assert!(
        attr_values(fanned, "data-failed")
            .iter()
            .all(|f| *f == "false"),
        "{fanned}"
    );
    assert!(fanned.contains("committed"), "{fanned}");
    // Event time as a date-time; years-old events show no lag.
    assert!(
        fanned.contains(">2024-01-01 00:") && fanned.contains(" UTC<"),
        "the generator's event time as a date-time: {fanned}"
    );
    assert!(!fanned.contains("lag"), "no lag for old events: {fanned}");
    // Live events: their time is today's, and the lag behind them shows.
    // Event times start at `now_ms` (a run across midnight UTC: the next day).
    let day = (now_ms / 86_400_000) as i64;
    assert!(
        [day, day + 1]
            .iter()
            .any(|d| live.contains(&format!(">{} ", utc_date(*d)))),
        "live event time as a date-time ({}): {live}",
        utc_date(day)
    );
    let lag = live
        .split(">lag ")
        .nth(1)
        .and_then(|l| l.split(" s<").next())
        .and_then(|l| l.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("a lag in seconds for live events: {live}"));
    assert!(lag < 60.0, "the lag of live events is small: {lag}");

    let _ = browser(&format!("--screenshot={}", shot.display()));
    let png = std::fs::read(&shot).expect("a screenshot");
    assert!(
        png.starts_with(b"\x89PNG"),
        "a PNG screenshot at {}",
        shot.display()
    );
    for name in ["fanned", "live"] {
        let (status, _) = server.post(&format!("/topologies/{name}/stop"), "", Some(ADMIN));
        assert_eq!(status, 200);
    }
}

/// The value of the metric line starting with `prefix`, if present.
fn metric_value(metrics: &str, prefix: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[test]
fn metrics_show_the_consumer_lag_of_each_kafka_partition_while_a_source_runs() {
    let broker = crate::kafka::broker::Broker::start();
    broker.create_topic("events", 2);
    let records: Vec<(i32, String, String)> = (0..60_000)
        .map(|i| (i % 2, format!("k{i}"), format!("{{\"id\":{i}}}")))
        .collect();
    broker.produce("events", &records);
    let s = Scratch::new();
    let server = Server::start(&s, None);
    let addr = broker.addr();
    let topology = format!(
        r#"name = "lagging"
# Decoding every column keeps each one-message poll slow enough for the
# 2 s statistics to catch the lag (projected to no column, for the
# blackhole, the source catches up before the first report).
push_down = false
[checkpoint]
interval = "200ms"
[sources.events]
plugin = "kafka-source"
allow_kafka = ["{addr}"]
config = {{ brokers = "{addr}", topics = ["events"], schema = [{{ name = "id", type = "int64" }}], max_messages_per_poll = 1 }}
[sinks.out]
input = "events"
plugin = "blackhole-sink"
"#
    );
    let (status, body) = server.post("/topologies", &topology, None);
    assert_eq!(status, 201, "{body}");
    let line = |p: i32| {
        format!(
            "fvhost_kafka_consumer_lag{{topology=\"lagging\",source=\"events\",topic=\"events\",partition=\"{p}\"}}"
        )
    };
    // Read one message per poll, the source lags behind at first; every
    // partition is reported, and once all 60,000 messages are read the
    // lag is 0.
    let mut most = 0.0f64;
    server.wait_until(
        || {
            let (_, metrics) = server.get("/metrics");
            let lags: Vec<Option<f64>> = (0..2).map(|p| metric_value(&metrics, &line(p))).collect();
            for lag in lags.iter().flatten() {
                assert!(*lag <= 30_000.0, "lag {lag} exceeds the partition's size");
                most = most.max(*lag);
            }
            lags.iter().all(|l| *l == Some(0.0))
        },
        "lag 0 on both partitions",
    );
    assert!(
        most > 0.0,
        "a positive lag was reported while the source caught up"
    );
    let (status, body) = server.post("/topologies/lagging/stop", "", None);
    assert_eq!(status, 200, "{body}");
    // A stopped source reports no lag.
    let (_, metrics) = server.get("/metrics");
    assert!(
        metric_value(&metrics, &line(0)).is_none(),
        "no lag for a stopped source: {metrics}"
    );
}

/// A hosted topology holds its state directory: a `fvhost run` pointed at
/// it is refused with the server's pid while the topology runs.
#[test]
fn a_hosted_topologys_state_is_locked_against_other_runs() {
    let s = Scratch::new();
    let server = Server::start(&s, None);
    let (status, body) = server.post("/topologies", &sequence("owned", 1_000_000, 2_000), None);
    assert_eq!(status, 201, "{body}");
    server.wait_until(|| server.state("owned") == "RUNNING", "running");
    s.write("t.toml", &sequence("owned", 10, 0));
    let run = s.fvhost(&[
        "run",
        "t.toml",
        "--no-progress",
        "--state-dir",
        "data/topologies/owned/state",
    ]);
    assert_exit(&run, 1);
    assert!(
        run.stderr.contains(&format!(
            "in use by another fvhost run (pid {})",
            server.child.id()
        )),
        "{}",
        run.stderr
    );
    let (status, _) = server.post("/topologies/owned/stop", "", None);
    assert_eq!(status, 200);
}

/// Two concurrent submits of one name: one is created, the other gets
/// 409; the winner keeps running with its directory intact. A refused
/// submission creates nothing — not where the server was started, not in
/// the data directory.
#[test]
fn concurrent_submits_of_one_name_create_one_and_refusals_leave_nothing() {
    let s = Scratch::new();
    let server = std::sync::Arc::new(Server::start(&s, None));
    let text = sequence("twin", 1_000_000, 2_000);
    let answers: Vec<(u16, String)> = std::thread::scope(|scope| {
        let calls: Vec<_> = (0..4)
            .map(|_| {
                let server = std::sync::Arc::clone(&server);
                let text = text.clone();
                scope.spawn(move || server.post("/topologies", &text, None))
            })
            .collect();
        calls.into_iter().map(|c| c.join().expect("join")).collect()
    });
    let created = answers.iter().filter(|(s, _)| *s == 201).count();
    let refused = answers.iter().filter(|(s, _)| *s == 409).count();
    assert_eq!((created, refused), (1, 3), "{answers:?}");
    assert_eq!(server.state("twin"), "RUNNING");
    assert!(
        s.path()
            .join("data/topologies/twin/topology.toml")
            .is_file(),
        "the winner's directory is intact"
    );
    server.wait_until(
        || server.json("/topologies/twin")["status"]["last_committed_epoch"].is_u64(),
        "the winner checkpoints",
    );

    let refused = sequence("refused", 10, 0)
        .replace("allow_write = [\"out\"]", "allow_write = [\"made_here\"]")
        .replace("plugin = \"generator\"", "plugin = \"no-such-plugin\"");
    let (status, body) = server.post("/topologies", &refused, None);
    assert_eq!(status, 400, "{body}");
    assert!(
        !s.path().join("made_here").exists(),
        "nothing in the server's directory"
    );
    assert!(
        !s.path().join("data/topologies/refused").exists(),
        "nothing in the data directory"
    );
    assert_eq!(server.post("/topologies/twin/stop", "", None).0, 200);
}

/// Operator limits: a submission over one is refused naming it, before
/// any instance is opened (a million tasks are refused at once); a
/// watcher over the limit gets 429.
#[test]
fn submissions_and_watchers_over_the_servers_limits_are_refused_naming_the_limit() {
    let s = Scratch::new();
    let server = Server::start_with(
        &s,
        &[],
        &[
            "--max-topologies",
            "2",
            "--max-parallelism",
            "4",
            "--max-tasks",
            "6",
            "--max-plugin-memory",
            "1GiB",
            "--max-watchers",
            "1",
        ],
        None,
    );
    let refused = |text: &str, limit: &str| {
        let started = Instant::now();
        let (status, body) = server.post("/topologies", text, None);
        assert_eq!(status, 400, "{body}");
        assert!(body.contains(limit), "names {limit}: {body}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refused at once"
        );
    };
    let base = sequence("big", 1_000_000, 2_000);
    refused(
        &base.replace("[sources.nums]", "[sources.nums]\nparallelism = 1000000"),
        "--max-parallelism",
    );
    refused(
        &base
            .replace("[sources.nums]", "[sources.nums]\nparallelism = 4")
            .replace("[sinks.out]", "[sinks.out]\nparallelism = 4"),
        "--max-tasks",
    );
    refused(
        &base.replace(
            "[sources.nums]",
            "[sources.nums]\nparallelism = 3\nmemory_limit = \"512MiB\"",
        ),
        "--max-plugin-memory",
    );
    assert!(
        !s.path().join("data/topologies/big").exists(),
        "refusals leave nothing"
    );

    for name in ["one", "two"] {
        let (status, body) = server.post("/topologies", &sequence(name, 1_000_000, 2_000), None);
        assert_eq!(status, 201, "{body}");
    }
    let (status, body) = server.post("/topologies", &sequence("three", 10, 0), None);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("--max-topologies"), "{body}");

    let mut watcher = TcpStream::connect(&server.addr).expect("connect");
    write!(
        watcher,
        "GET /topologies/one/stages/nums/tail HTTP/1.1\r\nHost: {}\r\n\r\n",
        server.addr
    )
    .expect("request");
    let mut first = [0u8; 64];
    let n = watcher.read(&mut first).expect("the stream started");
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    let (status, body) = server.get("/topologies/one/stages/nums/tail");
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("--max-watchers"), "{body}");
    drop(watcher);
    for name in ["one", "two"] {
        assert_eq!(
            server.post(&format!("/topologies/{name}/stop"), "", None).0,
            200
        );
    }
}
