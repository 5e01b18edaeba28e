//! The cgroup v2 hierarchy as selection reads it: where its root is (unified or hybrid host),
//! the processes of a cgroup and its descendants, and the cgroup of a Kubernetes pod.

use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
};

use crate::{
    sysfs::{self, HostRoot, SysfsError},
    targets::TargetError,
};

/// Where the cgroup v2 hierarchy is mounted on a unified host, and on a hybrid one (systemd's
/// v1 controllers in a tmpfs at /sys/fs/cgroup, v2 beside them).
const CGROUP_V2_MOUNTS: [&str; 2] = ["sys/fs/cgroup", "sys/fs/cgroup/unified"];

/// The root of the cgroup v2 hierarchy, which the paths in the configuration and in
/// `/proc/PID/cgroup`'s `0::` line are relative to: the first of [`CGROUP_V2_MOUNTS`] with a
/// `cgroup.controllers` file (only a v2 root has one). None on a cgroup v1 host.
pub(super) fn cgroup_v2_root(root: &HostRoot) -> Option<PathBuf> {
    CGROUP_V2_MOUNTS
        .iter()
        .map(|mount| root.path(mount))
        .find(|dir| dir.join("cgroup.controllers").is_file())
}

pub(super) fn no_cgroup_v2(root: &HostRoot) -> TargetError {
    TargetError::Selector {
        path: root.path(CGROUP_V2_MOUNTS[0]),
        what: "no cgroup v2 hierarchy here or at /sys/fs/cgroup/unified (a cgroup v1 host): \
               cgroup and pod targets need it; boot with systemd.unified_cgroup_hierarchy=1, \
               or name the targets by pid or process name"
            .into(),
    }
}

/// `path` relative to the cgroup v2 root when it is absolute under one of
/// [`CGROUP_V2_MOUNTS`] (the deepest first: /sys/fs/cgroup/unified is under /sys/fs/cgroup),
/// else unchanged.
#[must_use]
pub fn relative_to_cgroup_v2_root(path: &Path) -> &Path {
    CGROUP_V2_MOUNTS
        .iter()
        .rev()
        .find_map(|mount| path.strip_prefix(Path::new("/").join(mount)).ok())
        .unwrap_or(path)
}

/// The directory of the cgroup `path` (relative to the cgroup v2 root `cgroot`), which must
/// exist.
pub(super) fn cgroup_dir(cgroot: &Path, path: &Path) -> Result<PathBuf, TargetError> {
    let dir = cgroot.join(path);
    match dir.is_dir() {
        true => Ok(dir),
        false => Err(TargetError::Selector {
            path: dir,
            what: "no such cgroup".into(),
        }),
    }
}

/// Pids in `cgroup.procs` of `dir` and every cgroup below it.
pub(super) fn cgroup_pids(dir: &Path, out: &mut BTreeSet<u32>) -> Result<(), SysfsError> {
    if let Some(text) = sysfs::read_optional(&dir.join("cgroup.procs"))? {
        for line in text.lines() {
            let pid = line
                .trim()
                .parse()
                .map_err(|_| SysfsError::parse(&dir.join("cgroup.procs"), line, "a pid"))?;
            out.insert(pid);
        }
    }
    for name in sysfs::dir_names(dir)?.unwrap_or_default() {
        let child = dir.join(&name);
        if child.is_dir() {
            cgroup_pids(&child, out)?;
        }
    }
    Ok(())
}

/// The cgroup (relative to the cgroup root) of the pod with UID `uid`. The kubelet names it
/// `pod<UID>` with the cgroupfs driver (`kubepods/burstable/pod<UID>`) and
/// `kubepods-<qos>-pod<UID with _ for ->.slice` with the systemd driver
/// (`kubepods.slice/kubepods-burstable.slice/...`). Guaranteed pods sit directly under kubepods.
pub fn pod_cgroup(root: &HostRoot, uid: &str) -> Result<PathBuf, TargetError> {
    let cgroot = cgroup_v2_root(root).ok_or_else(|| no_cgroup_v2(root))?;
    let dir = find_pod_cgroup(&cgroot, uid)?;
    Ok(dir.strip_prefix(&cgroot).unwrap_or(&dir).to_path_buf())
}

/// [`pod_cgroup`]'s search, under the cgroup v2 root `cgroot`; the directory found.
pub(super) fn find_pod_cgroup(cgroot: &Path, uid: &str) -> Result<PathBuf, TargetError> {
    let plain = format!("pod{uid}");
    let systemd = format!("pod{}.slice", uid.replace('-', "_"));
    let matches = |name: &str| name == plain || name.ends_with(&systemd);
    let mut stack = Vec::new();
    for top in ["kubepods.slice", "kubepods"] {
        let dir = cgroot.join(top);
        if dir.is_dir() {
            stack.push((dir, 0));
        }
    }
    while let Some((dir, depth)) = stack.pop() {
        let names = sysfs::dir_names(&dir)
            .map_err(|e| TargetError::Selector {
                path: e.path().to_path_buf(),
                what: e.to_string(),
            })?
            .unwrap_or_default();
        for name in names {
            let child = dir.join(&name);
            if !child.is_dir() {
                continue;
            }
            if matches(&name) {
                return Ok(child);
            }
            // kubepods / qos class (burstable, besteffort) / pod: at most one level between.
            if depth < 1 {
                stack.push((child, depth + 1));
            }
        }
    }
    Err(TargetError::Selector {
        path: cgroot.join("kubepods"),
        what: format!("no cgroup for pod {uid}"),
    })
}
