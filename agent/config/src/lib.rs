//! The agent's configuration: `/etc/memtide/memtide.toml`, every key documented with its
//! default in `deploy/config/memtide.toml`.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere): a misspelt key is an error with its
//! line and column, never silently ignored. [`Config::validate`] then checks values against
//! each other and against the machine (a fast node that does not exist, say).

use std::{
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
};

use serde::{Deserialize, Serialize};

use memtide_core::tiering::TieringConfig;
use memtide_host::{
    exec::{ExecConfig, coexist::CoexistMode},
    targets::select::{Exclude, NamePattern, Selection, Selector},
    topology::{Topology, tiering::TierOverride},
};

pub use self::{
    kubernetes::KubeConfig,
    limits::{LimitAmount, LimitSelector, TargetLimit},
    sources::{DamonMonitorConfig, SourcesConfig},
};

pub mod kubernetes;
pub mod limits;
pub mod sources;

/// Where the service looks for its configuration.
pub const DEFAULT_PATH: &str = "/etc/memtide/memtide.toml";

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

/// `[agent]`: the process itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// HTTP address for /metrics, /healthz, /readyz and /status. Loopback by default: the
    /// endpoints describe other processes' memory and are not meant for the network.
    /// `IP:PORT`, or `HOST:PORT` with a host name resolved at start (`localhost:9477`).
    #[serde(deserialize_with = "deserialize_address")]
    pub listen: SocketAddr,
    /// Run everything except migration; report what would have moved.
    pub observe: bool,
    /// `human` or `json` log lines on stderr.
    pub log_format: LogFormat,
    /// What to do when something else also manages placement (kernel NUMA balancing in
    /// tiering mode, a kdamond, numad, memtierd): `warn` and carry on, or `refuse` to start.
    pub on_conflict: CoexistMode,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 9477)),
            observe: false,
            log_format: LogFormat::Human,
            on_conflict: CoexistMode::Warn,
        }
    }
}

/// `IP:PORT`, or `HOST:PORT` with the host name resolved (its first address: `localhost` is
/// 127.0.0.1 where the system lists that first), for `listen` and the command line's
/// `--listen` and `--address`.
pub fn resolve_address(text: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs as _;
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    if text
        .rsplit_once(':')
        .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
    {
        return Err(format!(
            "{text:?} is not an address: give IP:PORT or HOST:PORT (e.g. 127.0.0.1:9477, localhost:9477)"
        ));
    }
    match text.to_socket_addrs() {
        Ok(mut addresses) => addresses
            .next()
            .ok_or_else(|| format!("{text}: the host name has no address")),
        Err(error) => Err(format!("{text}: cannot resolve the host name: {error}")),
    }
}

fn deserialize_address<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<SocketAddr, D::Error> {
    let text = String::deserialize(deserializer)?;
    resolve_address(&text).map_err(serde::de::Error::custom)
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Human,
    Json,
}

/// `[targets]`: which processes memtide manages. With none configured (and none given on the
/// command line) it observes every process and migrates nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TargetsConfig {
    /// Process ids.
    pub pids: Vec<u32>,
    /// cgroup v2 directories, relative to the cgroup v2 root (/sys/fs/cgroup, or
    /// /sys/fs/cgroup/unified on a hybrid host; e.g. `system.slice/db.service`);
    /// their member processes (and those of child cgroups) are followed as they come and go.
    pub cgroups: Vec<PathBuf>,
    /// Process name patterns (`comm` or the basename of argv[0]; `*` and `?` wildcards).
    pub names: Vec<String>,
    /// Kubernetes pod UIDs, resolved to their cgroups under `kubepods`.
    pub pods: Vec<String>,
    /// Kubernetes label selector (e.g. `memtide.io/tiering=enabled`): the pods of this node
    /// that match it are targets, listed from the API server (see `[kubernetes]`) and followed
    /// as they come and go. `MEMTIDE_POD_SELECTOR` wins. Empty: off.
    pub pod_selector: String,
    /// Never managed, whatever the above say.
    pub exclude_pids: Vec<u32>,
    /// Name patterns, as in `names`. A managed process's name and cgroup are read again every
    /// 10 s: one that execs into an excluded name or moves into an excluded cgroup is dropped
    /// within that.
    pub exclude_names: Vec<String>,
    /// cgroup v2 directories, as in `cgroups`. A process whose cgroup v2 membership cannot be
    /// read (a cgroup v1 host) is not managed while this list is not empty.
    pub exclude_cgroups: Vec<PathBuf>,
    /// Upper bound on processes managed (or observed) at once; further ones are skipped and
    /// counted, which bounds the agent's memory.
    pub max_targets: usize,
    /// Fast-tier limits, one `[[targets.limits]]` table each: `cgroup`, `pod_label`
    /// (`key=value`, for pods opted in by `pod_selector`) or `name` says which targets, and
    /// `fast_bytes` or `fast_percent` (of the fast tier's memory) how much of the fast tier
    /// each of them may hold. The first table that matches a target applies. A target without
    /// a limit shares the fast tier fairly with the others when they want more than it has.
    pub limits: Vec<TargetLimit>,
}

