//! The bound (`--policy oracle`): the most fast-tier hits any policy can have on a trace.
//!
//! In the replay a placement changes only between two batches of [`BATCH`] records (every
//! policy's `step` runs after a batch, TPP's promotions included), and the fast tier holds at
//! most its capacity in 4 KiB pages. So no policy serves more of a batch's accesses from the
//! fast tier than the accesses of the batch's K most-accessed pages, K the capacity in pages.
//! The bound is that sum over the batches, and this policy reaches it: before each batch it
//! holds exactly those pages in the fast tier, placed for nothing (no migration is counted or
//! charged; what it moves is beyond any policy's means). Its hit ratio bounds every policy's
//! hit ratio; its projected time is the time of those hits with no migration cost, and bounds
//! nothing (pages keep the mapping size their first touch gave them).
//!
//! [`crate::oracle::EpochOracle`] (`oracle-epoch`) is the attainable counterpart: foresight of
//! one epoch, paying for its moves.
//!
//! [`FixedBound`] (`--policy oracle-fixed`) is the same knowledge held still: the most hits of
//! one placement kept for the whole replay, what any policy whose estimate of the pages' heat
//! settles (a long horizon, an hour of samples) can reach at most.
//!
//! [`BATCH`]: crate::run::BATCH

use std::collections::HashMap;

use crate::{
    model::TierModel,
    oracle::most_accessed,
    policy::{Clock, SimPolicy},
    sampler::LineFilter,
    trace::{TraceError, TraceRecord, TraceSpec},
};
use memtide_common::AccessSample;
use memtide_core::units::{PAGE_SIZE, Tier};

#[derive(Default)]
pub struct Bound {
    fast: FreePlacement,
    /// Accesses per 4 KiB page number in the batch.
    counts: HashMap<u64, u32>,
}

/// A fast tier placed for nothing (by the bound and by free hindsight): no migration is
/// counted or charged.
#[derive(Default)]
pub(crate) struct FreePlacement {
    /// Superpages (model indices) holding fast pages: what the next placement clears.
    placed: Vec<usize>,
}

impl FreePlacement {
    /// Makes the fast tier hold exactly the most-accessed of `counts` (accesses per 4 KiB page
    /// number) that fit, and nothing else.
    pub(crate) fn hold(
        &mut self,
        model: &mut TierModel,
        counts: impl IntoIterator<Item = (u64, u32)>,
    ) {
        for idx in self.placed.drain(..) {
            model.place_free(idx, [0; 8]);
        }
        let capacity = model.fast_capacity_bytes() / PAGE_SIZE;
        for (sp, fast) in most_accessed(counts, capacity) {
            let idx = match model.find(sp) {
                Some(idx) => idx,
                None => model.map(sp, Tier::Slow),
            };
            model.place_free(idx, fast);
            self.placed.push(idx);
        }
    }
}

impl SimPolicy for Bound {
    fn name(&self) -> String {
        "oracle".into()
    }

    /// Every superpage is mapped slow; [`Self::before_batch`] places the pages that count.
    fn place(&mut self, _: u64, _: &TierModel) -> Tier {
        Tier::Slow
    }

    fn before_batch(&mut self, batch: &[TraceRecord], model: &mut TierModel) {
        self.counts.clear();
        for r in batch {
            *self.counts.entry(r.addr / PAGE_SIZE).or_default() += 1;
        }
        self.fast.hold(model, self.counts.drain());
    }

    fn observe(&mut self, _: &[TraceRecord], _: &[AccessSample], _: &TierModel, _: Clock) {}

    fn step(&mut self, _: Clock, _: &mut TierModel) {}
}

/// The best fixed placement (`--policy oracle-fixed`): the fast tier holds, from the first
/// access to the last, the 4 KiB pages the whole trace accesses most (its records that reach
/// memory, counted before the replay through the replay's cache model), placed for nothing.
/// No placement that never changes has more fast-tier hits: its hit ratio bounds every fixed
/// placement's (first touch that never migrates included), and every policy's whose estimate
/// of the pages' heat stops changing, however much evidence it gathered. A policy above it
/// follows the program's phases. Its projected time, like the bound's, bounds nothing.
pub struct FixedBound {
    fast: FreePlacement,
    /// Accesses per 4 KiB page over the whole trace; taken when the first batch places them.
    counts: Option<PageCounts>,
}

impl FixedBound {
    /// Reads `spec` to count its pages' accesses. A trace repeated more than twice is read for
    /// two passes only: from the second pass on every pass reaches memory with the second's
    /// records, in the same order (`run::fast_forward`), so the later passes count as the
    /// second.
    pub fn new(spec: &dyn TraceSpec) -> Result<Self, TraceError> {
        let counts = match spec.repetition() {
            Some((inner, passes)) if passes > 2 => {
                let per_pass = records_in(inner)?;
                let (mut counts, second) = count_pages(spec, per_pass, 2 * per_pass)?;
                for (page, n) in second {
                    let total = counts.entry(page).or_default();
                    *total = total.saturating_add(n.saturating_mul(passes - 1));
                }
                counts
            }
            _ => count_pages(spec, u64::MAX, u64::MAX)?.0,
        };
        Ok(Self {
            fast: FreePlacement::default(),
            counts: Some(counts),
        })
    }
}

