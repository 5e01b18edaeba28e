//! The checks the seed papers predict (digest §6.4), each with its verdict as measured.

use std::fmt::Write as _;

use super::{Report, geomean, verdict};
use crate::{
    PolicyName,
    model::PresetName,
    policy::EngineVariant,
    run::{FastSize, SimResult},
    suite::{
        BW_SHARES, EPOCH_DRAWS, EPOCH_TRACES, EPOCHS_MS, LACKEY_RECORD_WEIGHT,
        draws::sparse_draw_names,
    },
};

/// One draw of the samples in a fixed-epoch sweep: the best fixed epoch and memtide's adaptive
/// run beside it.
pub(super) struct EpochDraw {
    pub(super) best_ms: u64,
    pub(super) best_s: f64,
    pub(super) memtide_s: f64,
}

impl EpochDraw {
    /// memtide's projected time over the best fixed epoch's, less one.
    pub(super) fn gap(&self) -> f64 {
        self.memtide_s / self.best_s - 1.0
    }
}

/// The geometric mean of memtide's time over the best fixed epoch's across draws, less one.
pub(super) fn mean_gap(draws: &[EpochDraw]) -> f64 {
    geomean(draws.iter().map(|d| d.memtide_s / d.best_s)) - 1.0
}

/// Most of whole-2 MiB migration's bytes hot-subpage migration may move on sparse
/// superpages (Rainbow, digest §6.4: half the traffic of HSCC-2MB).
pub(super) const SPARSE_SHARE_LIMIT: f64 = 0.5;

/// Bytes memtide moved over the bytes whole-2 MiB migration moved.
pub(super) fn moved_share(memtide_bytes: u64, whole_bytes: u64) -> f64 {
    memtide_bytes as f64 / (whole_bytes as f64).max(1.0)
}

/// How the page was made: the command and the runs' setup.
const SETUP: &str = include_str!("setup.md");

