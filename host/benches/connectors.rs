//! Network connectors against the ceiling they are bounded by, in the
//! same run (`cargo bench --workspace --bench connectors`; `FV_BENCH_ROWS`
//! sets the generator's events, default 2,000,000, of which 92 % are bids).
//!
//! `http-sink`: Nexmark bids from `generator` → `http-sink` (JSON lines,
//! checkpoints every second, epochs spooled to a file, one task) into a loopback receiver that reads
//! and counts every body, against a plain native client loop (`ureq`)
//! POSTing the same rows, encoded beforehand as the same JSON lines, in as
//! many requests of the same size, and against `file-sink` writing the
//! same JSON lines to local files (the encoding's share). Prints rows/s
//! (wall) and per CPU-second of the whole process for each, and the
//! ratios.
//!
//! `postgres-sink`: the same bids into a PostgreSQL table (insert mode,
//! one task, a server this bench starts with `initdb` when PostgreSQL is
//! installed), against a plain native `COPY` of the same rows, encoded
//! beforehand, over the same wire client, in as many COPYs as the sink
//! committed epochs: the server's own ingest is the ceiling.
//!
//! `postgres-cdc-source`: those bids inserted into a table (transactions
//! of ~100,000 rows) read back from a replication slot into
//! `blackhole-sink`, against PostgreSQL's own `pg_recvlogical` reading a
//! second slot of the same changes: the server's logical decoding and
//! its C client are the ceiling.
//!
//! `file-source` and `file-sink` on object storage (moto's S3 server,
//! when `moto_server` is on PATH; `tests/run` installs it): the bids as
//! Parquet read from the bucket into `blackhole-sink` (every column:
//! `push_down = false`) against the same files read from local disk, and
//! against the server's own ceiling — the same objects fetched whole by
//! a native `object_store` client; and the bids written to the bucket as
//! Parquet against the same to local files.
//!
//! Figures are printed, never asserted.

mod common;
#[allow(dead_code)]
#[path = "../../tests/e2e/postgres_server.rs"]
mod postgres_server;
#[allow(dead_code)]
#[path = "../../tests/e2e/s3_server.rs"]
mod s3_server;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{measure, run_topology};

/// What the receiver read: requests and body bytes.
#[derive(Default)]
struct Received {
    requests: AtomicU64,
    bytes: AtomicU64,
    /// Newlines: the rows of JSON lines bodies.
    lines: AtomicU64,
}

impl Received {
    fn take(&self) -> (u64, u64, u64) {
        (
            self.requests.swap(0, Ordering::SeqCst),
            self.bytes.swap(0, Ordering::SeqCst),
            self.lines.swap(0, Ordering::SeqCst),
        )
    }
}

/// A loopback HTTP/1.1 receiver answering 200 to every request; its port.
fn receiver(received: Arc<Received>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let received = Arc::clone(&received);
            std::thread::spawn(move || serve(stream, &received));
        }
    });
    port
}

fn serve(stream: TcpStream, received: &Received) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    let mut body = Vec::new();
    loop {
        let mut line = String::new();
        if !reader.read_line(&mut line).is_ok_and(|n| n > 0) {
            return;
        }
        let mut length = 0usize;
        loop {
            line.clear();
            if !reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                return;
            }
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        body.resize(length, 0);
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        received.requests.fetch_add(1, Ordering::SeqCst);
        received.bytes.fetch_add(length as u64, Ordering::SeqCst);
        let lines = body.iter().filter(|b| **b == b'\n').count();
        received.lines.fetch_add(lines as u64, Ordering::SeqCst);
        if writer
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .is_err()
        {
            return;
        }
    }
}

/// The bids the generator makes, as JSON lines (what `http-sink` sends).
fn bids_as_json_lines(rows: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut writer = arrow::json::LineDelimitedWriter::new(&mut out);
    let mut done = 0;
    while done < rows {
        let n = (rows - done).min(8192);
        writer.write(&common::bids(n)).expect("encode JSON lines");
        done += n;
    }
    writer.finish().expect("finish");
    drop(writer);
    out
}