/// Accesses per 4 KiB page number.
type PageCounts = HashMap<u64, u32>;

/// Records in a trace.
fn records_in(spec: &dyn TraceSpec) -> Result<u64, TraceError> {
    let mut source = spec.open()?;
    let mut buf = Vec::with_capacity(4096);
    let mut records = 0;
    loop {
        buf.clear();
        match source.fill(&mut buf, 4096)? {
            0 => return Ok(records),
            n => records += n as u64,
        }
    }
}

/// Accesses per 4 KiB page of the first `limit` records of `spec` that reach memory (through the
/// replay's cache model): those of the first `split` records, and those of the rest.
fn count_pages(
    spec: &dyn TraceSpec,
    split: u64,
    limit: u64,
) -> Result<(PageCounts, PageCounts), TraceError> {
    let mut source = spec.open()?;
    let mut llc = LineFilter::l3(source.meta());
    let (mut before, mut after) = (HashMap::new(), HashMap::new());
    let mut buf = Vec::with_capacity(4096);
    let mut read = 0u64;
    while read < limit {
        buf.clear();
        let want = usize::try_from(limit - read).map_or(4096, |left| left.min(4096));
        if source.fill(&mut buf, want)? == 0 {
            break;
        }
        for r in &buf {
            let counts = if read < split {
                &mut before
            } else {
                &mut after
            };
            read += 1;
            if llc.as_mut().is_none_or(|llc| llc.passes(r.addr)) {
                let n: &mut u32 = counts.entry(r.addr / PAGE_SIZE).or_default();
                *n = n.saturating_add(1);
            }
        }
    }
    Ok((before, after))
}

impl SimPolicy for FixedBound {
    fn name(&self) -> String {
        "oracle-fixed".into()
    }

    /// Every superpage is mapped slow; the first batch places the pages that count.
    fn place(&mut self, _: u64, _: &TierModel) -> Tier {
        Tier::Slow
    }

    fn before_batch(&mut self, _: &[TraceRecord], model: &mut TierModel) {
        if let Some(counts) = self.counts.take() {
            self.fast.hold(model, counts);
        }
    }

    fn observe(&mut self, _: &[TraceRecord], _: &[AccessSample], _: &TierModel, _: Clock) {}

    fn step(&mut self, _: Clock, _: &mut TierModel) {}

