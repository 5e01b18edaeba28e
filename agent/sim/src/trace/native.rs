//! memtide's native trace format, version 1. Little-endian throughout.
//!
//! ```text
//! offset size field
//!      0    8 magic "MTTRACE\0"
//!      8    4 version (1)
//!     12    4 record_weight: accesses one record stands for (>= 1)
//!     16    4 mlp: memory-level parallelism of the program (>= 1)
//!     20    4 flags; readers reject unknown bits:
//!             bit 0 = the records are accesses past the caches (LLC misses)
//!             bit 1 = the records are a live sampler's samples (`memtide record`)
//!             bit 2 = time marks are interleaved with the records
//!     24    8 footprint_bytes declared by the writer (0 = unknown)
//!     32    … records, 8 bytes each:
//!             bits  0..56 address (bits 48..56: process index, 0 for one process)
//!             bits 56..58 kind: 0 unknown, 1 load, 2 store, 3 time mark (only with flag
//!                         bit 2; bits 0..56 are then nanoseconds since the recording began,
//!                         the time of the records that follow, up to the next mark)
//!             bits 58..64 zero
//! ```
//! The record count is implied by the length (less the time marks). `memtide gen` and
//! `memtide record` write it; any reader must reject a different magic or version, unknown
//! flags and a truncated record. Flags 1 and 2 came after the first traces: a reader that does
//! not know them refuses a recording rather than replaying its samples as accesses.

use std::{
    io::{self, BufRead, Write},
    time::Duration,
};

use super::{AccessKind, RecordSource, TraceError, TraceMeta, TraceRecord};

pub const MAGIC: &[u8; 8] = b"MTTRACE\0";
pub const VERSION: u32 = 1;
const HEADER: usize = 32;
const ADDR_MASK: u64 = (1 << 56) - 1;

fn encode(r: &TraceRecord) -> u64 {
    (r.addr & ADDR_MASK) | (u64::from(r.kind as u8 & 3) << 56)
}

/// One 8-byte entry of the record stream.
#[derive(Clone, Copy)]
enum Entry {
    Record(TraceRecord),
    Mark(Duration),
}

const MARK_KIND: u64 = 3;

fn decode(v: u64, index: u64, time_marks: bool) -> Result<Entry, TraceError> {
    let kind = (v >> 56) & 3;
    if v >> 58 != 0 || (kind == MARK_KIND && !time_marks) {
        return Err(TraceError::Native(format!(
            "record {index}: reserved bits set ({v:#018x})"
        )));
    }
    if kind == MARK_KIND {
        return Ok(Entry::Mark(Duration::from_nanos(v & ADDR_MASK)));
    }
    Ok(Entry::Record(TraceRecord {
        addr: v & ADDR_MASK,
        kind: AccessKind::from_u8(kind as u8),
    }))
}

/// Header flags.
const PAST_CACHES: u32 = 1;
const LIVE_SAMPLES: u32 = 1 << 1;
const TIME_MARKS: u32 = 1 << 2;
const KNOWN_FLAGS: u32 = PAST_CACHES | LIVE_SAMPLES | TIME_MARKS;

fn flags(meta: &TraceMeta) -> u32 {
    [
        (meta.past_caches, PAST_CACHES),
        (meta.live_samples, LIVE_SAMPLES),
        (meta.time_marks, TIME_MARKS),
    ]
    .iter()
    .filter(|(set, _)| *set)
    .fold(0, |flags, (_, bit)| flags | bit)
}

/// Writes records in the native format.
pub struct NativeWriter<W: Write> {
    out: W,
    records: u64,
    time_marks: bool,
}

impl<W: Write> NativeWriter<W> {
    pub fn new(mut out: W, meta: &TraceMeta) -> io::Result<Self> {
        let mut h = [0u8; HEADER];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&meta.record_weight.max(1).to_le_bytes());
        h[16..20].copy_from_slice(&meta.mlp.max(1).to_le_bytes());
        h[20..24].copy_from_slice(&flags(meta).to_le_bytes());
        h[24..32].copy_from_slice(&meta.footprint_hint.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self {
            out,
            records: 0,
            time_marks: meta.time_marks,
        })
    }

    /// Stamps the records written next with `at`, the time since the recording began (at most
    /// 2^56 ns, about 2.3 years). Only in a trace whose header says it has time marks.
    pub fn mark(&mut self, at: Duration) -> io::Result<()> {
        if !self.time_marks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a time mark in a trace whose header declares none",
            ));
        }
        let nanos = u64::try_from(at.as_nanos())
            .unwrap_or(u64::MAX)
            .min(ADDR_MASK);
        self.out
            .write_all(&((MARK_KIND << 56) | nanos).to_le_bytes())
    }

    pub fn write(&mut self, records: &[TraceRecord]) -> io::Result<()> {
        let mut buf = Vec::with_capacity(records.len() * 8);
        for r in records {
            buf.extend_from_slice(&encode(r).to_le_bytes());
        }
        self.records += records.len() as u64;
        self.out.write_all(&buf)
    }

    #[must_use]
    pub const fn records(&self) -> u64 {
        self.records
    }

    /// Flushes and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Streams a native trace.