/// `rows` Nexmark bids from `generator` into `sink` (a `[sinks.…]` table),
/// checkpoints every second.
fn bids_into(rows: usize, sink: &str) -> String {
    format!(
        r#"
name = "bench"
batch_size = 8192
[checkpoint]
interval = "1s"
[sources.bids]
plugin = "generator"
config = {{ kind = "nexmark", stream = "bid", events = {rows} }}
{sink}
"#
    )
}

fn main() {
    // Generator events; bids are 46 of every 50.
    let events: usize = std::env::var("FV_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    // Before any thread reads the environment: the object store's
    // client is configured from it.
    let s3 = std::process::Command::new("moto_server")
        .arg("--help")
        .output()
        .is_ok_and(|o| o.status.success())
        .then(s3_server::S3Server::start);
    if let Some(server) = &s3 {
        for (key, value) in server.env() {
            // SAFETY: no other thread runs yet.
            unsafe { std::env::set_var(key, value) };
        }
    }
    let received = Arc::new(Received::default());
    let port = receiver(Arc::clone(&received));
    let engine = common::engine();
    let dir = tempfile::tempdir().expect("dir");
    let text = bids_into(
        events,
        &format!(
            r#"[sinks.post]
input = "bids"
plugin = "http-sink"
allow_http = ["http://127.0.0.1:{port}/"]
allow_write = ["spool"]
config = {{ url = "http://127.0.0.1:{port}/ingest", spool = "spool" }}"#
        ),
    );
    let (wall, cpu) = run_topology(&engine, dir.path(), &text);
    let (requests, bytes, lines) = received.take();
    let rows = lines as usize;
    println!(
        "http-sink: {rows} bids in {:.2} s wall, {cpu:.2} CPU-s: {:.0} rows/s, {:.0} rows per CPU-s ({requests} requests, {:.1} MB of JSON lines)",
        wall.as_secs_f64(),
        rows as f64 / wall.as_secs_f64(),
        rows as f64 / cpu,
        bytes as f64 / 1e6
    );

    // The same rows encoded the same way into files: what is encoding, and
    // what is HTTP.
    let files = bids_into(
        events,
        r#"[sinks.out]
input = "bids"
plugin = "file-sink"
allow_write = ["out"]
config = { path = "out", format = "jsonl" }"#,
    );
    let (file_wall, file_cpu) = run_topology(&engine, dir.path(), &files);
    println!(
        "file-sink (the same JSON lines to local files): {:.2} s wall, {file_cpu:.2} CPU-s: {:.0} rows/s, {:.0} rows per CPU-s",
        file_wall.as_secs_f64(),
        rows as f64 / file_wall.as_secs_f64(),
        rows as f64 / file_cpu
    );

    // The ceiling: the same bytes, already encoded, in as many requests.
    let body = bids_as_json_lines(rows);
    let requests = requests.max(1) as usize;
    let chunk = body.len().div_ceil(requests);
    let agent: ureq::Agent = ureq::Agent::config_builder().build().into();
    let url = format!("http://127.0.0.1:{port}/ingest");
    let ((), plain_wall, plain_cpu) = measure(|| {
        for part in body.chunks(chunk.max(1)) {
            agent
                .post(&url)
                .header("content-type", "application/x-ndjson")
                .send(part)
                .expect("POST");
        }
    });
    let (plain_requests, plain_bytes, _) = received.take();
    println!(
        "plain client loop (ureq, pre-encoded): {rows} bids in {:.2} s wall, {plain_cpu:.2} CPU-s: {:.0} rows/s, {:.0} rows per CPU-s ({plain_requests} requests, {:.1} MB)",
        plain_wall.as_secs_f64(),
        rows as f64 / plain_wall.as_secs_f64(),
        rows as f64 / plain_cpu,
        plain_bytes as f64 / 1e6
    );
    println!(
        "http-sink / plain loop: {:.2}x rows/s (wall), {:.2}x rows per CPU-s; http-sink / file-sink: {:.2}x rows/s (wall), {:.2}x rows per CPU-s",
        plain_wall.as_secs_f64() / wall.as_secs_f64(),
        plain_cpu / cpu,
        file_wall.as_secs_f64() / wall.as_secs_f64(),
        file_cpu / cpu
    );
    postgres(&engine, events);
    match &s3 {
        Some(server) => objects(&engine, server, events),
        None => {
            println!("object storage: skipped (moto_server is not on PATH; tests/run installs it)")
        }
    }
}

/// `file-source` and `file-sink` on the bucket against local files and
/// the server's ceiling.
fn objects(engine: &fvhost::plugin::PluginEngine, server: &s3_server::S3Server, events: usize) {
    server.create_bucket("lake");
    let dir = tempfile::tempdir().expect("dir");
    let to_local = bids_into(
        events,
        r#"[sinks.pq]
input = "bids"
plugin = "file-sink"
allow_write = ["pq"]
config = { path = "pq", format = "parquet" }"#,
    );
    let (local_write_wall, local_write_cpu) = run_topology(engine, dir.path(), &to_local);
    let to_bucket = to_local
        .replace(
            "allow_write = [\"pq\"]",
            "allow_write = [\"s3://lake/bids\"]",
        )
        .replace("path = \"pq\"", "path = \"s3://lake/bids\"");
    let (bucket_write_wall, bucket_write_cpu) = run_topology(engine, dir.path(), &to_bucket);
    let mut bytes = 0u64;
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(dir.path().join("pq"))
        .expect("pq")
        .flatten()
    {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".parquet") {
            bytes += entry.metadata().map_or(0, |m| m.len());
            objects.push(name);
        }
    }
    let read = |path: &str, grant: &str| {
        format!(
            r#"
name = "bench"
push_down = false
[sources.bids]
plugin = "file-source"
allow_read = ["{grant}"]
config = {{ path = "{path}" }}
[sinks.none]
input = "bids"
plugin = "blackhole-sink"
"#
        )
    };
    let (local_wall, local_cpu) = run_topology(engine, dir.path(), &read("pq/*.parquet", "pq"));
    let (bucket_wall, bucket_cpu) = run_topology(
        engine,
        dir.path(),
        &read("s3://lake/bids/*.parquet", "s3://lake/bids"),
    );
    // The ceiling: the bucket's objects fetched whole, natively.
    let keys = server.keys("lake", "bids/");
    let (fetched, raw_wall, raw_cpu) = measure(|| {
        use object_store::ObjectStoreExt;
        let store = object_store::aws::AmazonS3Builder::from_env()
            .with_url("s3://lake")
            .build()
            .expect("client");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let mut fetched = 0;
            for key in &keys {
                let path = object_store::path::Path::from(key.as_str());
                let got = store.get(&path).await.expect("get");
                fetched += got.bytes().await.expect("body").len();
            }
            fetched
        })
    });
    println!(
        "plain GET: {} objects, {:.1} MB fetched",
        keys.len(),
        fetched as f64 / 1e6
    );
    let rows = events as f64 * 46.0 / 50.0;
    let line = |what: &str, wall: std::time::Duration, cpu: f64| {
        println!(
            "{what}: {:.2} s wall, {cpu:.2} CPU-s of fvhost: {:.0} rows/s, {:.0} rows per CPU-s, {:.0} MB/s",
            wall.as_secs_f64(),
            rows / wall.as_secs_f64(),
            rows / cpu,
            bytes as f64 / 1e6 / wall.as_secs_f64()
        )
    };
    println!(
        "object storage: {} Parquet files, {:.1} MB of bids",
        objects.len(),
        bytes as f64 / 1e6
    );
    line(
        "file-source from local files (every column)",
        local_wall,
        local_cpu,
    );
    line(
        "file-source from the bucket (every column)",
        bucket_wall,
        bucket_cpu,
    );
    line(
        "plain GET of the same objects (object_store, native)",
        raw_wall,
        raw_cpu,
    );
    line(
        "file-sink Parquet to local files",
        local_write_wall,
        local_write_cpu,
    );
    line(
        "file-sink Parquet to the bucket (multipart)",
        bucket_write_wall,
        bucket_write_cpu,
    );
    println!(
        "file-source bucket / local: {:.2}x rows/s (wall), {:.2}x rows per CPU-s; bucket / plain GET: {:.2}x (wall); file-sink bucket / local: {:.2}x rows/s (wall)",
        local_wall.as_secs_f64() / bucket_wall.as_secs_f64(),
        local_cpu / bucket_cpu,
        raw_wall.as_secs_f64() / bucket_wall.as_secs_f64(),
        local_write_wall.as_secs_f64() / bucket_write_wall.as_secs_f64()
    );
}

