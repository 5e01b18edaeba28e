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
//! [`BATCH`]: crate::run::BATCH

use std::collections::HashMap;

use crate::{
    model::TierModel,
    oracle::most_accessed,
    policy::{Clock, SimPolicy},
    trace::TraceRecord,
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

#[cfg(test)]
mod tests {
    use std::{
        path::PathBuf,
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
    };

    use crate::{
        PolicyName,
        model::PresetName,
        run::{FastSize, SimConfig},
        simulate,
        suite::LACKEY_RECORD_WEIGHT,
        trace::{FileTrace, Format, RecordSource, TraceError, TraceMeta, TraceRecord, TraceSpec},
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
        // Free hindsight from the samples runs in the suite's cadence section only.
        for policy in PolicyName::ALL
            .into_iter()
            .chain([PolicyName::HindsightSamples])
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
