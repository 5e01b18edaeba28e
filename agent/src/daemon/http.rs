//! The agent's HTTP endpoints: `/metrics` (OpenMetrics), `/healthz` (the process answers),
//! `/readyz` (a sampling source runs and the first target pass is done; 503 with the reason
//! otherwise), `/status` (JSON, see [`super::status`]).

use std::{
    net::SocketAddr,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU64, Ordering},
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
use memtide_host::sys::process;

/// How long an encoded response is served again. The agent publishes its metrics once a
/// second and targets at each epoch, so a fresher answer would say nothing new; a burst of
/// scrapes (many Prometheus replicas, a dashboard storm) then costs a reference-count bump per
/// request instead of an encode, and cannot starve sampling of CPU.
const RESPONSE_TTL: Duration = Duration::from_millis(250);
/// How stale a body may be served while another request encodes a new one (beyond it, that
/// request is presumed lost and the next one encodes).
const STALE_LIMIT: Duration = Duration::from_secs(5);

/// What the handlers read.
#[derive(Clone, Debug)]
pub struct Shared {
    pub registry: Arc<Registry>,
    pub status: Arc<RwLock<AgentStatus>>,
    pub ready: Arc<Readiness>,
    pub cache: Arc<Mutex<ResponseCache>>,
}

impl Shared {
    #[must_use]
    pub fn new(
        registry: Arc<Registry>,
        status: Arc<RwLock<AgentStatus>>,
        ready: Arc<Readiness>,
    ) -> Self {
        Self {
            registry,
            status,
            ready,
            cache: Arc::default(),
        }
    }

    fn cached(&self, which: Cached, encode: impl FnOnce(&Self) -> Bytes) -> Bytes {
        let lock = || match self.cache.lock() {
            Ok(cache) => cache,
            Err(poisoned) => poisoned.into_inner(),
        };
        {
            let mut cache = lock();
            let refreshing = cache.refreshing[which as usize];
            if let Some((at, body)) = &cache.entries[which as usize]
                && (at.elapsed() < RESPONSE_TTL || (refreshing && at.elapsed() < STALE_LIMIT))
            {
                return body.clone();
            }
            cache.refreshing[which as usize] = true;
        }
        // Encoded outside the lock, by one request while the others are served the previous
        // body: the lock is a std mutex held on a runtime worker, and holding it through an
        // encode would stall every task of the agent (sampling, epochs) along with the
        // waiting requests.
        let body = encode(self);
        let mut cache = lock();
        cache.entries[which as usize] = Some((Instant::now(), body.clone()));
        cache.refreshing[which as usize] = false;
        body
    }
}

#[derive(Clone, Copy)]
enum Cached {
    OpenMetrics,
    Text,
    Status,
}

/// What `/readyz` answers. An agent that runs without a sampling source serves metrics but
/// tiers nothing: an orchestrator or a load balancer must not count it as working, so it is
/// not ready, and says why.
#[derive(Debug)]
pub struct Readiness(RwLock<Option<String>>);

impl Readiness {
    /// Not ready yet: start-up is under way.
    #[must_use]
    pub fn starting() -> Self {
        Self(RwLock::new(Some("starting".to_owned())))
    }

    /// Ready (`None`), or not ready for `reason`. Returns whether that changed anything.
    pub fn set(&self, not_ready: Option<String>) -> bool {
        let unchanged = match self.0.read() {
            Ok(current) => *current == not_ready,
            Err(_) => false,
        };
        if !unchanged {
            match self.0.write() {
                Ok(mut current) => *current = not_ready,
                Err(poisoned) => *poisoned.into_inner() = not_ready,
            }
        }
        !unchanged
    }

    /// Why the agent is not ready; `None` when it is.
    #[must_use]
    pub fn reason(&self) -> Option<String> {
        match self.0.read() {
            Ok(current) => current.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}

/// Recently encoded responses, by [`Cached`] kind.
#[derive(Debug, Default)]
pub struct ResponseCache {
    entries: [Option<(Instant, Bytes)>; 3],
    /// A request is encoding this kind afresh.
    refreshing: [bool; 3],
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
    match shared.ready.reason() {
        None => (StatusCode::OK, "ready\n").into_response(),
        Some(reason) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}\n"),
        )
            .into_response(),
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

/// How often the server thread publishes its CPU time.
const CPU_METER_PERIOD: Duration = Duration::from_millis(100);

/// CPU time of the HTTP server's thread, as it last published it.
#[derive(Clone, Debug, Default)]
pub struct CpuMeter(Arc<AtomicU64>);

impl CpuMeter {
    #[must_use]
    pub fn get(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }

    /// Publishes the calling thread's CPU time.
    fn publish_this_thread(&self) {
        if let Ok(cpu) = process::thread_cpu_time() {
            let nanos = u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX);
            self.0.store(nanos, Ordering::Relaxed);
        }
    }
}

/// The HTTP endpoints, served by a thread of their own with its own single-threaded runtime:
/// the workers that drain the rings and run the engines never wait behind a request, and
/// what serving costs is this thread's CPU time ([`CpuMeter`], `memtide_http_cpu_seconds_total`).
#[derive(Debug)]
pub struct HttpServer {
    done: tokio::sync::oneshot::Receiver<std::io::Result<()>>,
    cpu: CpuMeter,
    thread: std::thread::JoinHandle<()>,
}

impl HttpServer {
    /// Starts serving on `listener` until `shutdown` resolves.
    pub fn start(
        listener: TcpListener,
        shared: Shared,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<Self> {
        let listener = listener.into_std()?;
        let cpu = CpuMeter::default();
        let meter = cpu.clone();
        let (done_tx, done) = tokio::sync::oneshot::channel();
        let thread = std::thread::Builder::new()
            .name("memtide-http".to_owned())
            .spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .and_then(|runtime| {
                        runtime.block_on(async {
                            let listener = TcpListener::from_std(listener)?;
                            let publisher = tokio::spawn({
                                let meter = meter.clone();
                                async move {
                                    let mut tick = tokio::time::interval(CPU_METER_PERIOD);
                                    loop {
                                        tick.tick().await;
                                        meter.publish_this_thread();
                                    }
                                }
                            });
                            let served = serve(listener, shared, shutdown).await;
                            publisher.abort();
                            served
                        })
                    });
                meter.publish_this_thread();
                let _ = done_tx.send(result);
            })?;
        Ok(Self { done, cpu, thread })
    }

