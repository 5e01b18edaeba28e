//! `[kubernetes]`: how the agent reaches the API server for pod opt-in.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The in-cluster service-account files.
pub const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// `[kubernetes]`: how to reach the API server for pod opt-in (`[targets] pod_selector`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KubeConfig {
    /// This node's name; `MEMTIDE_NODE_NAME` (set by the DaemonSet from `spec.nodeName`) wins.
    pub node_name: String,
    /// API server URL; empty means in-cluster (`KUBERNETES_SERVICE_HOST` and `_PORT`).
    pub api_server: String,
    /// Bearer token (the service account's), read again every minute: projected tokens rotate.
    pub token_file: PathBuf,
    /// CA bundle (PEM) the API server's certificate must chain to, read again every minute.
    pub ca_file: PathBuf,
    /// Not used: the pods are listed once, then watched. Kept so that configurations written
    /// for the polling agent still load.
    pub poll_seconds: u64,
}

impl Default for KubeConfig {
    fn default() -> Self {
        Self {
            node_name: String::new(),
            api_server: String::new(),
            token_file: Path::new(SERVICE_ACCOUNT).join("token"),
            ca_file: Path::new(SERVICE_ACCOUNT).join("ca.crt"),
            poll_seconds: 10,
        }
    }
}
