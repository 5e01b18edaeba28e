//! Which processes are targets: by pid, cgroup v2 path, process name pattern or Kubernetes pod,
//! minus an exclude list, and never memtide itself or a kernel thread.
//!
//! Selection is re-evaluated on every [`TargetSet::refresh`], so members of a cgroup or pod are
//! followed as they come and go. Everything is read through a [`HostRoot`] (`/proc`,
//! `/sys/fs/cgroup`), so selection is tested against fixture trees.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use serde::{Deserialize, Serialize};

use super::{ProcStat, Target, TargetError};
use crate::sysfs::{self, HostRoot, SysfsError};

/// Where the cgroup v2 hierarchy is mounted on a unified host, and on a hybrid one (systemd's
/// v1 controllers in a tmpfs at /sys/fs/cgroup, v2 beside them).
const CGROUP_V2_MOUNTS: [&str; 2] = ["sys/fs/cgroup", "sys/fs/cgroup/unified"];

/// The root of the cgroup v2 hierarchy, which the paths in the configuration and in
/// `/proc/PID/cgroup`'s `0::` line are relative to: the first of [`CGROUP_V2_MOUNTS`] with a
/// `cgroup.controllers` file (only a v2 root has one). None on a cgroup v1 host.
fn cgroup_v2_root(root: &HostRoot) -> Option<PathBuf> {
    CGROUP_V2_MOUNTS
        .iter()
        .map(|mount| root.path(mount))
        .find(|dir| dir.join("cgroup.controllers").is_file())
}