/// The bids as COPY text (none of their values holds a tab, a newline
/// or a backslash).
fn bids_as_copy_text(rows: usize) -> Vec<u8> {
    use arrow::util::display::{ArrayFormatter, FormatOptions};
    use std::fmt::Write as _;
    let mut out = String::new();
    let mut done = 0;
    while done < rows {
        let n = (rows - done).min(8192);
        let batch = common::bids(n);
        let options = FormatOptions::default();
        let formatters: Vec<ArrayFormatter> = batch
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &options).expect("formatter"))
            .collect();
        for row in 0..n {
            for (i, f) in formatters.iter().enumerate() {
                if i > 0 {
                    out.push('\t');
                }
                write!(out, "{}", f.value(row)).expect("format");
            }
            out.push('\n');
        }
        done += n;
    }
    out.into_bytes()
}

fn postgres(engine: &fvhost::plugin::PluginEngine, events: usize) {
    if !std::path::Path::new("/usr/lib/postgresql").exists()
        && std::env::var_os("FVHOST_PG_BIN").is_none()
    {
        println!("postgres-sink: skipped (PostgreSQL is not installed; tests/run installs it)");
        return;
    }
    let pg = postgres_server::PostgresServer::start();
    let dir = tempfile::tempdir().expect("dir");
    let text = bids_into(
        events,
        &format!(
            r#"[sinks.db]
input = "bids"
plugin = "postgres-sink"
allow_connect = ["{}"]
config = {{ url = "{}", table = "bids", create_table = true }}"#,
            pg.address(),
            pg.url("fvtrust")
        ),
    );
    let (wall, cpu) = run_topology(engine, dir.path(), &text);
    // `events` counts every Nexmark event; bids are most of them.
    let rows: usize = pg.psql("SELECT count(*) FROM bids")[0]
        .parse()
        .expect("count");
    let epochs: usize = pg.psql("SELECT max(epoch) FROM fvhost_sink_epochs")[0]
        .parse()
        .unwrap_or(1);
    println!(
        "postgres-sink: {rows} bids in {:.2} s wall, {cpu:.2} CPU-s of fvhost: {:.0} rows/s, {:.0} rows per CPU-s (up to {epochs} epochs)",
        wall.as_secs_f64(),
        rows as f64 / wall.as_secs_f64(),
        rows as f64 / cpu
    );
    pg.psql("TRUNCATE bids");
    let body = bids_as_copy_text(rows);
    let mut client = fv_postgres_wire::Client::connect(&fv_postgres_wire::ConnectConfig {
        host: "127.0.0.1".into(),
        port: pg.port,
        user: "fvtrust".into(),
        password: None,
        database: "fv".into(),
        application_name: "bench".into(),
    })
    .expect("connect");
    let columns = common::bids(1)
        .schema()
        .fields()
        .iter()
        .map(|f| fv_postgres_wire::quote_ident(f.name()))
        .collect::<Vec<_>>()
        .join(", ");
    let parts = epochs.max(1);
    let ((), plain_wall, plain_cpu) = measure(|| {
        let mut start = 0;
        for i in 1..=parts {
            // Cut at row boundaries.
            let mut end = body.len() * i / parts;
            while end < body.len() && body[end - 1] != b'\n' {
                end += 1;
            }
            client.simple_query("BEGIN").expect("BEGIN");
            client
                .copy_in(
                    &format!("COPY bids ({columns}) FROM STDIN"),
                    &body[start..end],
                )
                .expect("COPY");
            client.simple_query("COMMIT").expect("COMMIT");
            start = end;
        }
    });
    let copied: usize = pg.psql("SELECT count(*) FROM bids")[0]
        .parse()
        .expect("count");
    assert_eq!(copied, rows, "the plain COPY wrote every bid");
    println!(
        "plain COPY (native, pre-encoded, {parts} transactions): {:.2} s wall, {plain_cpu:.2} CPU-s of the client: {:.0} rows/s",
        plain_wall.as_secs_f64(),
        rows as f64 / plain_wall.as_secs_f64(),
    );
    println!(
        "postgres-sink / plain COPY: {:.2}x rows/s (wall)",
        plain_wall.as_secs_f64() / wall.as_secs_f64(),
    );
    postgres_cdc(engine, &pg, rows);
}

