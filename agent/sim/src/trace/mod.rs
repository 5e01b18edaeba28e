//! Trace records and streaming readers.
//!
//! Every reader holds one line or one record at a time (constant memory whatever the trace
//! length) and yields [`TraceRecord`]s in batches. Inputs may be gzip- or zstd-compressed; the
//! compression and the format are detected from the first bytes.
//!
//! Formats:
//! - [`native`]: memtide's compact binary format (documented and versioned there);
//! - [`lackey`]: valgrind `--tool=lackey --trace-mem=yes` output;
//! - [`perf`]: `perf script` output of `perf mem record` or `perf record -e page-faults -d`.
//!
//! The two text formats read their lines through [`text::TextReader`].

pub mod lackey;
pub mod native;
pub mod perf;
pub mod repeat;
pub mod text;

use std::{
    fs::File,
    io::{self, BufRead, BufReader},
    path::{Path, PathBuf},
    time::Duration,
};

pub use memtide_common::AccessKind;
use serde::Serialize;

/// Bits of [`TraceRecord::addr`] that carry the virtual address; bits 48..56 carry a process
/// index when a trace mixes processes (perf-script), so their address spaces stay apart.
pub const ADDR_BITS: u32 = 48;
/// Shift of the process index inside [`TraceRecord::addr`].
pub const PID_SHIFT: u32 = ADDR_BITS;

/// One memory access of a trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    /// Virtual address; bits 48..56 hold a process index (0 for single-process traces).
    pub addr: u64,
    pub kind: AccessKind,
}

impl TraceRecord {
    #[must_use]
    pub const fn load(addr: u64) -> Self {
        Self {
            addr,
            kind: AccessKind::Load,
        }
    }

    #[must_use]
    pub const fn store(addr: u64) -> Self {
        Self {
            addr,
            kind: AccessKind::Store,
        }
    }

    #[must_use]
    pub fn is_write(&self) -> bool {
        self.kind == AccessKind::Store
    }
}

/// What a trace says about itself.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TraceMeta {
    /// Accesses one record stands for (the trace was sampled 1 in this many). Default 1.
    pub record_weight: u32,
    /// Memory-level parallelism of the program (independent misses in flight): 1 for a
    /// latency-bound program, large for a bandwidth-bound one. Default 1.
    pub mlp: u32,
    /// Footprint the writer declared, bytes (0 = unknown).
    pub footprint_hint: u64,
    /// The records are accesses the caches did not serve (LLC misses, or a PMU's filtered
    /// samples), not every access: the samplers' cache models pass them all.
    pub past_caches: bool,
    /// The records are the samples a live sampling source delivered (`memtide record`), each
    /// standing for `record_weight` events: already what a policy sees, so a replay hands every
    /// one to the policy at that weight, with no cache model or sample density thinning them
    /// again (unless `--sample-rate` asks for it).
    pub live_samples: bool,
    /// The records carry the time they were taken ([`RecordSource::clock`]): the policies'
    /// clock follows it instead of a nominal time per access.
    pub time_marks: bool,
}

impl Default for TraceMeta {
    fn default() -> Self {
        Self {
            record_weight: 1,
            mlp: 1,
            footprint_hint: 0,
            past_caches: false,
            live_samples: false,
            time_marks: false,
        }
    }
}

/// Trace input formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    Lackey,
    PerfScript,
    Native,
}

/// A failure to read a trace. Text formats carry the 1-based line number, the native format
/// the 0-based record index.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("line {line}: {reason}: {text:?}")]
    Malformed {
        line: u64,
        reason: &'static str,
        text: String,
    },
    #[error("native trace: {0}")]
    Native(String),
    #[error("cannot detect the trace format from its first bytes; pass --format")]
    Undetected,
}

/// A source of trace records, read in batches.
pub trait RecordSource: Send {
    fn meta(&self) -> &TraceMeta;

    /// Appends up to `max` records to `out`; returns how many were appended, 0 at the end.
    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError>;

    /// Malformed lines skipped so far (only in lenient mode).
    fn skipped(&self) -> u64 {
        0
    }

    /// When the records last filled were taken, from the start of the trace, for a trace with
    /// [`TraceMeta::time_marks`]; `None` before the first mark and for traces without time. A
    /// fill never spans two marks, so one batch has one time; after the last fill it is the
    /// end of the recording.
    fn clock(&self) -> Option<Duration> {
        None
    }
}

/// A trace that can be opened any number of times (the simulator reads it more than once: a
/// footprint pass, the replay, and the oracle's look-ahead).
pub trait TraceSpec: Send + Sync {
    /// A short name for reports.
    fn name(&self) -> String;
    fn open(&self) -> Result<Box<dyn RecordSource>, TraceError>;

    /// For a trace that replays another back to back ([`repeat::Repeated`]): that trace and
    /// the number of passes. A replay can fast-forward the passes after the second, which
    /// repeat it record for record, caches included. `None` for every other trace.
    fn repetition(&self) -> Option<(&dyn TraceSpec, u32)> {
        None
    }
}

/// A trace file.
#[derive(Clone, Debug)]
pub struct FileTrace {
    pub path: PathBuf,
    /// `None` detects the format from the content.
    pub format: Option<Format>,
    /// Skip and count malformed lines instead of failing.
    pub lenient: bool,
    /// Overrides the record weight (accesses per record) the trace declares.
    pub record_weight: Option<u32>,
}

impl TraceSpec for FileTrace {
    fn name(&self) -> String {
        let name = self
            .path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        ["zst", "gz"]
            .iter()
            .find_map(|ext| name.strip_suffix(&format!(".{ext}")).map(str::to_owned))
            .unwrap_or(name)
    }

    fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
        let mut input = open_decompressed(&self.path)?;
        let format = match self.format {
            Some(f) => f,
            None => detect(&mut input).map_err(|source| TraceError::Io {
                path: self.path.clone(),
                source,
            })??,
        };
        let mut src: Box<dyn RecordSource> = match format {
            Format::Native => Box::new(native::NativeReader::new(input)?),
            Format::Lackey => Box::new(lackey::LackeyReader::new(input, self.lenient)),
            Format::PerfScript => Box::new(perf::PerfReader::new(input, self.lenient)),
        };
        if let Some(w) = self.record_weight {
            let meta = TraceMeta {
                record_weight: w.max(1),
                ..src.meta().clone()
            };
            src = Box::new(Reweighted { inner: src, meta });
        }
        Ok(src)
    }
}

/// A source whose record weight was overridden on the command line.
struct Reweighted {
    inner: Box<dyn RecordSource>,
    meta: TraceMeta,
}

impl RecordSource for Reweighted {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        self.inner.fill(out, max)
    }

    fn skipped(&self) -> u64 {
        self.inner.skipped()
    }

    fn clock(&self) -> Option<Duration> {
        self.inner.clock()
    }
}

/// Opens `path`, transparently decompressing gzip or zstd (detected from the magic bytes).
pub fn open_decompressed(path: &Path) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_owned(),
        source,
    };
    let mut file = BufReader::with_capacity(1 << 16, File::open(path).map_err(io)?);
    let head = file.fill_buf().map_err(io)?;
    if head.starts_with(&[0x1f, 0x8b]) {
        let dec = flate2::bufread::MultiGzDecoder::new(file);
        Ok(Box::new(BufReader::with_capacity(1 << 16, dec)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        let dec = zstd::stream::read::Decoder::with_buffer(file).map_err(io)?;
        Ok(Box::new(BufReader::with_capacity(1 << 16, dec)))
    } else {
        Ok(Box::new(file))
    }
}

/// Detects the format from the first bytes of a (decompressed) stream without consuming them.
pub fn detect(input: &mut dyn BufRead) -> io::Result<Result<Format, TraceError>> {
    let head = input.fill_buf()?;
    if head.starts_with(native::MAGIC) {
        return Ok(Ok(Format::Native));
    }
    let text = String::from_utf8_lossy(&head[..head.len().min(8192)]);
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if line.starts_with("==") || lackey::parse_line(line).is_ok() {
            return Ok(Ok(Format::Lackey));
        }
        if line.starts_with('#') {
            continue;
        }
        // A sample the perf reader refuses is still perf-script: detecting it lets the reader
        // say which `perf script -F` fields to print instead of "cannot detect the format".
        if matches!(
            perf::parse_line(line),
            Ok(_) | Err(perf::LineError::NoDataAddress(_))
        ) {
            return Ok(Ok(Format::PerfScript));
        }
        break;
    }
    Ok(Err(TraceError::Undetected))
}

/// Reads one line into `buf` (cleared first); false at the end of the input.
pub(crate) fn read_line(input: &mut dyn BufRead, buf: &mut Vec<u8>) -> io::Result<bool> {
    buf.clear();
    Ok(input.read_until(b'\n', buf)? > 0)
}

/// Reads a whole small stream (tests).
#[cfg(test)]
pub(crate) fn read_all(src: &mut dyn RecordSource) -> Result<Vec<TraceRecord>, TraceError> {
    let mut out = Vec::new();
    while src.fill(&mut out, 1024)? > 0 {}
    Ok(out)
}

/// Adapts any `Read` for tests.
#[cfg(test)]
pub(crate) fn buf(text: &'static [u8]) -> Box<dyn BufRead + Send> {
    Box::new(BufReader::new(Box::new(text) as Box<dyn io::Read + Send>))
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    #[test]
    fn detects_formats() {
        let mut l = buf(b"==1== Lackey\nI  0400,3\n L 1ffe,8\n");
        assert_eq!(detect(&mut *l).unwrap().unwrap(), Format::Lackey);
        let mut p = buf(
            b"  1234 cpu/mem-loads,ldlat=30/P: 7ffd1c2f8e40 68100142 |OP LOAD|LVL L1 hit| 47\n",
        );
        assert_eq!(detect(&mut *p).unwrap().unwrap(), Format::PerfScript);
        let mut n = buf(b"MTTRACE\0\x01\0\0\0");
        assert_eq!(detect(&mut *n).unwrap().unwrap(), Format::Native);
        let mut x = buf(b"hello world\n");
        assert!(detect(&mut *x).unwrap().is_err());
    }

    #[test]
    fn reads_gzip_and_zstd() {
        let text = b"==1== x\n L 00001000,8\n S 00002000,4\n";
        let dir = tempfile::tempdir().unwrap();
        let gz = dir.path().join("t.gz");
        let mut enc = flate2::write::GzEncoder::new(
            File::create(&gz).unwrap(),
            flate2::Compression::default(),
        );
        enc.write_all(text).unwrap();
        enc.finish().unwrap();
        let zs = dir.path().join("t.zst");
        std::fs::write(&zs, zstd::encode_all(&text[..], 3).unwrap()).unwrap();
        for path in [gz, zs] {
            let spec = FileTrace {
                path,
                format: None,
                lenient: false,
                record_weight: Some(7),
            };
            assert_eq!(spec.name(), "t");
            let mut src = spec.open().unwrap();
            assert_eq!(src.meta().record_weight, 7);
            let recs = read_all(&mut *src).unwrap();
            assert_eq!(
                recs,
                vec![TraceRecord::load(0x1000), TraceRecord::store(0x2000)]
            );
        }
    }
}
