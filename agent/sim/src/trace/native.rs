//! memtide's native trace format, version 1. Little-endian throughout.
//!
//! ```text
//! offset size field
//!      0    8 magic "MTTRACE\0"
//!      8    4 version (1)
//!     12    4 record_weight: accesses one record stands for (>= 1)
//!     16    4 mlp: memory-level parallelism of the program (>= 1)
//!     20    4 flags: bit 0 = the records are accesses past the caches (LLC misses);
//!             readers reject unknown bits
//!     24    8 footprint_bytes declared by the writer (0 = unknown)
//!     32    … records, 8 bytes each:
//!             bits  0..56 address (bits 48..56: process index, 0 for one process)
//!             bits 56..58 kind: 0 unknown, 1 load, 2 store
//!             bits 58..64 zero
//! ```
//! The record count is implied by the length. `memtide gen` and `memtide record` write it; any
//! reader must reject a different magic or version and a truncated record.

use std::io::{self, BufRead, Write};

use super::{AccessKind, RecordSource, TraceError, TraceMeta, TraceRecord};

pub const MAGIC: &[u8; 8] = b"MTTRACE\0";
pub const VERSION: u32 = 1;
const HEADER: usize = 32;
const ADDR_MASK: u64 = (1 << 56) - 1;

fn encode(r: &TraceRecord) -> u64 {
    (r.addr & ADDR_MASK) | (u64::from(r.kind as u8 & 3) << 56)
}

fn decode(v: u64, index: u64) -> Result<TraceRecord, TraceError> {
    if v >> 58 != 0 || (v >> 56) & 3 == 3 {
        return Err(TraceError::Native(format!(
            "record {index}: reserved bits set ({v:#018x})"
        )));
    }
    Ok(TraceRecord {
        addr: v & ADDR_MASK,
        kind: AccessKind::from_u8(((v >> 56) & 3) as u8),
    })
}

/// Writes records in the native format.
/// Header flag: the records are accesses past the caches.
const PAST_CACHES: u32 = 1;
const KNOWN_FLAGS: u32 = PAST_CACHES;

fn flags(meta: &TraceMeta) -> u32 {
    if meta.past_caches { PAST_CACHES } else { 0 }
}

pub struct NativeWriter<W: Write> {
    out: W,
    records: u64,
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
        Ok(Self { out, records: 0 })
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
    index: u64,
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
            },
            index: 0,
        })
    }
}

impl RecordSource for NativeReader {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        let mut n = 0;
        while n < max {
            let buf = self
                .input
                .fill_buf()
                .map_err(|e| TraceError::Native(format!("record {}: {e}", self.index)))?;
            if buf.is_empty() {
                break;
            }
            if buf.len() < 8 {
                // A record straddles the buffer boundary (or the trace is truncated).
                let mut rec = [0u8; 8];
                self.input
                    .read_exact(&mut rec)
                    .map_err(|_| TraceError::Native(format!("record {}: truncated", self.index)))?;
                out.push(decode(u64::from_le_bytes(rec), self.index)?);
                self.index += 1;
                n += 1;
                continue;
            }
            let take = (buf.len() / 8).min(max - n);
            for chunk in buf[..take * 8].chunks_exact(8) {
                let mut rec = [0u8; 8];
                rec.copy_from_slice(chunk);
                out.push(decode(u64::from_le_bytes(rec), self.index)?);
                self.index += 1;
            }
            self.input.consume(take * 8);
            n += take;
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;

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
        };
        let recs: Vec<TraceRecord> = (0..100u64)
            .map(|i| {
                if i % 3 == 0 {
                    TraceRecord::store((i << 12) | (3 << 48))
                } else {
                    TraceRecord::load(i << 12)
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
}