/// The bids inserted into a table in transactions of about 100,000 rows
/// after two slots were made: `postgres-cdc-source` reads one into
/// `blackhole-sink`; `pg_recvlogical` reads the other to the same LSN.
fn postgres_cdc(
    engine: &fvhost::plugin::PluginEngine,
    pg: &postgres_server::PostgresServer,
    rows: usize,
) {
    pg.psql(
        "CREATE TABLE cdc_bids (LIKE bids); ALTER TABLE cdc_bids ADD COLUMN id bigserial PRIMARY KEY; \
         CREATE PUBLICATION fvbench FOR TABLE cdc_bids",
    );
    pg.psql("SELECT pg_create_logical_replication_slot('fv_bench_host', 'pgoutput')");
    pg.psql("SELECT pg_create_logical_replication_slot('fv_bench_native', 'pgoutput')");
    let parts = rows.div_ceil(100_000).max(1);
    for i in 0..parts {
        pg.psql(&format!(
            "INSERT INTO cdc_bids SELECT * FROM bids WHERE bidder % {parts} = {i}"
        ));
    }
    let dir = tempfile::tempdir().expect("dir");
    let text = format!(
        r#"
name = "bench"
[checkpoint]
interval = "1s"
[sources.changes]
plugin = "postgres-cdc-source"
allow_connect = ["{}"]
config = {{ url = "{}", table = "cdc_bids", slot = "fv_bench_host", publication = "fvbench", stop_at_end = true }}
[sinks.out]
input = "changes"
plugin = "blackhole-sink"
"#,
        pg.address(),
        pg.url("fvtrust")
    );
    let (wall, cpu) = run_topology(engine, dir.path(), &text);
    println!(
        "postgres-cdc-source: {rows} inserts in {parts} transactions in {:.2} s wall, {cpu:.2} CPU-s of fvhost: {:.0} rows/s, {:.0} rows per CPU-s",
        wall.as_secs_f64(),
        rows as f64 / wall.as_secs_f64(),
        rows as f64 / cpu
    );
    // The ceiling: PostgreSQL's own client, pg_recvlogical (C), reading the
    // other slot to the same LSN and writing what it decodes nowhere.
    let end = pg.psql("SELECT pg_current_wal_lsn()")[0].clone();
    let bin = postgres_server::bin_dir();
    let ((), native_wall, _) = measure(|| {
        let out = std::process::Command::new(bin.join("pg_recvlogical"))
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &pg.port.to_string(),
                "-U",
                "fvtrust",
                "-d",
                "fv",
            ])
            .args([
                "--slot",
                "fv_bench_native",
                "--start",
                "-n",
                "-f",
                "/dev/null",
            ])
            .args([
                "-o",
                "proto_version=1",
                "-o",
                "publication_names=fvbench",
                "-E",
                &end,
            ])
            .output()
            .expect("run pg_recvlogical");
        assert!(
            out.status.success(),
            "pg_recvlogical: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
    println!(
        "pg_recvlogical (PostgreSQL's C client, the same changes from a second slot, decoded nowhere): {:.2} s wall: {:.0} rows/s",
        native_wall.as_secs_f64(),
        rows as f64 / native_wall.as_secs_f64(),
    );
    println!(
        "postgres-cdc-source / pg_recvlogical: {:.2}x rows/s (wall)",
        native_wall.as_secs_f64() / wall.as_secs_f64(),
    );
}