impl Report<'_> {
    /// How to regenerate the page, and what the runs were.
    pub(super) fn setup(&self, o: &mut String) {
        let fast = match self.base.fast {
            FastSize::Ratio(_) => format!("{} of each trace's footprint", self.base.fast),
            FastSize::Bytes(_) => self.base.fast.to_string(),
        };
        o.push_str(&super::fill(
            SETUP,
            &[
                ("runs", self.results.len().to_string()),
                ("seconds", format!("{:.0}", self.elapsed)),
                ("command", self.command()),
                ("records", self.args.records.to_string()),
                ("footprint_mib", (self.args.footprint >> 20).to_string()),
                ("lackey_weight", LACKEY_RECORD_WEIGHT.to_string()),
                ("fast", fast),
                ("sample_rate", self.base.sample_rate.to_string()),
                ("access_ns", self.base.access_ns.to_string()),
            ],
        ));
    }

    /// The headline goals, and every policy's geometric means.
    pub(super) fn headline(&self, o: &mut String) {
        let ratios: Vec<f64> = self
            .traces
            .iter()
            .filter_map(|t| {
                let m = self.main(t, PolicyName::Memtide)?;
                let o = self.main(t, PolicyName::Oracle)?;
                Some(m.fast_hit_ratio / o.fast_hit_ratio.max(1e-9))
            })
            .collect();
        let hit_share = geomean(ratios.iter().copied());
        let gm_time = |p: PolicyName| self.main_geomean(p, |r| r.relative_time);
        let gm_hit = |p: PolicyName| self.main_geomean(p, |r| r.fast_hit_ratio);
        let mt = gm_time(PolicyName::Memtide);
        o.push_str("## Headline (measured)\n\n");
        self.headline_density(o);
        let _ = writeln!(
            o,
            "- memtide reaches **{:.1} %** of the bound's (`oracle`) fast-tier hit ratio (geometric mean over the {} traces of the main matrix; goal ≥ 90 %): {}.",
            hit_share * 100.0,
            ratios.len(),
            verdict(hit_share >= 0.9)
        );
        for p in [
            PolicyName::Tpp,
            PolicyName::Hemem,
            PolicyName::Memtis,
            PolicyName::Damon,
        ] {
            let b = gm_time(p);
            let _ = writeln!(
                o,
                "- projected time, geometric mean of relative time: memtide {mt:.3} vs {} {b:.3} ({:+.1} %): memtide ahead {}.",
                p.name(),
                (mt / b - 1.0) * 100.0,
                verdict(mt < b)
            );
        }
        o.push('\n');
        o.push_str("| policy | geomean hit ratio | geomean relative time |\n|---|---|---|\n");
        for p in PolicyName::ALL {
            let _ = writeln!(o, "| {} | {:.3} | {:.3} |", p.name(), gm_hit(p), gm_time(p));
        }
        o.push('\n');
    }

    /// Ryoo's checks: the best static granularity per pattern, and memtide against it.
    pub(super) fn granularity_checks(&self, o: &mut String) {
        o.push_str("## Acceptance checks (digest §6.4)\n\n");
        let gran_rows = [
            ("gups-hotset", "4k", "random"),
            ("clustered-64k", "64k", "64 KiB-clustered"),
            ("stream", "2m", "streaming"),
        ];
        let mut all_best = true;
        let mut within = true;
        let mut gran_lines = String::new();
        for (w, want, kind) in gran_rows {
            let statics: Vec<(&str, f64)> = ["4k", "64k", "2m"]
                .iter()
                .filter_map(|g| {
                    self.get("granularity", w, &format!("static-{g}"))
                        .map(|r| (*g, r.projected_time_s))
                })
                .collect();
            let Some(&(best, bt)) = statics.iter().min_by(|a, b| a.1.total_cmp(&b.1)) else {
                continue;
            };
            let m = self
                .get("granularity", w, "memtide")
                .map_or(f64::NAN, |r| r.projected_time_s);
            all_best &= best == want;
            let gap = m / bt - 1.0;
            within &= gap <= 0.03;
            let _ = writeln!(
                gran_lines,
                "  - {kind} (`{w}`): best static {best} (expected {want}); memtide {:+.1} % vs best static.",
                gap * 100.0
            );
        }
        let _ = writeln!(
            o,
            "- Best static granularity follows the pattern (random → 4 KiB, clustered → 64 KiB, streaming → 2 MiB), `ryoo` preset: {}.\n{gran_lines}- memtide within 3 % of the best static on those single-pattern traces: {}.",
            verdict(all_best),
            verdict(within)
        );
        let phases: Vec<(String, f64)> = ["static-4k", "static-64k", "static-2m", "memtide"]
            .iter()
            .filter_map(|c| {
                self.get("granularity", "phases", c)
                    .map(|r| ((*c).to_owned(), r.projected_time_s))
            })
            .collect();
        let pm = phases
            .iter()
            .find(|(c, _)| c == "memtide")
            .map_or(f64::NAN, |x| x.1);
        let best_static = phases
            .iter()
            .filter(|(c, _)| c != "memtide")
            .map(|x| x.1)
            .fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            o,
            "- memtide beats every static granularity on the phase mix (`phases`): memtide {pm:.4} s vs best static {best_static:.4} s: {}.",
            verdict(pm < best_static)
        );
    }

    /// memtide's adaptive epoch against the best fixed one on `trace`, for each draw of the
    /// samples whose runs are all there: `draws` names each draw's (fixed-epoch section,
    /// adaptive section), `label` an engine variant's runs in them.
    pub(super) fn epoch_draws(
        &self,
        trace: &str,
        draws: &[(&str, &str)],
        label: fn(EngineVariant) -> String,
    ) -> Vec<EpochDraw> {
        draws
            .iter()
            .filter_map(|&(fixed, adaptive)| {
                let (best_ms, best_s) = EPOCHS_MS
                    .iter()
                    .filter_map(|&ms| {
                        let run = self.get(fixed, trace, &label(EngineVariant::FixedEpochMs(ms)));
                        run.map(|r| (ms, r.projected_time_s))
                    })
                    .min_by(|a, b| a.1.total_cmp(&b.1))?;
                let memtide = self.get(adaptive, trace, &label(EngineVariant::Adaptive))?;
                Some(EpochDraw {
                    best_ms,
                    best_s,
                    memtide_s: memtide.projected_time_s,
                })
            })
            .collect()
    }

    /// Doudali's checks: the dip at the reuse distance, and the adaptive epoch against the best
    /// fixed one, over every draw of the samples.
    pub(super) fn epoch_checks(&self, o: &mut String) {
        let mut epoch_lines = String::new();
        let mut all_within = true;
        let mut dip_seen = false;
        for w in EPOCH_TRACES {
            let sweep: Vec<(u64, f64, f64)> = EPOCHS_MS
                .iter()
                .filter_map(|&ms| {
                    self.get("epoch", w, &format!("epoch-{ms}ms"))
                        .map(|r| (ms, r.fast_hit_ratio, r.projected_time_s))
                })
                .collect();
            let draws = self.epoch_draws(w, &EPOCH_DRAWS, EngineVariant::label);
            let Some(first) = draws.first() else {
                continue;
            };
            let gap = mean_gap(&draws);
            all_within &= gap <= 0.05;
            if w == "strided-reuse" {
                dip_seen = self.reuse_dip(&sweep, &mut epoch_lines);
            }
            let each: Vec<String> = draws
                .iter()
                .map(|d| format!("{:+.1} %", d.gap() * 100.0))
                .collect();
            let _ = writeln!(
                epoch_lines,
                "  - `{w}`: best fixed epoch {} ms ({:.4} s); memtide {:.4} s ({:+.1} %); over {} draws of the samples {} (geometric mean {:+.1} %).",
                first.best_ms,
                first.best_s,
                first.memtide_s,
                first.gap() * 100.0,
                draws.len(),
                each.join(", "),
                gap * 100.0
            );
        }
        let _ = writeln!(
            o,
            "- Hit-ratio dip in the fixed-epoch sweep when the epoch is at or below the reuse distance: {}.\n- Adaptive epoch within 5 % of the best fixed epoch (projected time, geometric mean over the draws of the samples): {}.\n{epoch_lines}",
            verdict(dip_seen),
            verdict(all_within)
        );
    }

    /// `strided-reuse`'s fixed-epoch `sweep` (epoch ms, hit ratio, projected time): whether its
    /// hit ratio dips at an epoch at or below the reuse distance, with the lines that say so
    /// added to `lines`.
    fn reuse_dip(&self, sweep: &[(u64, f64, f64)], lines: &mut String) -> bool {
        let reuse_ms = self
            .main("strided-reuse", PolicyName::Memtide)
            .map_or(0.0, |r| r.simulated_clock_s * 1000.0 / 6.0);
        // A dip: an interior epoch whose hit ratio is below both neighbours' best.
        let dips: Vec<u64> = sweep
            .windows(3)
            .filter(|x| x[1].1 < x[0].1 && x[1].1 < x[2].1 || x[1].1 < x[0].1.min(x[2].1) - 0.005)
            .map(|x| x[1].0)
            .collect();
        let below: Vec<u64> = dips
            .iter()
            .copied()
            .filter(|&ms| (ms as f64) <= reuse_ms * 1.5)
            .collect();
        let short: Vec<f64> = sweep
            .iter()
            .filter(|x| (x.0 as f64) < reuse_ms)
            .map(|x| x.1)
            .collect();
        let best_hit = sweep.iter().map(|x| x.1).fold(0.0, f64::max);
        let short_max = short.iter().copied().fold(0.0, f64::max);
        let _ = writeln!(
            lines,
            "  - `strided-reuse`: epochs shorter than the reuse distance reach at most {short_max:.3} against {best_hit:.3} for the best epoch ({}), but the curve has {} interior local minimum (Doudali's dip at the reuse distance).",
            if short_max < best_hit {
                "lower"
            } else {
                "not lower"
            },
            if dips.is_empty() { "no" } else { "an" }
        );
        let _ = writeln!(
            lines,
            "  - `strided-reuse` (reuse distance {reuse_ms:.0} ms): hit ratio by epoch {}; local minima at {:?} ms.",
            sweep
                .iter()
                .map(|(ms, h, _)| format!("{ms} ms: {h:.3}"))
                .collect::<Vec<_>>()
                .join(", "),
            dips
        );
        !below.is_empty()
    }

    /// Sparse superpages, writes in the fast tier (Memos) and the BW-AWARE share.
    pub(super) fn other_checks(&self, o: &mut String) {
        self.sparse_superpage_check(o);
        if let Some(r) = self.main("rw-mix", PolicyName::Memtide) {
            let _ = writeln!(
                o,
                "- Writes served by the fast tier on the write-heavy mix (`rw-mix`): {:.1} % (goal ≥ 80 %): {}.",
                r.fast_write_ratio * 100.0,
                verdict(r.fast_write_ratio >= 0.8)
            );
        }
        let bw_best = |w: &str| -> Option<(f64, f64)> {
            BW_SHARES
                .iter()
                .filter_map(|&f| {
                    self.get("bandwidth", w, &format!("f={f:.1}"))
                        .map(|r| (f, r.projected_time_s))
                })
                .min_by(|a, b| a.1.total_cmp(&b.1))
        };
        let p = PresetName::BwAware.preset();
        let f_star = p.fast_gbps / (p.fast_gbps + p.slow_gbps);
        if let (Some(bw), Some(lat)) = (bw_best("bw-multistream"), bw_best("pointer-chase")) {
            let _ = writeln!(
                o,
                "- BW-AWARE: performance peaks at f = {:.1} on the bandwidth-bound workload (b_fast/Σb = {f_star:.2}): {}; the latency-bound one is best at f = {:.1} (no spreading): {}.",
                bw.0,
                verdict((bw.0 - f_star).abs() <= 0.1),
                lat.0,
                verdict(lat.0 >= 0.999)
            );
        }
        o.push('\n');
    }

    /// Rainbow's hot-subpage claim, pooled over the draws of `sparse-superpage`: memtide's
    /// bytes moved against whole-2 MiB migration's, at a hit ratio at or above its in each
    /// draw.
    fn sparse_superpage_check(&self, o: &mut String) {
        let runs: Vec<(&SimResult, &SimResult)> = sparse_draw_names()
            .iter()
            .filter_map(|w| {
                let memtide = self.get("granularity", w, "memtide")?;
                Some((memtide, self.get("granularity", w, "static-2m")?))
            })
            .collect();
        if runs.is_empty() {
            return;
        }
        let (memtide_runs, whole_runs): (Vec<&SimResult>, Vec<&SimResult>) =
            runs.iter().copied().unzip();
        let moved = |rs: &[&SimResult]| rs.iter().map(|r| r.migrated_bytes).sum::<u64>();
        let hits = |rs: &[&SimResult]| geomean(rs.iter().map(|r| r.fast_hit_ratio));
        let (memtide, whole) = (moved(&memtide_runs), moved(&whole_runs));
        let share = moved_share(memtide, whole);
        let as_hot = runs
            .iter()
            .filter(|(m, s)| m.fast_hit_ratio >= s.fast_hit_ratio)
            .count();
        let _ = writeln!(
            o,
            "- Hot-subpage migration on sparse superpages (`sparse-superpage`, `ryoo`, {} draws of the workload pooled): memtide moves {:.1} % of the bytes of whole-2 MiB migration ({} vs {} MiB) at hit ratio {:.3} vs {:.3} (geometric means; at or above in {as_hot} of the draws): {}.",
            runs.len(),
            share * 100.0,
            memtide >> 20,
            whole >> 20,
            hits(&memtide_runs),
            hits(&whole_runs),
            verdict(share <= SPARSE_SHARE_LIMIT && as_hot == runs.len())
        );
        let by_draw: Vec<String> = runs
            .iter()
            .map(|(m, s)| {
                format!(
                    "{:.1} % ({} vs {} MiB, hit ratio {:.3} vs {:.3})",
                    moved_share(m.migrated_bytes, s.migrated_bytes) * 100.0,
                    m.migrated_bytes >> 20,
                    s.migrated_bytes >> 20,
                    m.fast_hit_ratio,
                    s.fast_hit_ratio
                )
            })
            .collect();
        let _ = writeln!(o, "  - by draw: {}.", by_draw.join("; "));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{fake_run, render_section};
    use crate::{
        PolicyName,
        suite::{Results, draws::sparse_draw_names},
    };

    /// MiB moved and hit ratio of one run.
    type Run = (u64, f64);

    /// The hot-subpage check of runs on the `sparse-superpage` draws, memtide's and
    /// `static-2m`'s in each.
    fn check(draws: &[(Run, Run)]) -> String {
        let mut results = Results::new();
        for (name, &(memtide, whole)) in sparse_draw_names().iter().zip(draws) {
            for (policy, (mib, hit)) in [
                (PolicyName::Memtide, memtide),
                (PolicyName::Static2m, whole),
            ] {
                let mut r = fake_run(policy, name, 1.0, hit, 0);
                r.migrated_bytes = mib << 20;
                results.insert(("granularity", name.clone(), policy.name().to_owned()), r);
            }
        }
        render_section(&results, &[], |report, o| report.sparse_superpage_check(o))
    }

    /// Pooled over the draws: one draw above half of whole-2 MiB migration's bytes does not
    /// fail the check where the draws together are below it; a draw where memtide's hit ratio
    /// is below `static-2m`'s does; with no runs there is no line.
    #[test]
    fn the_hot_subpage_check_pools_the_draws() {
        let one_above = check(&[
            ((20, 0.75), (32, 0.55)),
            ((14, 0.76), (32, 0.58)),
            ((17, 0.77), (52, 0.57)),
            ((18, 0.76), (48, 0.57)),
        ]);
        assert!(
            one_above.contains("4 draws of the workload pooled"),
            "{one_above}"
        );
        assert!(
            one_above.contains("moves 42.1 % of the bytes"),
            "{one_above}"
        );
        assert!(one_above.contains("(69 vs 164 MiB)"), "{one_above}");
        assert!(
            one_above.contains("at or above in 4 of the draws): **holds**."),
            "{one_above}"
        );
        assert!(
            one_above.contains("  - by draw: 62.5 % (20 vs 32 MiB"),
            "{one_above}"
        );
        let colder = check(&[((10, 0.75), (32, 0.55)), ((10, 0.50), (32, 0.58))]);
        assert!(
            colder.contains("2 draws of the workload pooled"),
            "{colder}"
        );
        assert!(
            colder.contains("at or above in 1 of the draws): **does not hold**."),
            "{colder}"
        );
        let more = check(&[((40, 0.75), (32, 0.55))]);
        assert!(more.contains(": **does not hold**."), "{more}");
        assert_eq!(check(&[]), "");
    }
}
