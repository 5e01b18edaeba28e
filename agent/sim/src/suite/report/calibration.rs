//! The DAMON baseline replayed on the VM comparison's workload next to the real DAMON's figures
//! (`baselines::damon::vm_calibration`).

use super::verdict;
use crate::{
    baselines::damon::{
        DamonSetup, VM_SECONDS, VM_SEEDS, VmCalibrations, vm_calibrations, vm_comparison_cell,
        vm_comparison_moved_bytes,
    },
    run::SimConfig,
};

/// The section's prose, with `{placeholders}` for the figures.
const CALIBRATION: &str = include_str!("calibration.md");

/// The calibration section for the VM comparison `table`, or nothing when the table has no
/// DAMON row.
pub(super) fn damon_calibration(table: &str, cfg: &SimConfig) -> anyhow::Result<String> {
    let Some(real_bytes) = vm_comparison_moved_bytes(table, "DAMON") else {
        return Ok(String::new());
    };
    let vm = vm_calibrations(DamonSetup::VM_COMPARISON, cfg)?;
    let design = vm_calibrations(
        DamonSetup {
            allocate_slow: true,
            ..DamonSetup::MTIER
        },
        cfg,
    )?;
    let real = |column: &str| vm_comparison_cell(table, "DAMON", column).unwrap_or_default();
    #[expect(clippy::cast_precision_loss, reason = "byte counts")]
    let ratio = vm.median.moved_bytes as f64 / real_bytes.max(1) as f64;
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20));
    let share = |x: f64| format!("{:.1} %", x * 100.0);
    let row = |c: &VmCalibrations| {
        (
            mib(c.median.moved_bytes),
            format!("{} to {}", mib(c.range.0), mib(c.range.1)),
            share(c.median.hot_fast),
            share(c.median.cold_fast),
        )
    };
    let (vm_moved, vm_range, vm_hot, vm_cold) = row(&vm);
    let (design_moved, design_range, design_hot, design_cold) = row(&design);
    // The real table gives the hot subset's share at 30 s and the share of the cold rest moved.
    Ok(super::fill(
        CALIBRATION,
        &[
            ("seconds", format!("{VM_SECONDS:.0}")),
            ("real_moved", mib(real_bytes)),
            ("real_hot", real("hot set on node 0 at 30 s")),
            ("real_cold", real("cold set moved")),
            ("seeds", VM_SEEDS.to_string()),
            ("vm_moved", vm_moved),
            ("vm_range", vm_range),
            ("vm_hot", vm_hot),
            ("vm_cold", vm_cold),
            ("design_moved", design_moved),
            ("design_range", design_range),
            ("design_hot", design_hot),
            ("design_cold", design_cold),
            ("ratio", format!("{ratio:.2}")),
            ("verdict", verdict((0.5..=2.0).contains(&ratio)).to_owned()),
        ],
    ))
}
