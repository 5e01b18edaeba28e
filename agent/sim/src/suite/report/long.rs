//! Long steady states: the server-like real programs replayed several times, under the sampling
//! policies at the rest of the page's rate and at the production density, and the page-table
//! baselines; whether memtide's hit ratio holds at the sparser density, and whether every
//! baseline acts.

use std::fmt::Write as _;

use super::{Report, fill, geomean, table_header, verdict};
use crate::{
    PolicyName,
    run::SimResult,
    suite::{
        Choice, LONG_FIXED, LONG_HOUR_SAMPLING, LONG_PASSES, LONG_RATES, LONG_REFERENCES,
        LONG_SAMPLER, LONG_SAMPLING, PRODUCTION_SAMPLE_RATE, long::LONG_SECTIONS,
    },
};

/// The section's prose, with the tables and checks filled in.
const LONG: &str = include_str!("long.md");
/// The hit ratio memtide must keep at the production density, as a share of its dense one.
const HELD_HIT_RATIO: f64 = 0.9;

impl Report<'_> {
    pub(super) fn long_steady_states(&self, o: &mut String) {
        if self.long.is_empty() {
            return;
        }
        let sizes = LONG_SECTIONS.with_sizes(self.base.fast);
        let mut tables = String::new();
        for (section, fast) in &sizes {
            self.long_table(&mut tables, section, &fast.to_string());
        }
        let dense = LONG_RATES[0];
        // The dense rate's hit ratio is its 16 passes': it places the hot set within the first
        // pass and holds it, so an hour of passes would add nothing but replay time.
        let held = |p: PolicyName, span: Span| {
            let ratio = |section: &str| {
                let hit =
                    |rate, span| self.long_geomean(section, p, rate, span, |r| r.fast_hit_ratio);
                Some(hit(PRODUCTION_SAMPLE_RATE, span)? / hit(dense, Span::Passes)?)
            };
            sizes
                .iter()
                .map(|(section, _)| ratio(section))
                .collect::<Option<Vec<f64>>>()
        };
        let shown = |ratios: &Option<Vec<f64>>| {
            ratios.as_ref().map_or("-".to_owned(), |r| {
                let each: Vec<String> = r.iter().map(|x| format!("{x:.2}")).collect();
                format!("{} (fast {})", each.join(" and "), sizes_label(&sizes))
            })
        };
        let free = Yardstick {
            policy: PolicyName::HindsightSamples,
            rate: PRODUCTION_SAMPLE_RATE,
            span: Span::Hour,
        };
        let (reach, by_trace) = self.reach(&sizes, free);
        let fixed = Yardstick {
            policy: LONG_FIXED,
            rate: PRODUCTION_SAMPLE_RATE,
            span: Span::Passes,
        };
        let (fixed_reach, fixed_by_trace) = self.reach(&sizes, fixed);
        let memtide_hour = Yardstick {
            policy: PolicyName::Memtide,
            rate: PRODUCTION_SAMPLE_RATE,
            span: Span::Hour,
        };
        let (_, memtide_by_trace) = self.reach(&sizes, memtide_hour);
        let memtide = held(PolicyName::Memtide, Span::Hour);
        let memtide_ok = memtide
            .as_ref()
            .is_some_and(|r| r.iter().all(|&x| x >= HELD_HIT_RATIO));
        let idle = self.idle_baselines(&sizes);
        let (covered, hour) = sizes
            .first()
            .map(|(section, _)| {
                (
                    self.long_coverage(section, Span::Passes),
                    self.long_coverage(section, Span::Hour),
                )
            })
            .unwrap_or_default();
        o.push_str(&fill(
            LONG,
            &[
                ("traces", programs(&self.long)),
                ("passes", LONG_PASSES.to_string()),
                ("sampler", LONG_SAMPLER.name().to_owned()),
                ("production", PRODUCTION_SAMPLE_RATE.to_string()),
                ("clock", covered.clock),
                ("samples", covered.samples),
                ("hour_passes", hour.passes),
                ("hour_clock", hour.clock),
                ("hour_samples", hour.samples),
                ("tables", tables),
                ("memtide_ratio", shown(&memtide)),
                (
                    "memtide_passes_ratio",
                    shown(&held(PolicyName::Memtide, Span::Passes)),
                ),
                ("memtide_verdict", verdict(memtide_ok).to_owned()),
                ("memtide_traces", memtide_by_trace),
                (
                    "hindsight_ratio",
                    shown(&held(PolicyName::HindsightSamples, Span::Passes)),
                ),
                ("hindsight_hour_reach", shown(&reach)),
                (
                    "first_size",
                    sizes.first().map_or("-".to_owned(), |(_, f)| f.to_string()),
                ),
                ("hindsight_hour_traces", by_trace),
                ("fixed_reach", shown(&fixed_reach)),
                ("fixed_traces", fixed_by_trace),
                ("moves_verdict", verdict(idle.is_empty()).to_owned()),
                (
                    "idle",
                    if idle.is_empty() {
                        String::new()
                    } else {
                        format!(" (moved nothing: {})", idle.join("; "))
                    },
                ),
            ],
        ));
    }

    /// What a yardstick reaches against memtide at the dense rate: its hit ratio over
    /// memtide's (16 passes at one sample per 4 records), the geometric means at each size, and
    /// by trace at the first size (`kv.mt 0.95, …`; `-` when none has both runs).
    fn reach(
        &self,
        sizes: &[(&str, crate::run::FastSize)],
        yardstick: Yardstick,
    ) -> (Option<Vec<f64>>, String) {
        let dense = LONG_RATES[0];
        let Yardstick { policy, rate, span } = yardstick;
        let reach = sizes
            .iter()
            .map(|(section, _)| {
                let hit =
                    |p, rate, span| self.long_geomean(section, p, rate, span, |r| r.fast_hit_ratio);
                Some(hit(policy, rate, span)? / hit(PolicyName::Memtide, dense, Span::Passes)?)
            })
            .collect::<Option<Vec<f64>>>();
        let Some((section, _)) = sizes.first() else {
            return (reach, "-".to_owned());
        };
        let by_trace = self
            .long_traces(span)
            .iter()
            .filter_map(|trace| {
                let name = program(trace);
                let passes = self.long.iter().find(|t| program(t) == name)?;
                let hit = |trace, p, rate| {
                    self.long_run(section, trace, p, rate)
                        .map(|r| r.fast_hit_ratio)
                };
                let ratio = hit(trace, policy, rate)? / hit(passes, PolicyName::Memtide, dense)?;
                Some(format!("{name} {ratio:.2}"))
            })
            .collect::<Vec<_>>();
        let by_trace = if by_trace.is_empty() {
            "-".to_owned()
        } else {
            by_trace.join(", ")
        };
        (reach, by_trace)
    }

    /// What the long traces cover over `span`, from memtide's runs at the production density in
    /// `section`: the passes, the programs' clocks, the samples each got, and what an hour would
    /// give at that rate.
    fn long_coverage(&self, section: &str, span: Span) -> LongCoverage {
        let traces = self.long_traces(span);
        let runs: Vec<&SimResult> = traces
            .iter()
            .filter_map(|t| self.long_run(section, t, PolicyName::Memtide, PRODUCTION_SAMPLE_RATE))
            .collect();
        let span = |values: Vec<f64>, digits: usize| {
            let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if values.is_empty() {
                "-".to_owned()
            } else if format!("{lo:.digits$}") == format!("{hi:.digits$}") {
                format!("{lo:.digits$}")
            } else {
                format!("{lo:.digits$} to {hi:.digits$}")
            }
        };
        #[expect(clippy::cast_precision_loss, reason = "sample counts for a report")]
        let samples = |r: &SimResult| r.samples as f64;
        let passes = traces
            .iter()
            .filter_map(|t| t.rsplit_once('×')?.1.parse::<f64>().ok())
            .collect();
        LongCoverage {
            passes: span(passes, 0),
            clock: span(runs.iter().map(|r| r.simulated_clock_s).collect(), 1),
            samples: span(runs.iter().map(|r| samples(r)).collect(), 0),
        }
    }

    /// The long traces replayed over `span`.
    fn long_traces(&self, span: Span) -> &[String] {
        match span {
            Span::Passes => &self.long,
            Span::Hour => &self.hour,
        }
    }

    /// `p`'s run of long trace `trace` in `section` at `rate` (a reference's at any rate).
    fn long_run(&self, section: &str, trace: &str, p: PolicyName, rate: u32) -> Option<&SimResult> {
        if LONG_REFERENCES.contains(&p) || p == LONG_FIXED {
            self.get(section, trace, p.name())
        } else {
            self.get(
                section,
                trace,
                &Choice::Density(p, LONG_SAMPLER, rate, 0).label(),
            )
        }
    }

    /// The geometric mean of `figure` over the long traces, when every one has a run.
    fn long_geomean(
        &self,
        section: &str,
        p: PolicyName,
        rate: u32,
        span: Span,
        figure: impl Fn(&SimResult) -> f64,
    ) -> Option<f64> {
        let traces = self.long_traces(span);
        let values: Vec<f64> = traces
            .iter()
            .filter_map(|t| self.long_run(section, t, p, rate).map(&figure))
            .collect();
        (!values.is_empty() && values.len() == traces.len()).then(|| geomean(values))
    }

    /// The least any long trace moved under `p` at `rate`, MiB.
    fn long_least_moved(&self, section: &str, p: PolicyName, rate: u32) -> Option<u64> {
        self.long
            .iter()
            .map(|t| {
                self.long_run(section, t, p, rate)
                    .map(|r| r.migrated_bytes >> 20)
            })
            .collect::<Option<Vec<u64>>>()?
            .into_iter()
            .min()
    }

    fn long_table(&self, o: &mut String, section: &str, fast: &str) {
        let _ = writeln!(o, "### Fast tier {fast} of each footprint\n");
        let (dense, sparse) = (LONG_RATES[0], PRODUCTION_SAMPLE_RATE);
        let hour = format!("at {sparse}, an hour");
        table_header(
            o,
            [
                "policy".to_owned(),
                format!("hit ratio at {dense}"),
                format!("hit ratio at {sparse}"),
                format!("hit ratio {hour}"),
                format!("relative time at {dense}"),
                format!("relative time at {sparse}"),
                format!("relative time {hour}"),
                format!("MiB moved at {sparse}"),
            ],
        );
        let text = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.3}"));
        for p in LONG_SAMPLING.iter().chain(&LONG_REFERENCES) {
            let figure = |rate, span, f: fn(&SimResult) -> f64| {
                text(self.long_geomean(section, *p, rate, span, f))
            };
            let hit = |rate, span| figure(rate, span, |r| r.fast_hit_ratio);
            let time = |rate, span| figure(rate, span, |r| r.relative_time);
            let in_hour = |shown: String| {
                if LONG_HOUR_SAMPLING.contains(p) {
                    shown
                } else {
                    "-".to_owned()
                }
            };
            let moved = self
                .long_least_moved(section, *p, sparse)
                .map_or("-".to_owned(), |m| m.to_string());
            let _ = writeln!(
                o,
                "| {} | {} | {} | {} | {} | {} | {} | {moved} |",
                p.name(),
                hit(dense, Span::Passes),
                hit(sparse, Span::Passes),
                in_hour(hit(sparse, Span::Hour)),
                time(dense, Span::Passes),
                time(sparse, Span::Passes),
                in_hour(time(sparse, Span::Hour)),
            );
        }
        o.push('\n');
    }

    /// The baselines that moved nothing on some long trace, with where.
    fn idle_baselines(&self, sizes: &[(&str, crate::run::FastSize)]) -> Vec<String> {
        let mut idle = Vec::new();
        let baselines = LONG_SAMPLING.iter().chain(&LONG_REFERENCES).filter(|&&p| {
            !matches!(
                p,
                PolicyName::Memtide | PolicyName::HindsightSamples | PolicyName::NoMigration
            )
        });
        for (section, fast) in sizes {
            for &p in baselines.clone() {
                for t in &self.long {
                    let run = self.long_run(section, t, p, PRODUCTION_SAMPLE_RATE);
                    if run.is_some_and(|r| r.migrated_bytes == 0) {
                        idle.push(format!("{} on {t} at fast {fast}", p.name()));
                    }
                }
            }
        }
        idle
    }
}

