//! Kubernetes pod opt-in: what `memtide run` checks before it talks to any API server. The
//! pod watch itself (list, watch, resumption, RBAC, a rejected token) runs against a real
//! etcd and kube-apiserver in deploy/tests/k8s (`make k8s-e2e`); the faults a real server
//! cannot be made to send are the pod watch's unit tests (agent/src/kube/watch/tests.rs).
mod support;

use std::time::{Duration, Instant};

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
