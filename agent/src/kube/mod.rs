//! Kubernetes pod opt-in: the pods of this node whose labels match a selector become targets.
//!
//! The agent lists them once from the API server and then watches them (kube-rs' `watcher`:
//! list, then watch from the list's resourceVersion, resume a watch that ends, list again on
//! 410 Gone, back off exponentially up to 30 s while the server fails), selected on the server
//! by label and by `spec.nodeName` (the DaemonSet's ClusterRole grants get, list and watch on
//! pods, nothing else). The pods' UIDs go to selection as [`Selector::Pod`]s, which follow each
//! pod's cgroup under `kubepods` as its containers come and go.
//!
//! In a pod, the API server, the service-account token and its CA come from the standard
//! in-cluster places; `[kubernetes] api_server` points elsewhere (an `http://` address is
//! accepted on loopback only, e.g. `kubectl proxy`, so the token never crosses a network in
//! clear). The token and CA files are read again every minute: projected tokens are rotated.
//!
//! [`Selector::Pod`]: memtide_host::targets::select::Selector::Pod

mod watch;

use memtide_config::KubeConfig;
use std::path::{Path, PathBuf};

pub use watch::{Denial, PodWatchError};

/// A failure to set up the pod watch.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(
        "pod opt-in needs this node's name: set MEMTIDE_NODE_NAME (the DaemonSet sets it from \
         spec.nodeName) or [kubernetes] node_name"
    )]
    NoNodeName,
    #[error(
        "no API server: KUBERNETES_SERVICE_HOST is not set (not running in a pod); set \
         [kubernetes] api_server"
    )]
    NoApiServer,
    #[error(
        "[kubernetes] api_server {0}: plain http only on loopback (kubectl proxy); use https so \
         the token is not sent in clear"
    )]
    PlainHttp(String),
    #[error("[kubernetes] api_server {0}: not an http:// or https:// URL")]
    BadUrl(String),
    #[error("{}: {source}", path.display())]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: no PEM certificate in the CA file", path.display())]
    NoCertificate { path: PathBuf },
}

/// One opted-in pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// The pod's labels, which `[[targets.limits]] pod_label` matches.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Watches the opted-in pods of one node.
#[derive(Clone)]
pub struct PodWatcher {
    client: kube::Config,
    server: String,
    label_selector: String,
    field_selector: String,
}

impl std::fmt::Debug for PodWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWatcher")
            .field("server", &self.server)
            .field("label_selector", &self.label_selector)
            .field("field_selector", &self.field_selector)
            .finish_non_exhaustive()
    }
}

impl PodWatcher {
    /// A watcher for the pods on `node` matching `selector`. `env` looks up environment
    /// variables (injected for tests). The CA and token files are checked here, so a missing
    /// one is a start-up error naming it rather than a retried failure.
    pub fn new(
        config: &KubeConfig,
        node: &str,
        selector: &str,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, KubeError> {
        if node.is_empty() {
            return Err(KubeError::NoNodeName);
        }
        let server = if config.api_server.is_empty() {
            let host = env("KUBERNETES_SERVICE_HOST")
                .filter(|h| !h.is_empty())
                .ok_or(KubeError::NoApiServer)?;
            let port = env("KUBERNETES_SERVICE_PORT").unwrap_or_else(|| "443".to_owned());
            if host.contains(':') {
                format!("https://[{host}]:{port}")
            } else {
                format!("https://{host}:{port}")
            }
        } else {
            config.api_server.trim_end_matches('/').to_owned()
        };
        let https = if let Some(rest) = server.strip_prefix("http://") {
            if !is_loopback(rest) {
                return Err(KubeError::PlainHttp(server));
            }
            false
        } else if server.starts_with("https://") {
            true
        } else {
            return Err(KubeError::BadUrl(server));
        };
        let uri = server
            .parse::<http::Uri>()
            .map_err(|_| KubeError::BadUrl(server.clone()))?;
        let mut client = kube::Config::new(uri);
        // Over plain http (a loopback proxy) the proxy authenticates; no token is sent.
        if https {
            client.root_cert = Some(read_ca(&config.ca_file)?);
            client.root_cert_file = Some(config.ca_file.clone());
            std::fs::metadata(&config.token_file).map_err(|source| KubeError::File {
                path: config.token_file.clone(),
                source,
            })?;
            client.auth_info.token_file = Some(config.token_file.display().to_string());
        }
        Ok(Self {
            client,
            server,
            label_selector: selector.to_owned(),
            field_selector: format!("spec.nodeName={node}"),
        })
    }

    /// The API server's URL (for logs).
    #[must_use]
    pub fn server(&self) -> &str {
        &self.server
    }
}

/// The DER certificates of a PEM bundle; an unreadable file or one without a certificate is
/// an error naming it.
fn read_ca(path: &Path) -> Result<Vec<Vec<u8>>, KubeError> {
    let pem = std::fs::read(path).map_err(|source| KubeError::File {
        path: path.to_owned(),
        source,
    })?;
    let certs: Vec<Vec<u8>> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert.der().to_vec()),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(KubeError::NoCertificate {
            path: path.to_owned(),
        });
    }
    Ok(certs)
}

