//! The agent's HTTP endpoints: `/metrics` (OpenMetrics), `/healthz` (the process answers),
//! `/readyz` (a source runs and the first target pass is done), `/status` (JSON, see
//! [`super::status`]).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use axum::{
    Router,
    body::Bytes,
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
    routing::get,
};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use super::status::AgentStatus;
use crate::metrics;

/// How long an encoded response is served again. The agent publishes its metrics once a
/// second and targets at each epoch, so a fresher answer would say nothing new; a burst of
/// scrapes (many Prometheus replicas, a dashboard storm) then costs a reference-count bump per
/// request instead of an encode, and cannot starve sampling of CPU.
const RESPONSE_TTL: Duration = Duration::from_millis(250);

/// What the handlers read.
#[derive(Clone, Debug)]
pub struct Shared {
    pub registry: Arc<Registry>,
    pub status: Arc<RwLock<AgentStatus>>,
    pub ready: Arc<AtomicBool>,
    pub cache: Arc<Mutex<ResponseCache>>,
}

impl Shared {
    #[must_use]
    pub fn new(
        registry: Arc<Registry>,
        status: Arc<RwLock<AgentStatus>>,
        ready: Arc<AtomicBool>,
    ) -> Self {
        Self {
            registry,
            status,
            ready,
            cache: Arc::default(),
        }
    }

    fn cached(&self, which: Cached, encode: impl FnOnce(&Self) -> Bytes) -> Bytes {
        let mut cache = match self.cache.lock() {
            Ok(cache) => cache,
            Err(poisoned) => poisoned.into_inner(),
        };
        let slot = &mut cache.entries[which as usize];
        if let Some((at, body)) = slot
            && at.elapsed() < RESPONSE_TTL
        {
            return body.clone();
        }
        // Encoded under the lock: concurrent requests wait for this one encode rather than
        // each doing their own.
        let body = encode(self);
        *slot = Some((Instant::now(), body.clone()));
        body
    }
}

#[derive(Clone, Copy)]
enum Cached {
    OpenMetrics,
    Text,
    Status,
}

/// Recently encoded responses, by [`Cached`] kind.
#[derive(Debug, Default)]
pub struct ResponseCache {
    entries: [Option<(Instant, Bytes)>; 3],
}

/// OpenMetrics for clients that ask for it (Prometheus does), the classic text format
/// otherwise (curl, promtool, older scrapers).
async fn metrics_handler(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    let wants_openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|accept| accept.to_str().ok())
        .is_some_and(|accept| accept.contains("application/openmetrics-text"));
    if wants_openmetrics {
        let body = shared.cached(Cached::OpenMetrics, |shared| {
            Bytes::from(metrics::encode(&shared.registry))
        });
        ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], body).into_response()
    } else {
        let body = shared.cached(Cached::Text, |shared| {
            Bytes::from(metrics::to_prometheus_text(&metrics::encode(
                &shared.registry,
            )))
        });
        ([(header::CONTENT_TYPE, metrics::TEXT_CONTENT_TYPE)], body).into_response()
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
    let body = shared.cached(Cached::Status, |shared| {
        let json = match shared.status.read() {
            Ok(status) => serde_json::to_string_pretty(&*status),
            Err(poisoned) => serde_json::to_string_pretty(&*poisoned.into_inner()),
        };
        // AgentStatus holds only strings, numbers and maps with string keys.
        Bytes::from(json.unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}")))
    });
    ([(header::CONTENT_TYPE, "application/json")], body).into_response()
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
