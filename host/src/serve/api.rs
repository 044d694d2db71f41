//! The HTTP API (axum): routes, token auth with two roles on every route
//! but the health checks ([`super::auth`]), body size limit, and JSON errors `{"error": …, "errors": [… line and
//! key …]}`. Handlers hand the work to [`TopologySet`] on blocking threads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::rejection::StringRejection;
use axum::extract::{DefaultBodyLimit, Path, Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::json;

use super::auth::{self, Role, Tokens};
use super::hosted::{ServeError, TopologyLanguage, TopologySet};
use super::{openapi, prometheus};

/// Request bodies larger than this are refused (413).
pub const BODY_LIMIT: usize = 1 << 20;

/// What every handler shares.
pub struct ApiState {
    /// The hosted topologies.
    pub set: Arc<TopologySet>,
    /// The admin and read tokens.
    pub tokens: Tokens,
    /// Whether `/metrics` is open to scrapers without a token.
    pub metrics_open: bool,
    /// Whether the topologies of the data directory have been resumed.
    pub ready: AtomicBool,
    /// Set when the server shuts down: every tail stream ends, so the
    /// graceful shutdown does not wait on watchers for ever.
    pub closing: AtomicBool,
    /// Wakes the tail streams when `closing` is set.
    pub closed: tokio::sync::Notify,
}

impl ApiState {
    /// End every tail stream (the server is shutting down).
    pub fn close_streams(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.closed.notify_waiters();
    }
}

/// An error as the API answers it.
pub struct ApiError {
    status: StatusCode,
    message: String,
    errors: Vec<String>,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            errors: Vec::new(),
        }
    }
}

impl From<ServeError> for ApiError {
    fn from(e: ServeError) -> Self {
        let status = match &e {
            ServeError::Invalid(_) => StatusCode::BAD_REQUEST,
            ServeError::NotFound(_) => StatusCode::NOT_FOUND,
            ServeError::Conflict(_) => StatusCode::CONFLICT,
            ServeError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            ServeError::Io(_) => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let errors = match &e {
            ServeError::Invalid(errors) => errors.clone(),
            _ => Vec::new(),
        };
        ApiError {
            status,
            message: e.to_string(),
            errors,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": self.message, "errors": self.errors });
        (self.status, axum::Json(body)).into_response()
    }
}

type ApiResult = Result<Response, ApiError>;

/// The router over `state`.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/openapi.json", get(openapi_json))
        .route("/metrics", get(metrics))
        .route("/topologies", get(list).post(submit))
        .route("/topologies/{name}", get(show).delete(delete))
        .route("/topologies/{name}/stop", post(stop))
        .route("/topologies/{name}/start", post(start))
        .route("/topologies/{name}/stages/{stage}/tail", get(tail))
        .layer(middleware::from_fn_with_state(Arc::clone(&state), auth))
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// With tokens set, every guarded route needs one: a read token for
/// reads, the admin token for anything that changes a topology.
async fn auth(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let tokens = &state.tokens;
    if !tokens.any() || auth::is_open(request.uri().path(), state.metrics_open) {
        return next.run(request).await;
    }
    let reading = matches!(*request.method(), Method::GET | Method::HEAD);
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let given = auth::given(header, request.uri().query(), reading);
    let refusal = match given.map(|g| tokens.role(g)) {
        None => Some((
            StatusCode::UNAUTHORIZED,
            "this call needs a token: `Authorization: Bearer <token>` (or `?token=` on a GET), the server's read or admin token",
        )),
        Some(None) => Some((StatusCode::UNAUTHORIZED, "the token is wrong")),
        Some(Some(Role::Read)) if !reading => Some((
            StatusCode::FORBIDDEN,
            "the read token cannot submit, stop, start or delete: this call needs the admin token",
        )),
        Some(Some(_)) => None,
    };
    match refusal {
        Some((status, message)) => ApiError::new(status, message).into_response(),
        None => next.run(request).await,
    }
}

/// Run blocking work (planning, stopping) off the async threads.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ServeError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the operation panicked: {e}"),
            )
        })?
        .map_err(ApiError::from)
}

/// The status page: plain HTML and JavaScript, compiled into the binary.
const PAGE: &str = include_str!("page/index.html");

async fn page() -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE).into_response()
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(state): State<Arc<ApiState>>) -> Response {
    if state.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "resuming the topologies of the data directory\n",
        )
            .into_response()
    }
}

async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        openapi::DOCUMENT,
    )
        .into_response()
}

