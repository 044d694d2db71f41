//! Network connectors against the ceiling they are bounded by, in the
//! same run (`cargo bench --workspace --bench connectors`; `FV_BENCH_ROWS`
//! sets the rows, default 2,000,000).
//!
//! `http-sink`: Nexmark bids from `generator` → `http-sink` (JSON lines,
//! checkpoints every second, epochs spooled to a file, one task) into a loopback receiver that reads
//! and counts every body, against a plain native client loop (`ureq`)
//! POSTing the same rows, encoded beforehand as the same JSON lines, in as
//! many requests of the same size, and against `file-sink` writing the
//! same JSON lines to local files (the encoding's share). Prints rows/s
//! (wall) and per CPU-second of the whole process for each, and the
//! ratios. Figures are printed,
//! never asserted.

mod common;

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
}

impl Received {
    fn take(&self) -> (u64, u64) {
        (
            self.requests.swap(0, Ordering::SeqCst),
            self.bytes.swap(0, Ordering::SeqCst),
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
    let rows: usize = std::env::var("FV_BENCH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let received = Arc::new(Received::default());
    let port = receiver(Arc::clone(&received));
    let engine = common::engine();
    let dir = tempfile::tempdir().expect("dir");
    let text = bids_into(
        rows,
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
    let (requests, bytes) = received.take();
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
        rows,
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
    let (plain_requests, plain_bytes) = received.take();
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
}
