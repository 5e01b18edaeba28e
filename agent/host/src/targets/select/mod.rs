//! Which processes are targets: by pid, cgroup v2 path, process name pattern or Kubernetes pod,
//! minus an exclude list, and never memtide itself or a kernel thread.
//!
//! Selection is re-evaluated on every [`TargetSet::refresh`], so members of a cgroup or pod are
//! followed as they come and go. Everything is read through a [`HostRoot`](crate::sysfs::HostRoot) (`/proc`,
//! `/sys/fs/cgroup`), so selection is tested against fixture trees.

mod cgroup;
mod glob;
mod process;
mod resolve;
mod target_set;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use self::{
    cgroup::{pod_cgroup, relative_to_cgroup_v2_root},
    glob::NamePattern,
    process::ProcessIdentity,
    resolve::check_named,
    target_set::{Changes, TargetSet},
};

/// One way of naming targets.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Selector {
    Pid(u32),
    /// A cgroup v2 path relative to the cgroup v2 root (`/sys/fs/cgroup`, or
    /// `/sys/fs/cgroup/unified` on a hybrid host), e.g.
    /// `system.slice/redis.service`; members of its descendants count too.
    Cgroup(PathBuf),
    /// Matched against the command name (`comm`) and the basename of `argv[0]`.
    Name(NamePattern),
    /// A Kubernetes pod UID; resolved to its cgroup under `kubepods`.
    Pod(String),
}

/// Processes never to manage, whatever the selectors say.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Exclude {
    pub pids: Vec<u32>,
    pub names: Vec<NamePattern>,
    /// cgroup v2 paths (relative to the cgroup root); their descendants are excluded too.
    pub cgroups: Vec<PathBuf>,
}

/// Selectors plus exclusions.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    pub include: Vec<Selector>,
    #[serde(default)]
    pub exclude: Exclude,
}