    /// It reads no record of the replay (it counted them all before), so the passes of a
    /// repeated trace after the second may be fast-forwarded.
    fn learns_from_samples_only(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use std::{
        path::PathBuf,
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
    };

    use super::{FixedBound, PAGE_SIZE};
    use crate::{
        PolicyName,
        model::PresetName,
        run::{BATCH, FastSize, MemTrace, SimConfig},
        simulate,
        suite::LACKEY_RECORD_WEIGHT,
        trace::{
            FileTrace, Format, RecordSource, TraceError, TraceMeta, TraceRecord, TraceSpec,
            repeat::{InFull, Repeated},
        },
        workload::{GenSpec, Workload},
    };

    /// Every synthetic workload (short) and every real trace in traces/, at the main matrix's
    /// two fast-tier sizes: no policy's hit ratio is above the bound's.
    #[test]
    fn the_bound_holds_for_every_policy_on_every_trace() {
        let mut traces: Vec<Arc<dyn TraceSpec>> = Workload::ALL
            .iter()
            .map(|&workload| {
                Arc::new(GenSpec {
                    workload,
                    footprint: 16 << 20,
                    records: 40_000,
                    seed: 3,
                }) as Arc<dyn TraceSpec>
            })
            .collect();
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces");
        let mut real: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
            .unwrap_or_default();
        real.retain(|path| {
            let name = path.to_string_lossy();
            name.ends_with(".mt.zst") || name.ends_with(".lackey.zst")
        });
        real.sort();
        assert!(!real.is_empty(), "no real traces in {}", dir.display());
        for path in real {
            let lackey = path.to_string_lossy().contains(".lackey");
            traces.push(Arc::new(Prefix {
                trace: FileTrace {
                    path,
                    format: Some(if lackey {
                        Format::Lackey
                    } else {
                        Format::Native
                    }),
                    lenient: false,
                    record_weight: lackey.then_some(LACKEY_RECORD_WEIGHT),
                },
                // A debug build replays about a million records a second: the first 300,000
                // of each capture keep the test under a minute.
                records: 300_000,
            }));
        }
        let jobs: Vec<(f64, &Arc<dyn TraceSpec>)> = [0.1, 0.25]
            .into_iter()
            .flat_map(|fast| traces.iter().map(move |trace| (fast, trace)))
            .collect();
        // The runs are independent: spread them over the cores (`make test` runs one test at
        // a time).
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..std::thread::available_parallelism().map_or(1, usize::from) {
                scope.spawn(|| {
                    while let Some(&(fast, trace)) = jobs.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        check(fast, &**trace);
                    }
                });
            }
        });
    }

    /// Three pages, each accessed alone in its own phase, the last phase the longest; room
    /// for one page: the best fixed placement holds the last phase's page throughout (half the
    /// accesses), the bound follows every phase (all of them).
    #[test]
    fn the_best_fixed_placement_holds_the_most_accessed_pages_throughout() {
        let base = crate::workload::BASE;
        let phase = |page: u64, batches: usize| {
            vec![TraceRecord::load(base + page * PAGE_SIZE); batches * BATCH]
        };
        let records = [phase(2, 1), phase(1, 2), phase(0, 3)].concat();
        let trace = MemTrace {
            name: "phases".into(),
            records: Arc::new(records),
            meta: TraceMeta {
                past_caches: true,
                ..TraceMeta::default()
            },
        };
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.fast = FastSize::Bytes(PAGE_SIZE);
        let fixed = simulate(&trace, PolicyName::OracleFixed, &cfg).unwrap();
        assert_eq!(fixed.fast_hit_ratio, 0.5, "{fixed:?}");
        let bound = simulate(&trace, PolicyName::Oracle, &cfg).unwrap();
        assert_eq!(bound.fast_hit_ratio, 1.0, "{bound:?}");
    }

    /// A repeated capture is counted from two of its passes and fast-forwarded after them,
    /// with the figures of reading and replaying every pass (which a trace that does not say
    /// it repeats gets).
    #[test]
    fn the_best_fixed_placement_of_a_repeated_trace_counts_every_pass() {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../traces/kv.mt.zst");
        let once = Prefix {
            trace: FileTrace {
                path,
                format: Some(Format::Native),
                lenient: false,
                record_weight: None,
            },
            records: 100_000,
        };
        let repeated = Repeated {
            inner: Arc::new(once),
            passes: 5,
        };
        let counts = |spec: &dyn TraceSpec| FixedBound::new(spec).unwrap().counts.unwrap();
        let all = InFull(repeated.clone());
        assert_eq!(counts(&repeated), counts(&all));
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.fast = FastSize::Ratio(0.1);
        let counted = simulate(&repeated, PolicyName::OracleFixed, &cfg).unwrap();
        let every_pass = simulate(&all, PolicyName::OracleFixed, &cfg).unwrap();
        assert_eq!(
            (counted.memory_records, counted.fast_hit_ratio),
            (every_pass.memory_records, every_pass.fast_hit_ratio)
        );
        assert!(counted.fast_hit_ratio > 0.0, "{counted:?}");
    }

    /// The first `records` records of a trace.
    struct Prefix {
        trace: FileTrace,
        records: u64,
    }

    struct PrefixSource {
        inner: Box<dyn RecordSource>,
        left: u64,
    }

    impl TraceSpec for Prefix {
        fn name(&self) -> String {
            self.trace.name()
        }

        fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
            Ok(Box::new(PrefixSource {
                inner: self.trace.open()?,
                left: self.records,
            }))
        }
    }

    impl RecordSource for PrefixSource {
        fn meta(&self) -> &TraceMeta {
            self.inner.meta()
        }

        fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
            let max = usize::try_from(self.left).map_or(max, |left| left.min(max));
            let n = self.inner.fill(out, max)?;
            self.left -= n as u64;
            Ok(n)
        }
    }

    fn check(fast: f64, trace: &dyn TraceSpec) {
        let mut cfg = SimConfig::new(PresetName::Pmem.preset());
        cfg.fast = FastSize::Ratio(fast);
        let bound = simulate(trace, PolicyName::Oracle, &cfg).unwrap();
        assert_eq!(
            bound.migrated_bytes, 0,
            "the bound's placements are not moves"
        );
        // First touch that never migrates is one fixed placement among those the best fixed
        // placement chooses from.
        let fixed = simulate(trace, PolicyName::OracleFixed, &cfg).unwrap();
        let first_touch = simulate(trace, PolicyName::NoMigration, &cfg).unwrap();
        assert!(
            fixed.fast_hit_ratio >= first_touch.fast_hit_ratio && fixed.migrated_bytes == 0,
            "{} at fast {fast}: the best fixed placement's hit ratio {} is below first touch's {}",
            trace.name(),
            fixed.fast_hit_ratio,
            first_touch.fast_hit_ratio
        );
        // Free hindsight from the samples and the best fixed placement run in the suite's
        // cadence and long sections only.
        for policy in PolicyName::ALL
            .into_iter()
            .chain([PolicyName::HindsightSamples, PolicyName::OracleFixed])
        {
            let result = simulate(trace, policy, &cfg).unwrap();
            assert!(
                result.fast_hit_ratio <= bound.fast_hit_ratio,
                "{} at fast {fast}: {} has hit ratio {} above the bound's {}",
                trace.name(),
                policy.name(),
                result.fast_hit_ratio,
                bound.fast_hit_ratio
            );
        }
    }
}