/// A policy whose hit ratio the checks hold against memtide's at the dense rate, and the runs
/// of it they read.
#[derive(Clone, Copy, Debug)]
struct Yardstick {
    policy: PolicyName,
    /// The sample rate of its runs (any, for a policy that samples nothing).
    rate: u32,
    span: Span,
}

/// Which replays of the long traces a figure reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    /// [`LONG_PASSES`] passes.
    Passes,
    /// [`LONG_HOUR`](crate::suite::LONG_HOUR) of the programs' clocks.
    Hour,
}

/// What the long section's traces cover, as the report prints it.
#[derive(Default)]
struct LongCoverage {
    /// Passes per trace.
    passes: String,
    /// The programs' clocks, s.
    clock: String,
    /// Samples per trace at the production density.
    samples: String,
}

/// "kv.mt, sqlite.mt": the programs the long traces repeat.
fn programs(long: &[String]) -> String {
    let names: Vec<&str> = long.iter().map(|t| program(t)).collect();
    names.join(", ")
}

/// "kv.mt" of "kv.mt×16": the program a repeated trace repeats (`Repeated`'s name).
fn program(trace: &str) -> &str {
    trace.rsplit_once('×').map_or(trace, |(program, _)| program)
}

/// "10 % and 25 %": the sizes in order.
fn sizes_label(sizes: &[(&str, crate::run::FastSize)]) -> String {
    let names: Vec<String> = sizes.iter().map(|(_, f)| f.to_string()).collect();
    names.join(" and ")
}

