//! Fast-forwarding a repeated trace ([`crate::trace::repeat::Repeated`]): from its third pass
//! on, a replay for a policy that learns from samples alone needs only what the second pass
//! recorded.
//!
//! Every pass replays the same records, and from the second on the caches start each pass as
//! the pass before left them (a direct-mapped cache ends a pass holding, in every slot the pass
//! uses, the pass's last line there), so the records that reach memory and the records the
//! sampler's filters pass are the second pass's again, in the same order and the same batches.
//! What differs from pass to pass is the placement, the draws and the policy's state, and a
//! fast-forwarded pass computes all three as a replay would: it charges the recorded memory
//! records against the current placement, draws the recorded candidates with the replay's own
//! sampler, and hands the policy the same samples at the same clock. The result is the
//! replay's, to the bit (the tests compare them); what it skips is reading and decoding every
//! record after the second pass, and filtering the ones a cache served (most of a lackey
//! trace's), which is what makes an hour of a server's passes affordable.
//!
//! The recorded pass costs memory a full replay does not: about 20 bytes per record that
//! reaches memory and 16 per candidate. A pass of more than [`MAX_RECORDS_PER_PASS`] records is
//! replayed in full instead.
//!
//! Policies that read every record (page-table scanners, hindsight over every access, the
//! bound, the epoch oracle) are replayed in full: they see the records a cache served too.

use std::time::Duration;

use super::{Footprint, TraceRecord};
use crate::{policy::SimPolicy, sampler::Candidate, trace::TraceSpec};

/// The longest pass the replay records for fast-forwarding: at most about 2.3 GB of recorded
/// memory records and candidates (every record of a trace past the caches is both under
/// `ideal`).
pub(super) const MAX_RECORDS_PER_PASS: u64 = 1 << 26;

/// A repeated trace the replay fast-forwards after its second pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Repeats {
    pub(super) records_per_pass: u64,
    pub(super) passes: u32,
}

impl Repeats {
    /// Whether `spec` repeats a non-empty trace of at most [`MAX_RECORDS_PER_PASS`] records
    /// more than twice and `policy` learns from samples alone. (An empty pass is replayed: its
    /// end is what gives the skipped lines and a recording's clock.)
    pub(super) fn of(spec: &dyn TraceSpec, policy: &dyn SimPolicy, fp: Footprint) -> Option<Self> {
        let (_, passes) = spec.repetition()?;
        let records_per_pass = fp.records / u64::from(passes);
        let fits = (1..=MAX_RECORDS_PER_PASS).contains(&records_per_pass);
        (passes > 2 && fits && policy.learns_from_samples_only()).then_some(Self {
            records_per_pass,
            passes,
        })
    }
}

/// One batch of a recorded pass: where its memory records and candidates end, and its clock.
#[derive(Clone, Copy, Debug)]
struct BatchMark {
    records: u32,
    memory_end: usize,
    candidates_end: usize,
    clock: Option<Duration>,
}

/// What a steady-state pass repeats.
#[derive(Debug, Default)]
pub(super) struct PassProfile {
    batches: Vec<BatchMark>,
    memory: Vec<TraceRecord>,
    /// The model's index of each memory record's superpage.
    memory_superpages: Vec<u32>,
    candidates: Vec<Candidate>,
    /// How far a pass moves a recording's clock; `None` for traces without time.
    pub(super) clock: Option<Duration>,
    /// Malformed lines a pass skips.
    pub(super) skipped: u64,
}

/// Records the second pass as it is replayed.
pub(super) struct PassRecorder {
    pass: PassProfile,
    /// The clock and skipped lines at the end of the first pass.
    clock_before: Option<Duration>,
    skipped_before: u64,
}

impl PassRecorder {
    pub(super) fn new(clock_before: Option<Duration>, skipped_before: u64) -> Self {
        Self {
            pass: PassProfile::default(),
            clock_before,
            skipped_before,
        }
    }

