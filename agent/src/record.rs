//! `memtide record`: the live access samples of running processes, written in the
//! simulator's native trace format (`sim::trace::native`), so `memtide sim` can replay what a
//! real program did through every policy, the bound and the epoch oracle.
//!
//! It uses the daemon's sampling path unchanged (BPF sampler, ring, ingest router) with a fixed
//! sample period: each record stands for `period` events, which the trace header says as its
//! record weight. The header also says that the records are a live sampler's samples and that
//! time marks (when each batch arrived) run between them, so `memtide sim` hands every sample to
//! the policy at that weight and runs its epochs on the recorded clock. Only sampling sources (PEBS, IBS, software page faults) can record; DAMON
//! reports access counts of regions, not accesses.
//!
//! Nothing is half-written under the final name: records go to `OUT.partial`, which is renamed
//! once the trace is complete. Samples the ring or the queue had to drop are counted and
//! reported, never silently lost.

use memtide_config::SourceKind;
use memtide_core::ingest::IngestCounters;
use std::{
    collections::BTreeMap,
    fs::File,
    io::{self, BufWriter, Write},
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use aya::maps::{MapData, RingBuf};
use memtide_common::{AccessKind, AccessSample};
use serde::Serialize;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
    task::JoinHandle,
};

use crate::sources::{
    PerfSpecError, SampleRoute, SampleRouter, TargetChannel, TargetInput,
    perf::{
        PerfSourceOptions,
        budget::KernelLimits,
        ring::{DRAIN_INTERVAL, run_sample_ring},
        sampler::{Sampler, SamplerError},
    },
    registry::{PER_ACCESS, past_caches, perf_spec_for},
};
use memtide_host::{
    probe::pmu::PmuScan,
    sysfs::{HostRoot, SysfsError},
    targets::{Target, TargetError},
};
use memtide_sim::trace::{PID_SHIFT, TraceMeta, TraceRecord, native::NativeWriter};

/// Most processes one trace can hold (the native format has 8 bits of process index).
pub const MAX_PROCESSES: usize = 255;
/// Batches queued between the ring and the file writer. Generous: a slow disk must not make
/// the router drop samples.
const QUEUE_BATCHES: usize = 4096;
/// How often the targets are checked for having exited.
const LIVENESS_CHECK: Duration = Duration::from_millis(250);

/// What to record.
#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub pids: Vec<u32>,
    /// `None`: the best sampling source this machine has.
    pub source: Option<SourceKind>,
    /// Sample one event in this many; `None`: the period the CPU budget gives.
    pub period: Option<u64>,
    /// Stop after this long; `None`: when every target has exited or on SIGINT/SIGTERM.
    pub duration: Option<Duration>,
    /// The trace file; `.zst` or `.gz` compresses it.
    pub out: PathBuf,
    pub ring_bytes: u32,
    pub root: HostRoot,
}

