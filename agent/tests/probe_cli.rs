//! Runs the real `memtide probe` binary: on this host (comparing against what sysfs says, so it
//! holds on any machine), on a fixture tree (exact values) and with a bad `--root`.

use std::{
    fs,
    path::Path,
    process::{Command, Output},
};

use serde_json::Value;

fn memtide(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_memtide"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("running memtide")
}

fn probe_json(args: &[&str]) -> Value {
    let out = memtide(args);
    assert!(
        out.status.success(),
        "memtide {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "memtide {args:?} printed invalid JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn read(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn assert_structure(json: &Value) {
    assert!(json["kernel"].is_string());
    assert!(json["bpf"].is_boolean());
    assert!(json["bpf_detail"].is_string());
    assert!(
        json["pmus"]
            .as_array()
            .unwrap()
            .iter()
            .all(Value::is_string)
    );
    let sources = json["sources"].as_array().unwrap();
    let known = ["pebs", "ibs", "spe", "damon", "swfault"];
    assert!(sources.iter().all(|s| known.contains(&s.as_str().unwrap())));
    let selected = &json["selected_source"];
    assert!(selected["reason"].is_string());
    assert_eq!(
        selected["name"],
        sources.first().cloned().unwrap_or(Value::Null)
    );
    let damon = &json["damon"];
    assert!(damon["present"].is_boolean());
    assert!(damon["operations"].is_array());
    assert!(damon["operations_source"].is_string());
    assert!(damon["busy"].is_boolean());
    assert!(damon["busy_kdamonds"].is_array());
    assert!(damon["tracepoint"].is_boolean());
    for node in json["numa_nodes"].as_array().unwrap() {
        assert!(node["id"].is_u64());
        assert!(node["cpus"].is_array());
        assert!(node["memory_bytes"].is_u64());
        assert!(node["tier"].is_u64() || node["tier"].is_null());
    }
    assert!(json["memory_tiers"].is_array());
    assert!(json["thp"].is_string() || json["thp"].is_null());
    assert!(json["numa_balancing"].is_u64() || json["numa_balancing"].is_null());
    assert!(json["demotion_enabled"].is_boolean() || json["demotion_enabled"].is_null());
    assert!(json["errors"].is_array());
}

#[test]
fn probe_json_on_this_host_agrees_with_sysfs() {
    // `probe` writes to DAMON sysfs only when no kdamond exists; then ask for --read-only so a
    // test never creates kdamonds on a machine where other tests may be using DAMON.
    let damon_admin = Path::new("/sys/kernel/mm/damon/admin");
    let nr_kdamonds: Option<u32> =
        read("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds").and_then(|s| s.parse().ok());
    let args: &[&str] = if nr_kdamonds == Some(0) {
        &["probe", "--json", "--read-only"]
    } else {
        &["probe", "--json"]
    };
    let json = probe_json(args);
    assert_structure(&json);
    assert_eq!(
        json["errors"],
        Value::Array(vec![]),
        "probe had read errors"
    );

    if let Some(release) = read("/proc/sys/kernel/osrelease") {
        assert_eq!(json["kernel"], release.as_str());
    }
    let mut pmus: Vec<String> = fs::read_dir("/sys/bus/event_source/devices")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    pmus.sort();
    assert_eq!(json["pmus"], serde_json::json!(pmus));
    if !pmus
        .iter()
        .any(|p| p == "cpu" || p == "cpu_core" || p == "ibs_op" || p.starts_with("arm_spe_"))
    {
        let sources = json["sources"].as_array().unwrap();
        assert!(
            !sources
                .iter()
                .any(|s| ["pebs", "ibs", "spe"].contains(&s.as_str().unwrap())),
            "hardware source without a hardware PMU: {sources:?}"
        );
    }
    if json["bpf"] == true && pmus.iter().any(|p| p == "software") {
        assert!(
            json["sources"]
                .as_array()
                .unwrap()
                .contains(&Value::from("swfault"))
        );
    }

    if let Some(online) = read("/sys/devices/system/node/online") {
        let nodes = json["numa_nodes"].as_array().unwrap();
        let expected = memtide_host::sysfs::parse_nodelist(&online).unwrap();
        let got: Vec<u64> = nodes.iter().map(|n| n["id"].as_u64().unwrap()).collect();
        assert_eq!(
            got,
            expected.iter().map(|&n| u64::from(n)).collect::<Vec<_>>()
        );
        if expected.len() == 1 {
            let out = memtide(&["probe", "--read-only"]);
            assert!(out.status.success());
            let table = String::from_utf8(out.stdout).unwrap();
            assert!(
                table.contains("one NUMA node: nothing to migrate to"),
                "{table}"
            );
        }
    }

    assert_eq!(json["damon"]["present"], damon_admin.exists());
    if let Some(n) = nr_kdamonds {
        let running: Vec<u64> = (0..n)
            .filter(|i| {
                read(&format!("/sys/kernel/mm/damon/admin/kdamonds/{i}/state")).as_deref()
                    == Some("on")
            })
            .filter_map(|i| {
                read(&format!("/sys/kernel/mm/damon/admin/kdamonds/{i}/pid"))?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(json["damon"]["busy"], !running.is_empty());
        assert_eq!(json["damon"]["busy_kdamonds"], serde_json::json!(running));
        if let Some(ops) = read("/sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/avail_operations")
        {
            let ops: Vec<&str> = ops.split_whitespace().collect();
            assert_eq!(json["damon"]["operations"], serde_json::json!(ops));
        }
        // The probe must not have touched anything.
        assert_eq!(
            read("/sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds").and_then(|s| s.parse().ok()),
            Some(n)
        );
    }
    if let Some(mode) = read("/proc/sys/kernel/numa_balancing") {
        assert_eq!(json["numa_balancing"].to_string(), mode);
    }
}

#[test]
fn probe_json_on_the_dev_machine_fixture() {
    let root = &format!("{}/machines/vm-single-node", memtide_host::FIXTURES);
    let json = probe_json(&["probe", "--json", "--root", root]);
    assert_structure(&json);
    assert_eq!(json["kernel"], "6.18.44-fc-v595");
    assert_eq!(
        json["pmus"],
        serde_json::json!(["breakpoint", "msr", "software", "tracepoint", "uprobe"])
    );
    assert_eq!(json["damon"]["operations"], serde_json::json!(["paddr"]));
    assert_eq!(json["damon"]["busy"], true);
    assert_eq!(json["damon"]["busy_kdamonds"], serde_json::json!([77]));
    assert_eq!(json["numa_nodes"].as_array().unwrap().len(), 1);
    assert_eq!(json["numa_nodes"][0]["tier"], 4);
    assert_eq!(json["thp"], "madvise");
    assert_eq!(json["numa_balancing"], 0);
    assert_eq!(json["demotion_enabled"], false);
    assert!(
        json["bpf_detail"]
            .as_str()
            .unwrap()
            .contains("checked on the running kernel"),
        "{}",
        json["bpf_detail"]
    );
}

#[test]
fn probe_with_a_missing_root_fails_clearly() {
    let out = memtide(&["probe", "--root", "/nonexistent/memtide-fixture"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("/nonexistent/memtide-fixture"), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn unknown_subcommand_is_a_usage_error() {
    let out = memtide(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}