    /// One record of the pass: `idx` its superpage in the model, `candidate` what the sampler's
    /// filters made of it.
    pub(super) fn record(
        &mut self,
        r: &TraceRecord,
        idx: usize,
        past_llc: bool,
        candidate: Option<Candidate>,
    ) {
        if past_llc {
            self.pass.memory.push(*r);
            self.pass
                .memory_superpages
                .push(u32::try_from(idx).expect("fewer than 2^32 superpages"));
        }
        self.pass.candidates.extend(candidate);
    }

    pub(super) fn end_batch(&mut self, records: usize, clock: Option<Duration>) {
        self.pass.batches.push(BatchMark {
            records: u32::try_from(records).expect("a batch is BATCH records at most"),
            memory_end: self.pass.memory.len(),
            candidates_end: self.pass.candidates.len(),
            clock,
        });
    }

    /// The recorded pass, given the clock and the skipped lines at its end.
    pub(super) fn finish(mut self, clock: Option<Duration>, skipped: u64) -> PassProfile {
        self.pass.clock = clock
            .zip(self.clock_before)
            .map(|(end, start)| end.saturating_sub(start));
        self.pass.skipped = skipped - self.skipped_before;
        self.pass
    }
}

impl PassProfile {
    pub(super) fn batches(&self) -> impl Iterator<Item = PassBatch<'_>> {
        let mut memory = 0;
        let mut candidates = 0;
        self.batches.iter().map(move |b| {
            let batch = PassBatch {
                records: u64::from(b.records),
                memory: &self.memory[memory..b.memory_end],
                memory_superpages: &self.memory_superpages[memory..b.memory_end],
                candidates: &self.candidates[candidates..b.candidates_end],
                clock: b.clock,
            };
            (memory, candidates) = (b.memory_end, b.candidates_end);
            batch
        })
    }
}

