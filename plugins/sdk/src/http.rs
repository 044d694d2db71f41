//! Outgoing HTTP through `wasi:http` (feature `http`): what a connector
//! needs to call an API. The host sends the request only when its URL is
//! under a prefix the node grants with `allow_http`, and the call's
//! `call_timeout` bounds the wait.
//!
//! ```ignore
//! let answer = fv_plugin_sdk::http::send(&fv_plugin_sdk::http::Request {
//!     method: "GET",
//!     url: "https://api.example.com/v1/items?since=42",
//!     headers: &[("accept".into(), "application/json".into())],
//!     body: None,
//!     max_answer: 16 << 20,
//! })?;
//! ```
//!
//! The request is handed to the host first and its body streamed after
//! (the host's buffer for an outgoing body is small: writing it whole
//! before sending would wait forever). The answer's body is read up to
//! `max_answer` bytes. Outside a Wasm component (a plugin's native unit
//! tests) every request fails.

use std::io::Read;

/// A URL split the way `wasi:http` takes it.
#[derive(Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// `https://` (else `http://`).
    pub https: bool,
    /// `host[:port]`.
    pub authority: &'a str,
    /// `/path?query` (`/` when the URL has none).
    pub path_with_query: &'a str,
}

impl<'a> Target<'a> {
    /// Split `url` (`http[s]://authority[/path][?query]`); the error says
    /// what is wrong with it.
    pub fn parse(url: &'a str) -> Result<Self, String> {
        let (https, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!("`{url}` is not an http:// or https:// URL"));
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let authority = &rest[..end];
        if authority.is_empty() || authority.contains('@') {
            return Err(format!(
                "`{url}` names no host (or a user: send credentials in a header)"
            ));
        }
        let path = &rest[end..];
        if path.contains('#') {
            return Err(format!("`{url}`: a fragment is never sent; drop the `#…`"));
        }
        Ok(Target {
            https,
            authority,
            path_with_query: if path.is_empty() { "/" } else { path },
        })
    }
}

/// The request headers of a connector's config: `headers` (name →
/// value) and `header_env` (name → an environment variable the node
/// grants with `allow_env`, for secrets), names lower-cased; a bad name
/// or value, or a variable not set, is refused naming its key.
pub fn config_headers(
    headers: &std::collections::BTreeMap<String, String>,
    header_env: &std::collections::BTreeMap<String, String>,
) -> Result<Vec<(String, String)>, crate::ConfigError> {
    let mut out = Vec::with_capacity(headers.len() + header_env.len());
    for (name, value) in headers {
        if !is_header_name(name) || value.contains(['\r', '\n']) {
            return Err(crate::ConfigError::at(
                format!("headers.{name}"),
                "not a valid header name and value",
            ));
        }
        out.push((name.to_ascii_lowercase(), value.clone()));
    }
    for (name, var) in header_env {
        if !is_header_name(name) {
            return Err(crate::ConfigError::at(
                format!("header_env.{name}"),
                "not a valid header name",
            ));
        }
        let value = std::env::var(var).map_err(|_| {
            crate::ConfigError::at(
                format!("header_env.{name}"),
                format!("environment variable `{var}` is not set, or not granted with allow_env = [\"{var}\"]"),
            )
        })?;
        out.push((name.to_ascii_lowercase(), value));
    }
    Ok(out)
}

/// Whether `name` is an HTTP header name (an RFC 9110 token).
pub fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One request.
pub struct Request<'a> {
    /// `GET`, `POST`, …
    pub method: &'a str,
    /// The URL.
    pub url: &'a str,
    /// Header names and values (`content-length` is set from the body).
    pub headers: &'a [(String, String)],
    /// The body and its length in bytes, if any.
    pub body: Option<(&'a mut dyn Read, u64)>,
    /// The most of the answer's body read; the rest is dropped
    /// ([`Answer::truncated`]).
    pub max_answer: usize,
}

/// What the server answered.
#[derive(Debug)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// Header names (lower case) and values.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The body, up to the request's `max_answer` bytes.
    pub body: Vec<u8>,
    /// Whether the body was longer than `max_answer`.
    pub truncated: bool,
}

impl Answer {
    /// The first value of header `name` (lower case), as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
    }
}

