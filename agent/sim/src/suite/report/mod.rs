//! The evaluation report: docs/evaluation.md and its plots, from the suite's results.
//!
//! The prose that does not depend on the runs lives beside this file (`intro.md`, `notes.md`);
//! each section of the page is one method: the checks the seed papers predict ([`checks`]), the
//! tables and plots ([`tables`]), the real programs ([`real`]), what re-placing them more
//! often could give ([`cadence`]) or counting in shorter intervals ([`interval`]), and the
//! same at PMU-scale sampling periods ([`periods`]) and across sample densities ([`density`]),
//! and the diagnosis of where memtide falls short
//! ([`diagnostics`]).

mod cadence;
mod calibration;
mod checks;
mod density;
mod density_synthetic;
mod diagnostics;
mod interval;
mod long;
mod periods;
mod real;
mod samplers;
mod tables;

use std::{collections::BTreeMap, fmt::Write as _, path::Path};

use super::{Results, SimConfig, SuiteArgs};
use crate::{
    PolicyName,
    run::{Footprint, SimResult},
};

/// The page's opening: what it is and how to read it.
const INTRO: &str = include_str!("intro.md");
/// The page's closing: what the baselines model, and the limits of the evaluation.
const NOTES: &str = include_str!("notes.md");

pub(super) struct Report<'a> {
    pub(super) results: &'a Results,
    pub(super) footprints: &'a BTreeMap<String, Footprint>,
    pub(super) traces: Vec<String>,
    pub(super) real: Vec<String>,
    /// The long steady states: the server-like real programs replayed several times.
    pub(super) long: Vec<String>,
    /// The same programs replayed for an hour of their clocks, in the order of `long`.
    pub(super) hour: Vec<String>,
    pub(super) args: &'a SuiteArgs,
    pub(super) base: &'a SimConfig,
    pub(super) elapsed: f64,
}

impl Report<'_> {
    fn get(&self, section: &str, trace: &str, choice: &str) -> Option<&SimResult> {
        self.results
            .iter()
            .find(|((s, t, c), _)| *s == section && t == trace && c == choice)
            .map(|(_, r)| r)
    }

    fn main(&self, trace: &str, p: PolicyName) -> Option<&SimResult> {
        self.get("main", trace, p.name())
    }

    /// Geometric mean over the main matrix's traces of `figure` of `p`'s runs.
    fn main_geomean(&self, p: PolicyName, figure: impl Fn(&SimResult) -> f64) -> f64 {
        geomean(
            self.traces
                .iter()
                .filter_map(|t| self.main(t, p).map(&figure)),
        )
    }

    fn command(&self) -> String {
        let a = self.args;
        format!(
            "cargo run --release -p memtide --bin memtide -- sim --suite --records {} --footprint {} --sample-rate {} --sampler {} --seed {} --out {} --traces {}",
            a.records,
            a.footprint,
            self.base.sample_rate,
            self.base.sampler.name(),
            self.base.seed,
            a.out.display(),
            a.traces.display()
        )
    }

    /// The whole page, section by section; the plots go to `dir`.
    pub(super) fn render(&self, dir: &Path) -> anyhow::Result<String> {
        let mut o = String::from(INTRO);
        self.setup(&mut o);
        self.headline(&mut o);
        self.granularity_checks(&mut o);
        self.epoch_checks(&mut o);
        self.other_checks(&mut o);
        self.sampler_check(&mut o);
        self.main_matrix(&mut o);
        self.real_programs(&mut o);
        self.cadence(&mut o);
        self.interval(&mut o);
        self.granularity_tables(&mut o);
        self.epoch_sweep(&mut o, dir)?;
        self.bandwidth(&mut o, dir)?;
        self.other_presets(&mut o);
        self.samplers(&mut o);
        self.pmu_periods(&mut o);
        self.density(&mut o, dir)?;
        self.density_synthetic(&mut o);
        self.long_steady_states(&mut o);
        self.plots(&mut o, dir)?;
        o.push_str(&self.diagnostics());
        o.push_str(&vm_comparison(&self.args.out, self.base)?);
        o.push_str(NOTES);
        Ok(o)
    }
}

