//! The tables of every run, and the plots.

use std::{fmt::Write as _, path::Path};

use super::Report;
use crate::{
    PolicyName,
    run::SimResult,
    suite::{BW_SHARES, EPOCH_TRACES, EPOCHS_MS, GRANULARITY_TRACES},
    svg::{self, Series},
};

/// The prose and header of the sampling-sensitivity table.
const SAMPLING: &str = include_str!("sampling.md");
/// What bounds the longest epoch, below the epoch sweep.
const EPOCH_BOUND: &str = include_str!("epoch-bound.md");

impl Report<'_> {
    /// The main matrix: every trace under every policy.
    pub(super) fn main_matrix(&self, o: &mut String) {
        let cols = PolicyName::ALL;
        let header = |o: &mut String, first: &str| {
            super::table_header(
                o,
                std::iter::once(first).chain(cols.iter().map(|p| p.name())),
            );
        };
        type Cell = fn(&SimResult) -> String;
        let tables: [(&str, Cell); 4] = [
            ("Fast-tier hit ratio", |r| {
                format!("{:.3}", r.fast_hit_ratio)
            }),
            ("Relative time (projected / all-fast)", |r| {
                format!("{:.3}", r.relative_time)
            }),
            ("Migrated MiB (4k / 64k / 2m)", |r| {
                let g = &r.migrated_bytes_by_granularity;
                format!("{} / {} / {}", g.k4 >> 20, g.k64 >> 20, g.m2 >> 20)
            }),
            ("Ping-pong pages; huge pages kept / mapped", |r| {
                format!(
                    "{}; {}/{}",
                    r.pingpong_pages, r.huge_pages_kept, r.huge_pages_total
                )
            }),
        ];
        o.push_str("## Main matrix (`pmem` preset)\n\n");
        o.push_str("Traces: footprint (THP-backed, MiB) and records.\n\n| trace | footprint MiB | records | kind |\n|---|---|---|---|\n");
        for t in &self.traces {
            if let Some(f) = self.footprints.get(t) {
                let kind = if self.real.contains(t) {
                    "real"
                } else {
                    "synthetic"
                };
                let _ = writeln!(o, "| {t} | {} | {} | {kind} |", f.bytes >> 20, f.records);
            }
        }
        o.push('\n');
        for (title, cell) in tables {
            let _ = writeln!(o, "### {title}\n");
            header(o, "trace");
            for t in &self.traces {
                let _ = write!(o, "| {t} |");
                for p in cols {
                    let _ = write!(o, " {} |", self.main(t, p).map_or_else(|| "–".into(), cell));
                }
                o.push('\n');
            }
            o.push('\n');
        }
    }

    /// Ryoo's static baselines, and the sampling sensitivity of the granularity choice.
    pub(super) fn granularity_tables(&self, o: &mut String) {
        o.push_str("## Granularity (`ryoo` preset, Ryoo's static baselines)\n\n| trace | policy | hit ratio | relative time | migrations (4k / 64k / 2m) | shootdowns | huge kept |\n|---|---|---|---|---|---|---|\n");
        for w in GRANULARITY_TRACES {
            for c in ["static-4k", "static-64k", "static-2m", "memtide"] {
                if let Some(r) = self.get("granularity", w, c) {
                    let g = &r.migrations_by_granularity;
                    let _ = writeln!(
                        o,
                        "| {w} | {c} | {:.3} | {:.3} | {} / {} / {} | {} | {}/{} |",
                        r.fast_hit_ratio,
                        r.relative_time,
                        g.k4,
                        g.k64,
                        g.m2,
                        r.tlb_shootdowns,
                        r.huge_pages_kept,
                        r.huge_pages_total
                    );
                }
            }
        }
        o.push('\n');
        o.push_str(&super::fill(
            SAMPLING,
            &[("sample_rate", self.base.sample_rate.to_string())],
        ));
        for w in ["stream", "phases", "clustered-64k", "gups-hotset"] {
            for c in ["memtide", "static-2m"] {
                for (sec, rate) in [("granularity", self.base.sample_rate), ("sampling", 1)] {
                    if let Some(r) = self.get(sec, w, c) {
                        let g = &r.migrations_by_granularity;
                        let _ = writeln!(
                            o,
                            "| {w} | {c} | 1 in {rate} | {:.3} | {:.3} | {} / {} / {} |",
                            r.fast_hit_ratio, r.relative_time, g.k4, g.k64, g.m2
                        );
                    }
                }
            }
        }
        o.push('\n');
    }

    /// The fixed-epoch sweep and its plot.
    pub(super) fn epoch_sweep(&self, o: &mut String, dir: &Path) -> anyhow::Result<()> {
        o.push_str("## Migration epoch (`pmem` preset)\n\n| trace | epoch | hit ratio | relative time | migrated MiB |\n|---|---|---|---|---|\n");
        let mut epoch_series = Vec::new();
        for w in EPOCH_TRACES {
            let mut pts = Vec::new();
            for ms in EPOCHS_MS {
                if let Some(r) = self.get("epoch", w, &format!("epoch-{ms}ms")) {
                    let _ = writeln!(
                        o,
                        "| {w} | {ms} ms | {:.3} | {:.3} | {} |",
                        r.fast_hit_ratio,
                        r.relative_time,
                        r.migrated_bytes >> 20
                    );
                    if let Some(i) = EPOCHS_MS.iter().position(|&e| e == ms) {
                        pts.push((i as f64, r.fast_hit_ratio));
                    }
                }
            }
            if let Some(r) = self.main(w, PolicyName::Memtide) {
                let _ = writeln!(
                    o,
                    "| {w} | memtide (adaptive, mean {:.0} ms) | {:.3} | {:.3} | {} |",
                    r.policy_info
                        .get("mean_epoch_ms")
                        .and_then(serde_json::Value::as_f64)
                        .unwrap_or(0.0),
                    r.fast_hit_ratio,
                    r.relative_time,
                    r.migrated_bytes >> 20
                );
            }
            epoch_series.push(Series {
                name: w.to_owned(),
                points: pts,
            });
        }
        let epochs: Vec<String> = EPOCHS_MS.iter().map(|ms| format!("{ms} ms")).collect();
        let svg = svg::dot_plot(
            "Hit ratio vs fixed epoch",
            "fast-tier hit ratio",
            &epochs,
            &epoch_series,
        );
        std::fs::write(dir.join("epoch-sweep.svg"), svg)?;
        o.push_str("\n![hit ratio vs epoch](evaluation/epoch-sweep.svg)\n\n");
        self.epoch_bound(o);
        Ok(())
    }

    /// What bounds the longest epoch, with the longest memtide chose in the main matrix and
    /// the real-program sections.
    fn epoch_bound(&self, o: &mut String) {
        let longest = ["main", "real-small"]
            .into_iter()
            .flat_map(|section| self.traces.iter().map(move |t| (section, t)))
            .filter_map(|(section, t)| {
                let r = self.get(section, t, PolicyName::Memtide.name())?;
                let ms = r.policy_info.get("longest_epoch_ms")?.as_u64()?;
                Some((ms, t))
            })
            .max_by_key(|&(ms, _)| ms);
        let Some((ms, trace)) = longest else {
            return;
        };
        let max_ms = memtide_core::policy::EpochConfig::default().max_ms;
        o.push_str(&super::fill(
            EPOCH_BOUND,
            &[
                ("max_ms", max_ms.to_string()),
                ("longest", ms.to_string()),
                ("longest_trace", format!("`{trace}`")),
            ],
        ));
    }

    /// The BW-AWARE share sweep and its plot.
    pub(super) fn bandwidth(&self, o: &mut String, dir: &Path) -> anyhow::Result<()> {
        o.push_str("## Bandwidth-aware placement (`bw-aware` preset: 200 vs 80 GB/s, fast tier holds everything)\n\n| trace | policy | relative time | hit ratio |\n|---|---|---|---|\n");
        let mut bw_series = Vec::new();
        for w in ["bw-multistream", "pointer-chase"] {
            let mut pts = Vec::new();
            for f in BW_SHARES {
                if let Some(r) = self.get("bandwidth", w, &format!("f={f:.1}")) {
                    let _ = writeln!(
                        o,
                        "| {w} | static f={f:.1} | {:.3} | {:.3} |",
                        r.relative_time, r.fast_hit_ratio
                    );
                    pts.push((f, 1.0 / r.relative_time));
                }
            }
            for p in ["memtide", "interleave", "no-migration"] {
                if let Some(r) = self.get("bandwidth", w, p) {
                    let _ = writeln!(
                        o,
                        "| {w} | {p} | {:.3} | {:.3} |",
                        r.relative_time, r.fast_hit_ratio
                    );
                }
            }
            bw_series.push(Series {
                name: w.to_owned(),
                points: pts,
            });
        }
        let svg = svg::line_chart(
            "Performance vs fast-tier share (BW-AWARE)",
            "fraction of pages in the fast tier",
            "performance (all-fast = 1)",
            &bw_series,
        );
        std::fs::write(dir.join("bw-share.svg"), svg)?;
        o.push_str("\n![performance vs placement share](evaluation/bw-share.svg)\n\n");

        Ok(())
    }

    /// The `cxl` and `rainbow-pcm` presets.
    pub(super) fn other_presets(&self, o: &mut String) {
        o.push_str("## Other presets\n\n| preset | trace | policy | hit ratio | relative time |\n|---|---|---|---|---|\n");
        for ((s, t, c), r) in self.results {
            if *s == "cxl" || *s == "rainbow-pcm" {
                let _ = writeln!(
                    o,
                    "| {s} | {t} | {c} | {:.3} | {:.3} |",
                    r.fast_hit_ratio, r.relative_time
                );
            }
        }
        o.push('\n');
    }

    /// Relative time per policy and trace, and each trace's hit ratio over time.
    pub(super) fn plots(&self, o: &mut String, dir: &Path) -> anyhow::Result<()> {
        o.push_str("## Plots\n\nProjected time relative to all-fast, per policy and trace (main matrix):\n\n");
        let labels: Vec<String> = self.traces.clone();
        // The bound's time is not a policy's (its moves are free): the epoch oracle stands
        // for foresight here.
        let series: Vec<Series> = [
            PolicyName::Memtide,
            PolicyName::OracleEpoch,
            PolicyName::NoMigration,
            PolicyName::Tpp,
            PolicyName::Hemem,
            PolicyName::Memtis,
            PolicyName::Damon,
            PolicyName::Static4k,
            PolicyName::Static2m,
        ]
        .iter()
        .map(|&p| Series {
            name: p.name().to_owned(),
            points: labels
                .iter()
                .enumerate()
                .filter_map(|(i, t)| self.main(t, p).map(|r| (i as f64, r.relative_time)))
                .collect(),
        })
        .collect();
        std::fs::write(
            dir.join("relative-time.svg"),
            svg::dot_plot(
                "Projected time / all-fast time (pmem)",
                "relative time",
                &labels,
                &series,
            ),
        )?;
        o.push_str("![relative time](evaluation/relative-time.svg)\n\nFast-tier hit ratio over time (50 windows of the trace), per trace:\n\n");
        for t in &self.traces {
            let series: Vec<Series> = [
                PolicyName::Memtide,
                PolicyName::Oracle,
                PolicyName::NoMigration,
                PolicyName::Tpp,
                PolicyName::Hemem,
                PolicyName::Memtis,
                PolicyName::Damon,
            ]
            .iter()
            .filter_map(|&p| {
                let r = self.main(t, p)?;
                Some(Series {
                    name: p.name().to_owned(),
                    points: r
                        .timeline
                        .iter()
                        .enumerate()
                        .map(|(i, &h)| (i as f64, h))
                        .collect(),
                })
            })
            .collect();
            let file = format!("hit-{t}.svg");
            std::fs::write(
                dir.join(&file),
                svg::line_chart(
                    &format!("Fast-tier hit ratio over time: {t}"),
                    "trace window",
                    "hit ratio",
                    &series,
                ),
            )?;
            let _ = writeln!(o, "- {t}: ![{t}](evaluation/{file})");
        }
        Ok(())
    }
}
