//! The configuration the agent runs with: the file, the command line's additions, and what they
//! make of observe mode.

use std::path::{Path, PathBuf};

use memtide_config::{Config, ConfigError, TargetsConfig};
use memtide_host::{
    sysfs::HostRoot,
    targets::select::{self, Exclude, NamePattern, Selection, Selector},
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
    config.validate(path, Some(&tiered.topology.node_ids()))?;
    config.apply_kubernetes_env(|name| std::env::var(name).ok());
    let later = applied_at_next_start(running, &config, command_line.listen.is_some());
    // The HTTP server stays where it is bound.
    config.agent.listen = running.agent.listen;
    if !later.is_empty() {
        tracing::warn!(
            settings = later.join("; "),
            "SIGHUP: these settings take effect at the next start; until then the running ones stay in force"
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

/// What `new` changes that a reload cannot apply: the HTTP server, the log format, the check
/// for other page movers, the pod watch, the sample sources and the interval they drain at are
/// set up once, at start. Targets found after the reload count at the new `[engine]
/// interval_ms`; the sources keep draining at the old one. `running` listens where its server
/// is bound (port 0 in the file binds any); `listen_from_command_line`: `--listen` overrides
/// the file's.
pub(super) fn applied_at_next_start(
    running: &Config,
    new: &Config,
    listen_from_command_line: bool,
) -> Vec<&'static str> {
    // New targets' queues take the new length at once.
    let sources = |c: &Config| memtide_config::SourcesConfig {
        queue_batches: 0,
        ..c.sources.clone()
    };
    let mut later = Vec::new();
    let (want, bound) = (new.agent.listen, running.agent.listen);
    if !listen_from_command_line
        && (want.ip() != bound.ip() || (want.port() != 0 && want.port() != bound.port()))
    {
        later.push("[agent] listen (the HTTP server)");
    }
    if new.agent.log_format != running.agent.log_format {
        later.push("[agent] log_format");
    }
    if new.agent.on_conflict != running.agent.on_conflict {
        later.push("[agent] on_conflict (checked at start)");
    }
    if new.targets.pod_selector != running.targets.pod_selector
        || new.kubernetes != running.kubernetes
    {
        later.push("[targets] pod_selector and [kubernetes] (the pod watch)");
    }
    if sources(new) != sources(running) {
        later.push("[sources] (the sample sources)");
    }
    if new.engine.engine.interval_ms != running.engine.engine.interval_ms {
        later.push("[engine] interval_ms for the sample sources' draining");
    }
    later
}

/// The processes `[targets]` names, and those it excludes.
pub(super) fn selection(targets: &TargetsConfig) -> Selection {
    let include = targets
        .pids
        .iter()
        .map(|&pid| Selector::Pid(pid))
        .chain(targets.cgroups.iter().cloned().map(Selector::Cgroup))
        .chain(
            targets
                .names
                .iter()
                .cloned()
                .map(|name| Selector::Name(NamePattern(name))),
        )
        .chain(targets.pods.iter().cloned().map(Selector::Pod))
        .collect();
    Selection {
        include,
        exclude: Exclude {
            pids: targets.exclude_pids.clone(),
            names: targets
                .exclude_names
                .iter()
                .cloned()
                .map(NamePattern)
                .collect(),
            cgroups: targets.exclude_cgroups.clone(),
        },
    }
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

#[cfg(test)]
mod tests {
    use memtide_config::LogFormat;

    use super::*;

    #[test]
    fn a_reload_names_what_only_the_next_start_applies() {
        let later = |running: &Config, new: &Config| applied_at_next_start(running, new, false);
        let running = Config::default();
        assert!(later(&running, &running.clone()).is_empty());
        // Targets, limits and a new queue length apply at once.
        let mut new = running.clone();
        new.targets.pids.push(42);
        new.sources.queue_batches += 1;
        new.engine.policy.benefit.threshold_ns += 1.0;
        assert!(later(&running, &new).is_empty());
        // The sources and the interval they drain at are set up once.
        new.sources.batch += 1;
        new.engine.engine.interval_ms += 10;
        let named = later(&running, &new);
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named[0].starts_with("[sources]") && named[1].contains("interval_ms"));
    }

    #[test]
    fn a_reload_names_a_new_listen_address_unless_it_is_where_the_server_is() {
        let mut running = Config::default();
        running.agent.listen = "127.0.0.1:40123".parse().unwrap();
        let mut new = running.clone();
        // Port 0 asks for any port: the server bound one.
        new.agent.listen = "127.0.0.1:0".parse().unwrap();
        assert!(applied_at_next_start(&running, &new, false).is_empty());
        new.agent.listen = "127.0.0.1:9477".parse().unwrap();
        assert_eq!(
            applied_at_next_start(&running, &new, false),
            ["[agent] listen (the HTTP server)"]
        );
        // `--listen` decides, whatever the file says.
        assert!(applied_at_next_start(&running, &new, true).is_empty());
        new.agent.log_format = LogFormat::Json;
        assert_eq!(
            applied_at_next_start(&running, &new, true),
            ["[agent] log_format"]
        );
    }
}
