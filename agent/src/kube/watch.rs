//! The pod watch itself: kube-rs' `watcher` stream folded into the set of opted-in pods, and
//! its errors told apart (a rejected token, a denied permission, anything else).

use std::{collections::BTreeMap, ops::ControlFlow, time::Duration};

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher::{self, Event};

use super::{PodRef, PodWatcher};

/// How long to wait before building the client again when that failed.
const CLIENT_RETRY: Duration = Duration::from_secs(30);
/// The first wait after a failed list or watch, doubled after each further failure up to
/// [`RETRY_MAX`] (client-go's reflector: 0.8 s to 30 s).
const RETRY_FIRST: Duration = Duration::from_millis(800);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Why the API server refused the agent, when it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denial {
    /// 401: the token was rejected (expired, revoked, or not a token of this cluster).
    Unauthorized,
    /// 403: the service account may not list or watch pods (RBAC).
    Forbidden,
}

impl Denial {
    /// The `reason` label of `memtide_kube_api_denied_total`.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
        }
    }
}

/// A failed list or watch; the watch is retried with back-off.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodWatchError {
    pub denial: Option<Denial>,
    pub message: String,
}

impl std::fmt::Display for PodWatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl PodWatcher {
    /// Lists, then watches, the opted-in pods, and calls `on_update` with the whole set each
    /// time it changes (first after the initial list) and with every failure; returns when
    /// `on_update` breaks. Failures are retried after a wait that doubles from 0.8 s to 30 s
    /// (jittered), so a fleet of agents does not hammer a server that is down or refuses them.
    pub async fn run(
        self,
        mut on_update: impl FnMut(Result<Vec<PodRef>, PodWatchError>) -> ControlFlow<()>,
    ) {
        let token_file = self.client.auth_info.token_file.clone();
        let client = loop {
            match kube::Client::try_from(self.client.clone()) {
                Ok(client) => break client,
                Err(error) => {
                    let failure = PodWatchError {
                        denial: None,
                        message: format!("connecting to {}: {error}", self.server),
                    };
                    if on_update(Err(failure)).is_break() {
                        return;
                    }
                    tokio::time::sleep(CLIENT_RETRY).await;
                }
            }
        };
        let pods: kube::Api<Pod> = kube::Api::all(client);
        // resourceVersion=0 lists are served from the API server's watch cache, not a quorum
        // read of etcd: what informers do, and what a DaemonSet on thousands of nodes needs.
        // kube-rs drops the 0 from a paged list, and one node's pods (kubelet's max-pods, 110
        // by default) need no paging.
        let mut config = watcher::Config::default()
            .labels(&self.label_selector)
            .fields(&self.field_selector)
            .any_semantic();
        config.page_size = None;
        // Not kube-rs' default_backoff: it resets on every item the watcher yields, and a relist
        // yields `Init` before its request, so a list that keeps failing was retried every
        // 0.8-1.5 s for ever (measured against a server answering garbage).
        let mut stream = std::pin::pin!(watcher::watcher(pods, config));
        let mut set = PodSet::default();
        let mut retry = RetryDelay::default();
        while let Some(event) = stream.next().await {
            let update = match event {
                Ok(event) => {
                    if !matches!(event, Event::Init | Event::InitApply(_)) {
                        retry.reset();
                    }
                    set.apply(event).map(Ok)
                }
                Err(error) => Some(Err(describe(&error, &self.server, token_file.as_deref()))),
            };
            let failed = update.as_ref().is_some_and(Result::is_err);
            if let Some(update) = update
                && on_update(update).is_break()
            {
                return;
            }
            if failed {
                tokio::time::sleep(retry.next_delay()).await;
            }
        }
    }
}

/// The wait before the next attempt after a failure: doubling, capped, with up to a quarter of
/// jitter either way so that agents restarted together spread their retries.
#[derive(Debug, Default)]
struct RetryDelay {
    failures: u32,
}

