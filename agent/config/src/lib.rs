//! The agent's configuration: `/etc/memtide/memtide.toml`, every key documented with its
//! default in `deploy/config/memtide.toml`.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere): a misspelt key is an error with its
//! line and column, never silently ignored. [`Config::validate`] then checks values against
//! each other and against the machine's NUMA nodes (a fast node that does not exist, say),
//! which the caller reads.
//!
//! It depends on no crate that makes system calls (libc, perf-event-open-sys2, memtide-host;
//! the file itself is read through std), so that the daemon (through `memtide-host`, which
//! acts on these tables) and the simulator (which reads `[engine]` with [`EngineTable`]) share
//! one list of tables and one `[engine]` parser.
#![forbid(unsafe_code)]

use std::path::Path;

use serde::{Deserialize, Serialize};

use memtide_core::tiering::TieringConfig;

pub use self::{
    agent::{AgentConfig, CoexistMode, LogFormat, resolve_address},
    engine::{EngineFileError, EngineTable, EngineTableError},
    error::{ConfigError, line_of},
    kubernetes::KubeConfig,
    limits::{LimitAmount, LimitSelector, TargetLimit},
    migration::ExecConfig,
    sources::{DamonMonitorConfig, SourceKind, SourcesConfig},
    targets::TargetsConfig,
    topology::{NodeCostOverride, TierOverride},
};

mod agent;
mod engine;
mod error;
pub mod kubernetes;
pub mod limits;
mod migration;
pub mod sources;
mod targets;
mod topology;
mod validate;

/// Where the service looks for its configuration.
pub const DEFAULT_PATH: &str = "/etc/memtide/memtide.toml";

/// The tables of a configuration file: [`Config`]'s fields, in the order the shipped file
/// (deploy/config/memtide.toml) has them. A test keeps the two in step.
pub const TABLES: [&str; 7] = [
    "agent",
    "targets",
    "sources",
    "topology",
    "migration",
    "engine",
    "kubernetes",
];

/// The whole configuration file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub agent: AgentConfig,
    pub targets: TargetsConfig,
    pub sources: SourcesConfig,
    /// Which NUMA nodes are fast and which slow. Empty lists: decided from the kernel's memory
    /// tiers, HMAT, distances and CPU-less nodes (`memtide probe` shows the result).
    pub topology: TierOverride,
    /// The migration executor: batching, rate limits (bytes/s, 0 = unlimited), watermark
    /// reserve, retries, huge-page handling.
    pub migration: ExecConfig,
    /// Hotness engine and placement policy (see `agent/core/src/engine` and `agent/core/src/policy`).
    pub engine: TieringConfig,
    /// The API server, for `[targets] pod_selector`.
    pub kubernetes: KubeConfig,
}

impl Config {
    /// Parses `text` (read from `path`, used in messages).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|error| ConfigError::syntax(path, text, &error))
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// The DaemonSet's environment: `MEMTIDE_POD_SELECTOR` and `MEMTIDE_NODE_NAME`, when set
    /// and not empty, win over `[targets] pod_selector` and `[kubernetes] node_name`.
    pub fn apply_kubernetes_env(&mut self, env: impl Fn(&str) -> Option<String>) {
        if let Some(selector) = env("MEMTIDE_POD_SELECTOR").filter(|s| !s.trim().is_empty()) {
            self.targets.pod_selector = selector.trim().to_owned();
        }
        if let Some(node) = env("MEMTIDE_NODE_NAME").filter(|s| !s.trim().is_empty()) {
            self.kubernetes.node_name = node.trim().to_owned();
        }
    }
}

