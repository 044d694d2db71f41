//! One POST through `wasi:http`'s outgoing handler: the request is handed
//! to the host first, then its body is streamed (the host's buffer for an
//! outgoing body is small, so writing it all before sending would wait
//! forever), then the answer's status and the start of its body are read.

/// A URL split the way `wasi:http` takes it.
#[derive(Debug, PartialEq, Eq)]
pub struct Target<'a> {
    pub https: bool,
    pub authority: &'a str,
    pub path_with_query: &'a str,
}

impl<'a> Target<'a> {
    /// Split `url` (`http[s]://authority[/path][?query]`).
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
                "`{url}` names no host (or a user: put credentials in header_env)"
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

/// What the endpoint answered.
pub struct Answer {
    pub status: u16,
    /// The start of the body, for messages.
    pub excerpt: String,
}

/// The most of an answer's body kept for a message.
#[cfg(target_os = "wasi")]
const EXCERPT: usize = 512;

/// POST `len` bytes read from `body` to `url`.
#[cfg(target_os = "wasi")]
pub fn post(
    url: &str,
    headers: &[(String, String)],
    body: &mut dyn std::io::Read,
    len: u64,
) -> Result<Answer, String> {
    use wasip2::http::outgoing_handler::handle;
    use wasip2::http::types::{Fields, Method, OutgoingBody, OutgoingRequest, Scheme};
    let target = Target::parse(url)?;
    let fields: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(n, v)| (n.clone(), v.clone().into_bytes()))
        .chain([("content-length".to_string(), len.to_string().into_bytes())])
        .collect();
    let fields = Fields::from_list(&fields).map_err(|e| format!("headers: {e:?}"))?;
    let request = OutgoingRequest::new(fields);
    request.set_method(&Method::Post).map_err(|()| "method")?;
    let scheme = if target.https {
        Scheme::Https
    } else {
        Scheme::Http
    };
    request.set_scheme(Some(&scheme)).map_err(|()| "scheme")?;
    request
        .set_authority(Some(target.authority))
        .map_err(|()| "authority")?;
    request
        .set_path_with_query(Some(target.path_with_query))
        .map_err(|()| "path")?;
    let outgoing = request.body().map_err(|()| "request body")?;
    let pending = handle(request, None).map_err(|e| format!("{e:?}"))?;
    {
        let stream = outgoing.write().map_err(|()| "body stream")?;
        let mut chunk = vec![0u8; 256 << 10];
        let mut left = len;
        while left > 0 {
            let want = chunk.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let got = body
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
    OutgoingBody::finish(outgoing, None).map_err(|e| format!("{e:?}"))?;
    pending.subscribe().block();
    let response = pending
        .get()
        .ok_or("no response")?
        .map_err(|()| "response taken twice")?
        .map_err(|e| format!("{e:?}"))?;
    let status = response.status();
    let incoming = response.consume().map_err(|()| "response body")?;
    let mut excerpt = Vec::new();
    {
        let stream = incoming.stream().map_err(|()| "response body stream")?;
        while excerpt.len() < EXCERPT {
            match stream.blocking_read((EXCERPT - excerpt.len()) as u64) {
                Ok(chunk) => excerpt.extend_from_slice(&chunk),
                Err(_) => break,
            }
        }
    }
    Ok(Answer {
        status,
        excerpt: String::from_utf8_lossy(&excerpt).trim().to_string(),
    })
}

/// Natively (the unit tests) there is no `wasi:http`.
#[cfg(not(target_os = "wasi"))]
pub fn post(
    _url: &str,
    _headers: &[(String, String)],
    _body: &mut dyn std::io::Read,
    _len: u64,
) -> Result<Answer, String> {
    Err("http-sink sends only from a Wasm component".into())
}

#[cfg(test)]
mod tests {
    use super::*;

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
