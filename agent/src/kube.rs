//! Kubernetes pod opt-in: the pods of this node whose labels match a selector become targets.
//!
//! The agent lists them from the API server (`GET /api/v1/pods` with a label selector and a
//! `spec.nodeName` field selector, the one permission the DaemonSet's ClusterRole grants) every
//! `[kubernetes] poll_seconds`, and hands their UIDs to selection as [`Selector::Pod`]s, which
//! follow each pod's cgroup under `kubepods` as its containers come and go.
//!
//! In a pod, the API server, the service-account token and its CA come from the standard
//! in-cluster places; `[kubernetes] api_server` points elsewhere (an `http://` address is
//! accepted on loopback only, e.g. `kubectl proxy`, so the token never crosses a network in
//! clear). The token file is read again for every request: projected tokens are rotated.
//!
//! [`Selector::Pod`]: super::select::Selector::Pod

use memtide_config::KubeConfig;
use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use serde::Deserialize;

/// Largest pod list accepted (a node runs at most a few hundred pods; each item is a few KiB).
const MAX_BODY: u64 = 64 << 20;

/// A failure to set up or run the pod list.
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
    #[error("listing pods from {url}: {what}")]
    Request { url: String, what: String },
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

/// Lists the opted-in pods of one node.
#[derive(Clone)]
pub struct PodLister {
    http: ureq::Agent,
    url: String,
    token_file: Option<PathBuf>,
}

impl std::fmt::Debug for PodLister {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodLister").field("url", &self.url).finish()
    }
}

impl PodLister {
    /// A lister for the pods on `node` matching `selector`. `env` looks up environment
    /// variables (injected for tests).
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
        let tls = if let Some(rest) = server.strip_prefix("http://") {
            if !is_loopback(rest) {
                return Err(KubeError::PlainHttp(server));
            }
            None
        } else if server.starts_with("https://") {
            Some(read_ca(&config.ca_file)?)
        } else {
            return Err(KubeError::BadUrl(server));
        };
        let mut builder = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(20)))
            .http_status_as_error(false);
        if let Some(roots) = tls {
            builder = builder.tls_config(
                ureq::tls::TlsConfig::builder()
                    .root_certs(ureq::tls::RootCerts::Specific(Arc::new(roots)))
                    .build(),
            );
        }
        let url = format!(
            "{server}/api/v1/pods?labelSelector={}&fieldSelector={}",
            percent_encode(selector),
            percent_encode(&format!("spec.nodeName={node}"))
        );
        // Over plain http (loopback proxy) the proxy authenticates; no token is sent.
        let token_file = server
            .starts_with("https://")
            .then(|| config.token_file.clone());
        Ok(Self {
            http: builder.build().into(),
            url,
            token_file,
        })
    }

    /// The request URL (for logs).
    #[must_use]
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The opted-in pods that are not finished, by UID order. Blocking (run it off the
    /// runtime's threads).
    pub fn list(&self) -> Result<Vec<PodRef>, KubeError> {
        let request_error = |what: String| KubeError::Request {
            url: self.url.clone(),
            what,
        };
        let mut request = self
            .http
            .get(&self.url)
            .header("Accept", "application/json");
        if let Some(path) = &self.token_file {
            let token = std::fs::read_to_string(path).map_err(|source| KubeError::File {
                path: path.clone(),
                source,
            })?;
            request = request.header("Authorization", format!("Bearer {}", token.trim()));
        }
        let mut response = request.call().map_err(|e| request_error(e.to_string()))?;
        let status = response.status();
        let body = response
            .body_mut()
            .with_config()
            .limit(MAX_BODY)
            .read_to_string()
            .map_err(|e| request_error(e.to_string()))?;
        if !status.is_success() {
            let message = serde_json::from_str::<Status>(&body)
                .map(|s| s.message)
                .unwrap_or_default();
            let hint = if status.as_u16() == 401 || status.as_u16() == 403 {
                " (the service account needs get/list on pods: deploy/kubernetes/base/rbac.yaml)"
            } else {
                ""
            };
            return Err(request_error(format!("HTTP {status}: {message}{hint}")));
        }
        parse_pod_list(&body).map_err(|e| request_error(format!("unexpected pod list: {e}")))
    }
}

