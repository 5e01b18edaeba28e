//! `memtide gen`, `memtide sim` and `memtide convert` end to end: the JSON contract, format
//! detection, compressed input, real lackey output, and line-numbered errors.

use std::{path::Path, process::Command};

fn memtide(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_memtide"))
        .args(args)
        .output()
        .expect("run memtide")
}

fn sim_json(trace: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["sim", "--trace", trace.to_str().unwrap(), "--json"];
    args.extend_from_slice(extra);
    let out = memtide(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn generate(dir: &Path, workload: &str, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    let out = memtide(&[
        "gen",
        "--workload",
        workload,
        "--footprint",
        &(64u64 << 20).to_string(),
        "--records",
        "60000",
        "--seed",
        "5",
        "--out",
        path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

#[test]
fn json_contract_for_every_policy() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generate(dir.path(), "gups-hotset", "t.mt.zst");
    for policy in [
        "memtide",
        "oracle",
        "oracle-epoch",
        "hindsight",
        "hindsight-epoch",
        "hindsight-samples",
        "no-migration",
        "interleave",
        "bw-aware",
        "static-4k",
        "static-64k",
        "static-2m",
        "tpp",
        "hemem",
        "memtis",
        "damon",
    ] {
        let v = sim_json(&trace, &["--policy", policy, "--preset", "pmem"]);
        assert_eq!(v["policy"], policy);
        assert_eq!(v["records"], 60_000);
        assert_eq!(v["footprint_bytes"], 64u64 << 20);
        let hit = v["fast_hit_ratio"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&hit), "{policy}: {hit}");
        let by = &v["migrated_bytes_by_granularity"];
        let sum: u64 = ["4k", "64k", "2m"]
            .iter()
            .map(|k| by[k].as_u64().unwrap())
            .sum();
        assert_eq!(sum, v["migrated_bytes"].as_u64().unwrap(), "{policy}");
        assert!(v["migrations"].is_u64());
        assert!(
            v["projected_time_s"].as_f64().unwrap()
                >= v["all_fast_time_s"].as_f64().unwrap() * 0.999
        );
    }
}

/// Without `--sample-rate` a replay samples at the density the agent's defaults give a busy
/// server: one sample per 128,000 LLC misses at 32 CPUs, four times denser at 8; and says so.
#[test]
fn the_default_density_is_the_agents_on_a_busy_server() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generate(dir.path(), "gups-hotset", "t.mt.zst");
    let rate_of = |extra: &[&str]| {
        let mut args = vec![
            "sim",
            "--trace",
            trace.to_str().unwrap(),
            "--policy",
            "memtide",
        ];
        args.extend_from_slice(extra);
        args.push("--json");
        let out = memtide(&args);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        (
            v["sample_rate"].as_u64().unwrap(),
            v["record_weight"].as_u64().unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Records per sample times accesses per record: LLC misses per sample.
    let (rate, weight, note) = rate_of(&[]);
    assert_eq!(rate * weight, 128_000, "{rate} x {weight}");
    assert!(note.contains("busy 32-CPU server"), "{note}");
    let (rate, weight, _) = rate_of(&["--cpus", "8"]);
    assert_eq!(rate * weight, 32_000);
    assert_eq!(rate_of(&["--record-weight", "16"]).0, 8_000);
    let (rate, _, note) = rate_of(&["--sample-rate", "4"]);
    assert_eq!(rate, 4);
    assert!(!note.contains("note: sampling"), "{note}");
    let both = memtide(&[
        "sim",
        "--trace",
        trace.to_str().unwrap(),
        "--policy",
        "memtide",
        "--sample-rate",
        "4",
        "--cpus",
        "8",
    ]);
    assert!(
        !both.status.success(),
        "--cpus models what --sample-rate sets"
    );
}

#[test]
fn everything_fast_costs_nothing_extra() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generate(dir.path(), "zipf-kv", "z.mt");
    let v = sim_json(&trace, &["--policy", "no-migration", "--fast-ratio", "1.0"]);
    assert_eq!(v["fast_hit_ratio"].as_f64().unwrap(), 1.0);
    let (p, a) = (
        v["projected_time_s"].as_f64().unwrap(),
        v["all_fast_time_s"].as_f64().unwrap(),
    );
    assert!((p / a - 1.0).abs() < 1e-9, "{p} vs {a}");
    // Nothing fast: every access slow.
    let v = sim_json(
        &trace,
        &["--policy", "no-migration", "--fast-capacity", "0"],
    );
    assert_eq!(v["fast_hit_ratio"].as_f64().unwrap(), 0.0);
}

#[test]
fn real_lackey_output_and_malformed_lines() {
    let real = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/lackey-sqlite-head.txt");
    let v = sim_json(&real, &["--policy", "memtide"]);
    assert!(v["records"].as_u64().unwrap() > 2000);
    let v = sim_json(
        &real,
        &[
            "--policy",
            "tpp",
            "--format",
            "lackey",
            "--record-weight",
            "64",
        ],
    );
    assert!(v["footprint_bytes"].as_u64().unwrap() >= 2 << 20);

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.txt");
    std::fs::write(
        &bad,
        "==1== Lackey\n L 1000,8\n S 2000,8\n L 12zz,8\n L 3000,8\n",
    )
    .unwrap();
    let out = memtide(&[
        "sim",
        "--trace",
        bad.to_str().unwrap(),
        "--policy",
        "memtide",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 4"), "{err}");
    let v = sim_json(&bad, &["--policy", "memtide", "--lenient"]);
    assert_eq!(v["skipped_lines"], 1);
    assert_eq!(v["records"], 3);
}

#[test]
fn perf_script_gzip_input() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.txt.gz");
    let mut text = String::from("# perf script -F pid,event,addr,data_src,weight\n");
    for i in 0..5000u64 {
        let ev = if i % 4 == 0 {
            "cpu/mem-stores/P:"
        } else {
            "cpu/mem-loads,ldlat=30/P:"
        };
        text.push_str(&format!(
            "  {} {ev} {:x} 68100142 |OP LOAD|LVL L3 miss| 120\n",
            100 + i % 2,
            0x7f00_0000_0000u64 + (i * 4096 * 7) % (32 << 20)
        ));
    }
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut enc, text.as_bytes()).unwrap();
    std::fs::write(&path, enc.finish().unwrap()).unwrap();
    let v = sim_json(&path, &["--policy", "hemem"]);
    assert_eq!(v["records"], 5000);
    // Two processes: their address spaces are kept apart (twice the superpages).
    assert_eq!(v["footprint_bytes"].as_u64().unwrap(), 2 * (32u64 << 20));
}

#[test]
fn convert_writes_the_record_weight_into_the_native_header() {
    let dir = tempfile::tempdir().unwrap();
    let lackey = dir.path().join("t.lackey");
    let mut text = String::from("==1== Lackey, an example Valgrind tool\n");
    for i in 0..5000u64 {
        text.push_str(&format!(
            "I  0400{:04x},3\n L {:x},8\n",
            i,
            0x10_0000 + (i % 700) * 4096
        ));
        if i % 5 == 0 {
            text.push_str(&format!(" S {:x},8\n", 0x20_0000 + (i % 90) * 4096));
        }
    }
    std::fs::write(&lackey, text).unwrap();
    let native = dir.path().join("t.mt.zst");
    let convert = |weight: &str| {
        memtide(&[
            "convert",
            "--trace",
            lackey.to_str().unwrap(),
            "--record-weight",
            weight,
            "--out",
            native.to_str().unwrap(),
        ])
    };
    let out = convert("64");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("wrote 6000 records (record weight 64)"));
    // The weight travels with the trace: no --record-weight on the replay.
    let converted = sim_json(&native, &["--policy", "no-migration"]);
    let original = sim_json(
        &lackey,
        &["--policy", "no-migration", "--record-weight", "64"],
    );
    assert_eq!(converted["record_weight"], 64);
    assert_eq!(converted["records"], 6000);
    assert_eq!(converted["footprint_bytes"], original["footprint_bytes"]);
    assert_eq!(converted["fast_hit_ratio"], original["fast_hit_ratio"]);
    let refused = convert("0");
    assert_eq!(refused.status.code(), Some(2), "a zero weight is refused");
}

/// `--engine-config` lays an agent configuration file's `[engine]` table over the simulated
/// engine's configuration, and refuses what it cannot apply, naming the file.
#[test]
fn an_engine_config_file_configures_the_simulated_engine() {
    let dir = tempfile::tempdir().unwrap();
    let trace = generate(dir.path(), "gups-hotset", "g.mt");
    let file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    // A fixed 30 ms epoch: the adaptive controller steps by doubling from 10 ms, never to 30.
    let fixed = file(
        "fixed.toml",
        concat!(
            "[agent]\nlog_format = \"json\"\n\n",
            "[engine.policy.epoch]\nadaptive = false\ninitial_ms = 30\n",
        ),
    );
    for policy in ["memtide", "static-2m"] {
        let default = sim_json(&trace, &["--policy", policy]);
        assert_ne!(default["policy_info"]["mean_epoch_ms"], 30.0, "{policy}");
        let configured = sim_json(&trace, &["--policy", policy, "--engine-config", &fixed]);
        assert_eq!(configured["policy_info"]["mean_epoch_ms"], 30.0, "{policy}");
        assert_eq!(configured["policy_info"]["final_epoch_ms"], 30, "{policy}");
    }
    // hindsight-epoch re-places once per shortest epoch: the file's (min_ms, not initial_ms),
    // not the default 10 ms.
    let fast = file(
        "fast.toml",
        "[engine.policy.epoch]\ninitial_ms = 1000\nmin_ms = 1\n",
    );
    let hit = |extra: &[&str]| {
        let mut args = vec!["--policy", "hindsight-epoch"];
        args.extend_from_slice(extra);
        sim_json(&trace, &args)["fast_hit_ratio"].as_f64().unwrap()
    };
    let (every_10ms, every_1ms) = (hit(&[]), hit(&["--engine-config", &fast]));
    assert!(
        every_1ms > every_10ms,
        "re-placed every ms {every_1ms}, every 10 ms {every_10ms}"
    );

    let refused = |extra: &[&str], expected: &[&str]| {
        let mut args = vec!["sim", "--trace", trace.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = memtide(&args);
        assert!(!out.status.success(), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        for e in expected {
            assert!(err.contains(e), "{extra:?}: {err}");
        }
    };
    // (file name, contents, what the error must say besides the file's path)
    let bad_files = [
        ("unknown.toml", "[engine.policy.epoch]\nnope = 1\n", "nope"),
        (
            "mistyped.toml",
            "[engine.policy.epoch]\ninitial_ms = \"x\"\n",
            "policy.epoch.initial_ms",
        ),
        (
            "invalid.toml",
            "[engine.policy.capacity]\nhigh_watermark = 2.0\n",
            "high_watermark",
        ),
        ("broken.toml", "[engine\n", "line 1"),
        (
            "typo.toml",
            "[engine]\n[engin.policy.epoch]\nreuse_floor = true\n",
            "unknown table `engin`",
        ),
        (
            "agent-only.toml",
            "[agent]\nlog_format = \"json\"\n",
            "no [engine] table",
        ),
    ];
    for (name, text, says) in bad_files {
        let path = file(name, text);
        refused(
            &["--policy", "memtide", "--engine-config", &path],
            &[&path, says],
        );
    }
    refused(
        &["--policy", "hemem", "--engine-config", &fixed],
        &["--engine-config", "hemem"],
    );
}
