//! The HTTP API (axum): routes, bearer-token auth on every mutating call,
//! body size limit, and JSON errors `{"error": …, "errors": [… line and
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

use super::hosted::{ServeError, TopologySet};
use super::{openapi, prometheus};

/// Request bodies larger than this are refused (413).
pub const BODY_LIMIT: usize = 1 << 20;

/// What every handler shares.
pub struct ApiState {
    /// The hosted topologies.
    pub set: Arc<TopologySet>,
    /// The bearer token mutating calls need, if any.
    pub token: Option<String>,
    /// Whether the topologies of the data directory have been resumed.
    pub ready: AtomicBool,
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

/// Mutating calls need `Authorization: Bearer <token>` when a token is set.
async fn auth(State(state): State<Arc<ApiState>>, request: Request, next: Next) -> Response {
    let mutating = !matches!(*request.method(), Method::GET | Method::HEAD);
    if let (true, Some(token)) = (mutating, &state.token) {
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if given != Some(token.as_str()) {
            let message = match given {
                None => "this call needs `Authorization: Bearer <token>` (the server's token)",
                Some(_) => "the bearer token is wrong",
            };
            return ApiError::new(StatusCode::UNAUTHORIZED, message).into_response();
        }
    }
    next.run(request).await
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

/// A submission: the TOML itself, or JSON `{"toml": "…"}`.
#[derive(Deserialize)]
struct Submission {
    toml: String,
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
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    let text = if json {
        serde_json::from_str::<Submission>(&body)
            .map_err(|e| {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    format!("a JSON body must be {{\"toml\": \"…\"}}: {e}"),
                )
            })?
            .toml
    } else {
        body
    };
    let set = Arc::clone(&state.set);
    let view = blocking(move || set.submit(&text)).await?;
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
    let events = futures::stream::unfold(subscription, |sub| async move {
        loop {
            let (rows, missed) = sub.take();
            if !rows.is_empty() || missed > 0 {
                let mut events = Vec::with_capacity(rows.len() + 1);
                if missed > 0 {
                    events.push(Event::default().event("missed").data(missed.to_string()));
                }
                events.extend(rows.into_iter().map(|r| Event::default().data(r)));
                return Some((futures::stream::iter(events), sub));
            }
            sub.notify.notified().await;
        }
    })
    .flatten()
    .map(Ok::<_, std::convert::Infallible>);
    Ok(Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response())
}