fn geomean(v: impl IntoIterator<Item = f64>) -> f64 {
    let (mut s, mut n) = (0.0, 0u32);
    for x in v {
        if x > 0.0 && x.is_finite() {
            s += x.ln();
            n += 1;
        }
    }
    if n == 0 {
        f64::NAN
    } else {
        (s / f64::from(n)).exp()
    }
}

/// A markdown table's header row and its separator, one column per item of `columns`.
fn table_header<T: std::fmt::Display>(o: &mut String, columns: impl IntoIterator<Item = T>) {
    let mut separator = String::from("|");
    o.push('|');
    for column in columns {
        let _ = write!(o, " {column} |");
        separator.push_str("---|");
    }
    let _ = writeln!(o, "\n{separator}");
}

/// `template` with each `{key}` replaced by its value. A placeholder left without a value is
/// a template and its filler out of step: it panics, so `make evaluation-check` catches it.
fn fill(template: &str, values: &[(&str, String)]) -> String {
    let text = values
        .iter()
        .fold(template.to_owned(), |text, (key, value)| {
            text.replace(&format!("{{{key}}}"), value)
        });
    let left: Vec<&str> = placeholders(&text).collect();
    assert!(left.is_empty(), "placeholders without a value: {left:?}");
    text
}

/// The `{key}` names in `text` (lower case, digits and `_`).
fn placeholders(text: &str) -> impl Iterator<Item = &str> {
    text.split('{').skip(1).filter_map(|rest| {
        let (key, _) = rest.split_once('}')?;
        (!key.is_empty()
            && key
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
        .then_some(key)
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok { "**holds**" } else { "**does not hold**" }
}

/// The measured (not simulated) comparison from the two-node VM suite, if
/// `<out>/evaluation/vm-comparison.md` exists (the table `vm/test.sh vm::compare` writes to
/// target/vm/vm-comparison.md, copied there), and the DAMON model calibrated against it.
fn vm_comparison(out: &Path, cfg: &SimConfig) -> anyhow::Result<String> {
    let Ok(table) = std::fs::read_to_string(out.join("evaluation").join("vm-comparison.md")) else {
        return Ok(String::new());
    };
    Ok(format!(
        "\n## Real two-tier VM: memtide vs kernel tiering vs DAMON migrate_hot\n\n\
         Measured, not simulated: the VM suite's comparison test \
         (`agent/tests/vm/compare.rs`), embedded from `evaluation/vm-comparison.md`.\n\n{}\n{}",
        table.trim_end(),
        calibration::damon_calibration(&table, cfg)?
    ))
}

#[cfg(test)]
mod fill_tests {
    use super::{fill, placeholders};

    #[test]
    fn every_placeholder_is_filled_or_named() {
        let text = fill("a {x} b {y_2}", &[("x", "1".into()), ("y_2", "2".into())]);
        assert_eq!(text, "a 1 b 2");
        assert_eq!(
            placeholders("{a} {B} {} {c_1}").collect::<Vec<_>>(),
            ["a", "c_1"]
        );
        let unfilled = std::panic::catch_unwind(|| fill("{x} {y}", &[("x", String::new())]));
        assert!(unfilled.is_err());
    }
}

#[cfg(test)]
mod vm_comparison_tests {
    use super::vm_comparison;
    use crate::{model::PresetName, run::SimConfig};

    #[test]
    fn the_vm_table_is_embedded_when_present() {
        let cfg = SimConfig::new(PresetName::Pmem.preset());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            vm_comparison(dir.path(), &cfg).unwrap(),
            "",
            "no file, no section"
        );
        std::fs::create_dir(dir.path().join("evaluation")).unwrap();
        std::fs::write(
            dir.path().join("evaluation/vm-comparison.md"),
            "| system | hot |\n|---|---|\n| memtide | 99 % |\n\n",
        )
        .unwrap();
        // No DAMON row: no calibration either.
        let section = vm_comparison(dir.path(), &cfg).unwrap();
        assert!(
            section.contains("## Real two-tier VM: memtide vs kernel tiering vs DAMON migrate_hot")
        );
        assert!(section.ends_with("| memtide | 99 % |\n"), "{section:?}");
    }
}

/// A run of `policy` on `trace` for the report's tests: its relative (and projected) time,
/// hit ratio and promoted MiB; the access time is what the hits leave of it.
#[cfg(test)]
fn fake_run(
    policy: PolicyName,
    trace: &str,
    relative: f64,
    hit: f64,
    promoted_mib: u64,
) -> SimResult {
    SimResult {
        policy: policy.name().into(),
        trace: trace.into(),
        preset: "pmem",
        records: 0,
        memory_records: 0,
        record_weight: 1,
        mlp: 1,
        footprint_bytes: 0,
        fast_capacity_bytes: 0,
        sampler: "ideal",
        sample_rate: 4,
        samples: 0,
        store_period_ratio: None,
        fast_hit_ratio: hit,
        fast_write_ratio: 0.0,
        migrated_bytes: 0,
        migrated_bytes_by_granularity: crate::run::ByGranularity::default(),
        promoted_bytes: promoted_mib << 20,
        demoted_bytes: 0,
        migrations: 0,
        migrations_by_granularity: crate::run::ByGranularity::default(),
        tlb_shootdowns: 0,
        huge_page_splits: 0,
        pingpong_pages: 0,
        failed_promotions: 0,
        huge_pages_kept: 0,
        huge_pages_total: 0,
        projected_time_s: relative,
        all_fast_time_s: 1.0,
        relative_time: relative,
        access_time_s: relative - hit / 10.0,
        migration_time_s: hit / 10.0,
        simulated_clock_s: 0.0,
        timeline: Vec::new(),
        skipped_lines: 0,
        policy_info: serde_json::Value::Null,
    }
}

/// One section of a report on `results`, with `real` as the real traces, for the report's
/// tests: `section` writes it.
#[cfg(test)]
fn render_section(
    results: &Results,
    real: &[&str],
    section: impl FnOnce(&Report<'_>, &mut String),
) -> String {
    render_section_with_long(results, real, &[], &[], section)
}

/// [`render_section`] with `long` and `hour` as the traces of the long steady states.
#[cfg(test)]
fn render_section_with_long(
    results: &Results,
    real: &[&str],
    long: &[&str],
    hour: &[&str],
    section: impl FnOnce(&Report<'_>, &mut String),
) -> String {
    render_section_of(results, (&[], real), (long, hour), section)
}

/// A section of a report whose traces are `traces` (the main matrix's, real programs
/// included), `real` of them real, and `long` and `hour` the long steady states'.
#[cfg(test)]
fn render_section_of(
    results: &Results,
    (traces, real): (&[&str], &[&str]),
    (long, hour): (&[&str], &[&str]),
    section: impl FnOnce(&Report<'_>, &mut String),
) -> String {
    let owned = |names: &[&str]| names.iter().map(|t| (*t).to_owned()).collect();
    let args = SuiteArgs {
        records: 0,
        footprint: 0,
        out: "docs".into(),
        traces: "traces".into(),
        jobs: None,
    };
    let base = SimConfig::new(crate::model::PresetName::Pmem.preset());
    let report = Report {
        results,
        footprints: &BTreeMap::new(),
        traces: owned(traces),
        real: owned(real),
        long: owned(long),
        hour: owned(hour),
        args: &args,
        base: &base,
        elapsed: 0.0,
    };
    let mut o = String::new();
    section(&report, &mut o);
    o
}
