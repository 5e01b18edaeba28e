//! The density sweep: the real programs under every sampling policy at sample densities from
//! the rest of the page's one in 4 records to four times sparser than production, with the
//! page-table baselines beside them, and the checks at the production density.

use std::{fmt::Write as _, path::Path};

use super::{Report, fill, geomean, table_header, verdict};
use crate::{
    PolicyName,
    run::SimResult,
    sampler::SamplerName,
    suite::{
        Choice, DENSITY_DRAWS, DENSITY_POLICIES, DENSITY_RATES, DENSITY_REFERENCES,
        DENSITY_SAMPLERS, DRAWN_FROM_RATE, PRODUCTION_SAMPLE_RATE, REAL_SECTIONS,
        density::DENSITY_SECTIONS, density_draws,
    },
    svg::{self, Series},
};

/// The section's prose, with the tables, plots and checks filled in.
const DENSITY: &str = include_str!("density.md");
/// What density the headline is measured at, and the production density's figure.
const HEADLINE_DENSITY: &str = include_str!("headline-density.md");
/// What memtide is held against in every cell of the sweep.
const EVERY_DENSITY_RIVALS: [PolicyName; 3] =
    [PolicyName::Hemem, PolicyName::Memtis, PolicyName::Static2m];

/// One cell of the sweep: a fast-tier size and a sampler, and where its runs are.
#[derive(Clone, Copy)]
pub(super) struct Cell<'a> {
    pub(super) section: &'static str,
    /// The real-program section at the same size (the references' runs).
    pub(super) real_section: &'static str,
    pub(super) fast: &'a str,
    pub(super) sampler: SamplerName,
}

