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

/// The recording tests one at a time: each checks at its end that no memtide BPF program is
/// left loaded, which another's running recorder would contradict.
static RECORDING: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_recording_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    RECORDING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn record_writes_the_live_samples_of_a_faulting_process() {
    if support::skip_unless_root("record_writes_the_live_samples_of_a_faulting_process") {
        return;
    }
    let _alone = one_recording_at_a_time();
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

/// Issue #46's acceptance: `memtide record --pid P --duration 10 -o t.mt.zst && memtide sim
/// --trace t.mt.zst --policy memtide` on a process that faults plans epochs and moves pages. The
/// replay hands the policy every recorded sample at the recorded weight and runs its epochs on
/// the recorded clock, where it once replayed the samples as a trace of accesses (the LLC model
/// kept 1 in 36 of them, the production density none of those, and 300,000 records spanned
/// 2 ms of simulated time: no samples, no plan).
#[test]
fn a_recording_replays_its_samples_on_its_clock_and_moves_pages() {
    let test = "a_recording_replays_its_samples_on_its_clock_and_moves_pages";
    if support::skip_unless_root(test) {
        return;
    }
    let _alone = one_recording_at_a_time();
    // The buffer is 4 superpages; the simulated fast tier holds one of them.
    let mut workload = Workload::spawn(&["--pages", "2048", "--no-thp"]);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.mt.zst");
    let mut recorder = Command::new(support::memtide_bin())
        .args(["record", "--duration", "10", "--json"])
        .args(["--pid", &workload.pid.to_string(), "-o"])
        .arg(&trace)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn memtide record");
    let started = Instant::now();
    while recorder.try_wait().expect("poll memtide record").is_none() {
        assert!(workload.command("churn 2").starts_with("churned"));
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "memtide record --duration 10 still running after 60 s"
        );
    }
    let output = recorder.wait_with_output().expect("memtide record output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() && stderr.contains("no sampling source could start") {
        support::skip(test, &format!("this machine cannot sample: {stderr}"));
        return;
    }
    assert!(output.status.success(), "memtide record failed: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).expect("summary");
    assert_eq!(summary["stopped_by"], "duration");
    let recorded = summary["records"].as_u64().unwrap();
    assert!(recorded >= 2048, "too few records: {summary}");

    let sim = Command::new(support::memtide_bin())
        .args(["sim", "--policy", "memtide", "--json", "--trace"])
        .arg(&trace)
        .output()
        .expect("run memtide sim");
    let notes = String::from_utf8_lossy(&sim.stderr);
    assert!(sim.status.success(), "memtide sim failed: {notes}");
    let r: serde_json::Value = serde_json::from_slice(&sim.stdout).expect("sim JSON");
    let context = format!("{r}\n{notes}");
    assert_eq!(r["records"].as_u64(), Some(recorded), "{context}");
    assert_eq!(
        r["memory_records"].as_u64(),
        Some(recorded),
        "no cache model filters samples: {context}"
    );
    assert_eq!(
        r["samples"].as_u64(),
        Some(recorded),
        "every recorded sample reaches the policy: {context}"
    );
    assert_eq!(r["record_weight"], summary["period"], "{context}");
    let clock = r["simulated_clock_s"].as_f64().unwrap();
    assert!(
        (9.5..12.0).contains(&clock),
        "the replay runs on the recorded 10 s: {context}"
    );
    let plans = r["policy_info"]["plans"].as_u64().unwrap();
    assert!(plans >= 1, "no epoch planned: {context}");
    // What it would move: pages promoted into the fast tier, and moved in all.
    assert!(r["promoted_bytes"].as_u64().unwrap() > 0, "{context}");
    assert!(r["migrated_bytes"].as_u64().unwrap() > 0, "{context}");
    assert!(
        notes.contains("replayed a recording") && !notes.contains("--record-weight"),
        "the note fits a recording: {notes}"
    );
    support::assert_no_memtide_bpf_programs();
}
