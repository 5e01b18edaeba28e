//! A real `perf record -e page-faults -d` capture replayed through the perf-script reader.
//!
//! The recorded program is this test binary run again with [`TOUCH_ENV`] set: it writes a
//! known buffer from user space, so its faults are recorded even where perf counts user-mode
//! events only (`perf_event_paranoid` 2 without root), and it says where the buffer was.

use std::{
    collections::HashSet,
    fs::File,
    path::Path,
    process::{Command, Stdio},
};

use memtide_core::units::SUPERPAGE_SIZE;
use memtide_sim::{
    run::measure_footprint,
    trace::{
        ADDR_BITS, FileTrace, RecordSource, TraceError, TraceRecord, TraceSpec as _,
        perf::SCRIPT_FIELDS,
    },
};

const TEST: &str = "replays_a_real_page_fault_capture";
/// Set in the recorded child: the file it writes the buffer's address and length to.
const TOUCH_ENV: &str = "MEMTIDE_SIM_PERF_TOUCH";
const TOUCHED: usize = 8 << 20;
/// Set by `make test` where the perf test must run (it installs linux-perf and runs as root):
/// a skip there would hide a broken environment, so it fails instead.
const REQUIRE_PRIVILEGED: &str = "MEMTIDE_REQUIRE_PRIVILEGED";

/// Prints why the test is skipped, or panics where it must run.
fn skip(reason: &str) {
    assert!(
        std::env::var_os(REQUIRE_PRIVILEGED).is_none_or(|v| v != "1"),
        "{TEST}: cannot run ({reason}) but {REQUIRE_PRIVILEGED}=1 says it must"
    );
    eprintln!("skipped: {TEST}: {reason}");
}

/// The recorded child: touches every page of a fresh buffer and reports where it is.
fn touch(out: &Path) {
    let buf = vec![1_u8; TOUCHED];
    std::hint::black_box(&buf);
    std::fs::write(out, format!("{:x} {}", buf.as_ptr() as usize, buf.len()))
        .expect("writing the touched range");
}

fn read_all(src: &mut dyn RecordSource) -> Result<Vec<TraceRecord>, TraceError> {
    let mut out = Vec::new();
    while src.fill(&mut out, 4096)? > 0 {}
    Ok(out)
}

fn user_addr(r: &TraceRecord) -> u64 {
    r.addr & ((1 << ADDR_BITS) - 1)
}

fn perf_script(data: &Path, fields: Option<&str>, out: &Path) {
    let mut cmd = Command::new("perf");
    cmd.arg("script").arg("-i").arg(data);
    if let Some(f) = fields {
        cmd.args(["-F", f]);
    }
    let output = cmd
        .stdout(File::create(out).expect("creating the script output"))
        .stderr(Stdio::piped())
        .output()
        .expect("running perf script");
    assert!(
        output.status.success(),
        "perf script {fields:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

fn spec(path: &Path, lenient: bool) -> FileTrace {
    FileTrace {
        path: path.to_owned(),
        // Detected, as `memtide sim --trace` does without --format.
        format: None,
        lenient,
        record_weight: None,
    }
}

#[test]
fn replays_a_real_page_fault_capture() {
    if let Some(out) = std::env::var_os(TOUCH_ENV) {
        touch(Path::new(&out));
        return;
    }
    if Command::new("perf").arg("--version").output().is_err() {
        skip("perf is not installed (Debian package linux-perf)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("pf.data");
    let range = dir.path().join("touched");
    // -c 1 records every fault, so each superpage of the buffer shows up.
    let record = Command::new("perf")
        .args(["record", "-q", "-e", "page-faults", "-c", "1", "-d", "-o"])
        .arg(&data)
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--test-threads=1", "-q"])
        .env(TOUCH_ENV, &range)
        .stdout(Stdio::null())
        .output()
        .expect("running perf record");
    if !record.status.success() {
        skip(&format!(
            "perf record failed ({}): {}",
            record.status,
            String::from_utf8_lossy(&record.stderr).trim()
        ));
        return;
    }
    let touched = std::fs::read_to_string(&range).expect("the recorded child ran");
    let (start, len) = touched.split_once(' ').unwrap();
    let start = u64::from_str_radix(start, 16).unwrap();
    let end = start + len.parse::<u64>().unwrap();

    let addr_txt = dir.path().join("addr.txt");
    perf_script(&data, Some(SCRIPT_FIELDS), &addr_txt);
    // Faults on the null page print address 0 (this binary has some: Rust's std probes statx
    // with a null path). They are skipped and counted, strict or not; no other line of this
    // capture may be.
    let text = std::fs::read_to_string(&addr_txt).unwrap();
    let zeros = text
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("0"))
        .count() as u64;
    let mut src = spec(&addr_txt, false).open().unwrap();
    let recs = read_all(&mut *src).unwrap();
    assert_eq!(src.skipped(), zeros);
    assert!(!recs.is_empty(), "no records from {}", addr_txt.display());
    // x86-64's user half ends at bit 47 (4-level paging); the misread kernel
    // instruction pointers (ffffffff81…) kept bit 47 after the reader's 48-bit mask.
    for r in &recs {
        assert!(
            user_addr(r) < 1 << 47,
            "kernel-space address {:#x} taken as data",
            r.addr
        );
    }
    let superpages: HashSet<u64> = recs.iter().map(|r| user_addr(r) / SUPERPAGE_SIZE).collect();
    for sp in start / SUPERPAGE_SIZE..=(end - 1) / SUPERPAGE_SIZE {
        assert!(
            superpages.contains(&sp),
            "superpage {:#x} of the touched buffer {start:#x}..{end:#x} has no record",
            sp * SUPERPAGE_SIZE
        );
    }
    let fp = measure_footprint(&spec(&addr_txt, true)).unwrap();
    assert_eq!(fp.records, recs.len() as u64);
    assert!(
        (TOUCHED as u64..64 << 20).contains(&fp.bytes),
        "footprint {} MiB for a program touching {} MiB",
        fp.bytes >> 20,
        TOUCHED >> 20
    );

    // Plain `perf script` prints each fault's instruction pointer, not its address: refused,
    // naming the fields, and under --lenient skipped rather than read.
    let plain = dir.path().join("plain.txt");
    perf_script(&data, None, &plain);
    let addrs: HashSet<u64> = recs.iter().map(user_addr).collect();
    match read_all(&mut *spec(&plain, false).open().unwrap()) {
        // A perf that prints the address by default must print these very addresses.
        Ok(plain_recs) => assert_eq!(plain_recs, recs),
        Err(TraceError::Malformed { reason, .. }) => {
            assert!(reason.contains(SCRIPT_FIELDS), "{reason}");
            let mut lenient = spec(&plain, true).open().unwrap();
            let taken = read_all(&mut *lenient).unwrap();
            assert!(lenient.skipped() > 0);
            for r in &taken {
                assert!(
                    addrs.contains(&user_addr(r)),
                    "{:#x} read from plain perf script is no recorded address",
                    r.addr
                );
            }
        }
        Err(other) => panic!("plain perf script: {other}"),
    }
}
