//! Values that parse but cannot work: checked against each other and, when the caller read
//! them from the machine, against its NUMA node ids. Every problem names the key as the file
//! spells it, in the order of the file's tables, so that the first is the one to fix first.

use std::path::Path;

use memtide_core::tiering::TieringConfig;

use crate::{Config, ConfigError, Problem, line_of};

impl Config {
    /// Checks values that parse but cannot work, against each other and, when given, the
    /// machine's NUMA node ids (the host's `Topology::node_ids`). Returns every problem, not
    /// just the first.
    #[must_use]
    pub fn problems(&self, machine_nodes: Option<&[u32]>) -> Vec<Problem> {
        let mut problems: Vec<Problem> = engine_problem(&self.engine).into_iter().collect();
        problems.extend(self.sources.problems());
        if self.migration.batch_pages == 0 {
            problems.push(Problem::new(
                "migration.batch_pages",
                "must be at least 1".to_owned(),
            ));
        }
        if self.targets.max_targets == 0 {
            problems.push(Problem::new(
                "targets.max_targets",
                "must be at least 1".to_owned(),
            ));
        }
        for (index, limit) in self.targets.limits.iter().enumerate() {
            problems.extend(limit.problems(index));
        }
        problems.extend(self.targets.cgroup_problems());
        problems.extend(self.topology.problems(machine_nodes));
        problems
    }

    /// [`Config::problems`] as one error naming the first bad key (all of them in the text).
    pub fn validate(&self, path: &Path, machine_nodes: Option<&[u32]>) -> Result<(), ConfigError> {
        let problems = self.problems(machine_nodes);
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

/// The first value of `[engine]` out of range. The engine's keys sit in `[engine]` itself, the
/// policy's under `[engine.policy]`: the problem names the key as the file spells it.
fn engine_problem(engine: &TieringConfig) -> Option<Problem> {
    let (table, error) = (engine
        .engine
        .validate()
        .err()
        .map(|error| ("engine", error)))
    .or_else(|| (engine.policy.validate().err()).map(|error| ("engine.policy", error)))?;
    let memtide_core::validate::ConfigError::OutOfRange {
        field,
        value,
        reason,
    } = error;
    Some(Problem::new(
        format!("{table}.{field}"),
        format!("{value}: {reason}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(Path::new("test.toml"), text)
    }

    /// The node ids of a machine with one NUMA node (the vm-single-node fixture's).
    const ONE_NODE: &[u32] = &[0];

    #[test]
    fn node_costs_are_checked_against_the_machine() {
        let config = parse(
            "[[topology.costs]]\nnode = 0\nread_latency_ns = 90\nwrite_bandwidth_mbps = 0\n\
             [[topology.costs]]\nnode = 3\nread_latency_ns = 300\n",
        )
        .unwrap();
        assert_eq!(config.topology.costs[0].read_latency_ns, Some(90));
        let problems = config.problems(Some(ONE_NODE));
        let messages: Vec<&str> = problems.iter().map(|p| p.message.as_str()).collect();
        assert!(
            problems.iter().all(|p| p.key == "topology.costs"),
            "{problems:?}"
        );
        assert!(
            messages[0].contains("node 0") && messages[0].contains("of 0"),
            "{messages:?}"
        );
        assert_eq!(
            messages[1], "node 3 does not exist on this machine (nodes: [0])",
            "{messages:?}"
        );
        assert!(parse("[[topology.costs]]\nnode = 0\nlatency = 1\n").is_err());
    }

    #[test]
    fn impossible_values_are_reported_by_key() {
        let mut config =
            parse("[sources]\nring_bytes = 1000\n[topology]\nfast_nodes = [7]\n").unwrap();
        let problems = config.problems(Some(ONE_NODE));
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            ["sources.ring_bytes", "topology.fast_nodes"],
            "{problems:?}"
        );
        assert!(problems[1].message.contains("node 7 does not exist"));
        let error = config
            .validate(Path::new("x.toml"), Some(ONE_NODE))
            .unwrap_err();
        assert_eq!(error.key(), Some("sources.ring_bytes"));
        config.sources.ring_bytes = 1 << 20;
        config.topology.fast_nodes = vec![0];
        assert!(config.validate(Path::new("x.toml"), Some(ONE_NODE)).is_ok());
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
    fn problems_come_in_the_order_of_the_files_tables() {
        let config = parse(concat!(
            "[targets]\nmax_targets = 0\ncgroups = [\"../x\"]\n",
            "[[targets.limits]]\nname = \"db\"\n",
            "[sources]\nring_bytes = 1000\ncpu_budget_percent = 0.0\nbatch = 0\n",
            "[sources.damon]\naggr_us = 1\nowner_file = \"run/k\"\nmin_regions = 1\n",
            "[topology]\nfast_nodes = [1]\nslow_nodes = [1]\n",
            "[[topology.costs]]\nnode = 0\nread_latency_ns = 0\n",
            "[[topology.costs]]\nnode = 0\n",
            "[migration]\nbatch_pages = 0\n",
            "[engine]\ninterval_ms = 0\n",
        ))
        .unwrap();
        let problems = config.problems(Some(ONE_NODE));
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "engine.interval_ms",
                "sources.ring_bytes",
                "sources.cpu_budget_percent",
                "sources.batch",
                "sources.damon.aggr_us",
                "sources.damon.owner_file",
                "sources.damon.min_regions",
                "migration.batch_pages",
                "targets.max_targets",
                "targets.limits[0]",
                "targets.cgroups",
                "topology.fast_nodes",
                "topology.costs",
                "topology.costs",
                "topology.costs",
                "topology.fast_nodes",
                "topology.slow_nodes",
            ],
            "{problems:?}"
        );
    }
}
