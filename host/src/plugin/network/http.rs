//! `allow_http` over `wasi:http`: the host sends a plugin's outgoing
//! request only when its URL is under a granted prefix.
//!
//! [`HttpGate`] is the store's `wasi:http` hooks. Each request's scheme,
//! host, port and path are checked before anything leaves the process; a
//! refused one fails with `HTTP-request-denied` and is counted and logged.
//! The host's client follows no redirect and reads no proxy setting: a
//! redirect reaches the plugin as a response, and following it is a new
//! request, checked again. Request bodies are read whole (they come from
//! a guest capped at its `memory_limit`), response bodies are streamed
//! and counted as the guest reads them. Waiting for a response is cut at
//! the call's budget by [`crate::plugin::call_budget`]. An instance has at
//! most [`MAX_IN_FLIGHT`] requests under way at once (from sending to the
//! end of the response's body): more wait for a place, so a plugin cannot
//! make the host open connections without bound.

use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::BodyExt;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::NetworkCounters;
use super::sockets::NetworkPolicy;

/// The process's HTTP client for plugins: no redirects, no proxy from the
/// environment (a proxy would be a door no grant names).
static CLIENT: LazyLock<Result<reqwest::Client, String>> = LazyLock::new(|| {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())
});

/// Requests one instance may have under way at once.
pub const MAX_IN_FLIGHT: usize = 64;

/// The `wasi:http` hooks of one instance.
pub(crate) struct HttpGate {
    policy: NetworkPolicy,
    /// Request bodies are read whole, up to this (the plugin's memory cap).
    body_limit: usize,
    in_flight: Arc<tokio::sync::Semaphore>,
}

impl HttpGate {
    pub(crate) fn new(policy: NetworkPolicy, body_limit: usize) -> Self {
        HttpGate {
            policy,
            body_limit,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
        }
    }

    /// The URL of `request` when a grant lets it through.
    fn granted(&self, request: &http::Request<WasiBody>) -> Result<url::Url, String> {
        let text = request.uri().to_string();
        let shown = super::shown(&text, 512);
        let url = url::Url::parse(&text).map_err(|e| format!("a request to `{shown}` ({e})"))?;
        match self.policy.grant.http_grant_for(&url) {
            Some(_) => Ok(url),
            None => Err(format!("an HTTP {} to {shown}", request.method())),
        }
    }
}

type SendFuture = Box<
    dyn Future<
            Output = wasmtime_wasi_http::Result<(
                http::Response<WasiBody>,
                Box<dyn Future<Output = Result<(), Error>> + Send>,
            )>,
        > + Send,
>;

impl WasiHttpHooks for HttpGate {
    fn set_host_header(&mut self) -> bool {
        // The client sets `Host` from the checked URL; a guest's own
        // would only be dropped.
        false
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        _options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> SendFuture {
        let url = match self.granted(&request) {
            Ok(url) => url,
            Err(what) => {
                let grants: Vec<String> = self
                    .policy
                    .grant
                    .http
                    .iter()
                    .map(|g| g.to_string())
                    .collect();
                self.policy.refuse(&what, "allow_http", &grants);
                return Box::new(async { Err(Error::HttpRequestDenied) });
            }
        };
        let counters = self.policy.counters.clone();
        let limit = self.body_limit;
        let in_flight = Arc::clone(&self.in_flight);
        Box::new(async move {
            let place = in_flight
                .acquire_owned()
                .await
                .map_err(|_| Error::ConnectionLimitReached)?;
            send(request, url, limit, counters, place).await
        })
    }
}

async fn send(
    request: http::Request<WasiBody>,
    url: url::Url,
    body_limit: usize,
    counters: Option<Arc<NetworkCounters>>,
    place: tokio::sync::OwnedSemaphorePermit,
) -> wasmtime_wasi_http::Result<(
    http::Response<WasiBody>,
    Box<dyn Future<Output = Result<(), Error>> + Send>,
)> {
    let client = match &*CLIENT {
        Ok(c) => c,
        Err(e) => return Err(Error::Connect(std::io::Error::other(e.clone()))),
    };
    let (mut parts, body) = request.into_parts();
    let body = http_body_util::Limited::new(body, body_limit)
        .collect()
        .await
        .map_err(|_| Error::HttpRequestBodySize(None))?
        .to_bytes();
    parts.headers.remove(http::header::HOST);
    if let Some(c) = &counters {
        c.requested(body.len() as u64);
    }
    let response = client
        .request(parts.method, url)
        .headers(parts.headers)
        .body(body)
        .send()
        .await
        .map_err(|e| match () {
            _ if e.is_timeout() => Error::ConnectionTimeout,
            _ if e.is_connect() => Error::ConnectionRefused,
            _ => Error::Connect(std::io::Error::other(e)),
        })?;
    let response: http::Response<reqwest::Body> = response.into();
    let response = response.map(|body| {
        Counted {
            inner: body,
            counters,
            _place: place,
        }
        .map_err(|e| Error::Connect(std::io::Error::other(e)))
        .boxed_unsync()
    });
    let io: Box<dyn Future<Output = Result<(), Error>> + Send> = Box::new(async { Ok(()) });
    Ok((response, io))
}

/// A response body that counts the bytes the guest reads, and holds its
/// request's place among the instance's in flight until it is dropped.
struct Counted {
    inner: reqwest::Body,
    counters: Option<Arc<NetworkCounters>>,
    _place: tokio::sync::OwnedSemaphorePermit,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = reqwest::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, reqwest::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let (Poll::Ready(Some(Ok(frame))), Some(c)) = (&polled, &self.counters)
            && let Some(data) = frame.data_ref()
        {
            c.received(data.len() as u64);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