impl Default for TargetsConfig {
    fn default() -> Self {
        Self {
            pids: Vec::new(),
            cgroups: Vec::new(),
            names: Vec::new(),
            pods: Vec::new(),
            pod_selector: String::new(),
            exclude_pids: Vec::new(),
            exclude_names: Vec::new(),
            exclude_cgroups: Vec::new(),
            max_targets: 64,
            limits: Vec::new(),
        }
    }
}

impl Config {
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

impl TargetsConfig {
    /// Whether any target is configured.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.pids.is_empty()
            && self.cgroups.is_empty()
            && self.names.is_empty()
            && self.pods.is_empty()
            && self.pod_selector.is_empty()
    }

    /// The selection these keys describe.
    #[must_use]
    pub fn selection(&self) -> Selection {
        let include = self
            .pids
            .iter()
            .map(|&pid| Selector::Pid(pid))
            .chain(self.cgroups.iter().cloned().map(Selector::Cgroup))
            .chain(
                self.names
                    .iter()
                    .cloned()
                    .map(|name| Selector::Name(NamePattern(name))),
            )
            .chain(self.pods.iter().cloned().map(Selector::Pod))
            .collect();
        Selection {
            include,
            exclude: Exclude {
                pids: self.exclude_pids.clone(),
                names: self
                    .exclude_names
                    .iter()
                    .cloned()
                    .map(NamePattern)
                    .collect(),
                cgroups: self.exclude_cgroups.clone(),
            },
        }
    }
}

/// A configuration that cannot be used, with where and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}\n  hint: {hint}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        hint: String,
    },
    #[error("{}{}: {key}: {message}", path.display(), line.map_or_else(String::new, |line| format!(":{line}")))]
    Invalid {
        path: PathBuf,
        /// Where `key` is set in the file, when it is set there (not a default).
        line: Option<usize>,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The key (dotted path) an invalid value sits at, when known.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }
}

/// One value problem found by [`Config::validate`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// The line where `key` (dotted: `engine.policy.capacity.high_watermark`) is set in `text`,
/// under its table's header; `None` when the file leaves it at its default.
#[must_use]
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    let mut in_table = table.is_empty();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            in_table = header.split(']').next().map(str::trim) == Some(table);
            continue;
        }
        if in_table
            && let Some((found, _)) = line.split_once('=')
            && found.trim().trim_matches('"') == name
        {
            return Some(index + 1);
        }
    }
    None
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

/// The dotted key (`section.key`) whose value sits at `offset`, for messages about values;
/// `None` when the offset points at a key itself (the message names it already).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let line = text[line_start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key_column = line.len() - line.trim_start().len();
    if offset - line_start <= key_column {
        return None;
    }
    let section = before[..line_start]
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_owned());
    Some(match section {
        Some(section) => format!("{section}.{}", key.trim()),
        None => key.trim().to_owned(),
    })
}

fn hint_for(message: &str) -> String {
    if message.contains("unknown field") {
        "check the spelling against deploy/config/memtide.toml, which lists every key with its \
         default"
            .to_owned()
    } else if message.contains("invalid type") {
        "the value has the wrong type; deploy/config/memtide.toml shows each key's type".to_owned()
    } else if message.contains("unknown variant") {
        "use one of the values listed in the message".to_owned()
    } else {
        "see deploy/config/memtide.toml for the format".to_owned()
    }
}