async fn metrics(State(state): State<Arc<ApiState>>) -> ApiResult {
    let set = Arc::clone(&state.set);
    let text = blocking(move || Ok(prometheus::render(&set.live_metrics()))).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}

async fn list(State(state): State<Arc<ApiState>>) -> ApiResult {
    let set = Arc::clone(&state.set);
    let views = blocking(move || Ok(set.list())).await?;
    Ok(axum::Json(views).into_response())
}

/// A JSON submission: `{"toml": "…"}` or `{"sql": "…"}`.
#[derive(Deserialize)]
struct Submission {
    toml: Option<String>,
    sql: Option<String>,
}

async fn submit(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Result<String, StringRejection>,
) -> ApiResult {
    let body = body.map_err(|r| {
        let status = r.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!("the body is larger than {BODY_LIMIT} bytes")
        } else {
            format!("unreadable body: {r}")
        };
        ApiError::new(status, message)
    })?;
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let (text, language) = if content_type.starts_with("application/json") {
        let usage = "a JSON body is {\"toml\": \"…\"} or {\"sql\": \"…\"}";
        let submission = serde_json::from_str::<Submission>(&body)
            .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("{usage}: {e}")))?;
        match (submission.toml, submission.sql) {
            (Some(toml), None) => (toml, TopologyLanguage::Toml),
            (None, Some(sql)) => (sql, TopologyLanguage::Sql),
            _ => return Err(ApiError::new(StatusCode::BAD_REQUEST, usage.to_string())),
        }
    } else if content_type.starts_with("application/sql") {
        (body, TopologyLanguage::Sql)
    } else {
        (body, TopologyLanguage::Toml)
    };
    let set = Arc::clone(&state.set);
    let view = blocking(move || set.submit(&text, language)).await?;
    Ok((StatusCode::CREATED, axum::Json(view)).into_response())
}

async fn show(State(state): State<Arc<ApiState>>, Path(name): Path<String>) -> ApiResult {
    let set = Arc::clone(&state.set);
    let view = blocking(move || set.view(&name)).await?;
    Ok(axum::Json(view).into_response())
}

async fn stop(State(state): State<Arc<ApiState>>, Path(name): Path<String>) -> ApiResult {
    let set = Arc::clone(&state.set);
    let view = blocking(move || set.stop(&name)).await?;
    Ok(axum::Json(view).into_response())
}

async fn start(State(state): State<Arc<ApiState>>, Path(name): Path<String>) -> ApiResult {
    let set = Arc::clone(&state.set);
    let view = blocking(move || set.start(&name)).await?;
    Ok(axum::Json(view).into_response())
}

#[derive(Deserialize)]
struct DeleteQuery {
    #[serde(default)]
    purge: bool,
}

async fn delete(
    State(state): State<Arc<ApiState>>,
    Path(name): Path<String>,
    Query(q): Query<DeleteQuery>,
) -> ApiResult {
    let set = Arc::clone(&state.set);
    blocking(move || set.delete(&name, q.purge)).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Rows a watcher may fall behind by before the oldest are dropped.
const TAIL_BUFFER: usize = 10_000;

/// Server-sent events: each row leaving the stage as a JSON object
/// (`data:`), and `event: missed` with the number of rows dropped when the
/// watcher fell more than the buffer behind.
async fn tail(
    State(state): State<Arc<ApiState>>,
    Path((name, stage)): Path<(String, String)>,
) -> ApiResult {
    use axum::response::sse::{Event, KeepAlive, Sse};
    use futures::StreamExt;
    let set = Arc::clone(&state.set);
    let subscription = blocking(move || set.subscribe(&name, &stage, TAIL_BUFFER)).await?;
    let events = futures::stream::unfold((subscription, state), |(sub, state)| async move {
        loop {
            // Registered before the check, so a close in between wakes it.
            let closed = state.closed.notified();
            if state.closing.load(Ordering::SeqCst) {
                return None;
            }
            let (rows, missed) = sub.take();
            if !rows.is_empty() || missed > 0 {
                let mut events = Vec::with_capacity(rows.len() + 1);
                if missed > 0 {
                    events.push(Event::default().event("missed").data(missed.to_string()));
                }
                events.extend(rows.into_iter().map(|r| Event::default().data(r)));
                drop(closed);
                return Some((futures::stream::iter(events), (sub, state)));
            }
            tokio::select! {
                () = sub.notify.notified() => {}
                () = closed => return None,
            }
        }
    })
    .flatten()
    .map(Ok::<_, std::convert::Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
