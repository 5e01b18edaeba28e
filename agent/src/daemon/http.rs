//! The agent's HTTP endpoints: `/metrics` (OpenMetrics), `/healthz` (the process answers),
//! `/readyz` (a source runs and the first target pass is done), `/status` (JSON, see
//! [`super::status`]).

use std::{
    net::SocketAddr,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, Ordering},
    },
};

use axum::{
    Router,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use super::status::AgentStatus;
use crate::metrics;

/// What the handlers read.
#[derive(Clone, Debug)]
pub struct Shared {
    pub registry: Arc<Registry>,
    pub status: Arc<RwLock<AgentStatus>>,
    pub ready: Arc<AtomicBool>,
}

/// OpenMetrics for clients that ask for it (Prometheus does), the classic text format
/// otherwise (curl, promtool, older scrapers).
async fn metrics_handler(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let body = metrics::encode(&shared.registry);
    let wants_openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    if wants_openmetrics {
        ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response()
    } else {
        (
            [(header::CONTENT_TYPE, metrics::TEXT_CONTENT_TYPE)],
            metrics::to_prometheus_text(&body),
        )
            .into_response()
    }
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(shared): State<Shared>) -> Response {
    if shared.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting\n").into_response()
    }
}

async fn status_handler(State(shared): State<Shared>) -> Response {
    let body = match shared.status.read() {
        Ok(status) => serde_json::to_string_pretty(&*status),
        Err(poisoned) => serde_json::to_string_pretty(&*poisoned.into_inner()),
    };
    match body {
        Ok(json) => ([(header::CONTENT_TYPE, "application/json")], json).into_response(),
        Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, error.to_string()).into_response(),
    }
}

/// The router, separate from binding so tests can drive it.
pub fn router(shared: Shared) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/status", get(status_handler))
        .with_state(shared)
}

/// Binds `address`. A port in use is reported with the address and the fix.
pub async fn bind(address: SocketAddr) -> Result<TcpListener, std::io::Error> {
    TcpListener::bind(address).await.map_err(|error| {
        let hint = match error.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (another process listens there: stop it, or set [agent] listen / --listen)"
            }
            std::io::ErrorKind::PermissionDenied => {
                " (a port below 1024 needs CAP_NET_BIND_SERVICE)"
            }
            _ => "",
        };
        std::io::Error::new(
            error.kind(),
            format!("listening on {address}: {error}{hint}"),
        )
    })
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    shared: Shared,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(shared))
        .with_graceful_shutdown(shutdown)
        .await
}
