//! A small HTTP/1.1 server on loopback for the tests of plugins that call
//! out (`allow_http`): each request goes to a handler, which answers or
//! hangs (a server that never answers). Keep-alive, `Content-Length`
//! bodies only: what the host's client sends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

/// One request as the server read it.
pub struct Request {
    pub method: String,
    pub path: String,
    /// Names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What the handler answers.
pub enum Reply {
    /// A status line's tail (`200 OK`), extra header lines (each ending in
    /// `\r\n`) and a body.
    Answer(&'static str, String, Vec<u8>),
    /// Never answer (the connection stays open for two minutes).
    Hang,
}

/// A running server; it lives until the test process ends.
pub struct HttpServer {
    pub port: u16,
}

impl HttpServer {
    /// Serve every request with `handler`.
    pub fn start(handler: impl Fn(&Request) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let handler = Arc::new(handler);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let handler = Arc::clone(&handler);
                std::thread::spawn(move || serve(stream, &*handler));
            }
        });
        HttpServer { port }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn serve(stream: TcpStream, handler: &(dyn Fn(&Request) -> Reply + Send + Sync)) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut writer = stream;
    while let Some(request) = read_request(&mut reader) {
        let (status, extra, body) = match handler(&request) {
            Reply::Answer(status, extra, body) => (status, extra, body),
            Reply::Hang => {
                std::thread::sleep(Duration::from_secs(120));
                return;
            }
        };
        let head = format!(
            "HTTP/1.1 {status}\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        );
        if writer.write_all(head.as_bytes()).is_err() || writer.write_all(&body).is_err() {
            return;
        }
    }
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if !reader.read_line(&mut line).is_ok_and(|n| n > 0) {
        return None;
    }
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut headers = Vec::new();
    loop {
        let mut header = String::new();
        if !reader.read_line(&mut header).is_ok_and(|n| n > 0) {
            return None;
        }
        if header.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0usize);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}