/// Whether the authority of an `http://` URL (what follows the scheme) names this machine.
fn is_loopback(rest: &str) -> bool {
    let authority = rest.split('/').next().unwrap_or_default();
    let host = if let Some(bracketed) = authority.strip_prefix('[') {
        bracketed.split(']').next().unwrap_or_default()
    } else {
        authority.rsplit_once(':').map_or(authority, |(h, _)| h)
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_watch_selects_by_label_and_node() {
        let config = KubeConfig {
            api_server: "http://127.0.0.1:8001/".to_owned(),
            ..KubeConfig::default()
        };
        let watcher =
            PodWatcher::new(&config, "node-a", "memtide.io/tiering=enabled", no_env).unwrap();
        assert_eq!(watcher.server(), "http://127.0.0.1:8001");
        assert_eq!(watcher.label_selector, "memtide.io/tiering=enabled");
        assert_eq!(watcher.field_selector, "spec.nodeName=node-a");
        assert_eq!(
            watcher.client.auth_info.token_file, None,
            "no token over plain http"
        );
    }

    #[test]
    fn in_cluster_uses_the_service_host_the_ca_and_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let config = KubeConfig {
            ca_file: dir.path().join("ca.crt"),
            token_file: dir.path().join("token"),
            ..KubeConfig::default()
        };
        let env = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_owned()),
            "KUBERNETES_SERVICE_PORT" => Some("6443".to_owned()),
            _ => None,
        };
        // A missing CA file is named.
        let error = PodWatcher::new(&config, "n", "a=b", env).unwrap_err();
        assert!(error.to_string().contains("ca.crt"), "{error}");
        std::fs::write(&config.ca_file, "not a certificate\n").unwrap();
        let error = PodWatcher::new(&config, "n", "a=b", env).unwrap_err();
        assert!(matches!(error, KubeError::NoCertificate { .. }), "{error}");
        let certified = rcgen::generate_simple_self_signed(vec!["fd00::1".to_owned()]).unwrap();
        std::fs::write(&config.ca_file, certified.cert.pem()).unwrap();
        // So is a missing token file.
        let error = PodWatcher::new(&config, "n", "a=b", env).unwrap_err();
        assert!(error.to_string().contains("token"), "{error}");
        std::fs::write(&config.token_file, "t\n").unwrap();
        let watcher = PodWatcher::new(&config, "n", "a=b", env).unwrap();
        assert_eq!(watcher.server(), "https://[fd00::1]:6443");
        assert_eq!(
            watcher.client.root_cert.as_deref(),
            Some(&[certified.cert.der().to_vec()][..])
        );
        assert_eq!(
            watcher.client.auth_info.token_file.as_deref(),
            Some(config.token_file.to_str().unwrap())
        );
        // Outside a pod, without api_server, the error says what to set.
        let error = PodWatcher::new(&config, "n", "a=b", no_env).unwrap_err();
        assert!(matches!(error, KubeError::NoApiServer), "{error}");
        assert!(error.to_string().contains("api_server"));
    }

    #[test]
    fn plain_http_is_refused_off_loopback_and_the_node_name_is_required() {
        for (server, ok) in [
            ("http://10.0.0.1:8001", false),
            ("http://kubernetes.default:80", false),
            ("http://localhost:8001", true),
            ("http://[::1]:8001", true),
            ("http://127.0.0.2", true),
            ("ftp://127.0.0.1", false),
        ] {
            let config = KubeConfig {
                api_server: server.to_owned(),
                ..KubeConfig::default()
            };
            assert_eq!(
                PodWatcher::new(&config, "n", "a=b", no_env).is_ok(),
                ok,
                "{server}"
            );
        }
        let config = KubeConfig {
            api_server: "http://127.0.0.1:1".to_owned(),
            ..KubeConfig::default()
        };
        assert!(matches!(
            PodWatcher::new(&config, "", "a=b", no_env),
            Err(KubeError::NoNodeName)
        ));
    }
}
