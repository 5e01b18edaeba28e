//! Further draws of a synthetic workload: the same generator with the next seeds, named apart,
//! for a check whose figure one draw of the workload moves by more than the check's margin.

use std::sync::Arc;

use crate::{
    trace::{RecordSource, TraceError, TraceSpec},
    workload::{GenSpec, Workload},
};

/// The seed every synthetic workload of the suite is generated with; further draws take the
/// next ones.
pub(super) const WORKLOAD_SEED: u64 = 42;

/// Draws of `sparse-superpage` (which superpages are hot, and which 1–32 of their pages) that
/// the hot-subpage check pools. Its yardstick, whole-2 MiB migration, moves 16 to 28
/// superpages in all (in and out) depending on the draw, so the share of one draw swung from
/// 26 % to 64 % over nine seeds while memtide's own bytes stayed within 10 to 21 MiB.
pub(crate) const SPARSE_DRAWS: u64 = 4;

/// A synthetic workload generated with a seed other than the suite's, named `workload#seed`.
struct WorkloadDraw(GenSpec);

impl TraceSpec for WorkloadDraw {
    fn name(&self) -> String {
        drawn_name(self.0.workload, self.0.seed)
    }

    fn open(&self) -> Result<Box<dyn RecordSource>, TraceError> {
        self.0.open()
    }
}

fn drawn_name(workload: Workload, seed: u64) -> String {
    if seed == WORKLOAD_SEED {
        workload.name().to_owned()
    } else {
        format!("{}#{seed}", workload.name())
    }
}

/// The names of the `sparse-superpage` draws, the suite's own first.
pub(crate) fn sparse_draw_names() -> Vec<String> {
    (0..SPARSE_DRAWS)
        .map(|d| drawn_name(Workload::SparseSuperpage, WORKLOAD_SEED + d))
        .collect()
}

/// The `sparse-superpage` draws after the suite's own (which is one of its traces already).
pub(super) fn sparse_draws(footprint: u64, records: u64) -> Vec<Arc<dyn TraceSpec>> {
    (1..SPARSE_DRAWS)
        .map(|d| {
            Arc::new(WorkloadDraw(GenSpec {
                workload: Workload::SparseSuperpage,
                footprint,
                records,
                seed: WORKLOAD_SEED + d,
            })) as Arc<dyn TraceSpec>
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first name is the suite's own trace; the others are apart from it and each other.
    #[test]
    fn the_draws_are_named_apart_from_the_suites_trace() {
        let names = sparse_draw_names();
        assert_eq!(names.len() as u64, SPARSE_DRAWS);
        assert_eq!(names[0], "sparse-superpage");
        let drawn: Vec<String> = sparse_draws(16 << 20, 1000)
            .iter()
            .map(|t| t.name())
            .collect();
        assert_eq!(drawn, names[1..]);
        let mut unique = names.clone();
        unique.dedup();
        assert_eq!(unique, names);
    }

    /// A draw is the same workload with other hot pages: the suite's seed gives its own trace's
    /// records, the next seed others.
    #[test]
    fn a_draw_is_the_workload_with_its_own_seed() {
        let records = |t: &dyn TraceSpec| {
            let mut out = Vec::new();
            t.open().unwrap().fill(&mut out, 4096).unwrap();
            out.iter().map(|r| r.addr).collect::<Vec<_>>()
        };
        let own = GenSpec {
            workload: Workload::SparseSuperpage,
            footprint: 16 << 20,
            records: 4096,
            seed: WORKLOAD_SEED,
        };
        let drawn = sparse_draws(16 << 20, 4096);
        assert_eq!(records(&WorkloadDraw(own)), records(&own));
        assert_ne!(records(&*drawn[0]), records(&own));
    }
}