pub struct NativeReader {
    input: Box<dyn BufRead + Send>,
    meta: TraceMeta,
    /// Entries read, records and time marks.
    index: u64,
    /// The time of the records last filled.
    clock: Option<Duration>,
    /// A mark read after the last fill's records: the next fill's time.
    pending: Option<Duration>,
}

impl NativeReader {
    pub fn new(mut input: Box<dyn BufRead + Send>) -> Result<Self, TraceError> {
        let mut h = [0u8; HEADER];
        input
            .read_exact(&mut h)
            .map_err(|e| TraceError::Native(format!("header: {e}")))?;
        if &h[..8] != MAGIC {
            return Err(TraceError::Native("bad magic".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
        let version = u32_at(8);
        if version != VERSION {
            return Err(TraceError::Native(format!(
                "version {version} is not supported (this reader knows {VERSION})"
            )));
        }
        let flags = u32_at(20);
        if flags & !KNOWN_FLAGS != 0 {
            return Err(TraceError::Native(format!(
                "unknown flags {:#x}",
                flags & !KNOWN_FLAGS
            )));
        }
        let mut fp = [0u8; 8];
        fp.copy_from_slice(&h[24..32]);
        Ok(Self {
            input,
            meta: TraceMeta {
                record_weight: u32_at(12).max(1),
                mlp: u32_at(16).max(1),
                footprint_hint: u64::from_le_bytes(fp),
                past_caches: flags & PAST_CACHES != 0,
                live_samples: flags & LIVE_SAMPLES != 0,
                time_marks: flags & TIME_MARKS != 0,
            },
            index: 0,
            clock: None,
            pending: None,
        })
    }
}

impl RecordSource for NativeReader {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        if let Some(at) = self.pending.take() {
            self.clock = Some(at);
        }
        let time_marks = self.meta.time_marks;
        let mut n = 0;
        // Set when a mark follows this fill's records: they end here, so one fill has one time.
        let mut marked = false;
        while n < max && !marked {
            let buf = self
                .input
                .fill_buf()
                .map_err(|e| TraceError::Native(format!("record {}: {e}", self.index)))?;
            if buf.is_empty() {
                break;
            }
            let mut entry = [0u8; 8];
            if buf.len() < 8 {
                // An entry straddles the buffer boundary (or the trace is truncated).
                self.input
                    .read_exact(&mut entry)
                    .map_err(|_| TraceError::Native(format!("record {}: truncated", self.index)))?;
                let e = decode(u64::from_le_bytes(entry), self.index, time_marks)?;
                self.index += 1;
                marked = place(e, out, &mut n, &mut self.clock, &mut self.pending);
                continue;
            }
            let take = (buf.len() / 8).min(max - n);
            let mut used = 0;
            for chunk in buf[..take * 8].chunks_exact(8) {
                entry.copy_from_slice(chunk);
                used += 1;
                let e = decode(u64::from_le_bytes(entry), self.index, time_marks)?;
                self.index += 1;
                marked = place(e, out, &mut n, &mut self.clock, &mut self.pending);
                if marked {
                    break;
                }
            }
            self.input.consume(used * 8);
        }
        Ok(n)
    }

    fn clock(&self) -> Option<Duration> {
        self.clock
    }
}

/// Takes one entry into a fill that has `n` records so far; true when it is a mark that ends
/// the fill (it becomes the next fill's time).
fn place(
    entry: Entry,
    out: &mut Vec<TraceRecord>,
    n: &mut usize,
    clock: &mut Option<Duration>,
    pending: &mut Option<Duration>,
) -> bool {
    match entry {
        Entry::Record(r) => {
            out.push(r);
            *n += 1;
            false
        }
        Entry::Mark(at) if *n > 0 => {
            *pending = Some(at);
            true
        }
        Entry::Mark(at) => {
            *clock = Some(at);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use memtide_core::units::PAGE_SHIFT;

    use super::*;
    use crate::trace::read_all;

    fn reader(bytes: Vec<u8>) -> Result<NativeReader, TraceError> {
        NativeReader::new(Box::new(BufReader::with_capacity(
            13,
            io::Cursor::new(bytes),
        )))
    }

    #[test]
    fn round_trip() {
        let meta = TraceMeta {
            record_weight: 32,
            mlp: 4,
            footprint_hint: 1 << 30,
            past_caches: true,
            live_samples: true,
            time_marks: false,
        };
        let recs: Vec<TraceRecord> = (0..100u64)
            .map(|i| {
                if i % 3 == 0 {
                    TraceRecord::store((i << PAGE_SHIFT) | (3 << 48))
                } else {
                    TraceRecord::load(i << PAGE_SHIFT)
                }
            })
            .chain([TraceRecord {
                addr: 5,
                kind: AccessKind::Unknown,
            }])
            .collect();
        let mut w = NativeWriter::new(Vec::new(), &meta).unwrap();
        w.write(&recs).unwrap();
        assert_eq!(w.records(), 101);
        let bytes = w.finish().unwrap();
        assert_eq!(bytes.len(), 32 + 101 * 8);
        let mut r = reader(bytes).unwrap();
        assert_eq!(r.meta(), &meta);
        assert_eq!(read_all(&mut r).unwrap(), recs);
    }

    #[test]
    fn rejects_bad_input() {
        let mut w = NativeWriter::new(Vec::new(), &TraceMeta::default()).unwrap();
        w.write(&[TraceRecord::load(0x1000)]).unwrap();
        let good = w.finish().unwrap();
        let mut trunc = good.clone();
        trunc.pop();
        let err = read_all(&mut reader(trunc).unwrap()).unwrap_err();
        assert!(err.to_string().contains("record 0: truncated"), "{err}");
        let mut v2 = good.clone();
        v2[8] = 2;
        assert!(reader(v2).is_err());
        let mut magic = good.clone();
        magic[0] = b'X';
        assert!(reader(magic).is_err());
        let mut reserved = good;
        reserved[32 + 7] = 0xff;
        let err = read_all(&mut reader(reserved).unwrap()).unwrap_err();
        assert!(err.to_string().contains("reserved bits"), "{err}");
        assert!(reader(vec![1, 2, 3]).is_err());
    }

    #[test]
    fn time_marks_give_each_fill_one_time() {
        let meta = TraceMeta {
            live_samples: true,
            time_marks: true,
            ..TraceMeta::default()
        };
        let ms = Duration::from_millis;
        let mut w = NativeWriter::new(Vec::new(), &meta).unwrap();
        w.mark(ms(5)).unwrap();
        w.write(&[TraceRecord::load(0x1000), TraceRecord::load(0x2000)])
            .unwrap();
        w.mark(ms(40)).unwrap();
        w.write(&[TraceRecord::store(0x3000)]).unwrap();
        w.mark(ms(10_000)).unwrap();
        assert_eq!(w.records(), 3, "marks are not records");
        let mut r = reader(w.finish().unwrap()).unwrap();
        assert_eq!(r.meta(), &meta);
        assert_eq!(r.clock(), None);
        let mut out = Vec::new();
        assert_eq!(r.fill(&mut out, 100).unwrap(), 2, "a fill stops at a mark");
        assert_eq!(r.clock(), Some(ms(5)));
        assert_eq!(r.fill(&mut out, 100).unwrap(), 1);
        assert_eq!(r.clock(), Some(ms(40)));
        assert_eq!(r.fill(&mut out, 100).unwrap(), 0);
        assert_eq!(r.clock(), Some(ms(10_000)), "the end of the recording");
        assert_eq!(out.len(), 3);
    }

    #[test]
    fn a_mark_needs_the_header_flag() {
        let mut w = NativeWriter::new(Vec::new(), &TraceMeta::default()).unwrap();
        assert!(w.mark(Duration::from_millis(1)).is_err());
        let mut bytes = w.finish().unwrap();
        bytes.extend_from_slice(&((MARK_KIND << 56) | 7).to_le_bytes());
        let err = read_all(&mut reader(bytes).unwrap()).unwrap_err();
        assert!(err.to_string().contains("reserved bits"), "{err}");
        let mut unknown = NativeWriter::new(Vec::new(), &TraceMeta::default())
            .unwrap()
            .finish()
            .unwrap();
        unknown[20] = 1 << 3;
        assert!(reader(unknown).is_err(), "unknown flags are refused");
    }
}