    /// The server thread's CPU time, for `memtide_http_cpu_seconds_total`.
    #[must_use]
    pub fn cpu_meter(&self) -> CpuMeter {
        self.cpu.clone()
    }

    /// Waits up to `grace` for the server to finish after its shutdown signal and its thread to
    /// end; an error it stopped with is logged. Returns whether the thread ended.
    pub async fn finish(self, grace: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + grace;
        match tokio::time::timeout_at(deadline, self.done).await {
            Ok(Ok(Err(error))) => tracing::warn!(%error, "the HTTP server stopped with an error"),
            Ok(Ok(Ok(())) | Err(_)) => {}
            Err(_) => {
                tracing::warn!("the HTTP server did not stop within {grace:?}");
                return false;
            }
        }
        // The thread has sent its result and is returning: joining it waits only for its exit.
        let thread = self.thread;
        let joined = tokio::task::spawn_blocking(move || thread.join().is_ok());
        matches!(
            tokio::time::timeout_at(deadline, joined).await,
            Ok(Ok(true))
        )
    }

    /// The server thread's name, as `ps -L` shows it.
    #[cfg(test)]
    #[must_use]
    pub fn thread_name(&self) -> Option<&str> {
        self.thread.thread().name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Shared {
        Shared::new(
            Arc::new(Registry::default()),
            Arc::new(RwLock::new(AgentStatus::default())),
            Arc::new(Readiness::starting()),
        )
    }

    fn age(shared: &Shared, by: Duration) {
        let mut cache = shared.cache.lock().unwrap();
        let entry = cache.entries[Cached::Status as usize].as_mut().unwrap();
        entry.0 = Instant::now().checked_sub(by).unwrap();
    }

    #[test]
    fn a_body_is_reused_within_its_ttl_and_served_stale_while_another_request_refreshes() {
        let shared = shared();
        let first = shared.cached(Cached::Status, |_| Bytes::from_static(b"one"));
        assert_eq!(first, "one");
        let again = shared.cached(Cached::Status, |_| panic!("encoded within the TTL"));
        assert_eq!(again, "one");

        // Expired, and another request is encoding: the old body, no second encode.
        age(&shared, RESPONSE_TTL * 2);
        shared.cache.lock().unwrap().refreshing[Cached::Status as usize] = true;
        let stale = shared.cached(Cached::Status, |_| panic!("encoded twice at once"));
        assert_eq!(stale, "one");

        // That request never finished: past the stale limit the next one encodes.
        age(&shared, STALE_LIMIT * 2);
        let fresh = shared.cached(Cached::Status, |_| Bytes::from_static(b"two"));
        assert_eq!(fresh, "two");
        assert!(!shared.cache.lock().unwrap().refreshing[Cached::Status as usize]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_server_runs_on_its_own_thread_reports_its_cpu_and_stops() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let address = listener.local_addr().unwrap();
        let (stop, mut stop_rx) = tokio::sync::watch::channel(false);
        let server = HttpServer::start(listener, shared(), async move {
            let _ = stop_rx.changed().await;
        })
        .unwrap();
        let meter = server.cpu_meter();
        let body = tokio::task::spawn_blocking(move || {
            ureq::get(&format!("http://{address}/healthz"))
                .call()
                .unwrap()
                .into_body()
                .read_to_string()
                .unwrap()
        })
        .await
        .unwrap();
        assert_eq!(body, "ok\n");
        // Other tests in this binary run servers of their own: look at this server's thread,
        // not at every thread of that name.
        assert_eq!(
            server.thread_name(),
            Some("memtide-http"),
            "no thread of its own"
        );
        stop.send(true).unwrap();
        assert!(
            server.finish(Duration::from_secs(30)).await,
            "the server thread outlived finish()"
        );
        // Published once more as the thread ends: it built a runtime and served a request.
        assert!(meter.get() > Duration::ZERO);
    }
}
