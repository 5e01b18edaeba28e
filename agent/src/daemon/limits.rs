//! Which `[[targets.limits]]` table applies to a target: the first whose cgroup, pod label or
//! process name matches it. Read when the target is found and again at each reload, so a
//! changed limit reaches running targets.

use memtide_config::{LimitSelector, TargetLimit};
use memtide_host::{
    sysfs::HostRoot,
    targets::select::{NamePattern, ProcessIdentity},
};

use super::target::AppliedLimit;
use crate::kube::PodRef;

/// The limit for `pid` (`None`: no table matches, or the process is gone).
pub(super) fn limit_for(
    root: &HostRoot,
    pid: u32,
    limits: &[TargetLimit],
    pods: &[PodRef],
) -> Option<AppliedLimit> {
    if limits.is_empty() {
        return None;
    }
    let identity = ProcessIdentity::read(root, pid).ok()?;
    matching(limits, &identity, pods)
}

/// The first of `limits` that matches a process of `identity`, with the opted-in `pods`.
fn matching(
    limits: &[TargetLimit],
    identity: &ProcessIdentity,
    pods: &[PodRef],
) -> Option<AppliedLimit> {
    limits.iter().find_map(|limit| {
        let selector = limit.selector()?;
        let matches = match selector {
            LimitSelector::Cgroup(cgroup) => identity.in_cgroup(cgroup),
            LimitSelector::PodLabel { key, value } => pods.iter().any(|pod| {
                pod.labels.get(key).map(String::as_str) == Some(value) && identity.in_pod(&pod.uid)
            }),
            LimitSelector::Name(name) => identity.name_matches(&NamePattern(name.to_owned())),
        };
        let amount = limit.amount().filter(|_| matches)?;
        Some(AppliedLimit {
            matched: selector.to_string(),
            amount,
        })
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use memtide_config::LimitAmount;

    use super::*;

    fn limit(text: &str) -> TargetLimit {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn the_first_matching_table_applies() {
        let limits = [
            limit("cgroup = \"tenants/a\"\nfast_bytes = 100"),
            limit("pod_label = \"tier=bronze\"\nfast_percent = 10.0"),
            limit("name = \"redis*\"\nfast_bytes = 300"),
            limit("name = \"*\"\nfast_bytes = 400"),
        ];
        let pod = PodRef {
            namespace: "prod".into(),
            name: "cache".into(),
            uid: "0f1e-22".into(),
            labels: [("tier".to_owned(), "bronze".to_owned())].into(),
        };
        let process = |comm: &str, cgroup: &str| ProcessIdentity {
            comm: comm.to_owned(),
            argv0: None,
            cgroup: Some(PathBuf::from(cgroup)),
        };
        let amount = |identity: &ProcessIdentity, pods: &[PodRef]| {
            matching(&limits, identity, pods).map(|applied| (applied.matched, applied.amount))
        };
        assert_eq!(
            amount(&process("redis-server", "tenants/a/worker"), &[]),
            Some(("cgroup tenants/a".to_owned(), LimitAmount::Bytes(100)))
        );
        // The pod's cgroup, as the kubelet's systemd driver names it.
        let in_pod = process(
            "redis-server",
            "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e_22.slice/cri-containerd-1.scope",
        );
        assert_eq!(
            amount(&in_pod, std::slice::from_ref(&pod)),
            Some((
                "pod label tier=bronze".to_owned(),
                LimitAmount::Percent(10.0)
            ))
        );
        // Without the pod in the opted-in list, the name decides.
        assert_eq!(
            amount(&in_pod, &[]),
            Some(("name redis*".to_owned(), LimitAmount::Bytes(300)))
        );
        assert_eq!(
            amount(&process("postgres", "system.slice"), &[]).map(|(m, _)| m),
            Some("name *".to_owned())
        );
        assert_eq!(matching(&limits[..3], &process("postgres", "x"), &[]), None);
        // A cgroup written from the root, or under the mount, matches the same.
        for cgroup in ["/tenants/a", "/sys/fs/cgroup/tenants/a"] {
            let rooted = [limit(&format!("cgroup = \"{cgroup}\"\nfast_bytes = 1"))];
            let found = matching(&rooted, &process("db", "tenants/a/x"), &[]);
            assert!(found.is_some(), "{cgroup}");
        }
    }
}