/// Send `request` and read the answer.
#[cfg(target_os = "wasi")]
pub fn send(request: Request<'_>) -> Result<Answer, String> {
    use wasip2::http::outgoing_handler::handle;
    use wasip2::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
    let target = Target::parse(request.url)?;
    let mut fields: Vec<(String, Vec<u8>)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.clone().into_bytes()))
        .collect();
    if let Some((_, len)) = &request.body {
        fields.push(("content-length".into(), len.to_string().into_bytes()));
    }
    let fields = Fields::from_list(&fields).map_err(|e| format!("headers: {e:?}"))?;
    let outgoing = OutgoingRequest::new(fields);
    let method = match request.method.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "HEAD" => Method::Head,
        other => Method::Other(other.to_string()),
    };
    outgoing.set_method(&method).map_err(|()| "method")?;
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    outgoing.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    outgoing
        .set_authority(Some(target.authority))
        .map_err(|()| "authority")?;
    outgoing
        .set_path_with_query(Some(target.path_with_query))
        .map_err(|()| "path")?;
    let body = outgoing.body().map_err(|()| "request body")?;
    let pending = handle(outgoing, None).map_err(|e| format!("{e:?}"))?;
    if let Some((reader, len)) = request.body {
        let stream = body.write().map_err(|()| "body stream")?;
        let mut chunk = vec![0u8; 256 << 10];
        let mut left = len;
        while left > 0 {
            let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let got = reader
                .read(&mut chunk[..want])
                .map_err(|e| format!("reading the body: {e}"))?;
            if got == 0 {
                return Err(format!("the body ended {left} bytes early"));
            }
            left -= got as u64;
            let mut rest = &chunk[..got];
            while !rest.is_empty() {
                let room = stream
                    .check_write()
                    .map_err(|e| format!("sending the body: {e:?}"))?;
                if room == 0 {
                    stream.subscribe().block();
                    continue;
                }
                let n = rest.len().min(usize::try_from(room).unwrap_or(usize::MAX));
                stream
                    .write(&rest[..n])
                    .map_err(|e| format!("sending the body: {e:?}"))?;
                rest = &rest[n..];
            }
        }
        stream
            .blocking_flush()
            .map_err(|e| format!("sending the body: {e:?}"))?;
    }
    OutgoingBody::finish(body, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let headers = response.headers().entries();
    let incoming = response.consume().map_err(|()| "response body")?;
    let mut bytes = Vec::new();
    let mut truncated = false;
    {
        let stream = incoming.stream().map_err(|()| "response body stream")?;
        loop {
            match stream.blocking_read(64 << 10) {
                Ok(chunk) if bytes.len() + chunk.len() <= request.max_answer => {
                    bytes.extend_from_slice(&chunk)
                }
                Ok(chunk) => {
                    let room = request.max_answer - bytes.len();
                    bytes.extend_from_slice(&chunk[..room]);
                    truncated = true;
                    break;
                }
                Err(wasip2::io::streams::StreamError::Closed) => break,
                Err(e) => return Err(format!("reading the answer: {e:?}")),
            }
        }
    }
    Ok(Answer {
        status,
        headers,
        body: bytes,
        truncated,
    })
}

/// Outside a Wasm component there is no `wasi:http`.
#[cfg(not(target_os = "wasi"))]
pub fn send(_request: Request<'_>) -> Result<Answer, String> {
    Err("HTTP requests go through wasi:http: only from a Wasm component".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_names_are_tokens_and_config_headers_name_their_key() {
        assert!(is_header_name("X-Api-Key"));
        assert!(!is_header_name("X Api"));
        assert!(!is_header_name(""));
        assert!(!is_header_name("a:b"));
        let ok = config_headers(
            &[("X-Trace".to_string(), "1".to_string())].into(),
            &Default::default(),
        )
        .expect("valid");
        assert_eq!(ok, [("x-trace".to_string(), "1".to_string())]);
        let e = config_headers(
            &Default::default(),
            &[(
                "Authorization".to_string(),
                "FV_SDK_TEST_UNSET_VAR".to_string(),
            )]
            .into(),
        )
        .expect_err("unset");
        assert!(
            format!("{e:?}").contains("header_env.Authorization"),
            "{e:?}"
        );
    }

    #[test]
    fn a_url_splits_into_scheme_authority_and_path() {
        assert_eq!(
            Target::parse("https://api.example.com:8443/v1/ingest?x=1").expect("parses"),
            Target {
                https: true,
                authority: "api.example.com:8443",
                path_with_query: "/v1/ingest?x=1"
            }
        );
        assert_eq!(
            Target::parse("http://127.0.0.1:8080")
                .expect("parses")
                .path_with_query,
            "/"
        );
        for bad in ["ftp://x/", "http:///x", "https://u:p@h/", "http://h/a#b"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }
}
