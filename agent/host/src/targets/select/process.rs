//! What selection reads of a process: its names and cgroup, and the pids under `/proc`.

use std::path::{Path, PathBuf};

use super::{NamePattern, cgroup::relative_to_cgroup_v2_root};
use crate::{
    sysfs::{self, HostRoot, SysfsError},
    targets::{ProcStat, TargetError},
};

/// A process's names and cgroup: what selection and `[[targets.limits]]` match it by.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessIdentity {
    /// The command name (`comm`).
    pub comm: String,
    /// The basename of `argv[0]`.
    pub argv0: Option<String>,
    /// cgroup v2 path relative to the root, from `0::/path`; `None` on a cgroup v1 host.
    pub cgroup: Option<PathBuf>,
}

impl ProcessIdentity {
    /// Reads `pid`'s identity under `root`.
    pub fn read(root: &HostRoot, pid: u32) -> Result<Self, TargetError> {
        read_candidate(root, pid).map(|candidate| candidate.identity)
    }

    /// Whether `comm` or the basename of `argv[0]` matches `pattern`.
    #[must_use]
    pub fn name_matches(&self, pattern: &NamePattern) -> bool {
        pattern.matches(&self.comm) || self.argv0.as_deref().is_some_and(|a| pattern.matches(a))
    }

    /// Whether the process is in `cgroup` (relative to the cgroup v2 root) or below it.
    #[must_use]
    pub fn in_cgroup(&self, cgroup: &Path) -> bool {
        let wanted = relative_to_cgroup_v2_root(cgroup);
        let wanted = wanted.strip_prefix("/").unwrap_or(wanted);
        self.cgroup
            .as_deref()
            .is_some_and(|c| c.starts_with(wanted))
    }

    /// Whether the process runs in the Kubernetes pod with UID `uid`: a component of its
    /// cgroup is the pod's cgroup, as [`super::pod_cgroup`] names it.
    #[must_use]
    pub fn in_pod(&self, uid: &str) -> bool {
        let plain = format!("pod{uid}");
        let systemd = format!("pod{}.slice", uid.replace('-', "_"));
        self.cgroup.as_deref().is_some_and(|cgroup| {
            cgroup.components().any(|part| {
                let part = part.as_os_str().to_string_lossy();
                part == plain.as_str() || part.ends_with(&systemd)
            })
        })
    }
}

/// What selection knows about one candidate process.
#[derive(Clone, Debug)]
pub(super) struct Candidate {
    pub(super) stat: ProcStat,
    pub(super) identity: ProcessIdentity,
}

pub(super) fn read_candidate(root: &HostRoot, pid: u32) -> Result<Candidate, TargetError> {
    let stat = ProcStat::read(root, pid)?;
    let cmdline = std::fs::read(root.path(format!("proc/{pid}/cmdline"))).unwrap_or_default();
    let argv0 = cmdline
        .split(|&b| b == 0)
        .next()
        .filter(|a| !a.is_empty())
        .map(|a| {
            let a = String::from_utf8_lossy(a);
            a.rsplit('/').next().unwrap_or(&a).to_owned()
        });
    let cgroup = sysfs::read_optional(&root.path(format!("proc/{pid}/cgroup")))
        .ok()
        .flatten()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("0::"))
                .map(|p| PathBuf::from(p.trim_start_matches('/')))
        });
    Ok(Candidate {
        identity: ProcessIdentity {
            comm: stat.comm.clone(),
            argv0,
            cgroup,
        },
        stat,
    })
}

/// The pids under `/proc`, ascending.
pub(super) fn all_pids(root: &HostRoot) -> Result<Vec<u32>, SysfsError> {
    Ok(sysfs::dir_names(&root.path("proc"))?
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect())
}