/// What was recorded.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecordSummary {
    pub path: PathBuf,
    pub source: String,
    /// Sample period of the first sampling event (the trace's record weight).
    pub period: u64,
    /// `pids[i]` is process index `i` in the trace's addresses.
    pub pids: Vec<u32>,
    pub records: u64,
    pub loads: u64,
    pub stores: u64,
    /// Samples lost before the file, by reason.
    pub dropped: BTreeMap<String, u64>,
    /// Why recording stopped.
    pub stopped_by: String,
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("no process to record: pass --pid PID (repeatable)")]
    NoTargets,
    #[error("too many processes ({0}): one trace holds at most {MAX_PROCESSES}")]
    TooManyTargets(usize),
    #[error(
        "{0} cannot record: it reports region access counts, not accesses (use pebs, ibs or swfault)"
    )]
    NotSampling(SourceKind),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Sysfs(#[from] SysfsError),
    #[error("no sampling source could start: {0}")]
    NoSource(String),
    #[error("{path}: {source}")]
    Output {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading the sample ring or installing signal handlers: {0}")]
    Ring(io::Error),
}

/// Records until the duration passes, every target exits, or SIGINT/SIGTERM arrives.
pub async fn record(options: RecordOptions) -> Result<RecordSummary, RecordError> {
    check(&options)?;
    // First, so a Ctrl-C during start-up still ends in a complete trace.
    let mut terminate = signal(SignalKind::terminate()).map_err(RecordError::Ring)?;
    let mut interrupt = signal(SignalKind::interrupt()).map_err(RecordError::Ring)?;
    let targets = options
        .pids
        .iter()
        .map(|&pid| Target::open(&options.root, pid))
        .collect::<Result<Vec<_>, _>>()?;

    let (kind, mut sampler, period, ring) = open_sampler(&options)?;
    tracing::info!(source = %kind, period, pids = ?options.pids, out = %options.out.display(), "recording");

    let partial = partial_path(&options.out);
    let output = |source| RecordError::Output {
        path: partial.clone(),
        source,
    };
    let mut trace = Trace {
        file: TraceFile::create(&partial, &trace_meta(kind, period)).map_err(output)?,
        counts: Counts::default(),
        index: options
            .pids
            .iter()
            .enumerate()
            .map(|(i, &pid)| (pid, i as u64))
            .collect(),
    };
    let started = tokio::time::Instant::now();
    let mut ingest = Ingest::start(ring);
    let deadline = options.duration.map(|d| tokio::time::Instant::now() + d);
    let mut liveness = tokio::time::interval(LIVENESS_CHECK);
    let stopped_by = loop {
        tokio::select! {
            Some(TargetInput::Samples(batch)) = ingest.samples.recv() => {
                trace.write(&batch, started.elapsed()).map_err(output)?;
            }
            _ = terminate.recv() => break "SIGTERM",
            _ = interrupt.recv() => break "SIGINT",
            () = sleep_until(deadline) => break "duration",
            _ = liveness.tick() => {
                if targets.iter().all(|t| t.exited().unwrap_or(true)) {
                    break "every target exited";
                }
            }
        }
    };

    // Stop sampling, then drain what is already in the ring and the queue. The samples still
    // queued were taken before this moment: they keep it as their time, and the recording's
    // length is this long, not the time of its last sample.
    let stopped = started.elapsed();
    if let Err(error) = sampler.disable() {
        tracing::warn!(%error, "disabling the sampler; late samples may be left out");
    }
    let (counters, samples) = ingest.stop().await?;
    let (records, counts) = trace.finish(samples, stopped).await.map_err(output)?;
    std::fs::rename(&partial, &options.out).map_err(|source| RecordError::Output {
        path: options.out.clone(),
        source,
    })?;

    Ok(RecordSummary {
        path: options.out,
        source: kind.as_str().to_owned(),
        period,
        pids: options.pids,
        records,
        loads: counts.loads,
        stores: counts.stores,
        dropped: dropped(&sampler, &counters),
        stopped_by: stopped_by.to_owned(),
    })
}

/// The sampler for `options`, following its targets, and its ring.
fn open_sampler(
    options: &RecordOptions,
) -> Result<(SourceKind, Sampler, u64, RingBuf<MapData>), RecordError> {
    let (kind, mut sampler, period) = start_sampler(options)?;
    for &pid in &options.pids {
        sampler
            .add_target(pid)
            .map_err(|error| RecordError::NoSource(error.to_string()))?;
    }
    let ring = sampler
        .take_ring()
        .ok_or_else(|| RecordError::NoSource("the sampler's ring was already taken".into()))?;
    Ok((kind, sampler, period, ring))
}

/// What the trace says about its records.
fn trace_meta(kind: SourceKind, period: u64) -> TraceMeta {
    TraceMeta {
        record_weight: u32::try_from(period).unwrap_or(u32::MAX),
        past_caches: past_caches(kind),
        live_samples: true,
        time_marks: true,
        ..TraceMeta::default()
    }
}

/// The daemon's ingest path with every sample routed to one queue.
struct Ingest {
    counters: Arc<IngestCounters>,
    samples: mpsc::Receiver<TargetInput>,
    control: mpsc::UnboundedSender<SampleRoute>,
    task: JoinHandle<io::Result<SampleRouter>>,
}

impl Ingest {
    fn start(ring: RingBuf<MapData>) -> Self {
        let counters = Arc::new(IngestCounters::default());
        let mut router = SampleRouter::new(1024, Arc::clone(&counters));
        let (samples_tx, samples) = mpsc::channel::<TargetInput>(QUEUE_BATCHES);
        router.apply(SampleRoute::SetDefault {
            sender: Some(TargetChannel(samples_tx)),
        });
        let (control, control_rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(run_sample_ring(ring, router, control_rx, DRAIN_INTERVAL));
        Self {
            counters,
            samples,
            control,
            task,
        }
    }

    /// Drains the ring one last time and stops; returns the counters and the queue, with what
    /// is still in it, to read until it ends.
    async fn stop(self) -> Result<(Arc<IngestCounters>, mpsc::Receiver<TargetInput>), RecordError> {
        drop(self.control);
        let router = self
            .task
            .await
            .map_err(|error| RecordError::Ring(io::Error::other(error)))?
            .map_err(RecordError::Ring)?;
        drop(router);
        Ok((self.counters, self.samples))
    }
}

/// The trace being written: its file, the counts by kind, and each process's index.
struct Trace {
    file: TraceFile,
    counts: Counts,
    index: BTreeMap<u32, u64>,
}

impl Trace {
    /// `batch`, marked with the time it was taken at.
    fn write(&mut self, batch: &[AccessSample], at: Duration) -> io::Result<()> {
        self.file.mark(at)?;
        self.file.write(&self.counts.convert(batch, &self.index))
    }

    /// Writes what is still queued in `samples`, all as taken at `stopped`, and finishes the
    /// file; returns its record count and the counts by kind.
    async fn finish(
        mut self,
        mut samples: mpsc::Receiver<TargetInput>,
        stopped: Duration,
    ) -> io::Result<(u64, Counts)> {
        while let Some(input) = samples.recv().await {
            if let TargetInput::Samples(batch) = input {
                self.write(&batch, stopped)?;
            }
        }
        self.file.mark(stopped)?;
        Ok((self.file.finish()?, self.counts))
    }
}

/// Refuses what cannot be recorded before anything starts.
fn check(options: &RecordOptions) -> Result<(), RecordError> {
    if options.pids.is_empty() {
        return Err(RecordError::NoTargets);
    }
    if options.pids.len() > MAX_PROCESSES {
        return Err(RecordError::TooManyTargets(options.pids.len()));
    }
    if let Some(kind) = options.source.filter(|kind| !PER_ACCESS.contains(kind)) {
        return Err(RecordError::NotSampling(kind));
    }
    Ok(())
}

/// Samples lost before the file, by reason: in BPF (samples of other processes are not lost,
/// they were never wanted), on a full queue, or malformed.
fn dropped(sampler: &Sampler, counters: &IngestCounters) -> BTreeMap<String, u64> {
    let mut dropped: BTreeMap<String, u64> = sampler
        .drop_counts()
        .unwrap_or_default()
        .into_iter()
        .filter(|(reason, _)| *reason != "not_target")
        .map(|(reason, count)| (reason.to_owned(), count))
        .collect();
    dropped.extend(counters.losses("queue_full"));
    dropped
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Starts the requested source, or the best one that starts. Returns it with its period.
fn start_sampler(options: &RecordOptions) -> Result<(SourceKind, Sampler, u64), RecordError> {
    let pmus = PmuScan::read(&options.root).unwrap_or_default();
    let cpus = aya::util::online_cpus()
        .map_err(|(path, error)| RecordError::NoSource(format!("{path}: {error}")))?;
    let limits = KernelLimits::read(&options.root)?;
    let mut perf = PerfSourceOptions::new(cpus, limits);
    perf.ring_bytes = options.ring_bytes;
    let kinds: Vec<SourceKind> = options
        .source
        .map_or(PER_ACCESS.to_vec(), |kind| vec![kind]);
    let mut failures = Vec::new();
    for kind in kinds {
        match start_one(kind, &pmus, &options.root, &perf, options.period) {
            Ok((sampler, period)) => return Ok((kind, sampler, period)),
            Err(error) => {
                tracing::debug!(source = %kind, %error, "cannot record with {kind}");
                failures.push(format!("{kind}: {error}"));
            }
        }
    }
    Err(RecordError::NoSource(failures.join("; ")))
}

#[derive(Debug, thiserror::Error)]
enum StartError {
    #[error(transparent)]
    Spec(#[from] PerfSpecError),
    #[error(transparent)]
    Sampler(#[from] SamplerError),
}

fn start_one(
    kind: SourceKind,
    pmus: &PmuScan,
    root: &HostRoot,
    perf: &PerfSourceOptions,
    period: Option<u64>,
) -> Result<(Sampler, u64), StartError> {
    let mut spec = perf_spec_for(kind, pmus, root, perf)?;
    if let Some(period) = period {
        for event in spec.spec.events.iter_mut().filter(|e| !e.group_leader) {
            event.attr.sample_period = period.max(1);
        }
    }
    let first_period = spec
        .spec
        .events
        .iter()
        .find(|event| !event.group_leader)
        .map_or(1, |event| event.attr.sample_period);
    Ok((Sampler::start(&spec.spec)?, first_period))
}

/// `OUT.partial`, next to `OUT`.
fn partial_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    out.with_file_name(name)
}

/// Per-kind record counts, and the conversion from samples to trace records.
#[derive(Debug, Default)]
struct Counts {
    loads: u64,
    stores: u64,
}

impl Counts {
    /// Samples of a process outside `index` (a racing exec of a reused pid) are left out.
    fn convert(&mut self, batch: &[AccessSample], index: &BTreeMap<u32, u64>) -> Vec<TraceRecord> {
        let mut out = Vec::with_capacity(batch.len());
        for sample in batch {
            let Some(&process) = index.get(&sample.pid) else {
                continue;
            };
            let kind = AccessKind::from_u8(sample.kind);
            match kind {
                AccessKind::Load => self.loads += 1,
                AccessKind::Store => self.stores += 1,
                AccessKind::Unknown => {}
            }
            out.push(TraceRecord {
                addr: (sample.addr & ((1 << PID_SHIFT) - 1)) | (process << PID_SHIFT),
                kind,
            });
        }
        out
    }
}

/// The native writer over a plain, gzip or zstd file, chosen by the file name.
enum TraceFile {
    Plain(NativeWriter<BufWriter<File>>),
    Zstd(NativeWriter<zstd::Encoder<'static, BufWriter<File>>>),
    Gzip(NativeWriter<flate2::write::GzEncoder<BufWriter<File>>>),
}

impl TraceFile {
    fn create(partial: &Path, meta: &TraceMeta) -> io::Result<Self> {
        let file = BufWriter::new(File::create(partial)?);
        let name = partial.to_string_lossy();
        let name = name.strip_suffix(".partial").unwrap_or(&name);
        Ok(if name.ends_with(".zst") {
            Self::Zstd(NativeWriter::new(zstd::Encoder::new(file, 3)?, meta)?)
        } else if name.ends_with(".gz") {
            Self::Gzip(NativeWriter::new(
                flate2::write::GzEncoder::new(file, flate2::Compression::default()),
                meta,
            )?)
        } else {
            Self::Plain(NativeWriter::new(file, meta)?)
        })
    }

    fn write(&mut self, records: &[TraceRecord]) -> io::Result<()> {
        match self {
            Self::Plain(w) => w.write(records),
            Self::Zstd(w) => w.write(records),
            Self::Gzip(w) => w.write(records),
        }
    }

    fn mark(&mut self, at: Duration) -> io::Result<()> {
        match self {
            Self::Plain(w) => w.mark(at),
            Self::Zstd(w) => w.mark(at),
            Self::Gzip(w) => w.mark(at),
        }
    }

    /// Finishes compression, flushes to disk; returns the record count.
    fn finish(self) -> io::Result<u64> {
        match self {
            Self::Plain(w) => {
                let n = w.records();
                w.finish()?
                    .into_inner()
                    .map_err(io::Error::other)?
                    .sync_all()?;
                Ok(n)
            }
            Self::Zstd(w) => {
                let n = w.records();
                let mut file = w.finish()?.finish()?;
                file.flush()?;
                file.into_inner().map_err(io::Error::other)?.sync_all()?;
                Ok(n)
            }
            Self::Gzip(w) => {
                let n = w.records();
                let mut file = w.finish()?.finish()?;
                file.flush()?;
                file.into_inner().map_err(io::Error::other)?.sync_all()?;
                Ok(n)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use memtide_common::SampleSource;

    use super::*;
    use memtide_sim::trace::{RecordSource as _, native::NativeReader};

    fn sample(pid: u32, addr: u64, kind: AccessKind) -> AccessSample {
        AccessSample {
            addr,
            weight: 1,
            pid,
            tid: pid,
            cpu: 0,
            kind: kind as u8,
            source: SampleSource::Pebs as u8,
            _pad: [0; 2],
        }
    }

    #[test]
    fn samples_become_records_with_their_process_index() {
        let index = BTreeMap::from([(100, 0), (200, 1)]);
        let mut counts = Counts::default();
        let records = counts.convert(
            &[
                sample(100, 0x7f00_0000_1000, AccessKind::Load),
                sample(200, 0x7f00_0000_2000, AccessKind::Store),
                sample(300, 0x1000, AccessKind::Load),
            ],
            &index,
        );
        assert_eq!(
            records,
            [
                TraceRecord::load(0x7f00_0000_1000),
                TraceRecord::store(0x7f00_0000_2000 | (1 << PID_SHIFT)),
            ],
            "the stranger's sample is left out"
        );
        assert_eq!((counts.loads, counts.stores), (1, 1));
    }

    #[test]
    fn compressed_trace_files_read_back_with_their_weight() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["t.mt", "t.mt.zst", "t.mt.gz"] {
            let out = dir.path().join(name);
            let partial = partial_path(&out);
            let meta = TraceMeta {
                record_weight: 4,
                ..TraceMeta::default()
            };
            let mut file = TraceFile::create(&partial, &meta).unwrap();
            let records = [TraceRecord::load(0x1000), TraceRecord::store(0x2000)];
            file.write(&records).unwrap();
            assert_eq!(file.finish().unwrap(), 2);
            std::fs::rename(&partial, &out).unwrap();
            let input = memtide_sim::trace::open_decompressed(&out).unwrap();
            let mut reader = NativeReader::new(input).unwrap();
            assert_eq!(reader.meta().record_weight, 4, "{name}");
            let mut back = Vec::new();
            reader.fill(&mut back, 10).unwrap();
            assert_eq!(back, records, "{name}");
        }
    }

    #[test]
    fn partial_files_sit_next_to_the_output() {
        assert_eq!(
            partial_path(Path::new("/tmp/x/run.mt.zst")),
            Path::new("/tmp/x/run.mt.zst.partial")
        );
    }
}