impl Config {
    /// Parses `text` (read from `path`, used in messages).
    pub fn parse(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|error| {
            let (line, column) = error
                .span()
                .map_or((1, 1), |span| line_column(text, span.start));
            let mut message = error.message().trim().to_owned();
            if let Some(key) = error.span().and_then(|span| key_at(text, span.start)) {
                message = format!("key `{key}`: {message}");
            }
            ConfigError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                hint: hint_for(&message),
                message,
            }
        })
    }

    /// Reads and parses `path`.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Checks values that parse but cannot work, against each other and, when given, the
    /// machine's topology. Returns every problem, not just the first.
    #[must_use]
    pub fn problems(&self, topology: Option<&Topology>) -> Vec<Problem> {
        let mut problems = Vec::new();
        let mut problem = |key: &str, message: String| {
            problems.push(Problem {
                key: key.to_owned(),
                message,
            });
        };
        // The engine's keys sit in [engine] itself, the policy's under [engine.policy]: each
        // problem names the key as the file spells it.
        let engine = (self
            .engine
            .engine
            .validate()
            .err()
            .map(|error| ("engine", error)))
        .or_else(|| (self.engine.policy.validate().err()).map(|error| ("engine.policy", error)));
        if let Some((
            table,
            memtide_core::validate::ConfigError::OutOfRange {
                field,
                value,
                reason,
            },
        )) = engine
        {
            problem(&format!("{table}.{field}"), format!("{value}: {reason}"));
        }
        let ring = self.sources.ring_bytes;
        if ring < 4096 || !ring.is_power_of_two() {
            problem(
                "sources.ring_bytes",
                format!("{ring} must be a power of two of at least 4096"),
            );
        }
        if !(self.sources.cpu_budget_percent > 0.0 && self.sources.cpu_budget_percent <= 100.0) {
            problem(
                "sources.cpu_budget_percent",
                format!("{} must be in (0, 100]", self.sources.cpu_budget_percent),
            );
        }
        if self.sources.batch == 0 || self.sources.queue_batches == 0 {
            problem(
                "sources.batch",
                "batch and queue_batches must be at least 1".to_owned(),
            );
        }
        let damon = &self.sources.damon;
        if damon.sample_us == 0 || damon.aggr_us < damon.sample_us {
            problem(
                "sources.damon.aggr_us",
                format!(
                    "aggregation interval {} µs must be at least the sampling interval {} µs (> 0)",
                    damon.aggr_us, damon.sample_us
                ),
            );
        }
        if !damon.owner_file.as_os_str().is_empty() && !damon.owner_file.is_absolute() {
            problem(
                "sources.damon.owner_file",
                format!(
                    "{} is not an absolute path; give one (default /run/memtide/kdamond) or \"\" to keep no record",
                    damon.owner_file.display()
                ),
            );
        }
        if damon.min_regions < 3 || damon.min_regions > damon.max_regions {
            problem(
                "sources.damon.min_regions",
                format!(
                    "need 3 <= min_regions ({}) <= max_regions ({})",
                    damon.min_regions, damon.max_regions
                ),
            );
        }
        if self.migration.batch_pages == 0 {
            problem("migration.batch_pages", "must be at least 1".to_owned());
        }
        if self.targets.max_targets == 0 {
            problem("targets.max_targets", "must be at least 1".to_owned());
        }
        for (index, limit) in self.targets.limits.iter().enumerate() {
            for found in limit.problems(index) {
                problem(&found.key, found.message);
            }
        }
        if self.kubernetes.poll_seconds == 0 {
            problem("kubernetes.poll_seconds", "must be at least 1".to_owned());
        }
        for cgroup in &self.targets.cgroups {
            if cgroup
                .components()
                .any(|part| part == std::path::Component::ParentDir)
            {
                problem(
                    "targets.cgroups",
                    format!(
                        "{} must stay under /sys/fs/cgroup (no \"..\")",
                        cgroup.display()
                    ),
                );
            }
        }
        let both: Vec<u32> = self
            .topology
            .fast_nodes
            .iter()
            .filter(|node| self.topology.slow_nodes.contains(node))
            .copied()
            .collect();
        if !both.is_empty() {
            problem(
                "topology.fast_nodes",
                format!("nodes {both:?} are listed as both fast and slow"),
            );
        }
        let cost_nodes: Vec<u32> = self.topology.costs.iter().map(|c| c.node).collect();
        for cost in &self.topology.costs {
            let values = [
                cost.read_latency_ns,
                cost.write_latency_ns,
                cost.read_bandwidth_mbps,
                cost.write_bandwidth_mbps,
            ];
            if values.contains(&Some(0)) {
                problem(
                    "topology.costs",
                    format!(
                        "node {}: a latency or bandwidth of 0 means nothing; leave the field out to use HMAT or SLIT",
                        cost.node
                    ),
                );
            }
            if cost_nodes.iter().filter(|&&n| n == cost.node).count() > 1 {
                problem(
                    "topology.costs",
                    format!(
                        "node {} has more than one [[topology.costs]] entry",
                        cost.node
                    ),
                );
            }
        }
        if let Some(topology) = topology {
            for (key, nodes) in [
                ("topology.fast_nodes", &self.topology.fast_nodes),
                ("topology.slow_nodes", &self.topology.slow_nodes),
                ("topology.costs", &cost_nodes),
            ] {
                for node in nodes {
                    if topology.node(*node).is_none() {
                        let known: Vec<u32> = topology.nodes.iter().map(|n| n.id).collect();
                        problem(
                            key,
                            format!(
                                "node {node} does not exist on this machine (nodes: {known:?})"
                            ),
                        );
                    }
                }
            }
        }
        problems
    }

    /// [`Config::problems`] as one error naming the first bad key (all of them in the text).
    pub fn validate(&self, path: &Path, topology: Option<&Topology>) -> Result<(), ConfigError> {
        let problems = self.problems(topology);
        let Some(first) = problems.first() else {
            return Ok(());
        };
        let message = problems
            .iter()
            .skip(1)
            .fold(first.message.clone(), |text, more| {
                format!("{text}; also {more}")
            });
        Err(ConfigError::Invalid {
            path: path.to_path_buf(),
            line: std::fs::read_to_string(path)
                .ok()
                .and_then(|text| line_of(&text, &first.key)),
            key: first.key.clone(),
            message,
        })
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
    use memtide_host::probe::SourceKind;

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
        assert!(
            parse("[kubernetes]\npoll_seconds = 0\n")
                .unwrap()
                .problems(None)[0]
                .to_string()
                .contains("kubernetes.poll_seconds")
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
    fn node_costs_are_checked_against_the_machine() {
        let config = parse(
            "[[topology.costs]]\nnode = 0\nread_latency_ns = 90\nwrite_bandwidth_mbps = 0\n\
             [[topology.costs]]\nnode = 3\nread_latency_ns = 300\n",
        )
        .unwrap();
        assert_eq!(config.topology.costs[0].read_latency_ns, Some(90));
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/machines/vm-single-node");
        let topology = Topology::read(&memtide_host::sysfs::HostRoot::new(fixture)).unwrap();
        let problems = config.problems(Some(&topology));
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            problems.iter().all(|p| p.key == "topology.costs"),
            "{problems:?}"
        );
        assert!(
            messages[0].contains("node 0") && messages[0].contains("of 0"),
            "{messages:?}"
        );
        assert!(
            messages[1].contains("node 3 does not exist"),
            "{messages:?}"
        );
        assert!(parse("[[topology.costs]]\nnode = 0\nlatency = 1\n").is_err());
    }

    #[test]
    fn impossible_values_are_reported_by_key() {
        let mut config =
            parse("[sources]\nring_bytes = 1000\n[topology]\nfast_nodes = [7]\n").unwrap();
        // This machine's shape: one node, 0.
        let fixture =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/machines/vm-single-node");
        let topology = Topology::read(&memtide_host::sysfs::HostRoot::new(fixture)).unwrap();
        let problems = config.problems(Some(&topology));
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            ["sources.ring_bytes", "topology.fast_nodes"],
            "{problems:?}"
        );
        assert!(problems[1].message.contains("node 7 does not exist"));
        let error = config
            .validate(Path::new("x.toml"), Some(&topology))
            .unwrap_err();
        assert_eq!(error.key(), Some("sources.ring_bytes"));
        config.sources.ring_bytes = 1 << 20;
        config.topology.fast_nodes = vec![0];
        assert!(
            config
                .validate(Path::new("x.toml"), Some(&topology))
                .is_ok()
        );
    }

    #[test]
    fn the_kdamond_record_needs_an_absolute_path_or_none() {
        let problems = parse("[sources.damon]\nowner_file = \"run/kdamond\"\n")
            .unwrap()
            .problems(None);
        assert_eq!(problems[0].key, "sources.damon.owner_file", "{problems:?}");
        for ok in ["", "/var/lib/memtide/kdamond"] {
            let config = parse(&format!("[sources.damon]\nowner_file = \"{ok}\"\n")).unwrap();
            assert!(config.problems(None).is_empty(), "{ok:?}");
        }
    }

    #[test]
    fn engine_validation_is_included_and_names_the_key_as_the_file_does() {
        let config = parse("[engine]\ninterval_ms = 0\n").unwrap();
        let problems = config.problems(None);
        assert_eq!(problems[0].key, "engine.interval_ms", "{problems:?}");
        let text =
            "[agent]\nobserve = true\n\n[engine.policy.capacity]\n# why\nhigh_watermark = 2.0\n";
        let problems = parse(text).unwrap().problems(None);
        assert_eq!(
            problems[0].key, "engine.policy.capacity.high_watermark",
            "{problems:?}"
        );
        assert_eq!(line_of(text, &problems[0].key), Some(6));
        assert_eq!(line_of(text, "agent.observe"), Some(2));
        assert_eq!(line_of(text, "agent.listen"), None);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        std::fs::write(&path, text).unwrap();
        let error = Config::load(&path)
            .unwrap()
            .validate(&path, None)
            .unwrap_err()
            .to_string();
        assert!(
            error.ends_with(
                "m.toml:6: engine.policy.capacity.high_watermark: 2: must be within [0, 1]"
            ),
            "{error}"
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
}
