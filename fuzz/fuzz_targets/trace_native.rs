//! The native trace reader (`agent/sim/src/trace/native.rs`).
//!
//! Properties: reading through a 13-byte buffer in batches of 7 gives exactly what a 64 KiB
//! buffer in batches of 4096 gives (records straddling buffer boundaries decode the same); a
//! trace that reads without error has a whole number of entries, records and time marks, and
//! writing its header and records back with `NativeWriter` reproduces the input byte for byte
//! (the writer raises a zero record weight or MLP to 1, as the reader does), or, for a trace
//! with time marks, reads back as the same records; the format detector calls it native exactly
//! when it starts with the magic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use memtide_fuzz::{drain, trace_input};
use memtide_sim::trace::{
    self, Format, RecordSource as _, TraceMeta,
    native::{MAGIC, NativeReader, NativeWriter},
};

fn read(
    data: &[u8],
    capacity: usize,
    batch: usize,
) -> Result<(TraceMeta, memtide_fuzz::Drained), String> {
    let mut reader = NativeReader::new(trace_input(data, capacity)).map_err(|e| e.to_string())?;
    let drained = drain(&mut reader, batch);
    Ok((reader.meta().clone(), drained))
}

fuzz_target!(|data: &[u8]| {
    let detected = trace::detect(&mut *trace_input(data, 1 << 16)).expect("in-memory input");
    assert_eq!(
        matches!(detected, Ok(Format::Native)),
        data.starts_with(MAGIC),
        "detection of a native trace"
    );

    let whole = read(data, 1 << 16, 4096);
    let straddled = read(data, 13, 7);
    let (meta, drained) = match (whole, straddled) {
        (Err(a), Err(b)) => {
            assert_eq!(a, b, "header errors differ with the buffer size");
            return;
        }
        (Ok((meta_a, a)), Ok((meta_b, b))) => {
            assert_eq!(meta_a, meta_b);
            assert_eq!(a.records, b.records, "records differ with the buffer size");
            assert_eq!(
                a.error.as_ref().map(ToString::to_string),
                b.error.as_ref().map(ToString::to_string),
                "errors differ with the buffer size"
            );
            (meta_a, a)
        }
        (a, b) => panic!("header accepted with one buffer size only: {a:?} / {b:?}"),
    };
    assert!(meta.record_weight >= 1 && meta.mlp >= 1);
    if drained.error.is_some() {
        return;
    }
    let body = &data[32..];
    assert_eq!(body.len() % 8, 0, "a truncated record was accepted");
    // Time marks (kind 3, only under the header's flag) are entries, not records.
    let marks = body
        .chunks_exact(8)
        .filter(|e| meta.time_marks && u64::from_le_bytes((*e).try_into().unwrap()) >> 56 == 3)
        .count();
    assert_eq!(drained.records.len() + marks, body.len() / 8);
    if marks > 0 {
        // Marks set the time of the fills that follow them, which the records alone do not
        // carry: what was read, written back without marks, reads back the same.
        let mut writer = NativeWriter::new(Vec::new(), &meta).expect("writing to a Vec");
        writer.write(&drained.records).expect("writing to a Vec");
        let written = writer.finish().expect("writing to a Vec");
        let (_, again) = read(&written, 13, 7).expect("a trace the writer wrote");
        assert!(again.error.is_none(), "{:?}", again.error);
        assert_eq!(
            again.records, drained.records,
            "records lost writing them back"
        );
        return;
    }

    let mut writer = NativeWriter::new(Vec::new(), &meta).expect("writing to a Vec");
    writer.write(&drained.records).expect("writing to a Vec");
    assert_eq!(writer.records(), drained.records.len() as u64);
    let written = writer.finish().expect("writing to a Vec");
    let mut expected = data.to_vec();
    expected[12..16].copy_from_slice(&meta.record_weight.to_le_bytes());
    expected[16..20].copy_from_slice(&meta.mlp.to_le_bytes());
    assert_eq!(written, expected, "write(read(trace)) is not the trace");
});