/// The API server's error body.
#[derive(Deserialize)]
struct Status {
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct PodList {
    items: Vec<Pod>,
}

#[derive(Deserialize)]
struct Pod {
    metadata: Metadata,
    #[serde(default)]
    status: PodStatus,
}

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
    uid: String,
    #[serde(default)]
    labels: std::collections::BTreeMap<String, String>,
}

#[derive(Default, Deserialize)]
struct PodStatus {
    #[serde(default)]
    phase: String,
}

/// The pods of a `PodList` body that still run (or are about to); finished ones have no
/// processes left to manage.
pub fn parse_pod_list(body: &str) -> Result<Vec<PodRef>, serde_json::Error> {
    let list: PodList = serde_json::from_str(body)?;
    let mut pods: Vec<PodRef> = list
        .items
        .into_iter()
        .filter(|pod| !matches!(pod.status.phase.as_str(), "Succeeded" | "Failed"))
        .map(|pod| PodRef {
            namespace: pod.metadata.namespace,
            name: pod.metadata.name,
            uid: pod.metadata.uid,
            labels: pod.metadata.labels,
        })
        .collect();
    pods.sort_by(|a, b| a.uid.cmp(&b.uid));
    Ok(pods)
}

fn read_ca(path: &Path) -> Result<Vec<ureq::tls::Certificate<'static>>, KubeError> {
    let pem = std::fs::read(path).map_err(|source| KubeError::File {
        path: path.to_owned(),
        source,
    })?;
    let certs: Vec<_> = ureq::tls::parse_pem(&pem)
        .filter_map(|item| match item {
            Ok(ureq::tls::PemItem::Certificate(cert)) => Some(cert.to_owned()),
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

/// Percent-encodes everything but RFC 3986's unreserved characters (a query value).
fn percent_encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn the_url_selects_by_label_and_node() {
        let config = KubeConfig {
            api_server: "http://127.0.0.1:8001/".to_owned(),
            ..KubeConfig::default()
        };
        let lister =
            PodLister::new(&config, "node-a", "memtide.io/tiering=enabled", no_env).unwrap();
        assert_eq!(
            lister.url(),
            "http://127.0.0.1:8001/api/v1/pods?labelSelector=memtide.io%2Ftiering%3Denabled\
             &fieldSelector=spec.nodeName%3Dnode-a"
        );
        assert_eq!(lister.token_file, None, "no token over plain http");
    }

    #[test]
    fn in_cluster_uses_the_service_host_and_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let config = KubeConfig {
            ca_file: dir.path().join("ca.crt"),
            ..KubeConfig::default()
        };
        let env = |name: &str| match name {
            "KUBERNETES_SERVICE_HOST" => Some("fd00::1".to_owned()),
            "KUBERNETES_SERVICE_PORT" => Some("6443".to_owned()),
            _ => None,
        };
        // A missing CA file is named.
        let error = PodLister::new(&config, "n", "a=b", env).unwrap_err();
        assert!(error.to_string().contains("ca.crt"), "{error}");
        std::fs::write(&config.ca_file, "not a certificate\n").unwrap();
        let error = PodLister::new(&config, "n", "a=b", env).unwrap_err();
        assert!(matches!(error, KubeError::NoCertificate { .. }), "{error}");
        // Outside a pod, without api_server, the error says what to set.
        let error = PodLister::new(&config, "n", "a=b", no_env).unwrap_err();
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
                PodLister::new(&config, "n", "a=b", no_env).is_ok(),
                ok,
                "{server}"
            );
        }
        let config = KubeConfig {
            api_server: "http://127.0.0.1:1".to_owned(),
            ..KubeConfig::default()
        };
        assert!(matches!(
            PodLister::new(&config, "", "a=b", no_env),
            Err(KubeError::NoNodeName)
        ));
    }

    /// A one-connection-at-a-time HTTPS server on loopback with a fresh self-signed
    /// certificate for 127.0.0.1; answers every request with `body` and records the request
    /// head. Returns the port and the certificate (PEM).
    fn tls_server(body: String, heads: Arc<std::sync::Mutex<Vec<String>>>) -> (u16, String) {
        use std::io::{Read as _, Write as _};
        let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
        let pem = certified.cert.pem();
        let key =
            rustls::pki_types::PrivateKeyDer::Pkcs8(certified.signing_key.serialize_der().into());
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![certified.cert.der().clone()], key)
            .unwrap(),
        );
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for tcp in listener.incoming().flatten() {
                let connection = rustls::ServerConnection::new(Arc::clone(&config)).unwrap();
                let mut tls = rustls::StreamOwned::new(connection, tcp);
                let mut head = Vec::new();
                let mut byte = [0_u8];
                while !head.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => break,
                    }
                }
                if !head.ends_with(b"\r\n\r\n") {
                    continue; // the client refused the certificate
                }
                heads
                    .lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                let _ = write!(
                    tls,
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        (port, pem)
    }

    #[test]
    fn https_verifies_the_server_against_the_ca_file_and_sends_the_token() {
        let heads = Arc::new(std::sync::Mutex::new(Vec::new()));
        let body = r#"{"items":[{"metadata":{"name":"db","namespace":"prod","uid":"u-1"}}]}"#;
        let (port, pem) = tls_server(body.to_owned(), Arc::clone(&heads));
        let dir = tempfile::tempdir().unwrap();
        let config = KubeConfig {
            api_server: format!("https://127.0.0.1:{port}"),
            token_file: dir.path().join("token"),
            ca_file: dir.path().join("ca.crt"),
            ..KubeConfig::default()
        };
        std::fs::write(&config.ca_file, &pem).unwrap();
        std::fs::write(&config.token_file, "first-token\n").unwrap();
        let lister = PodLister::new(&config, "node-a", "app=db", no_env).unwrap();
        assert_eq!(lister.list().unwrap()[0].uid, "u-1");
        // A rotated token is picked up by the next request.
        std::fs::write(&config.token_file, "second-token").unwrap();
        lister.list().unwrap();
        let heads = heads.lock().unwrap().clone();
        assert!(heads[0].contains("Bearer first-token\r\n"), "{}", heads[0]);
        assert!(heads[1].contains("Bearer second-token\r\n"), "{}", heads[1]);
        assert!(heads[0].starts_with("GET /api/v1/pods?labelSelector=app%3Ddb&"));

        // Another CA: the server is not trusted and no request goes out.
        let (_, other_pem) = tls_server(String::new(), Arc::default());
        std::fs::write(&config.ca_file, other_pem).unwrap();
        let lister = PodLister::new(&config, "node-a", "app=db", no_env).unwrap();
        let error = lister.list().unwrap_err().to_string();
        assert!(error.to_lowercase().contains("certificate"), "{error}");
    }

    #[test]
    fn finished_pods_are_left_out_and_the_rest_sorted_by_uid() {
        let body = r#"{"kind":"PodList","apiVersion":"v1","metadata":{"resourceVersion":"9"},
            "items":[
              {"metadata":{"name":"db","namespace":"prod","uid":"b-2","labels":{"tier":"gold"}},"status":{"phase":"Running"}},
              {"metadata":{"name":"job","namespace":"prod","uid":"c-3"},"status":{"phase":"Succeeded"}},
              {"metadata":{"name":"web","namespace":"prod","uid":"a-1"},"status":{"phase":"Pending"}},
              {"metadata":{"name":"new","namespace":"prod","uid":"d-4"}}
            ]}"#;
        let pods = parse_pod_list(body).unwrap();
        let uids: Vec<&str> = pods.iter().map(|p| p.uid.as_str()).collect();
        assert_eq!(uids, ["a-1", "b-2", "d-4"]);
        assert_eq!(pods[1].name, "db");
        assert_eq!(pods[1].labels.get("tier").map(String::as_str), Some("gold"));
        assert!(pods[0].labels.is_empty());
        assert!(parse_pod_list(r#"{"items":[{"metadata":{}}]}"#).is_err());
    }
}