#[cfg(test)]
mod tests {
    use super::{
        super::{fake_run, render_section_with_long},
        Choice, LONG_FIXED, LONG_HOUR_SAMPLING, LONG_RATES, LONG_REFERENCES, LONG_SAMPLER,
        LONG_SAMPLING, PRODUCTION_SAMPLE_RATE, PolicyName,
    };
    use crate::suite::Results;

    /// memtide keeps 0.8 of its hit ratio at the production density over 16 passes and 0.9
    /// over an hour (the check reads the hour), and DAMON moves nothing on one trace: the
    /// checks say so and name it; the policies that do not run an hour show `-` there.
    #[test]
    fn the_checks_read_the_ratio_of_hit_ratios_and_name_idle_baselines() {
        let mut results = Results::new();
        let traces = ["kv.mt×16", "sqlite.mt×16"];
        let hours = ["kv.mt×2206", "sqlite.mt×913"];
        for section in ["long-small", "long"] {
            for t in traces {
                for (i, rate) in (0..).zip(LONG_RATES) {
                    for p in LONG_SAMPLING {
                        let hit = if i == 0 { 0.5 } else { 0.4 };
                        let mut run = fake_run(p, t, 1.2, hit, 0);
                        run.migrated_bytes = 8 << 20;
                        // 400 samples in 20 s (kv) or 40 s (sqlite): 72,000 or 36,000 an hour.
                        run.samples = 400;
                        run.simulated_clock_s = if t.starts_with("kv") { 20.0 } else { 40.0 };
                        let label = Choice::Density(p, LONG_SAMPLER, rate, 0).label();
                        results.insert((section, t.to_owned(), label), run);
                    }
                }
                let fixed = fake_run(LONG_FIXED, t, 1.0, 0.3, 0);
                results.insert((section, t.to_owned(), LONG_FIXED.name().to_owned()), fixed);
                for p in LONG_REFERENCES {
                    let mut run = fake_run(p, t, 1.5, 0.2, 0);
                    let idle = p == PolicyName::Damon && t.starts_with("kv") && section == "long";
                    run.migrated_bytes = if idle { 0 } else { 4 << 20 };
                    results.insert((section, t.to_owned(), p.name().to_owned()), run);
                }
            }
            for t in hours {
                for p in LONG_HOUR_SAMPLING {
                    let mut run = fake_run(p, t, 1.1, 0.45, 0);
                    run.samples = 50_000;
                    run.simulated_clock_s = 3600.0;
                    let label = Choice::Density(p, LONG_SAMPLER, PRODUCTION_SAMPLE_RATE, 0).label();
                    results.insert((section, t.to_owned(), label), run);
                }
            }
        }
        let o = render_section_with_long(&results, &[], &traces, &hours, |report, o| {
            report.long_steady_states(o);
        });
        assert!(
            o.contains("programs (kv.mt, sqlite.mt) are replayed")
                && o.contains("20.0 to 40.0 s of the\n  programs' clocks, 400 samples per trace"),
            "{o}"
        );
        assert!(
            o.contains("an hour: 913 to 2206 passes, 3600.0 s of the programs' clocks, 50000"),
            "{o}"
        );
        assert!(
            o.contains("| memtide | 0.500 | 0.400 | 0.450 | 1.200 | 1.200 | 1.100 | 8 |"),
            "{o}"
        );
        assert!(
            o.contains("| damon | 0.200 | 0.200 | - | 1.500 | 1.500 | - | 0 |"),
            "{o}"
        );
        assert!(
            o.contains(
                "one sample per 4 records: 0.90 and 0.90 (fast 10 % and 25 %) (**holds**; by \
                 trace, fast 10 %: kv.mt 0.90, sqlite.mt 0.90); over 16 passes 0.80 and 0.80 \
                 (fast 10 % and 25 %)"
            ),
            "{o}"
        );
        assert!(o.contains(
            "where it samples): **does not hold** (moved nothing: damon on kv.mt×16 at fast 25 %)"
        ), "{o}");
        // Free hindsight's hour (0.45) over memtide's dense 16 passes (0.5).
        assert!(
            o.contains(
                "reaches 0.90 and 0.90 (fast 10 % and 25 %) of memtide's hit ratio at one \
                 sample per 4 records (by trace, fast 10 %: kv.mt 0.90, sqlite.mt 0.90)"
            ),
            "{o}"
        );
        // The best fixed placement's 16 passes (0.3) over memtide's dense ones (0.5).
        assert!(
            o.contains(
                "placed for nothing) reaches 0.60 and 0.60 (fast 10 % and 25 %) of it (by \
                 trace, fast 10 %: kv.mt 0.60, sqlite.mt 0.60)"
            ),
            "{o}"
        );
    }
}
