//! A selection resolved to pids: what its selectors include (pids, cgroups and pods, name
//! patterns), less memtide itself, kernel threads and the exclusions.

use std::collections::BTreeSet;

use super::{
    NamePattern, Selection, Selector,
    cgroup::{cgroup_dir, cgroup_pids, cgroup_v2_root, find_pod_cgroup, no_cgroup_v2},
    process::{all_pids, read_candidate},
};
use crate::{
    sysfs::{HostRoot, SysfsError},
    targets::{ProcStat, TargetError},
};

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
    pub(super) fn resolve_each_trusting(
        &self,
        root: &HostRoot,
        self_pid: u32,
        checked: &BTreeSet<u32>,
    ) -> Result<(BTreeSet<u32>, Vec<TargetError>), TargetError> {
        let (wanted, mut problems) = self.included(root, checked)?;
        let (out, unknown_cgroup) = self.admitted(root, self_pid, checked, wanted)?;
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

    /// The pids the selectors name, before any exclusion, and the selectors that could not be
    /// resolved.
    fn included(
        &self,
        root: &HostRoot,
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
                Selector::Cgroup(path) => cgroot().and_then(|cgroot| cgroup_dir(cgroot, path)),
                Selector::Pod(uid) => cgroot().and_then(|cgroot| find_pod_cgroup(cgroot, uid)),
            };
            let read =
                dir.and_then(|dir| cgroup_pids(&dir, &mut wanted).map_err(|e| selector_error(&e)));
            if let Err(e) = read {
                problems.push(e);
            }
        }
        if !by_name.is_empty() {
            wanted.extend(named(root, &by_name, checked)?);
        }
        Ok((wanted, problems))
    }

    /// Of `wanted`, the pids to manage: not memtide, not a kernel thread, not excluded. The
    /// second list holds the pids left out because an exclusion by cgroup cannot be checked
    /// for them.
    fn admitted(
        &self,
        root: &HostRoot,
        self_pid: u32,
        checked: &BTreeSet<u32>,
        wanted: BTreeSet<u32>,
    ) -> Result<(BTreeSet<u32>, Vec<u32>), TargetError> {
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
        Ok((out, unknown_cgroup))
    }
}

/// The pids whose name matches one of `patterns`; those in `checked` are taken as matching
/// without reading them again.
fn named(
    root: &HostRoot,
    patterns: &[&NamePattern],
    checked: &BTreeSet<u32>,
) -> Result<BTreeSet<u32>, TargetError> {
    let pids = all_pids(root).map_err(|e| selector_error(&e))?;
    let mut wanted = BTreeSet::new();
    for pid in pids {
        if checked.contains(&pid) {
            wanted.insert(pid);
            continue;
        }
        if let Ok(c) = read_candidate(root, pid)
            && patterns.iter().any(|p| c.identity.name_matches(p))
        {
            wanted.insert(pid);
        }
    }
    Ok(wanted)
}

fn selector_error(error: &SysfsError) -> TargetError {
    TargetError::Selector {
        path: error.path().to_path_buf(),
        what: error.to_string(),
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
            cgroup_dir(&cgroot, path).map(drop)
        }
        Selector::Pod(uid) => {
            let cgroot = cgroup_v2_root(root).ok_or_else(|| no_cgroup_v2(root))?;
            find_pod_cgroup(&cgroot, uid).map(drop)
        }
        // A pattern names no particular process: matching none is not an error.
        Selector::Name(_) => Ok(()),
    }
}