impl Report<'_> {
    pub(super) fn density(&self, o: &mut String, dir: &Path) -> anyhow::Result<()> {
        if self.real.is_empty() {
            return Ok(());
        }
        let sizes: Vec<(&'static str, &'static str, String)> = DENSITY_SECTIONS
            .with_sizes(self.base.fast)
            .into_iter()
            .zip(REAL_SECTIONS.with_sizes(self.base.fast))
            .map(|((section, fast), (real_section, _))| (section, real_section, fast.to_string()))
            .collect();
        let cells: Vec<Cell<'_>> = sizes
            .iter()
            .flat_map(|(section, real_section, fast)| {
                DENSITY_SAMPLERS.map(|sampler| Cell {
                    section,
                    real_section,
                    fast,
                    sampler,
                })
            })
            .collect();
        let (mut tables, mut plots) = (String::new(), String::new());
        for cell in &cells {
            self.density_table(&mut tables, cell);
            plots.push_str(&self.density_plot(dir, cell)?);
        }
        let rates: Vec<String> = DENSITY_RATES.iter().map(u32::to_string).collect();
        let (every_ok, misses) = self.every_density_misses(&cells);
        o.push_str(&fill(
            DENSITY,
            &[
                ("production", PRODUCTION_SAMPLE_RATE.to_string()),
                ("rates", rates.join(", ")),
                ("traces", self.real.len().to_string()),
                ("drawn_from", DRAWN_FROM_RATE.to_string()),
                ("draws", DENSITY_DRAWS.to_string()),
                ("draw_spread", self.density_draw_spread(&cells)),
                ("tables", tables),
                ("plots", plots),
                ("production_lines", self.production_lines(&cells)),
                ("every_verdict", verdict(every_ok).to_owned()),
                ("every_misses", misses),
            ],
        ));
        Ok(())
    }

    /// The headline's density, and memtide against the best other policy at the production
    /// density in the main fast-tier size under `pebs`.
    pub(super) fn headline_density(&self, o: &mut String) {
        let (section, fast) = (DENSITY_SECTIONS.main, self.base.fast.to_string());
        let cell = Cell {
            section,
            real_section: REAL_SECTIONS.main,
            fast: &fast,
            sampler: SamplerName::Pebs,
        };
        let rate = PRODUCTION_SAMPLE_RATE;
        let memtide = self.density_geomean(&cell, PolicyName::Memtide, rate);
        let best = DENSITY_POLICIES
            .iter()
            .chain(&DENSITY_REFERENCES)
            .filter(|&&p| p != PolicyName::Memtide && p != PolicyName::HindsightSamples)
            .filter_map(|&p| self.density_geomean(&cell, p, rate).map(|g| (p, g)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        let (Some(memtide), Some((best_p, best_g))) = (memtide, best) else {
            return;
        };
        o.push_str(&fill(
            HEADLINE_DENSITY,
            &[
                ("rate", self.base.sample_rate.to_string()),
                ("sampler", self.base.sampler.name().to_owned()),
                ("denser", (rate / self.base.sample_rate.max(1)).to_string()),
                ("production", rate.to_string()),
                ("fast", fast.clone()),
                ("memtide", format!("{memtide:.3}")),
                ("best", best_p.name().to_owned()),
                ("best_time", format!("{best_g:.3}")),
                (
                    "delta",
                    format!("{:+.1} %", (memtide / best_g - 1.0) * 100.0),
                ),
            ],
        ));
    }

    /// `p`'s run of `trace` in `cell` at `rate` under one draw of the samples (a reference's
    /// from the real-program section, the same in every draw).
    pub(super) fn density_run(
        &self,
        cell: &Cell<'_>,
        trace: &str,
        (p, rate, draw): (PolicyName, u32, u64),
    ) -> Option<&SimResult> {
        if DENSITY_REFERENCES.contains(&p) {
            self.get(cell.real_section, trace, p.name())
        } else {
            self.get(
                cell.section,
                trace,
                &Choice::Density(p, cell.sampler, rate, draw).label(),
            )
        }
    }

    /// `p`'s relative time on `trace` in `cell` at `rate`: the geometric mean over the draws
    /// of the samples, when every draw has a run.
    pub(super) fn density_time(
        &self,
        cell: &Cell<'_>,
        trace: &str,
        p: PolicyName,
        rate: u32,
    ) -> Option<f64> {
        let times: Option<Vec<f64>> = (0..density_draws(rate))
            .map(|draw| {
                self.density_run(cell, trace, (p, rate, draw))
                    .map(|r| r.relative_time)
            })
            .collect();
        times.map(geomean)
    }

    /// `p`'s geometric mean of relative time over the real traces, when every trace has a run.
    fn density_geomean(&self, cell: &Cell<'_>, p: PolicyName, rate: u32) -> Option<f64> {
        let times: Vec<f64> = self
            .real
            .iter()
            .filter_map(|t| self.density_time(cell, t, p, rate))
            .collect();
        (times.len() == self.real.len()).then(|| geomean(times))
    }

    /// The most memtide's geometric mean over the real traces differs between two draws of
    /// the samples in one cell at one drawn density, and where.
    fn density_draw_spread(&self, cells: &[Cell<'_>]) -> String {
        let mut widest: Option<(f64, String)> = None;
        for cell in cells {
            for rate in DENSITY_RATES.into_iter().filter(|&r| density_draws(r) > 1) {
                let per_draw: Option<Vec<f64>> = (0..density_draws(rate))
                    .map(|draw| {
                        let times: Option<Vec<f64>> = self
                            .real
                            .iter()
                            .map(|t| {
                                self.density_run(cell, t, (PolicyName::Memtide, rate, draw))
                                    .map(|r| r.relative_time)
                            })
                            .collect();
                        times.map(geomean)
                    })
                    .collect();
                let Some(per_draw) = per_draw else { continue };
                let lo = per_draw.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = per_draw.iter().copied().fold(0.0, f64::max);
                let spread = (hi / lo - 1.0) * 100.0;
                if widest.as_ref().is_none_or(|(w, _)| spread > *w) {
                    let at = format!(
                        "fast {}, `{}`, 1 in {rate}: {lo:.3} to {hi:.3}",
                        cell.fast,
                        cell.sampler.name()
                    );
                    widest = Some((spread, at));
                }
            }
        }
        widest.map_or_else(
            || "no cell ran more than one draw".to_owned(),
            |(spread, at)| format!("up to {spread:.1} % ({at})"),
        )
    }

    fn density_table(&self, o: &mut String, cell: &Cell<'_>) {
        let _ = writeln!(
            o,
            "### Fast tier {} of each footprint, `{}`\n",
            cell.fast,
            cell.sampler.name()
        );
        let policies = DENSITY_POLICIES.iter().chain(&DENSITY_REFERENCES);
        table_header(
            o,
            ["records per sample", "samples"]
                .into_iter()
                .chain(policies.clone().map(|p| p.name())),
        );
        for rate in DENSITY_RATES {
            let mut samples: Vec<u64> = self
                .real
                .iter()
                .filter_map(|t| self.density_run(cell, t, (PolicyName::Memtide, rate, 0)))
                .map(|r| r.samples)
                .collect();
            samples.sort_unstable();
            let median = samples.get(samples.len() / 2).copied().unwrap_or(0);
            let production = if rate == PRODUCTION_SAMPLE_RATE {
                " (production)"
            } else {
                ""
            };
            let _ = write!(o, "| {rate}{production} | {median} |");
            for &p in policies.clone() {
                let cell_text = self
                    .density_geomean(cell, p, rate)
                    .map_or("-".to_owned(), |g| format!("{g:.3}"));
                let _ = write!(o, " {cell_text} |");
            }
            o.push('\n');
        }
        o.push('\n');
    }

    /// The cell's plot: relative time against records per sample, on a log axis.
    fn density_plot(&self, dir: &Path, cell: &Cell<'_>) -> anyhow::Result<String> {
        let series: Vec<Series> = DENSITY_POLICIES
            .iter()
            .chain(&DENSITY_REFERENCES)
            .filter(|p| !matches!(p, PolicyName::Static4k | PolicyName::Static64k))
            .map(|&p| Series {
                name: p.name().to_owned(),
                points: DENSITY_RATES
                    .iter()
                    .filter_map(|&rate| {
                        self.density_geomean(cell, p, rate)
                            .map(|g| (f64::from(rate), g))
                    })
                    .collect(),
            })
            .collect();
        let file = format!("density-{}-{}.svg", cell.section, cell.sampler.name());
        std::fs::write(
            dir.join(&file),
            svg::line_chart_log_x(
                &format!(
                    "Relative time vs sample density: fast {}, {}",
                    cell.fast,
                    cell.sampler.name()
                ),
                "records per sample (log scale)",
                "relative time (geomean)",
                &series,
            ),
        )?;
        Ok(format!(
            "![relative time vs density, fast {}, {}](evaluation/{file})\n\n",
            cell.fast,
            cell.sampler.name()
        ))
    }

    /// Per cell at the production density: memtide, the best of the others, and the verdict.
    fn production_lines(&self, cells: &[Cell<'_>]) -> String {
        let rate = PRODUCTION_SAMPLE_RATE;
        let rivals = DENSITY_POLICIES
            .iter()
            .chain(&DENSITY_REFERENCES)
            .filter(|&&p| p != PolicyName::Memtide && p != PolicyName::HindsightSamples);
        let mut all_ok = true;
        let mut lines = String::new();
        for cell in cells {
            let Some(memtide) = self.density_geomean(cell, PolicyName::Memtide, rate) else {
                continue;
            };
            let best = rivals
                .clone()
                .filter_map(|&p| self.density_geomean(cell, p, rate).map(|g| (p, g)))
                .min_by(|a, b| a.1.total_cmp(&b.1));
            let Some((best_p, best_g)) = best else {
                continue;
            };
            all_ok &= memtide <= best_g;
            let _ = write!(
                lines,
                "\n  - fast {}, `{}`: memtide {memtide:.3}, best other {} {best_g:.3} ({:+.1} %)",
                cell.fast,
                cell.sampler.name(),
                best_p.name(),
                (memtide / best_g - 1.0) * 100.0
            );
        }
        format!("{}{lines}", verdict(all_ok))
    }

    /// Whether memtide is at or below each of [`EVERY_DENSITY_RIVALS`] in every cell at every
    /// density, and the cells where it is not.
    fn every_density_misses(&self, cells: &[Cell<'_>]) -> (bool, String) {
        let mut misses = Vec::new();
        for cell in cells {
            for rate in DENSITY_RATES {
                let Some(memtide) = self.density_geomean(cell, PolicyName::Memtide, rate) else {
                    continue;
                };
                for p in EVERY_DENSITY_RIVALS {
                    if let Some(g) = self.density_geomean(cell, p, rate)
                        && memtide > g
                    {
                        misses.push(format!(
                            "\n  - fast {}, `{}`, 1 in {rate}: {} {g:.3}, memtide {memtide:.3} ({:+.1} %)",
                            cell.fast,
                            cell.sampler.name(),
                            p.name(),
                            (memtide / g - 1.0) * 100.0
                        ));
                    }
                }
            }
        }
        let text = if misses.is_empty() {
            String::new()
        } else {
            format!(", behind in {} places:{}", misses.len(), misses.concat())
        };
        (misses.is_empty(), text)
    }
}

#[cfg(test)]
mod tests {
    use super::{
        super::{fake_run, render_section},
        Choice, DENSITY_POLICIES, DENSITY_RATES, DENSITY_REFERENCES, DENSITY_SAMPLERS,
        PRODUCTION_SAMPLE_RATE, PolicyName, density_draws,
    };
    use crate::suite::Results;

    /// A sweep where memtide leads everywhere but at the production density of the small fast
    /// tier under `ibs`, where HeMem is ahead: the table shows every cell's own run, and the
    /// checks name exactly that place.
    #[test]
    fn the_sweep_reads_each_cell_and_the_checks_name_where_memtide_is_behind() {
        let mut results = Results::new();
        let trace = "a.mt";
        for (section, real_section) in [("density-small", "real-small"), ("density", "main")] {
            for sampler in DENSITY_SAMPLERS {
                for (i, rate) in (0..).zip(DENSITY_RATES) {
                    for (j, p) in (0..).zip(DENSITY_POLICIES) {
                        for draw in 0..density_draws(rate) {
                            let mut time = 1.2 + 0.01 * f64::from(i) + 0.001 * f64::from(j);
                            let behind = section == "density-small"
                                && sampler.name() == "ibs"
                                && rate == PRODUCTION_SAMPLE_RATE;
                            if behind && p == PolicyName::Memtide {
                                time = 1.5;
                            }
                            // Draws that differ, around the same mean: the table shows their
                            // geometric mean, the spread line how far apart they were.
                            let spread = section == "density"
                                && sampler.name() == "pebs"
                                && rate == 32768
                                && p == PolicyName::Memtide;
                            if spread {
                                time *= [1.0, 1.02, 0.98, 1.0][usize::try_from(draw).unwrap()];
                            }
                            let mut run = fake_run(p, trace, time, 0.5, 1);
                            run.samples = 1000 / u64::from(rate);
                            let label = Choice::Density(p, sampler, rate, draw).label();
                            results.insert((section, trace.to_owned(), label), run);
                        }
                    }
                }
            }
            for p in DENSITY_REFERENCES {
                let run = fake_run(p, trace, 1.9, 0.1, 0);
                results.insert((real_section, trace.to_owned(), p.name().to_owned()), run);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let section = render_section(&results, &[trace], |r, o| r.density(o, dir.path()).unwrap());
        let small_pebs = section
            .split("### Fast tier 10 % of each footprint, `pebs`")
            .nth(1)
            .unwrap();
        let row = small_pebs
            .lines()
            .find(|l| l.starts_with("| 8192"))
            .unwrap();
        assert_eq!(
            row,
            "| 8192 (production) | 0 | 1.230 | 1.231 | 1.232 | 1.233 | 1.234 | 1.235 | 1.236 | 1.900 | 1.900 | 1.900 |"
        );
        assert!(section.contains(
            "every `static-*`: **does not hold**\n  - fast 10 %, `pebs`: memtide 1.230, best other static-4k 1.231 (-0.1 %)"
        ), "{section}");
        assert!(
            section.contains(
                "  - fast 10 %, `ibs`: memtide 1.500, best other static-4k 1.231 (+21.9 %)"
            ),
            "{section}"
        );
        assert!(section.contains(
            "in every cell: **does not hold**, behind in 3 places:\n  - fast 10 %, `ibs`, 1 in 8192: hemem 1.234, memtide 1.500 (+21.6 %)"
        ), "{section}");
        assert!(
            section.contains("by up to 4.1 % (fast 25 %, `pebs`, 1 in 32768: 1.215 to 1.265)"),
            "{section}"
        );
        let row = section
            .split("### Fast tier 25 % of each footprint, `pebs`")
            .nth(1)
            .and_then(|t| t.lines().find(|l| l.starts_with("| 32768")))
            .unwrap();
        assert!(row.starts_with("| 32768 | 0 | 1.240 |"), "{row}");
        let headline = render_section(&results, &[trace], |r, o| r.headline_density(o));
        assert!(
            headline.contains("2048 times denser than the **production density**"),
            "{headline}"
        );
        assert!(
            headline.contains(
                "fast 25 %, `pebs`: memtide 1.230, the best other policy static-4k 1.231\n(-0.1 %)"
            ),
            "{headline}"
        );
        for file in ["density-density-small-pebs.svg", "density-density-ibs.svg"] {
            let svg = std::fs::read_to_string(dir.path().join(file)).unwrap();
            assert!(
                svg.contains(">memtide</text>") && svg.contains(">10000</text>"),
                "{svg}"
            );
        }
    }
}