fn no_cgroup_v2(root: &HostRoot) -> TargetError {
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

/// A shell-style pattern over a process name: `*` any run, `?` one character.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NamePattern(pub String);

impl NamePattern {
    /// Whether `name` matches the whole pattern.
    #[must_use]
    pub fn matches(&self, name: &str) -> bool {
        glob(self.0.as_bytes(), name.as_bytes())
    }
}

fn glob(pattern: &[u8], text: &[u8]) -> bool {
    // Iterative matcher with one backtrack point (the last `*`): linear in practice.
    let (mut p, mut t) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(&c) if c == b'?' || c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

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
    /// cgroup is the pod's cgroup, as [`pod_cgroup`] names it.
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
struct Candidate {
    stat: ProcStat,
    identity: ProcessIdentity,
}

fn read_candidate(root: &HostRoot, pid: u32) -> Result<Candidate, TargetError> {
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
fn all_pids(root: &HostRoot) -> Result<Vec<u32>, SysfsError> {
    Ok(sysfs::dir_names(&root.path("proc"))?
        .unwrap_or_default()
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect())
}

/// Pids in `cgroup.procs` of `dir` and every cgroup below it.
fn cgroup_pids(dir: &Path, out: &mut BTreeSet<u32>) -> Result<(), SysfsError> {
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
fn find_pod_cgroup(cgroot: &Path, uid: &str) -> Result<PathBuf, TargetError> {
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

impl Selection {
    /// The pids selected now, ascending. `self_pid` (memtide) and kernel threads are never
    /// selected; processes that vanish while being read are skipped.
    pub fn resolve(&self, root: &HostRoot, self_pid: u32) -> Result<BTreeSet<u32>, TargetError> {
        let (pids, mut problems) = self.resolve_each(root, self_pid)?;
        match problems.is_empty() {
            true => Ok(pids),
            false => Err(problems.swap_remove(0)),
        }
    }

    /// Like [`Self::resolve`], but a selector that cannot be resolved (a cgroup removed, a pod
    /// gone) is reported and skipped instead of failing the others: one deleted cgroup must
    /// not stop the agent from following every other target.
    pub fn resolve_each(
        &self,
        root: &HostRoot,
        self_pid: u32,
    ) -> Result<(BTreeSet<u32>, Vec<TargetError>), TargetError> {
        self.resolve_each_trusting(root, self_pid, &BTreeSet::new())
    }

    /// Like [`Self::resolve_each`], but the pids in `checked` (members whose name and cgroup
    /// were read recently) are taken as still passing the name and exclusion tests without
    /// reading their `/proc` files again; whether their selector still includes them is
    /// checked as for any pid.
    fn resolve_each_trusting(
        &self,
        root: &HostRoot,
        self_pid: u32,
        checked: &BTreeSet<u32>,
    ) -> Result<(BTreeSet<u32>, Vec<TargetError>), TargetError> {
        let mut wanted = BTreeSet::new();
        let mut by_name = Vec::new();
        let mut problems = Vec::new();
        // Looked up once per resolution, and only when a selector needs it.
        let cgroot = self
            .include
            .iter()
            .any(|s| matches!(s, Selector::Cgroup(_) | Selector::Pod(_)))
            .then(|| cgroup_v2_root(root))
            .flatten();
        for selector in &self.include {
            let cgroot = || cgroot.as_deref().ok_or_else(|| no_cgroup_v2(root));
            let dir = match selector {
                Selector::Pid(pid) => {
                    wanted.insert(*pid);
                    continue;
                }
                Selector::Name(pattern) => {
                    by_name.push(pattern);
                    continue;
                }
                Selector::Cgroup(path) => cgroot().and_then(|cgroot| {
                    let dir = cgroot.join(path);
                    match dir.is_dir() {
                        true => Ok(dir),
                        false => Err(TargetError::Selector {
                            path: dir,
                            what: "no such cgroup".into(),
                        }),
                    }
                }),
                Selector::Pod(uid) => cgroot().and_then(|cgroot| find_pod_cgroup(cgroot, uid)),
            };
            let read = dir.and_then(|dir| {
                cgroup_pids(&dir, &mut wanted).map_err(|e| TargetError::Selector {
                    path: e.path().to_path_buf(),
                    what: e.to_string(),
                })
            });
            if let Err(e) = read {
                problems.push(e);
            }
        }
        if !by_name.is_empty() {
            let pids = all_pids(root).map_err(|e| TargetError::Selector {
                path: e.path().to_path_buf(),
                what: e.to_string(),
            })?;
            for pid in pids {
                if checked.contains(&pid) {
                    wanted.insert(pid);
                    continue;
                }
                if let Ok(c) = read_candidate(root, pid)
                    && by_name.iter().any(|p| c.identity.name_matches(p))
                {
                    wanted.insert(pid);
                }
            }
        }
        let mut out = BTreeSet::new();
        let mut unknown_cgroup = Vec::new();
        for pid in wanted {
            if pid == self_pid || self.exclude.pids.contains(&pid) {
                continue;
            }
            if checked.contains(&pid) {
                out.insert(pid);
                continue;
            }
            let candidate = match read_candidate(root, pid) {
                Ok(c) => c,
                Err(e) if e.is_exited() => continue,
                Err(e) => return Err(e),
            };
            if candidate.stat.is_kernel_thread()
                || self
                    .exclude
                    .names
                    .iter()
                    .any(|p| candidate.identity.name_matches(p))
                || self
                    .exclude
                    .cgroups
                    .iter()
                    .any(|c| candidate.identity.in_cgroup(c))
            {
                continue;
            }
            // It may be in an excluded cgroup only we cannot tell (a cgroup v1 host:
            // /proc/PID/cgroup has no `0::` line): not managed, rather than managed against
            // the exclusion.
            if !self.exclude.cgroups.is_empty() && candidate.identity.cgroup.is_none() {
                unknown_cgroup.push(pid);
                continue;
            }
            out.insert(pid);
        }
        if let Some(&first) = unknown_cgroup.first() {
            problems.push(TargetError::Selector {
                path: root.path(format!("proc/{first}/cgroup")),
                what: format!(
                    "no cgroup v2 membership (`0::` line) for {} selected process(es), pid {first} first: \
                     [targets] exclude_cgroups cannot be checked, so they are not managed; \
                     exclude them by pid or name on a cgroup v1 host",
                    unknown_cgroup.len()
                ),
            });
        }
        Ok((out, problems))
    }
}

/// Whether a target the user named (on the command line) is there to manage now: a pid of a
/// running user process other than memtide, a cgroup or pod whose directory exists. A typo'd
/// name must stop the agent at start rather than leave it idling with nothing to say; a
/// target that goes away later is the normal course of things and only reported.
pub fn check_named(root: &HostRoot, selector: &Selector, self_pid: u32) -> Result<(), TargetError> {
    match selector {
        Selector::Pid(pid) => {
            let pid = *pid;
            if pid == self_pid {
                return Err(TargetError::IsSelf { pid });
            }
            let stat = ProcStat::read(root, pid).map_err(|error| match error {
                TargetError::Exited { .. } => TargetError::Selector {
                    path: root.path(format!("proc/{pid}")),
                    what: "no such process".into(),
                },
                other => other,
            })?;
            if stat.is_kernel_thread() {
                return Err(TargetError::KernelThread {
                    pid,
                    comm: stat.comm,
                });
            }
            Ok(())
        }
        Selector::Cgroup(path) => {
            let cgroot = cgroup_v2_root(root).ok_or_else(|| no_cgroup_v2(root))?;
            let dir = cgroot.join(path);
            match dir.is_dir() {
                true => Ok(()),
                false => Err(TargetError::Selector {
                    path: dir,
                    what: "no such cgroup".into(),
                }),
            }
        }
        Selector::Pod(uid) => {
            let cgroot = cgroup_v2_root(root).ok_or_else(|| no_cgroup_v2(root))?;
            find_pod_cgroup(&cgroot, uid).map(drop)
        }
        // A pattern names no particular process: matching none is not an error.
        Selector::Name(_) => Ok(()),
    }
}

/// What a [`TargetSet::refresh`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<u32>,
    /// Exited, or no longer selected.
    pub removed: Vec<u32>,
    /// Selectors that could not be resolved this time (each names its path), skipped.
    pub problems: Vec<String>,
}

/// The live targets of a [`Selection`], each held through its pidfd.
#[derive(Debug, Default)]
pub struct TargetSet {
    targets: BTreeMap<u32, Target>,
    /// When each member's name and cgroup were last read.
    checked: BTreeMap<u32, Instant>,
}

impl TargetSet {
    /// How long a member's name and cgroup, once read, are trusted.
    pub const RECHECK: Duration = Duration::from_secs(10);

    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Re-resolves `selection` on this machine: opens new members, drops exited or deselected
    /// ones. A member whose pid now names another process (its pidfd says exited) is dropped
    /// and, if still selected, reopened as the new process.
    ///
    /// Whether a selector still includes a member (its cgroup's members, its pid) is read at
    /// every refresh; its name and cgroup, which only an exec or a cgroup move change, every
    /// [`Self::RECHECK`]: re-reading three `/proc` files of each of a thousand targets every
    /// second costs more than the targets themselves (scripts/bench-scale.sh). A member that
    /// execs into an excluded name or moves into an excluded cgroup is dropped within it.
    pub fn refresh(&mut self, selection: &Selection) -> Result<Changes, TargetError> {
        let root = HostRoot::default();
        let now = Instant::now();
        let alive: BTreeSet<u32> = self
            .targets
            .iter()
            .filter(|(_, target)| target.exited().is_ok_and(|exited| !exited))
            .map(|(pid, _)| *pid)
            .collect();
        // Only live members are trusted: an exited one's pid may already name another
        // process, whose name and cgroup nobody has read.
        self.checked.retain(|pid, at| {
            now.saturating_duration_since(*at) < Self::RECHECK && alive.contains(pid)
        });
        let trusted: BTreeSet<u32> = self.checked.keys().copied().collect();
        let (selected, problems) =
            selection.resolve_each_trusting(&root, std::process::id(), &trusted)?;
        let mut changes = Changes {
            problems: problems.iter().map(ToString::to_string).collect(),
            ..Changes::default()
        };
        self.targets.retain(|pid, _| {
            let keep = selected.contains(pid) && alive.contains(pid);
            if !keep {
                changes.removed.push(*pid);
            }
            keep
        });
        self.checked.retain(|pid, _| selected.contains(pid));
        for &pid in &selected {
            self.checked.entry(pid).or_insert(now);
        }
        for pid in selected {
            if self.targets.contains_key(&pid) {
                continue;
            }
            match Target::open(pid) {
                Ok(target) => {
                    self.targets.insert(pid, target);
                    changes.added.push(pid);
                }
                // Gone, or turned out to be a kernel thread: not a target, not an error.
                Err(
                    TargetError::Exited { .. }
                    | TargetError::KernelThread { .. }
                    | TargetError::IsSelf { .. },
                ) => {
                    self.checked.remove(&pid);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(changes)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Target> {
        self.targets.values()
    }

    #[must_use]
    pub fn get(&self, pid: u32) -> Option<&Target> {
        self.targets.get(&pid)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn write(root: &Path, rel: &str, content: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    fn process(
        root: &Path,
        pid: u32,
        comm: &str,
        ppid: u32,
        flags: u64,
        argv0: &str,
        cgroup: &str,
    ) {
        write(
            root,
            &format!("proc/{pid}/stat"),
            &format!("{pid} ({comm}) S {ppid} 1 1 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 100 0 0\n"),
        );
        write(
            root,
            &format!("proc/{pid}/cmdline"),
            &format!("{argv0}\0--flag\0"),
        );
        write(
            root,
            &format!("proc/{pid}/cgroup"),
            &format!("0::/{cgroup}\n"),
        );
    }

    /// A machine with: memtide (10), redis in a service cgroup (20, 21), a pod with two
    /// processes (30, 31), a kworker (40), and a python script (50).
    fn fixture() -> tempfile::TempDir {
        fixture_with_cgroup_v2_at("sys/fs/cgroup")
    }

    /// [`fixture`] with the cgroup v2 hierarchy mounted at `mount` (relative to the root).
    fn fixture_with_cgroup_v2_at(mount: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(
            r,
            &format!("{mount}/cgroup.controllers"),
            "cpu memory pids\n",
        );
        process(
            r,
            10,
            "memtide",
            1,
            0x400100,
            "/usr/bin/memtide",
            "system.slice/memtide.service",
        );
        process(
            r,
            20,
            "redis-server",
            1,
            0x400100,
            "/usr/bin/redis-server",
            "system.slice/redis.service",
        );
        process(
            r,
            21,
            "redis-bio",
            20,
            0x400040,
            "/usr/bin/redis-server",
            "system.slice/redis.service/worker",
        );
        let pod = "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234_ab_cd.slice";
        process(
            r,
            30,
            "app",
            1,
            0x400100,
            "/app/bin/app",
            &format!("{pod}/cri-containerd-1.scope"),
        );
        process(
            r,
            31,
            "sidecar",
            1,
            0x400100,
            "/sidecar",
            &format!("{pod}/cri-containerd-2.scope"),
        );
        process(r, 40, "kworker/0:1", 2, 0x4208060, "", "");
        process(
            r,
            50,
            "python3",
            1,
            0x400100,
            "/usr/bin/python3",
            "user.slice",
        );
        write(
            r,
            &format!("{mount}/system.slice/redis.service/cgroup.procs"),
            "20\n",
        );
        write(
            r,
            &format!("{mount}/system.slice/redis.service/worker/cgroup.procs"),
            "21\n",
        );
        write(
            r,
            &format!("{mount}/system.slice/memtide.service/cgroup.procs"),
            "10\n",
        );
        write(
            r,
            &format!("{mount}/{pod}/cri-containerd-1.scope/cgroup.procs"),
            "30\n",
        );
        write(
            r,
            &format!("{mount}/{pod}/cri-containerd-2.scope/cgroup.procs"),
            "31\n",
        );
        write(r, &format!("{mount}/{pod}/cgroup.procs"), "");
        // A stale pid in cgroup.procs whose /proc entry is gone: skipped.
        write(r, &format!("{mount}/user.slice/cgroup.procs"), "50\n77\n");
        dir
    }

    fn resolve(dir: &tempfile::TempDir, include: Vec<Selector>, exclude: Exclude) -> Vec<u32> {
        Selection { include, exclude }
            .resolve(&HostRoot::new(dir.path()), 10)
            .unwrap()
            .into_iter()
            .collect()
    }

    #[test]
    fn glob_patterns() {
        let p = |s: &str| NamePattern(s.into());
        assert!(p("redis*").matches("redis-server"));
        assert!(p("*server").matches("redis-server"));
        assert!(p("r?dis-*").matches("redis-x"));
        assert!(p("*").matches(""));
        assert!(!p("redis").matches("redis-server"));
        assert!(!p("?").matches(""));
        assert!(p("a*b*c").matches("aXbYbZc"));
        assert!(!p("a*b*c").matches("aXbYbZ"));
    }

    #[test]
    fn named_targets_must_exist_when_named() {
        let dir = fixture();
        let root = HostRoot::new(dir.path());
        let check =
            |selector: Selector| check_named(&root, &selector, 10).map_err(|e| e.to_string());
        assert_eq!(check(Selector::Pid(20)), Ok(()));
        let missing = check(Selector::Pid(99)).unwrap_err();
        assert!(
            missing.contains("proc/99") && missing.contains("no such process"),
            "{missing}"
        );
        assert!(
            check(Selector::Pid(10))
                .unwrap_err()
                .contains("memtide itself")
        );
        assert!(
            check(Selector::Pid(40))
                .unwrap_err()
                .contains("kernel thread")
        );
        assert_eq!(
            check(Selector::Cgroup("system.slice/redis.service".into())),
            Ok(())
        );
        let cgroup = check(Selector::Cgroup("system.slice/nope.service".into())).unwrap_err();
        assert!(
            cgroup.contains("nope.service") && cgroup.contains("no such cgroup"),
            "{cgroup}"
        );
        assert_eq!(check(Selector::Pod("1234-ab-cd".into())), Ok(()));
        assert!(
            check(Selector::Pod("feed-beef".into()))
                .unwrap_err()
                .contains("feed-beef")
        );
        // A pattern that matches nothing yet is not a mistake.
        assert_eq!(
            check(Selector::Name(NamePattern("nothing*".into()))),
            Ok(())
        );
    }

    #[test]
    fn by_pid_never_self_or_kthread() {
        let dir = fixture();
        let pids = resolve(
            &dir,
            vec![
                Selector::Pid(10),
                Selector::Pid(20),
                Selector::Pid(40),
                Selector::Pid(99),
            ],
            Exclude::default(),
        );
        assert_eq!(pids, vec![20]);
    }

    #[test]
    fn by_cgroup_includes_descendants_and_skips_stale() {
        let dir = fixture();
        let pids = resolve(
            &dir,
            vec![Selector::Cgroup("system.slice/redis.service".into())],
            Exclude::default(),
        );
        assert_eq!(pids, vec![20, 21]);
        let pids = resolve(
            &dir,
            vec![Selector::Cgroup("system.slice".into())],
            Exclude::default(),
        );
        assert_eq!(
            pids,
            vec![20, 21],
            "memtide's own cgroup member is left out"
        );
        let pids = resolve(
            &dir,
            vec![Selector::Cgroup("user.slice".into())],
            Exclude::default(),
        );
        assert_eq!(pids, vec![50]);
        let err = Selection {
            include: vec![Selector::Cgroup("nope.slice".into())],
            exclude: Exclude::default(),
        }
        .resolve(&HostRoot::new(dir.path()), 10)
        .unwrap_err();
        assert!(err.to_string().contains("nope.slice"), "{err}");
        // The daemon's view: a removed cgroup is reported, the others still resolve.
        let (pids, problems) = Selection {
            include: vec![
                Selector::Cgroup("nope.slice".into()),
                Selector::Cgroup("user.slice".into()),
            ],
            exclude: Exclude::default(),
        }
        .resolve_each(&HostRoot::new(dir.path()), 10)
        .unwrap();
        assert_eq!(pids.into_iter().collect::<Vec<_>>(), vec![50]);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().contains("nope.slice"));
    }

    #[test]
    fn by_name_matches_comm_or_argv0() {
        let dir = fixture();
        // comm of 21 is redis-bio but argv0 is redis-server.
        let pids = resolve(
            &dir,
            vec![Selector::Name(NamePattern("redis-server".into()))],
            Exclude::default(),
        );
        assert_eq!(pids, vec![20, 21]);
        let pids = resolve(
            &dir,
            vec![Selector::Name(NamePattern("*".into()))],
            Exclude::default(),
        );
        assert_eq!(
            pids,
            vec![20, 21, 30, 31, 50],
            "everything but self and the kworker"
        );
    }

    #[test]
    fn by_pod_uid_systemd_and_cgroupfs_drivers() {
        let dir = fixture();
        let pids = resolve(
            &dir,
            vec![Selector::Pod("1234-ab-cd".into())],
            Exclude::default(),
        );
        assert_eq!(pids, vec![30, 31]);
        // cgroupfs driver layout.
        write(
            dir.path(),
            "sys/fs/cgroup/kubepods/besteffort/pod9f-00/c1/cgroup.procs",
            "50\n",
        );
        let pids = resolve(
            &dir,
            vec![Selector::Pod("9f-00".into())],
            Exclude::default(),
        );
        assert_eq!(pids, vec![50]);
        let err = pod_cgroup(&HostRoot::new(dir.path()), "missing").unwrap_err();
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn on_a_hybrid_host_cgroups_and_pods_resolve_in_the_unified_hierarchy() {
        // v1 controllers in /sys/fs/cgroup (a tmpfs, no cgroup.controllers), v2 beside them.
        let dir = fixture_with_cgroup_v2_at("sys/fs/cgroup/unified");
        write(
            dir.path(),
            "sys/fs/cgroup/memory/system.slice/cgroup.procs",
            "50\n",
        );
        let pids = resolve(
            &dir,
            vec![Selector::Cgroup("system.slice/redis.service".into())],
            Exclude::default(),
        );
        assert_eq!(pids, vec![20, 21]);
        let pids = resolve(
            &dir,
            vec![Selector::Pod("1234-ab-cd".into())],
            Exclude::default(),
        );
        assert_eq!(pids, vec![30, 31]);
    }

    #[test]
    fn absolute_cgroup_paths_become_relative_to_either_v2_root() {
        let relative = |p: &str| relative_to_cgroup_v2_root(Path::new(p)).to_path_buf();
        assert_eq!(relative("/sys/fs/cgroup/a.slice/b"), Path::new("a.slice/b"));
        assert_eq!(
            relative("/sys/fs/cgroup/unified/a.slice"),
            Path::new("a.slice")
        );
        assert_eq!(relative("a.slice"), Path::new("a.slice"));
    }

    #[test]
    fn on_a_cgroup_v1_host_cgroup_and_pod_targets_are_a_clear_problem() {
        let dir = fixture_with_cgroup_v2_at("sys/fs/cgroup");
        fs::remove_file(dir.path().join("sys/fs/cgroup/cgroup.controllers")).unwrap();
        let (pids, problems) = Selection {
            include: vec![
                Selector::Cgroup("system.slice/redis.service".into()),
                Selector::Pod("1234-ab-cd".into()),
                Selector::Pid(50),
            ],
            exclude: Exclude::default(),
        }
        .resolve_each(&HostRoot::new(dir.path()), 10)
        .unwrap();
        assert_eq!(pids.into_iter().collect::<Vec<_>>(), vec![50]);
        assert_eq!(problems.len(), 2, "{problems:?}");
        for problem in problems {
            let text = problem.to_string();
            assert!(
                text.contains("no cgroup v2 hierarchy") && text.contains("by pid or process name"),
                "{text}"
            );
        }
    }

    #[test]
    fn exclude_list() {
        let dir = fixture();
        let all = vec![Selector::Name(NamePattern("*".into()))];
        let exclude = Exclude {
            pids: vec![50],
            names: vec![NamePattern("side*".into())],
            cgroups: vec!["system.slice/redis.service/worker".into()],
        };
        assert_eq!(resolve(&dir, all, exclude), vec![20, 30]);
    }

    #[test]
    fn trusted_members_are_not_read_again_but_must_still_be_selected() {
        let dir = fixture();
        let root = HostRoot::new(dir.path());
        let exclude = Exclude {
            names: vec![NamePattern("side*".into())],
            ..Exclude::default()
        };
        let selection = Selection {
            include: vec![Selector::Name(NamePattern("*".into()))],
            exclude,
        };
        let trusting = |trusted: &[u32]| {
            let trusted = trusted.iter().copied().collect();
            let (pids, _) = selection
                .resolve_each_trusting(&root, 10, &trusted)
                .unwrap();
            pids.into_iter().collect::<Vec<_>>()
        };
        let everyone = trusting(&[]);
        // Trusted: its files are not read, so a new, excluded name goes unseen until the
        // trust runs out.
        let member = everyone[0];
        process(
            dir.path(),
            member,
            "sidecar",
            1,
            0x400100,
            "/usr/bin/sidecar",
            "x",
        );
        assert_eq!(trusting(&[member]), everyone);
        assert!(!trusting(&[]).contains(&member));
        // Trust does not select: a pid no selector names stays out.
        let by_pid = Selection {
            include: vec![Selector::Pid(everyone[1])],
            exclude: Exclude::default(),
        };
        let (pids, _) = by_pid
            .resolve_each_trusting(&root, 10, &[member].into_iter().collect())
            .unwrap();
        assert_eq!(pids.into_iter().collect::<Vec<_>>(), [everyone[1]]);
    }

    #[test]
    fn without_cgroup_v2_membership_a_cgroup_exclusion_leaves_the_process_unmanaged() {
        let dir = fixture();
        // As on a cgroup v1 host: controller lines only, no `0::` line.
        write(
            dir.path(),
            "proc/21/cgroup",
            "4:memory:/system.slice/redis.service\n1:name=systemd:/system.slice/redis.service\n",
        );
        let selection = Selection {
            include: vec![Selector::Pid(20), Selector::Pid(21)],
            exclude: Exclude {
                cgroups: vec!["system.slice/redis.service/worker".into()],
                ..Exclude::default()
            },
        };
        let (pids, problems) = selection
            .resolve_each(&HostRoot::new(dir.path()), 10)
            .unwrap();
        assert_eq!(pids.into_iter().collect::<Vec<_>>(), vec![20]);
        let [problem] = problems.as_slice() else {
            panic!("one problem expected: {problems:?}");
        };
        let text = problem.to_string();
        assert!(
            text.contains("proc/21/cgroup") && text.contains("exclude_cgroups"),
            "{text}"
        );
        // Without cgroup exclusions the same process is managed.
        let selection = Selection {
            exclude: Exclude::default(),
            ..selection
        };
        assert_eq!(
            resolve(&dir, selection.include, selection.exclude),
            vec![20, 21]
        );
    }
}
