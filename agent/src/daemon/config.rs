//! The configuration the agent runs with: the file, the command line's additions, and what they
//! make of observe mode.

use std::path::{Path, PathBuf};

use memtide_config::{Config, ConfigError};
use memtide_host::{
    sysfs::HostRoot,
    targets::select::{self, Selector},
    topology::tiering::TieredTopology,
};

use super::{DaemonError, RunOptions};

/// The configuration `run` uses, and the file it came from.
pub fn load_config(options: &RunOptions) -> Result<(Config, Option<PathBuf>), ConfigError> {
    let path = match &options.config {
        Some(path) => Some(path.clone()),
        None => Some(PathBuf::from(memtide_config::DEFAULT_PATH)).filter(|p| p.exists()),
    };
    let mut config = match &path {
        Some(path) => {
            memtide_config::check_permissions(path)?;
            Config::load(path)?
        }
        None => Config::default(),
    };
    config.apply_kubernetes_env(|name| std::env::var(name).ok());
    config.agent.observe |= options.observe;
    config.targets.pids.extend(&options.pids);
    config
        .targets
        .cgroups
        .extend(options.cgroups.iter().cloned());
    if let Some(listen) = options.listen {
        config.agent.listen = listen;
    }
    Ok((config, path))
}

/// The targets the command line names (`--pid`, `--cgroup`) must be there at start: the agent
/// stops with exit code 2 naming the first that is not, instead of idling without a word.
/// The configuration file's targets are not checked: a file may name a service that starts
/// later.
pub(super) fn check_command_line_targets(
    root: &HostRoot,
    options: &RunOptions,
) -> Result<(), DaemonError> {
    let self_pid = std::process::id();
    let pids = options
        .pids
        .iter()
        .map(|&pid| ("--pid", pid.to_string(), Selector::Pid(pid)));
    let cgroups = options.cgroups.iter().map(|path| {
        (
            "--cgroup",
            path.display().to_string(),
            Selector::Cgroup(path.clone()),
        )
    });
    for (flag, value, selector) in pids.chain(cgroups) {
        select::check_named(root, &selector, self_pid).map_err(|source| {
            DaemonError::NamedTarget {
                flag,
                value,
                source,
            }
        })?;
    }
    Ok(())
}

/// SIGHUP: `path` read again and checked against the machine, with the command line's
/// additions kept in force (what the old file said is not). A broken file is an error; the
/// caller keeps the running configuration.
pub(super) fn reload(
    path: &Path,
    running: &Config,
    command_line: &RunOptions,
    tiered: &TieredTopology,
) -> Result<Config, ConfigError> {
    memtide_config::check_permissions(path)?;
    let mut config = Config::load(path)?;
    config.validate(path, Some(&tiered.topology))?;
    config.apply_kubernetes_env(|name| std::env::var(name).ok());
    if config.targets.pod_selector != running.targets.pod_selector
        || config.kubernetes != running.kubernetes
    {
        tracing::warn!(
            "SIGHUP: [targets] pod_selector and [kubernetes] take effect at the next start; the pod list keeps its current settings"
        );
    }
    config.agent.observe |= command_line.observe;
    for &pid in &command_line.pids {
        if !config.targets.pids.contains(&pid) {
            config.targets.pids.push(pid);
        }
    }
    for cgroup in &command_line.cgroups {
        if !config.targets.cgroups.contains(cgroup) {
            config.targets.cgroups.push(cgroup.clone());
        }
    }
    Ok(config)
}

/// Why the agent only observes, if it does.
pub(super) fn observe_reason(config: &Config, tiered: &TieredTopology) -> Option<String> {
    if config.agent.observe {
        return Some("observe mode (--observe or [agent] observe = true)".to_owned());
    }
    if !tiered.classes.can_tier() {
        let nodes = tiered.topology.nodes.len();
        return Some(format!(
            "{nodes} NUMA node(s), no slow tier: there is nothing to migrate to; observing only"
        ));
    }
    if config.targets.is_empty() {
        return Some(
            "no targets configured: observing every process, migrating nothing (set [targets] \
             or --pid/--cgroup)"
                .to_owned(),
        );
    }
    None
}
