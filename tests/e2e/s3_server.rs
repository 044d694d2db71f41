//! A moto S3 server (`moto_server`, installed by `tests/run` from PyPI)
//! on a free loopback port, for the object-storage tests and the
//! connectors bench; killed on drop. Buckets and objects are made and
//! read with unsigned requests, which moto accepts.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto S3 server; killed on drop.
pub(crate) struct S3Server {
    child: Child,
    port: u16,
}

impl S3Server {
    pub(crate) fn start() -> S3Server {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("moto_server")
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server (pip install 'moto[server]'; .ci/run does)");
        let server = S3Server { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "moto_server did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    pub(crate) fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Create a bucket (moto checks no signature on this call).
    pub(crate) fn create_bucket(&self, bucket: &str) {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(
            conn,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("request");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("response");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }

    /// Put `body` at `key` in `bucket` (unsigned; moto takes it).
    pub(crate) fn put_object(&self, bucket: &str, key: &str, body: &[u8]) {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(
            conn,
            "PUT /{bucket}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        )
        .expect("request");
        conn.write_all(body).expect("body");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("response");
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    }

    /// The body of `key` in `bucket` (unsigned GET).
    pub(crate) fn get_object(&self, bucket: &str, key: &str) -> Vec<u8> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(
            conn,
            "GET /{bucket}/{key} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("request");
        let mut response = Vec::new();
        conn.read_to_end(&mut response).expect("response");
        let at = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a header");
        let head = String::from_utf8_lossy(&response[..at]).to_string();
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(
            !head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{head}"
        );
        response[at + 4..].to_vec()
    }

    /// Keys under `prefix` in `bucket` (ListObjectsV2, unsigned).
    pub(crate) fn keys(&self, bucket: &str, prefix: &str) -> Vec<String> {
        let mut conn = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        write!(
            conn,
            "GET /{bucket}?list-type=2&prefix={prefix} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nConnection: close\r\n\r\n",
            self.port
        )
        .expect("request");
        let mut response = String::new();
        conn.read_to_string(&mut response).expect("response");
        response
            .split("<Key>")
            .skip(1)
            .filter_map(|s| s.split("</Key>").next())
            .map(str::to_string)
            .collect()
    }

    /// The environment that points fvhost's S3 client at this server.
    pub(crate) fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
