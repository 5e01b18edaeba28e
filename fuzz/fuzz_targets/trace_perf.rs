//! The `perf script` reader (`agent/sim/src/trace/perf.rs`) and the format detector.
//!
//! Properties: as for lackey (strict errors name an existing line; the lenient reader never
//! fails and extends what the strict one read, skipping what the strict one skipped (address
//! 0) and more only where the strict one failed; buffer size changes nothing); every address
//! keeps its process index within bits 48..56, and at most 256 process indices appear.
#![no_main]

use std::collections::BTreeSet;

use libfuzzer_sys::fuzz_target;
use memtide_fuzz::{drain, line_count, trace_input};
use memtide_sim::trace::{self, PID_SHIFT, RecordSource as _, TraceError, perf::PerfReader};

fuzz_target!(|data: &[u8]| {
    let _ = trace::detect(&mut *trace_input(data, 1 << 16)).expect("in-memory input");

    let mut strict_reader = PerfReader::new(trace_input(data, 1 << 16), false);
    let strict = drain(&mut strict_reader, 4096);
    let small = drain(&mut PerfReader::new(trace_input(data, 7), false), 2);
    assert_eq!(
        strict.records, small.records,
        "records differ with the buffer size"
    );
    assert_eq!(
        strict.error.as_ref().map(ToString::to_string),
        small.error.as_ref().map(ToString::to_string)
    );

    let mut lenient_reader = PerfReader::new(trace_input(data, 1 << 16), true);
    let lenient = drain(&mut lenient_reader, 4096);
    assert!(
        lenient.error.is_none(),
        "lenient reader failed: {:?}",
        lenient.error
    );
    assert!(lenient.records.starts_with(&strict.records));
    let mut processes = BTreeSet::new();
    for record in &lenient.records {
        assert_eq!(
            record.addr >> 56,
            0,
            "address {:#x} overflows the process index",
            record.addr
        );
        processes.insert(record.addr >> PID_SHIFT);
    }
    assert!(processes.len() <= 256);
    match strict.error {
        // Samples at address 0 are skipped by both readers; the lenient one skips only more.
        None => {
            assert_eq!(lenient.records, strict.records);
            assert_eq!(lenient_reader.skipped(), strict_reader.skipped());
        }
        Some(TraceError::Malformed { line, .. }) => {
            assert!(
                line >= 1 && line <= line_count(data),
                "line {line} does not exist"
            );
            assert!(lenient_reader.skipped() > strict_reader.skipped());
        }
        Some(other) => panic!("unexpected error from an in-memory trace: {other}"),
    }
});
