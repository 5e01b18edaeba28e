//! Kubernetes pod opt-in, end to end on this machine: `memtide run` with `[targets]
//! pod_selector` lists the pods of its node from an API server (a fake one on loopback that
//! checks the query), finds each opted-in pod's cgroup under `kubepods` (cgroupfs layout, made
//! here) and manages its processes, and only those. A failing API server keeps the last list;
//! a pod that leaves the list stops being managed. A `[[targets.limits]]` table by pod label
//! bounds the pod's process until the pod is relabelled.
mod support;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::TcpListener,
    path::PathBuf,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use support::{Agent, Workload, http_get, metric_value, status_pids, wait_for};

const SELECTOR_QUERY: &str =
    "labelSelector=memtide.io%2Ftiering%3Denabled&fieldSelector=spec.nodeName%3Dtest-node";

/// What the fake API server answers: HTTP status and body.
type Answer = Arc<Mutex<(u16, String)>>;

/// Serves `GET /api/v1/pods?...` on loopback with whatever `answer` holds; a request with
/// another path or query gets 400. Returns the port.
fn fake_api_server(answer: Answer, requests: Arc<Mutex<Vec<String>>>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the fake API server");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            // Headers up to the blank line.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or_default();
            requests.lock().unwrap().push(path.to_owned());
            let (status, body) = if path == format!("/api/v1/pods?{SELECTOR_QUERY}") {
                answer.lock().unwrap().clone()
            } else {
                (400, r#"{"message":"unexpected request"}"#.to_owned())
            };
            let _ = write!(
                stream,
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    port
}

fn pod_list(uids: &[&str]) -> String {
    labelled_pod_list(uids, "bronze")
}

/// A pod list whose pods carry the label `tier=TIER`.
fn labelled_pod_list(uids: &[&str], tier: &str) -> String {
    let items: Vec<String> = uids
        .iter()
        .map(|uid| {
            format!(
                r#"{{"metadata":{{"name":"pod-{uid}","namespace":"test","uid":"{uid}","labels":{{"tier":"{tier}"}}}},"status":{{"phase":"Running"}}}}"#
            )
        })
        .collect();
    format!(r#"{{"kind":"PodList","items":[{}]}}"#, items.join(","))
}

/// The fast-tier share in the status row of `pid`, and why (None, None while unbounded).
fn fast_share(port: u16, pid: u32) -> (Option<u64>, Option<String>) {
    let Some((200, body)) = http_get(port, "/status") else {
        return (None, None);
    };
    let status: serde_json::Value = serde_json::from_str(&body).expect("/status is JSON");
    let row = status["targets"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|row| row["pid"] == u64::from(pid))
                .cloned()
        })
        .unwrap_or_default();
    (
        row["fast_share_bytes"].as_u64(),
        row["fast_share_reason"].as_str().map(str::to_owned),
    )
}

/// A pod's cgroup as kubelet's cgroupfs driver lays it out in the cgroup v2 hierarchy
/// (`support::cgroup_v2_root`, /sys/fs/cgroup/unified on this hybrid test machine), with `pid`
/// moved in for real (and back out on drop). Everything made is removed on drop.
struct PodCgroup {
    dir: PathBuf,
    kubepods: PathBuf,
    cgroot: PathBuf,
    pid: u32,
}

impl PodCgroup {
    /// None when this host has no cgroup v2 hierarchy or it cannot be written.
    fn create(uid: &str, pid: u32) -> Option<Self> {
        let cgroot = support::cgroup_v2_root()?;
        let kubepods = cgroot.join("kubepods");
        let dir = kubepods.join("burstable").join(format!("pod{uid}"));
        std::fs::create_dir_all(&dir).ok()?;
        let cgroup = Self {
            dir,
            kubepods,
            cgroot,
            pid,
        };
        std::fs::write(cgroup.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        Some(cgroup)
    }
}

impl Drop for PodCgroup {
    fn drop(&mut self) {
        let _ = std::fs::write(self.cgroot.join("cgroup.procs"), self.pid.to_string());
        let _ = std::fs::remove_dir(&self.dir);
        // The shared parents go with the last pod's cgroup.
        let _ = std::fs::remove_dir(self.kubepods.join("burstable"));
        let _ = std::fs::remove_dir(&self.kubepods);
    }
}

#[test]
fn opted_in_pods_of_this_node_are_managed_and_no_others() {
    const TEST: &str = "opted_in_pods_of_this_node_are_managed_and_no_others";
    if support::skip_unless_root(TEST) {
        return;
    }
    let opted_in = Workload::spawn(&["--pages", "256"]);
    let bystander = Workload::spawn(&["--pages", "256"]);
    let (in_uid, out_uid) = (
        "0a1b2c3d-0000-4000-8000-00000000a11c",
        "0a1b2c3d-0000-4000-8000-0000000b0b00",
    );
    let Some(_in_cgroup) = PodCgroup::create(in_uid, opted_in.pid) else {
        support::skip(
            TEST,
            "no writable cgroup v2 hierarchy at /sys/fs/cgroup or /sys/fs/cgroup/unified",
        );
        return;
    };
    let _out_cgroup = PodCgroup::create(out_uid, bystander.pid).expect("second pod cgroup");

    let answer: Answer = Arc::new(Mutex::new((200, pod_list(&[in_uid]))));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let api_port = fake_api_server(Arc::clone(&answer), Arc::clone(&requests));
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("memtide.toml");
    std::fs::write(
        &config,
        format!(
            "[targets]\npod_selector = \"memtide.io/tiering=enabled\"\n\
             [[targets.limits]]\npod_label = \"tier=bronze\"\nfast_bytes = 1048576\n\
             [kubernetes]\napi_server = \"http://127.0.0.1:{api_port}\"\nnode_name = \"test-node\"\npoll_seconds = 1\n"
        ),
    )
    .expect("write the config");
    let config = config.to_string_lossy().into_owned();
    let agent = Agent::start(&["--config", &config], Duration::from_secs(30));

    let managed = || status_pids(agent.port);
    assert!(
        wait_for(Duration::from_secs(20), || managed()
            == vec![u64::from(opted_in.pid)]),
        "the opted-in pod's process is not (the only) target: {:?}; requests {:?}\n{}",
        managed(),
        requests.lock().unwrap(),
        agent.log()
    );
    let metrics = http_get(agent.port, "/metrics").expect("/metrics").1;
    assert_eq!(
        metric_value(&metrics, "memtide_opted_in_pods", ""),
        Some(1.0)
    );
    assert!(
        agent.log().contains(&format!("test/pod-{in_uid}")),
        "{}",
        agent.log()
    );

    // The pod's label matches a [[targets.limits]] table: its share is that limit...
    let bronze = (
        Some(1 << 20),
        Some("limit (pod label tier=bronze)".to_owned()),
    );
    assert!(
        wait_for(Duration::from_secs(20), || fast_share(
            agent.port,
            opted_in.pid
        ) == bronze),
        "the pod's limit is not in its status row: {:?}\n{}",
        fast_share(agent.port, opted_in.pid),
        agent.log()
    );
    // ... until the pod is relabelled: the new list re-matches the limits (the target, quiet,
    // plans again within 10 s).
    *answer.lock().unwrap() = (200, labelled_pod_list(&[in_uid], "gold"));
    assert!(
        wait_for(Duration::from_secs(25), || fast_share(
            agent.port,
            opted_in.pid
        ) == (None, None)),
        "the relabelled pod kept its limit: {:?}\n{}",
        fast_share(agent.port, opted_in.pid),
        agent.log()
    );

    // The API server fails: the pod stays managed, the failure is counted and logged once.
    *answer.lock().unwrap() = (503, r#"{"message":"etcd is down"}"#.to_owned());
    assert!(
        wait_for(Duration::from_secs(10), || {
            let metrics = http_get(agent.port, "/metrics").expect("/metrics").1;
            metric_value(&metrics, "memtide_pod_list_errors_total", "").unwrap_or(0.0) >= 2.0
        }),
        "no failed list counted:\n{}",
        agent.log()
    );
    assert_eq!(
        managed(),
        vec![u64::from(opted_in.pid)],
        "kept through the failure"
    );
    let log = agent.log();
    assert_eq!(
        log.matches("etcd is down").count(),
        1,
        "the failure is logged once, with the server's message:\n{log}"
    );

    // The pod leaves the list (label removed): no longer managed.
    *answer.lock().unwrap() = (200, pod_list(&[]));
    assert!(
        wait_for(Duration::from_secs(15), || managed().is_empty()),
        "the pod that left the list is still a target: {:?}\n{}",
        managed(),
        agent.log()
    );
    let (exit, log) = agent.stop();
    assert!(exit.success(), "memtide run exited with {exit}:\n{log}");
    support::assert_no_memtide_bpf_programs();
    drop(opted_in);
    drop(bystander);
}

/// Pod opt-in without this node's name is a configuration error (exit 2) that says what to set.
#[test]
fn pod_opt_in_without_a_node_name_is_a_configuration_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("memtide.toml");
    std::fs::write(
        &config,
        "[targets]\npod_selector = \"memtide.io/tiering=enabled\"\n[kubernetes]\napi_server = \"http://127.0.0.1:9\"\n",
    )
    .expect("write the config");
    let mut child = std::process::Command::new(support::memtide_bin())
        .args([
            "run",
            "--listen",
            &format!("127.0.0.1:{}", support::free_port()),
            "--config",
        ])
        .arg(&config)
        .env_remove("MEMTIDE_NODE_NAME")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("memtide run");
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("memtide run kept running without a node name");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("MEMTIDE_NODE_NAME"), "{stderr}");
}
