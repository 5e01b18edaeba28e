//! The DAMON model on the VM comparison's workload (agent/tests/vm/compare.rs), to set its
//! bytes moved beside what the real DAMON moved there (docs/evaluation/vm-comparison.md).

use std::time::Duration;

use serde::Serialize;

use super::{Damon, DamonSetup};
use crate::{
    run::{FastSize, SimConfig, run_keeping_model},
    trace::TraceError,
    workload::{BASE, GenSpec, Workload},
};
use memtide_core::{
    policy::PlacementView as _,
    units::{PAGE_SIZE, Tier},
};

/// The VM comparison's workload and machine, as `memtide gen` and the tier model have them:
/// 256 MiB, a 32 MiB hot subset (agent/tests/vm/promotion.rs), 30 s, a fast tier with room
/// for all of it (node 0 of the VM has about 1 GiB free).
pub(super) const VM_FOOTPRINT: u64 = 256 << 20;
pub const VM_SECONDS: f64 = 30.0;
pub(super) const VM_FAST_BYTES: u64 = 1 << 30;
/// Seeds of DAMON's random region splits the calibration runs: how far a region reaches from
/// the hot subset into the cold rest is a draw, in the model as in the kernel, so one run of
/// each is one sample.
pub const VM_SEEDS: u64 = 7;

/// What the model of one DAMON setup moved on the VM comparison's workload.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VmCalibration {
    /// Bytes the model migrated (promoted and demoted) in [`VM_SECONDS`].
    pub moved_bytes: u64,
    /// Share of the hot subset, and of the cold rest, in the fast tier at the end.
    pub hot_fast: f64,
    pub cold_fast: f64,
}

/// The calibration runs of one setup, over [`VM_SEEDS`] seeds.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VmCalibrations {
    /// The run of median bytes moved.
    pub median: VmCalibration,
    /// Fewest and most bytes moved.
    pub range: (u64, u64),
}

/// Replays the VM comparison's workload through the DAMON model at `setup` under `cfg`'s
/// preset and clock, DAMON's splits drawn from `seed`.
pub fn vm_calibration(
    setup: DamonSetup,
    cfg: &SimConfig,
    seed: u64,
) -> Result<VmCalibration, TraceError> {
    let records_per_s = 1e9
        / (cfg.access_pace_ns(Workload::HotSubset.mlp())
            * f64::from(Workload::HotSubset.record_weight()));
    let spec = GenSpec {
        workload: Workload::HotSubset,
        footprint: VM_FOOTPRINT,
        records: (VM_SECONDS * records_per_s) as u64,
        seed: cfg.seed,
    };
    let cfg = SimConfig {
        fast: FastSize::Bytes(VM_FAST_BYTES),
        footprint: None,
        ..cfg.clone()
    };
    // The VM switched DAMON on after the workload had written its memory: so does the model.
    let written = Duration::from_secs_f64((VM_FOOTPRINT / PAGE_SIZE) as f64 / records_per_s);
    let mut damon = Damon::starting_at(setup, written, seed);
    let (result, model) = run_keeping_model(&spec, &mut damon, &cfg)?;
    let pages = VM_FOOTPRINT / PAGE_SIZE;
    let (hot_first, hot_pages) = (pages * 7 / 16, pages / 8);
    let (mut hot, mut cold) = (0u64, 0u64);
    for page in 0..pages {
        let fast = model.tier_of(BASE + page * PAGE_SIZE) == Some(Tier::Fast);
        if (hot_first..hot_first + hot_pages).contains(&page) {
            hot += u64::from(fast);
        } else {
            cold += u64::from(fast);
        }
    }
    Ok(VmCalibration {
        moved_bytes: result.promoted_bytes + result.demoted_bytes,
        hot_fast: hot as f64 / hot_pages as f64,
        cold_fast: cold as f64 / (pages - hot_pages) as f64,
    })
}

/// [`vm_calibration`] over seeds 1 to [`VM_SEEDS`], each on its own thread.
pub fn vm_calibrations(setup: DamonSetup, cfg: &SimConfig) -> Result<VmCalibrations, TraceError> {
    let mut runs = std::thread::scope(|scope| {
        let handles: Vec<_> = (1..=VM_SEEDS)
            .map(|seed| scope.spawn(move || vm_calibration(setup, cfg, seed)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a calibration run panicked"))
            .collect::<Result<Vec<_>, _>>()
    })?;
    runs.sort_by_key(|r| r.moved_bytes);
    let range = (runs[0].moved_bytes, runs[runs.len() - 1].moved_bytes);
    Ok(VmCalibrations {
        median: runs.swap_remove(runs.len() / 2),
        range,
    })
}

/// The cell of `column` in the row of the first system whose name starts with `system`, in the
/// VM comparison's table (docs/evaluation/vm-comparison.md).
#[must_use]
pub fn vm_comparison_cell(table: &str, system: &str, column: &str) -> Option<String> {
    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|c| c.trim().to_owned())
            .collect()
    };
    let mut rows = table.lines().filter(|l| l.starts_with('|'));
    let index = cells(rows.next()?).iter().position(|c| c == column)?;
    rows.map(cells)
        .find(|r| r[0].starts_with(system))?
        .get(index)
        .cloned()
}

/// Bytes migrated by `system` in the VM comparison's table (its "bytes migrated", in MiB).
#[must_use]
pub fn vm_comparison_moved_bytes(table: &str, system: &str) -> Option<u64> {
    let cell = vm_comparison_cell(table, system, "bytes migrated")?;
    let mib: f64 = cell.strip_suffix(" MiB")?.parse().ok()?;
    Some((mib * f64::from(1 << 20)) as u64)
}

#[cfg(test)]
mod tests {
    use super::{DamonSetup, VM_FOOTPRINT, vm_calibration, vm_comparison_moved_bytes};
    use crate::{model::PresetName, run::SimConfig};

    /// On the VM comparison's workload, set up as the VM set up the real DAMON (physical
    /// monitoring of the slow node, no filter, no quota), the model promotes the whole hot
    /// subset, and the regions that held hot pages carry cold ones with them; monitoring the
    /// virtual address space instead, its regions close in on the hot subset and carry less.
    #[test]
    fn the_vm_comparisons_scheme_promotes_the_hot_subset_and_cold_pages_with_it() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        let paddr = vm_calibration(DamonSetup::VM_COMPARISON, &cfg, 1).unwrap();
        assert!(paddr.hot_fast >= 0.99, "{paddr:?}");
        assert!(paddr.moved_bytes > VM_FOOTPRINT / 8, "{paddr:?}");
        let vaddr = DamonSetup {
            physical_node_bytes: None,
            ..DamonSetup::VM_COMPARISON
        };
        let vaddr = vm_calibration(vaddr, &cfg, 1).unwrap();
        assert!(vaddr.hot_fast >= 0.99, "{vaddr:?}");
        assert!(vaddr.cold_fast < paddr.cold_fast, "{vaddr:?} vs {paddr:?}");
    }

    #[test]
    fn the_vm_comparison_table_is_read_by_column() {
        let table = "| system | time to 90 % | bytes migrated |\n|---|---|---|\n\
                     | memtide | 6 s | 41.3 MiB |\n| DAMON migrate_hot (paddr) | 4 s | 94.0 MiB |\n";
        assert_eq!(vm_comparison_moved_bytes(table, "DAMON"), Some(94 << 20));
        assert_eq!(vm_comparison_moved_bytes(table, "kernel"), None);
    }
}
