//! The network modes: what a connector does with `allow_connect` (std's
//! `TcpStream`) and `allow_http` (`wasi:http`'s outgoing handler).

use std::io::{BufRead, BufReader, Write};

/// Connect to `target`, send `ping\n` and return the line it answers.
pub fn tcp_line(target: &str) -> Result<String, String> {
    let mut stream = std::net::TcpStream::connect(target).map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(b"ping\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut line = String::new();
    BufReader::new(stream)
        .read_line(&mut line)
        .map_err(|e| format!("read: {e}"))?;
    Ok(line.trim_end().to_string())
}

/// GET `url`, following up to 3 redirects; `<status> <body>`.
#[cfg(target_os = "wasi")]
pub fn http_get(url: &str) -> Result<String, String> {
    let mut url = url.to_string();
    for _ in 0..4 {
        let (status, location, body) = get_once(&url)?;
        match location {
            Some(next) if (300..400).contains(&status) => url = next,
            _ => return Ok(format!("{status} {body}")),
        }
    }
    Err("too many redirects".into())
}

/// Send `n` GETs of `url` at once, then wait for the first answer.
#[cfg(target_os = "wasi")]
pub fn http_flood(url: &str, n: i64) -> Result<String, String> {
    let mut pending = Vec::new();
    for _ in 0..n {
        pending.push(
            wasip2::http::outgoing_handler::handle(request(url)?, None)
                .map_err(|e| format!("{e:?}"))?,
        );
    }
    let first = pending.first().ok_or("no request")?;
    first.subscribe().block();
    Ok(format!("{} requests sent", pending.len()))
}

/// Natively there is no `wasi:http`.
#[cfg(not(target_os = "wasi"))]
pub fn http_flood(_url: &str, _n: i64) -> Result<String, String> {
    Err("net-http-flood is a Wasm-only mode".into())
}

/// A GET of `url`, ready to send.
#[cfg(target_os = "wasi")]
fn request(url: &str) -> Result<wasip2::http::types::OutgoingRequest, String> {
    use wasip2::http::types::{Fields, OutgoingRequest, Scheme};
    let (scheme, rest) = url.split_once("://").ok_or("not a URL")?;
    let (authority, path) = match rest.find('/') {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let scheme = match scheme {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => Scheme::Other(other.to_string()),
    };
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    request
        .set_authority(Some(authority))
        .map_err(|()| "authority")?;
    request
        .set_path_with_query(Some(path))
        .map_err(|()| "path")?;
    Ok(request)
}

#[cfg(target_os = "wasi")]
fn get_once(url: &str) -> Result<(u16, Option<String>, String), String> {
    use wasip2::http::outgoing_handler::handle;
    let request = request(url)?;
    let pending = handle(request, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let location = response
        .headers()
        .get("location")
        .first()
        .map(|v| String::from_utf8_lossy(v).into_owned());
    let body = response.consume().map_err(|()| "body")?;
    let stream = body.stream().map_err(|()| "body stream")?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 << 10) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(wasip2::io::streams::StreamError::Closed) => break,
            Err(e) => return Err(format!("reading the body: {e:?}")),
        }
    }
    drop(stream);
    Ok((
        status,
        location,
        String::from_utf8_lossy(&bytes).into_owned(),
    ))
}

/// Natively (the plugin's unit tests) there is no `wasi:http`.
#[cfg(not(target_os = "wasi"))]
pub fn http_get(_url: &str) -> Result<String, String> {
    Err("net-http is a Wasm-only mode".into())
}
