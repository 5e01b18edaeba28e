//! The valgrind lackey reader (`agent/sim/src/trace/lackey.rs`) and the format detector.
//!
//! Properties: the strict reader fails only on a line that exists, with its 1-based number;
//! the lenient reader never fails, yields what the strict one yielded before its error and
//! then more, and counts at least one skipped line exactly when the strict one failed; both
//! give the same records whatever the buffer size; lackey accesses are loads or stores, never
//! "unknown".
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtide_fuzz::{drain, line_count, trace_input};
use memtide_sim::trace::{self, AccessKind, RecordSource as _, TraceError, lackey::LackeyReader};

fuzz_target!(|data: &[u8]| {
    let _ = trace::detect(&mut *trace_input(data, 1 << 16)).expect("in-memory input");

    let strict = drain(
        &mut LackeyReader::new(trace_input(data, 1 << 16), false),
        4096,
    );
    let small = drain(&mut LackeyReader::new(trace_input(data, 5), false), 3);
    assert_eq!(
        strict.records, small.records,
        "records differ with the buffer size"
    );
    assert_eq!(
        strict.error.as_ref().map(ToString::to_string),
        small.error.as_ref().map(ToString::to_string)
    );

    let mut lenient_reader = LackeyReader::new(trace_input(data, 1 << 16), true);
    let lenient = drain(&mut lenient_reader, 4096);
    assert!(
        lenient.error.is_none(),
        "lenient reader failed: {:?}",
        lenient.error
    );
    assert!(lenient.records.starts_with(&strict.records));
    for record in &lenient.records {
        assert_ne!(
            record.kind,
            AccessKind::Unknown,
            "lackey gives loads and stores only"
        );
    }
    match strict.error {
        None => {
            assert_eq!(lenient.records, strict.records);
            assert_eq!(lenient_reader.skipped(), 0);
        }
        Some(TraceError::Malformed { line, .. }) => {
            assert!(
                line >= 1 && line <= line_count(data),
                "line {line} does not exist"
            );
            assert!(lenient_reader.skipped() >= 1);
        }
        Some(other) => panic!("unexpected error from an in-memory trace: {other}"),
    }
});