impl RetryDelay {
    fn next_delay(&mut self) -> Duration {
        let base = RETRY_FIRST
            .saturating_mul(1 << self.failures.min(8))
            .min(RETRY_MAX);
        self.failures = self.failures.saturating_add(1);
        // The clock's nanoseconds are random enough to spread a fleet; no RNG needed.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |t| t.subsec_nanos());
        let spread = f64::from(nanos % 1000) / 1000.0 * 0.5 + 0.75;
        base.mul_f64(spread)
    }

    fn reset(&mut self) {
        self.failures = 0;
    }
}

/// The opted-in pods as the watch events leave them.
#[derive(Debug, Default)]
struct PodSet {
    pods: BTreeMap<String, PodRef>,
    /// The pods of a list in progress, which replace `pods` when it completes.
    listing: Option<BTreeMap<String, PodRef>>,
}

impl PodSet {
    /// Takes in one event; the new set, by UID, when it may have changed.
    fn apply(&mut self, event: Event<Pod>) -> Option<Vec<PodRef>> {
        match event {
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                return None;
            }
            Event::InitApply(pod) => {
                if let (Some(listing), Some(pod)) = (self.listing.as_mut(), opted_in(&pod)) {
                    listing.insert(pod.uid.clone(), pod);
                }
                return None;
            }
            Event::InitDone => self.pods = self.listing.take().unwrap_or_default(),
            Event::Apply(pod) => match opted_in(&pod) {
                Some(pod) => {
                    self.pods.insert(pod.uid.clone(), pod);
                }
                // Finished: it has no processes left to manage.
                None => {
                    self.pods.remove(&uid_of(&pod));
                }
            },
            // Deleted, or no longer matching the label selector (the server sends a deletion
            // when an object stops matching a watch's selector).
            Event::Delete(pod) => {
                self.pods.remove(&uid_of(&pod));
            }
        }
        Some(self.pods.values().cloned().collect())
    }
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

/// The pod as a target, unless it has finished (or has no UID to find its cgroup by).
fn opted_in(pod: &Pod) -> Option<PodRef> {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let meta = &pod.metadata;
    Some(PodRef {
        namespace: meta.namespace.clone().unwrap_or_default(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().filter(|uid| !uid.is_empty())?,
        labels: meta.labels.clone().unwrap_or_default(),
    })
}

/// A failure as the operator needs it: what the server said, and what to fix when it refused.
fn describe(error: &watcher::Error, server: &str, token_file: Option<&str>) -> PodWatchError {
    let status = match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => match e {
            kube::Error::Api(status) => Some(status.as_ref()),
            _ => None,
        },
        watcher::Error::WatchError(status) => Some(status.as_ref()),
        watcher::Error::NoResourceVersion => None,
    };
    let denial = match status.map(|s| s.code) {
        Some(401) => Some(Denial::Unauthorized),
        Some(403) => Some(Denial::Forbidden),
        _ => None,
    };
    let said = status.map_or_else(String::new, |s| format!(": {}", s.message));
    let message = match denial {
        Some(Denial::Unauthorized) => format!(
            "{server} rejected the agent's token (401 Unauthorized{said}); [kubernetes] \
             token_file {} must hold a current token of this cluster's memtide service account",
            token_file.unwrap_or("(none: plain http)")
        ),
        Some(Denial::Forbidden) => format!(
            "{server} denied watching pods (403 Forbidden{said}); the service account needs get, \
             list and watch on pods (deploy/kubernetes/base/rbac.yaml)"
        ),
        None => {
            let chain = error_chain(error);
            // rustls says why it refused the server only deep in the chain.
            let hint = if chain.to_lowercase().contains("certificate") {
                "; the server's certificate must chain to [kubernetes] ca_file"
            } else {
                ""
            };
            format!("watching pods on {server}: {chain}{hint}")
        }
    };
    PodWatchError { denial, message }
}

/// The error and its causes, "outer: inner: ...", each said once (hyper and kube repeat them).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut said: Vec<String> = Vec::new();
    let mut next = Some(error);
    while let Some(error) = next {
        let text = error.to_string();
        if !said.iter().any(|earlier| earlier.contains(&text)) {
            said.push(text);
        }
        next = error.source();
    }
    said.join(": ")
}

#[cfg(test)]
mod tests;
