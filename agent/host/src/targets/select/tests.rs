//! Selection against fixture trees of /proc and /sys/fs/cgroup.

use std::{fs, path::Path};

use super::*;
use crate::{sysfs::HostRoot, test_tree::write};

fn process(root: &Path, pid: u32, comm: &str, ppid: u32, flags: u64, argv0: &str, cgroup: &str) {
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
    let check = |selector: Selector| check_named(&root, &selector, 10).map_err(|e| e.to_string());
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

/// A target set resolves, opens and reads its targets under the root it is given: a real child
/// (its pidfd is real) whose name, maps and threads only the fixture tree has.
#[test]
fn a_target_set_reads_its_targets_under_the_root_it_is_given() {
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = child.id();
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    process(
        r,
        pid,
        "fixture-only",
        1,
        0x400100,
        "/opt/fixture-only",
        "x",
    );
    write(
        r,
        &format!("proc/{pid}/maps"),
        "7f2a3c000000-7f2a3c200000 rw-p 00000000 00:00 0 \n",
    );
    write(
        r,
        &format!("proc/{pid}/task/{pid}/stat"),
        &format!(
            "{pid} (fixture-only) S 1 {pid} {pid} 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 100 \
             0 0 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 5 0 0 0 0 0\n"
        ),
    );
    let selection = Selection {
        include: vec![Selector::Name(NamePattern("fixture-only".into()))],
        exclude: Exclude::default(),
    };
    let mut set = TargetSet::new();
    let changes = set.refresh(&HostRoot::new(r), &selection);
    let target = set.get(pid).map(|target| {
        (
            target.stat().comm.clone(),
            target.maps().map(|maps| maps.len()),
            target.thread_cpus(),
        )
    });
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(changes.unwrap().added, vec![pid]);
    let (comm, maps, cpus) = target.expect("the child is a target");
    assert_eq!(comm, "fixture-only");
    assert_eq!(maps.unwrap(), 1);
    assert_eq!(cpus.unwrap(), vec![5]);
}
