//! `[targets]`: which processes memtide manages. Only what the file says; the daemon turns it
//! into the host's target selection.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Problem, limits::TargetLimit};

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

    /// `targets.cgroups` entries that would leave the cgroup root.
    pub(crate) fn cgroup_problems(&self) -> impl Iterator<Item = Problem> + '_ {
        self.cgroups
            .iter()
            .filter(|cgroup| {
                cgroup
                    .components()
                    .any(|part| part == std::path::Component::ParentDir)
            })
            .map(|cgroup| {
                Problem::new(
                    "targets.cgroups",
                    format!(
                        "{} must stay under /sys/fs/cgroup (no \"..\")",
                        cgroup.display()
                    ),
                )
            })
    }
}
