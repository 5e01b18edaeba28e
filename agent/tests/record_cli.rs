//! `memtide record`: live samples of a real process land in a native trace that the simulator
//! reads back, every address inside the process's buffer; bad requests fail by name.
mod support;

use std::{
    io::{BufRead as _, BufReader},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use memtide_sim::trace::{RecordSource as _, native::NativeReader, open_decompressed};
use support::Workload;

#[test]
fn record_writes_the_live_samples_of_a_faulting_process() {
    if support::skip_unless_root("record_writes_the_live_samples_of_a_faulting_process") {
        return;
    }
    let mut workload = Workload::spawn(&["--pages", "2048", "--no-thp"]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("live.mt.zst");
    let mut recorder = Command::new(support::memtide_bin())
        .args(["record", "--source", "swfault", "--period", "1", "--json"])
        .args(["--pid", &workload.pid.to_string(), "-o"])
        .arg(&out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn memtide record");
    // The recorder is ready once its ring exists; churning until the file has data would need
    // the file finished, so churn for a while, then stop it the way a user does (SIGINT).
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        assert!(workload.command("churn 2").starts_with("churned"));
    }
    let status = Command::new("kill")
        .args(["-INT", &recorder.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(status.success());
    let mut line = String::new();
    BufReader::new(recorder.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let exit = recorder.wait().expect("wait for memtide record");
    let stderr = std::io::read_to_string(recorder.stderr.take().unwrap()).unwrap_or_default();
    assert!(exit.success(), "memtide record failed: {exit}\n{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&line).expect("summary JSON");
    assert_eq!(summary["stopped_by"], "SIGINT");
    assert_eq!(summary["source"], "swfault");
    let records = summary["records"].as_u64().unwrap();
    assert!(records >= 2048, "too few records: {summary}");
    assert!(
        !dir.path().join("live.mt.zst.partial").exists(),
        "partial file left behind"
    );

    let mut reader = NativeReader::new(open_decompressed(&out).unwrap()).unwrap();
    assert_eq!(
        reader.meta().record_weight,
        1,
        "period 1: one record per fault"
    );
    let mut all = Vec::new();
    while reader.fill(&mut all, 1 << 16).unwrap() > 0 {}
    assert_eq!(
        all.len() as u64,
        records,
        "the summary counts what the file holds"
    );
    let range = workload.base..workload.base + workload.size;
    let inside = all.iter().filter(|r| range.contains(&r.addr)).count();
    // Faults outside the buffer (stack, allocator) are the workload's too; the churned buffer
    // dominates.
    assert!(
        inside * 10 >= all.len() * 9,
        "{inside} of {} records inside the workload's buffer",
        all.len()
    );
    support::assert_no_memtide_bpf_programs();
}

#[test]
fn record_refuses_what_it_cannot_record() {
    let run = |args: &[&str]| {
        let output = Command::new(support::memtide_bin())
            .arg("record")
            .args(args)
            .output()
            .expect("run memtide record");
        assert!(
            !output.status.success(),
            "memtide record {args:?} succeeded"
        );
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    // A pid that cannot exist (above the kernel's pid_max limit of 2^22).
    let stderr = run(&["--pid", "99999999", "--duration", "1"]);
    assert!(stderr.contains("99999999"), "error names the pid: {stderr}");
    let stderr = run(&["--pid", "1", "--source", "damon"]);
    assert!(stderr.contains("damon"), "error names the source: {stderr}");
    let stderr = run(&["--pid", "1", "--duration=-3"]);
    assert!(
        stderr.contains("--duration"),
        "error names the flag: {stderr}"
    );
    let stderr = run(&["--duration", "1"]);
    assert!(
        stderr.contains("--pid"),
        "error names the missing flag: {stderr}"
    );
}