/// One value problem found by [`Config::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl Problem {
    pub(crate) fn new(key: impl Into<String>, message: String) -> Self {
        Self {
            key: key.into(),
            message,
        }
    }
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// Refuses a configuration file anyone may write: it decides which processes' memory an
/// agent with CAP_SYS_NICE rewrites.
pub fn check_permissions(path: &Path) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    let metadata = std::fs::metadata(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    if metadata.permissions().mode() & 0o002 != 0 {
        return Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            line: None,
            key: "(file mode)".to_owned(),
            message: "the file is world-writable; fix with: chmod o-w".to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    #[test]
    fn the_daemonset_environment_sets_pod_opt_in() {
        let mut config = parse("[targets]\npod_selector = \"team=db\"\n").unwrap();
        assert!(!config.targets.is_empty(), "a pod selector is a target");
        config.apply_kubernetes_env(|_| Some(String::new()));
        assert_eq!(
            config.targets.pod_selector, "team=db",
            "empty values change nothing"
        );
        config.apply_kubernetes_env(|name| match name {
            "MEMTIDE_POD_SELECTOR" => Some("memtide.io/tiering=enabled".to_owned()),
            "MEMTIDE_NODE_NAME" => Some("node-7\n".to_owned()),
            _ => None,
        });
        assert_eq!(config.targets.pod_selector, "memtide.io/tiering=enabled");
        assert_eq!(config.kubernetes.node_name, "node-7");
        // Kept so that configurations written for the polling agent still load.
        assert!(
            parse("[kubernetes]\npoll_seconds = 0\n")
                .unwrap()
                .problems(None)
                .is_empty()
        );
    }

    #[test]
    fn listen_takes_host_names_and_says_what_an_address_is() {
        let config = parse("[agent]\nlisten = \"localhost:9478\"\n").unwrap();
        assert!(
            config.agent.listen.ip().is_loopback(),
            "{}",
            config.agent.listen
        );
        assert_eq!(config.agent.listen.port(), 9478);
        let config = parse("[agent]\nlisten = \"[::1]:9\"\n").unwrap();
        assert_eq!(config.agent.listen.to_string(), "[::1]:9");
        let error = parse("\n[agent]\nlisten = \"localhost\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            error.starts_with("test.toml:3:") && error.contains("HOST:PORT"),
            "{error}"
        );
        assert!(resolve_address("localhost:70000").is_err());
        assert!(resolve_address(":80").is_err());
    }

    #[test]
    fn empty_file_is_the_default_configuration() {
        assert_eq!(parse("").unwrap(), Config::default());
        let config = Config::default();
        assert_eq!(config.agent.listen.to_string(), "127.0.0.1:9477");
        assert!(!config.agent.observe);
        assert!(config.targets.is_empty());
    }

    #[test]
    fn the_shipped_default_config_parses_and_equals_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/config/memtide.toml");
        let config = Config::load(&path).expect("deploy/config/memtide.toml parses");
        assert_eq!(
            config,
            Config::default(),
            "the commented defaults drifted from the code"
        );
    }

    #[test]
    fn unknown_key_names_line_column_and_key() {
        let error = parse("[agent]\nobserve = true\nlisten_addr = \"0.0.0.0:1\"\n").unwrap_err();
        let text = error.to_string();
        assert!(text.starts_with("test.toml:3:1:"), "{text}");
        assert!(text.contains("listen_addr"), "{text}");
        assert!(text.contains("hint:"), "{text}");
    }

    #[test]
    fn wrong_type_names_the_key() {
        let error = parse("[sources]\nring_bytes = \"big\"\n").unwrap_err();
        let text = error.to_string();
        assert!(text.contains("test.toml:2:"), "{text}");
        assert!(
            text.contains("key `sources.ring_bytes`: invalid type"),
            "{text}"
        );
        let error = parse("[engine.policy.epoch]\nmin_ms = -1\n").unwrap_err();
        assert!(
            error.to_string().contains("`engine.policy.epoch.min_ms`"),
            "{error}"
        );
    }

    #[test]
    fn nested_engine_keys_are_strict_too() {
        let error = parse("[engine]\ninterval_msec = 5\n").unwrap_err();
        assert!(error.to_string().contains("interval_msec"), "{error}");
        // The engine's keys and the policy's table share `[engine]`: errors still point at the
        // key they are about.
        let error = parse("[engine]\ntop_n = 4\ninterval_msec = 5\n").unwrap_err();
        assert!(error.to_string().starts_with("test.toml:3:1:"), "{error}");
        let error = parse("[engine]\ninterval_ms = \"x\"\n").unwrap_err();
        let text = error.to_string();
        assert!(
            text.starts_with("test.toml:2:") && text.contains("key `engine.interval_ms`"),
            "{text}"
        );
        let error = parse("[engine.policy]\nnope = 1\n").unwrap_err();
        assert!(error.to_string().starts_with("test.toml:2:1:"), "{error}");
        let config = parse("[engine]\ntop_n = 4\n[engine.policy.rw]\nwindow = 5\n").unwrap();
        assert_eq!(
            (config.engine.engine.top_n, config.engine.policy.rw.window),
            (4, 5)
        );
    }

    #[test]
    fn world_writable_config_is_refused() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("memtide.toml");
        std::fs::write(&path, "").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let error = check_permissions(&path).unwrap_err();
        assert!(error.to_string().contains("world-writable"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(check_permissions(&path).is_ok());
    }

    #[test]
    fn sources_order_uses_probe_names() {
        let config = parse("[sources]\norder = [\"damon\", \"swfault\"]\n").unwrap();
        assert_eq!(
            config.sources.order,
            [SourceKind::Damon, SourceKind::SwFault]
        );
        assert!(parse("[sources]\norder = [\"pmu\"]\n").is_err());
    }

    #[test]
    fn the_table_list_is_the_configurations_fields() {
        let printed = toml::Table::try_from(Config::default()).unwrap();
        let mut fields: Vec<&str> = printed.keys().map(String::as_str).collect();
        let mut tables = TABLES.to_vec();
        fields.sort_unstable();
        tables.sort_unstable();
        assert_eq!(tables, fields);
    }
}