/// One batch of a recorded pass, as a fast-forwarded pass replays it.
pub(super) struct PassBatch<'a> {
    pub(super) records: u64,
    pub(super) memory: &'a [TraceRecord],
    pub(super) memory_superpages: &'a [u32],
    pub(super) candidates: &'a [Candidate],
    /// The batch's clock in the second pass.
    pub(super) clock: Option<Duration>,
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    };

    use super::*;
    use crate::{
        PolicyName,
        model::PresetName,
        run::{MemTrace, SimConfig},
        sampler::SamplerName,
        simulate,
        trace::{
            RecordSource, TraceError, TraceMeta,
            repeat::{InFull, Repeated},
        },
        workload::{GenSpec, Workload},
    };

    /// A trace of every access (cache hits included, as lackey's are) that counts the records
    /// read from it.
    struct Counted {
        trace: MemTrace,
        read: Arc<AtomicU64>,
    }

    struct CountedSource {
        inner: Box<dyn RecordSource>,
        read: Arc<AtomicU64>,
    }

    impl RecordSource for CountedSource {
        fn meta(&self) -> &TraceMeta {
            self.inner.meta()
        }

        fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
            let n = self.inner.fill(out, max)?;
            self.read.fetch_add(n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    impl TraceSpec for Counted {
        fn name(&self) -> String {
            self.trace.name()
        }

        fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
            Ok(Box::new(CountedSource {
                inner: self.trace.open()?,
                read: Arc::clone(&self.read),
            }))
        }
    }

    fn accesses() -> Counted {
        let spec = GenSpec {
            workload: Workload::ZipfKv,
            footprint: 16 << 20,
            records: 40_000,
            seed: 5,
        };
        let mut src = spec.open().unwrap();
        let mut records = Vec::new();
        while src.fill(&mut records, 4096).unwrap() > 0 {}
        Counted {
            trace: MemTrace {
                name: "kv-accesses".into(),
                records: Arc::new(records),
                meta: TraceMeta {
                    record_weight: 64,
                    ..TraceMeta::default()
                },
            },
            read: Arc::default(),
        }
    }

    /// Fast-forwarding gives the replay's result to the bit, for every policy that learns from
    /// samples, under every sampler, while reading no record after the second pass.
    #[test]
    fn a_fast_forwarded_replay_is_the_full_replay() {
        let counted = Arc::new(accesses());
        let per_pass = counted.trace.records.len() as u64;
        let repeated = Repeated {
            inner: Arc::clone(&counted) as Arc<dyn TraceSpec>,
            passes: 5,
        };
        let in_full = InFull(repeated.clone());
        let policies = [
            PolicyName::Memtide,
            PolicyName::Static2m,
            PolicyName::Hemem,
            PolicyName::Memtis,
            PolicyName::HindsightSamples,
            PolicyName::NoMigration,
        ];
        for sampler in SamplerName::ALL {
            let mut cfg = SimConfig::new(PresetName::Pmem.preset());
            cfg.sampler = sampler;
            cfg.sample_rate = 16;
            cfg.fast = crate::run::FastSize::Ratio(0.1);
            for policy in policies {
                let full = simulate(&in_full, policy, &cfg).unwrap();
                counted.read.store(0, Ordering::Relaxed);
                let fast = simulate(&repeated, policy, &cfg).unwrap();
                let read = counted.read.load(Ordering::Relaxed);
                // Footprint: one pass, then two; the replay: two.
                assert_eq!(
                    read,
                    5 * per_pass,
                    "{policy:?} under {sampler:?} read {read}"
                );
                assert!(full.samples > 0);
                assert_eq!(
                    serde_json::to_value(&fast).unwrap(),
                    serde_json::to_value(&full).unwrap(),
                    "{policy:?} under {sampler:?}"
                );
            }
        }
    }

    /// A lackey trace of exactly one batch whose last line is malformed: only the fill that ends
    /// a pass reads that line, and the recorded pass made none. The fast-forwarded replay
    /// still counts it once a pass, as the full replay does; an empty trace is replayed.
    #[test]
    fn skipped_lines_count_every_pass_and_an_empty_trace_is_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let mut text: String = (0..crate::run::BATCH as u64)
            .map(|i| format!(" L {:x},8\n", 0x7f00_0000_0000 + i * 4096))
            .collect();
        text.push_str("not an access\n");
        let path = dir.path().join("batch.lackey");
        std::fs::write(&path, &text).unwrap();
        let empty = dir.path().join("empty.lackey");
        std::fs::write(&empty, "not an access\n").unwrap();
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        for path in [path, empty] {
            let file = crate::trace::FileTrace {
                path,
                format: Some(crate::trace::Format::Lackey),
                lenient: true,
                record_weight: None,
            };
            let repeated = Repeated {
                inner: Arc::new(file),
                passes: 4,
            };
            let full = simulate(&InFull(repeated.clone()), PolicyName::Memtide, &cfg).unwrap();
            let fast = simulate(&repeated, PolicyName::Memtide, &cfg).unwrap();
            assert_eq!(full.skipped_lines, 4);
            assert_eq!(
                serde_json::to_value(&fast).unwrap(),
                serde_json::to_value(&full).unwrap()
            );
        }
    }

    /// A policy that reads every record (TPP's hint faults) is replayed in full.
    #[test]
    fn a_policy_that_reads_records_is_not_fast_forwarded() {
        let counted = Arc::new(accesses());
        let per_pass = counted.trace.records.len() as u64;
        let repeated = Repeated {
            inner: Arc::clone(&counted) as Arc<dyn TraceSpec>,
            passes: 4,
        };
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        simulate(&repeated, PolicyName::Tpp, &cfg).unwrap();
        assert_eq!(counted.read.load(Ordering::Relaxed), (1 + 2 + 4) * per_pass);
    }

    #[test]
    fn a_recorded_pass_moves_a_recordings_clock_by_its_length() {
        let s = Duration::from_secs;
        let mut recorder = PassRecorder::new(Some(s(10)), 2);
        recorder.end_batch(3, Some(s(15)));
        recorder.end_batch(1, Some(s(20)));
        let pass = recorder.finish(Some(s(20)), 5);
        assert_eq!((pass.clock, pass.skipped), (Some(s(10)), 3));
        let clocks: Vec<_> = pass.batches().map(|b| (b.records, b.clock)).collect();
        assert_eq!(clocks, [(3, Some(s(15))), (1, Some(s(20)))]);
        let untimed = PassRecorder::new(None, 0).finish(None, 0);
        assert_eq!(untimed.clock, None);
    }
}
