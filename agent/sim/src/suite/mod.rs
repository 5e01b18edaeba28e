//! `memtide sim --suite`: policies × workloads × presets, run in parallel, then the report
//! ([`report`]: docs/evaluation.md plus SVG plots). Every number in the report is computed from
//! the runs; nothing is typed in by hand.

mod density;
mod draws;
mod long;
mod report;

pub use self::{
    density::{
        DENSITY_DRAWS, DENSITY_POLICIES, DENSITY_RATES, DENSITY_REFERENCES, DENSITY_SAMPLERS,
        DRAWN_FROM_RATE, PRODUCTION_SAMPLE_RATE, density_draws,
    },
    long::{
        LONG_FIXED, LONG_HOUR, LONG_HOUR_SAMPLING, LONG_PASSES, LONG_RATES, LONG_REFERENCES,
        LONG_SAMPLER, LONG_SAMPLING, LONG_TRACES,
    },
};

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::Context as _;
use memtide_core::units::Granularity;

use self::report::Report;
use super::{
    PolicyName,
    baselines::static_place::StaticPlacement,
    hindsight::Hindsight,
    make_policy,
    model::PresetName,
    policy::{EnginePolicy, EngineVariant, SimPolicy, engine_config},
    run::{self, FastSize, Footprint, SimConfig, SimResult},
    sampler::SamplerName,
    trace::{FileTrace, TraceSpec},
    workload::{GenSpec, Workload},
};

/// Record weight of lackey text traces found in the trace directory, which carry none (the
/// corpus that scripts/capture-lackey-traces.sh captures is native, its weight in the header;
/// its earlier captures kept 1 in 64).
pub const LACKEY_RECORD_WEIGHT: u32 = 64;
/// The fast-tier size of the real-program section besides the main matrix's.
pub const REAL_SMALL_FAST: f64 = 0.1;

/// The names of a section the real programs run in at both fast-tier sizes: `small` at
/// [`REAL_SMALL_FAST`], `main` at the suite's size.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TwoSizes {
    pub(crate) small: &'static str,
    pub(crate) main: &'static str,
}

impl TwoSizes {
    pub(crate) const fn new(small: &'static str, main: &'static str) -> Self {
        Self { small, main }
    }

    /// Each section with its fast-tier size, the small one first.
    pub(crate) fn with_sizes(self, base: FastSize) -> [(&'static str, FastSize); 2] {
        [
            (self.small, FastSize::Ratio(REAL_SMALL_FAST)),
            (self.main, base),
        ]
    }
}

/// Every policy on the real programs (the small size its own section, the suite's size the
/// main matrix).
pub(crate) const REAL_SECTIONS: TwoSizes = TwoSizes::new("real-small", "main");
/// memtide, HeMem and `static-2m` at [`PMU_SAMPLE_RATE`].
pub(crate) const PERIOD_SECTIONS: TwoSizes = TwoSizes::new("periods-small", "periods");
/// Free hindsight at each of [`CADENCES_MS`].
pub(crate) const CADENCE_SECTIONS: TwoSizes = TwoSizes::new("cadence-small", "cadence");
/// memtide at [`SHORT_INTERVAL_MS`] on the real programs.
pub(crate) const INTERVAL_SECTIONS: TwoSizes = TwoSizes::new("interval-small", "interval");
/// Where the fixed-epoch sweep and memtide's adaptive run of its traces are, for each draw of
/// the samples (the suite's seed plus the index): (fixed-epoch section, adaptive section). The
/// epoch check compares them over every draw, as the sampler check does: one draw moves when a
/// long epoch's plan falls, and with it a sweep's run by several percent.
pub(crate) const EPOCH_DRAWS: [(&str, &str); SAMPLER_SEEDS as usize] = [
    ("epoch", "main"),
    ("epoch-draw-1", "epoch-draw-1"),
    ("epoch-draw-2", "epoch-draw-2"),
    ("epoch-draw-3", "epoch-draw-3"),
];
/// The same for the interval section's sweep of `shrinking`.
pub(crate) const INTERVAL_EPOCH_DRAWS: [(&str, &str); SAMPLER_SEEDS as usize] = [
    ("interval-epoch", "interval-epoch"),
    ("interval-epoch-draw-1", "interval-epoch-draw-1"),
    ("interval-epoch-draw-2", "interval-epoch-draw-2"),
    ("interval-epoch-draw-3", "interval-epoch-draw-3"),
];
/// The counting interval the interval section tries against the default: the shortest epoch,
/// so that every plan at it reads an interval of its own (cooling keeps its default period).
pub const SHORT_INTERVAL_MS: u64 = 10;
/// One sample per this many records in the PMU-period section: on the corpus's weight of 16 or
/// 32 accesses per record, a sample stands for 16 Ki to 32 Ki accesses, inside the 10^4 to
/// 10^6 of PEBS and IBS periods in production (the rest of the suite samples 1 in 4).
pub const PMU_SAMPLE_RATE: u32 = 1024;
/// The samplers and the policies of the PMU-period section: memtide against the best baseline
/// of the corpus and the best static granularity.
pub(crate) const PMU_SAMPLERS: [SamplerName; 3] =
    [SamplerName::Ideal, SamplerName::Pebs, SamplerName::Ibs];
pub(crate) const PMU_POLICIES: [PolicyName; 3] =
    [PolicyName::Memtide, PolicyName::Hemem, PolicyName::Static2m];
/// Fixed epochs of the epoch sweep, ms.
pub const EPOCHS_MS: [u64; 7] = [100, 200, 400, 800, 1600, 3200, 6400];
/// Re-placement intervals of free hindsight in the cadence section, ms: around memtide's
/// shortest epoch, down to what a user-space agent could hardly plan at. The shortest epoch
/// itself is `hindsight-epoch`'s, run in the real-program sections.
pub const CADENCES_MS: [u64; 3] = [20, 5, 2];
/// The re-placement intervals of the cadence section's columns, ms, longest first: the
/// cadences above and memtide's shortest epoch. Free hindsight from the samples alone runs at
/// each of them (and every batch).
#[must_use]
pub fn cadence_columns_ms() -> Vec<u64> {
    let min_ms = memtide_core::policy::EpochConfig::default().min_ms;
    let mut ms: Vec<u64> = CADENCES_MS.iter().copied().chain([min_ms]).collect();
    ms.sort_unstable_by(|a, b| b.cmp(a));
    ms.dedup();
    ms
}
/// Fast shares of the BW-AWARE sweep.
pub const BW_SHARES: [f64; 11] = [0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
/// The single-pattern traces (and their mix) of the granularity section, under Ryoo's preset.
const GRANULARITY_TRACES: [&str; 5] = [
    "gups-hotset",
    "clustered-64k",
    "stream",
    "sparse-superpage",
    "phases",
];
/// The traces of the fixed-epoch sweep.
const EPOCH_TRACES: [&str; 3] = ["strided-reuse", "shrinking", "oscillating"];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Choice {
    Named(PolicyName),
    FixedEpoch(u64),
    Share(f64),
    /// memtide with its samples from this source, drawn with the suite's seed plus this.
    Sampled(SamplerName, u64),
    /// A policy with its samples from this source at [`PMU_SAMPLE_RATE`].
    Period(PolicyName, SamplerName),
    /// Free hindsight re-placed once per this many ms.
    Cadence(u64),
    /// Free hindsight from the samples alone, re-placed once per this many ms (every batch
    /// when `None`).
    SampledCadence(Option<u64>),
    /// memtide's engine (as the variant sets it up) counting in intervals of this many ms.
    Interval(u64, EngineVariant),
    /// A sampling policy with its samples from this source at this sample rate, drawn with the
    /// suite's seed plus the last field (the density sweep; `hindsight-samples` at memtide's
    /// shortest epoch).
    Density(PolicyName, SamplerName, u32, u64),
}

/// Draws of the samples memtide runs under for each sampler that draws them (the suite's seed
/// and the next ones): one draw moves a trace's hit ratio by up to tens of percent (the policy
/// reacts to which pages happen to be sampled), so the samplers are compared over several.
pub(crate) const SAMPLER_SEEDS: u64 = 4;

impl Choice {
    fn label(self) -> String {
        match self {
            Self::Named(p) => p.name().to_owned(),
            Self::FixedEpoch(ms) => format!("epoch-{ms}ms"),
            Self::Share(f) => format!("f={f:.1}"),
            Self::Sampled(s, draw) => format!("memtide/{}/{draw}", s.name()),
            Self::Period(p, s) => format!("{}/{}", p.name(), s.name()),
            Self::Cadence(ms) => format!("hindsight-every-{ms}ms"),
            Self::SampledCadence(Some(ms)) => format!("hindsight-samples-every-{ms}ms"),
            Self::SampledCadence(None) => "hindsight-samples-every-batch".to_owned(),
            Self::Interval(ms, variant) => format!("interval-{ms}ms/{}", variant.label()),
            Self::Density(p, s, rate, 0) => format!("{}/{}/{rate}", p.name(), s.name()),
            Self::Density(p, s, rate, draw) => {
                format!("{}/{}/{rate}/draw-{draw}", p.name(), s.name())
            }
        }
    }
}

struct Job {
    section: &'static str,
    trace: Arc<dyn TraceSpec>,
    choice: Choice,
    cfg: SimConfig,
}

type Results = BTreeMap<(&'static str, String, String), SimResult>;

fn build(job: &Job) -> anyhow::Result<Box<dyn SimPolicy>> {
    let preset = job.cfg.preset;
    let fp = job
        .cfg
        .footprint
        .context("footprint measured before the jobs")?;
    Ok(match job.choice {
        Choice::Density(PolicyName::HindsightSamples, ..) => {
            Box::new(density::hindsight_at_shortest_epoch())
        }
        Choice::Named(p) | Choice::Period(p, _) | Choice::Density(p, ..) => make_policy(
            p,
            &preset,
            &*job.trace,
            &job.cfg,
            run::fast_bytes(&job.cfg, fp),
        )?,
        Choice::FixedEpoch(ms) => {
            Box::new(EnginePolicy::new(&preset, EngineVariant::FixedEpochMs(ms))?)
        }
        Choice::Share(f) => Box::new(StaticPlacement::ratio(f)),
        Choice::Sampled(..) => Box::new(EnginePolicy::new(&preset, EngineVariant::Adaptive)?),
        Choice::Cadence(ms) => Box::new(Hindsight::every(Duration::from_millis(ms))),
        Choice::SampledCadence(ms) => {
            Box::new(Hindsight::from_samples(ms.map(Duration::from_millis)))
        }
        Choice::Interval(ms, variant) => {
            let mut cfg = engine_config(&preset);
            // Forgetting a superpage after as long as the default does.
            let e = &mut cfg.engine;
            e.retain_intervals =
                u32::try_from(u64::from(e.retain_intervals) * e.interval_ms / ms.max(1))
                    .unwrap_or(u32::MAX);
            e.interval_ms = ms;
            Box::new(EnginePolicy::configured(cfg, variant)?)
        }
    })
}

/// How many draws of the samples the suite makes under `sampler`.
pub(crate) const fn sampler_draws(sampler: SamplerName) -> u64 {
    if sampler.draws() { SAMPLER_SEEDS } else { 1 }
}

/// What the suite runs and where it writes (`memtide sim --suite`'s options).
#[derive(Clone, Debug)]
pub struct SuiteArgs {
    /// Records per synthetic workload.
    pub records: u64,
    /// Footprint of the synthetic workloads, bytes.
    pub footprint: u64,
    /// Directory of the report (evaluation.md and the SVG plots).
    pub out: PathBuf,
    /// Directory of the captured real traces.
    pub traces: PathBuf,
    /// Worker threads (default: available parallelism).
    pub jobs: Option<usize>,
}

/// Runs the suite and writes `<out>/evaluation.md` and `<out>/evaluation/*.svg`.
pub fn run_suite(args: &SuiteArgs, base: &SimConfig) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut traces: Vec<Arc<dyn TraceSpec>> = Workload::ALL
        .iter()
        .map(|&w| {
            Arc::new(GenSpec {
                workload: w,
                footprint: args.footprint,
                records: args.records,
                seed: draws::WORKLOAD_SEED,
            }) as Arc<dyn TraceSpec>
        })
        .collect();
    let sparse_draws = draws::sparse_draws(args.footprint, args.records);
    let real = real_traces(&args.traces)?;
    let real_names: Vec<String> = real.iter().map(|t| t.name()).collect();
    let long = long::long_traces(&real);
    let long_names: Vec<String> = long.iter().map(|t| t.name()).collect();
    traces.extend(real);

    eprintln!(
        "measuring footprints of {} traces",
        traces.len() + long.len()
    );
    let mut footprints = BTreeMap::new();
    for t in traces.iter().chain(&long).chain(&sparse_draws) {
        footprints.insert(t.name(), run::measure_footprint(&**t)?);
    }
    let hour = long::hour_traces(&traces, base)?;
    let hour_names: Vec<String> = hour.iter().map(|t| t.name()).collect();
    for t in &hour {
        footprints.insert(t.name(), run::measure_footprint(&**t)?);
    }
    let matrix = Matrix {
        by_name: traces
            .iter()
            .chain(&long)
            .chain(&hour)
            .chain(&sparse_draws)
            .map(|t| (t.name(), Arc::clone(t)))
            .collect(),
        footprints: &footprints,
        base,
    };
    let mut jobs = matrix.jobs(&traces, &real_names);
    jobs.extend(matrix.long_jobs(&long_names));
    jobs.extend(matrix.hour_jobs(&hour_names));
    let results = execute(&jobs, args.jobs)?;
    let elapsed = started.elapsed().as_secs_f64();
    let dir = args.out.join("evaluation");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let report = Report {
        results: &results,
        footprints: &footprints,
        traces: traces.iter().map(|t| t.name()).collect(),
        real: real_names,
        long: long_names,
        hour: hour_names,
        args,
        base,
        elapsed,
    };
    let md = report.render(&dir)?;
    let path = args.out.join("evaluation.md");
    std::fs::write(&path, md).with_context(|| format!("writing {}", path.display()))?;
    eprintln!(
        "wrote {} ({} runs in {elapsed:.0} s)",
        path.display(),
        results.len()
    );
    Ok(())
}

/// The suite's matrix: which traces run under which policies, on which preset, section by
/// section.
struct Matrix<'a> {
    by_name: BTreeMap<String, Arc<dyn TraceSpec>>,
    footprints: &'a BTreeMap<String, Footprint>,
    base: &'a SimConfig,
}

impl Matrix<'_> {
    fn config(&self, preset: PresetName, fast: FastSize, name: &str) -> SimConfig {
        SimConfig {
            preset: preset.preset(),
            fast,
            footprint: self.footprints.get(name).copied(),
            ..self.base.clone()
        }
    }

    fn job(
        &self,
        section: &'static str,
        trace: &str,
        choice: Choice,
        (preset, fast): (PresetName, FastSize),
    ) -> Job {
        Job {
            section,
            trace: Arc::clone(&self.by_name[trace]),
            choice,
            cfg: self.config(preset, fast, trace),
        }
    }

    fn jobs(&self, traces: &[Arc<dyn TraceSpec>], real: &[String]) -> Vec<Job> {
        let pmem = (PresetName::Pmem, self.base.fast);
        let ryoo = (PresetName::Ryoo, self.base.fast);
        let mut jobs = Vec::new();
        // A: the main matrix.
        for t in traces {
            for p in PolicyName::ALL {
                jobs.push(self.job("main", &t.name(), Choice::Named(p), pmem));
            }
        }
        // B: granularity under Ryoo's projection.
        let statics = [
            PolicyName::Static4k,
            PolicyName::Static64k,
            PolicyName::Static2m,
            PolicyName::Memtide,
        ];
        for w in GRANULARITY_TRACES {
            for p in statics {
                jobs.push(self.job("granularity", w, Choice::Named(p), ryoo));
            }
        }
        // B, further draws of `sparse-superpage` for the hot-subpage check.
        for w in &draws::sparse_draw_names()[1..] {
            for p in [PolicyName::Static2m, PolicyName::Memtide] {
                jobs.push(self.job("granularity", w, Choice::Named(p), ryoo));
            }
        }
        // B': sampling sensitivity of the granularity choice: every record a sample.
        for w in ["stream", "phases", "clustered-64k", "gups-hotset"] {
            for p in [PolicyName::Memtide, PolicyName::Static2m] {
                let mut job = self.job("sampling", w, Choice::Named(p), ryoo);
                job.cfg.sample_rate = 1;
                jobs.push(job);
            }
        }
        // C: fixed-epoch sweep, and its further draws of the samples with memtide's run beside.
        for w in EPOCH_TRACES {
            for ms in EPOCHS_MS {
                jobs.push(self.job("epoch", w, Choice::FixedEpoch(ms), pmem));
            }
        }
        let sweep = EPOCHS_MS
            .map(Choice::FixedEpoch)
            .into_iter()
            .chain([Choice::Named(PolicyName::Memtide)]);
        for (draw, (section, _)) in (0..).zip(EPOCH_DRAWS).skip(1) {
            for w in EPOCH_TRACES {
                for choice in sweep.clone() {
                    let mut job = self.job(section, w, choice, pmem);
                    job.cfg.seed = job.cfg.seed.wrapping_add(draw);
                    jobs.push(job);
                }
            }
        }
        jobs.extend(self.bandwidth_jobs());
        jobs.extend(self.preset_jobs());
        jobs.extend(self.sampler_jobs(traces));
        jobs.extend(self.real_jobs(real));
        jobs.extend(self.period_jobs(real));
        jobs.extend(self.cadence_jobs(real));
        jobs.extend(self.interval_jobs(real));
        jobs.extend(self.density_jobs(real));
        let synthetic: Vec<String> = traces
            .iter()
            .map(|t| t.name())
            .filter(|t| !real.contains(t))
            .collect();
        jobs.extend(self.synthetic_density_jobs(&synthetic));
        jobs
    }

    /// J: memtide counting in [`SHORT_INTERVAL_MS`] intervals on the real programs at both
    /// fast-tier sizes, and on the two checks of the main matrix the interval moves: the
    /// epoch sweep of `shrinking` and the granularity runs of `sparse-superpage`.
    fn interval_jobs(&self, real: &[String]) -> Vec<Job> {
        let short = |variant| Choice::Interval(SHORT_INTERVAL_MS, variant);
        let mut jobs = Vec::new();
        for t in real {
            for (section, fast) in INTERVAL_SECTIONS.with_sizes(self.base.fast) {
                let choice = short(EngineVariant::Adaptive);
                jobs.push(self.job(section, t, choice, (PresetName::Pmem, fast)));
            }
        }
        let pmem = (PresetName::Pmem, self.base.fast);
        let epochs = EPOCHS_MS.iter().map(|&ms| EngineVariant::FixedEpochMs(ms));
        for (draw, (section, _)) in (0..).zip(INTERVAL_EPOCH_DRAWS) {
            for variant in epochs.clone().chain([EngineVariant::Adaptive]) {
                let mut job = self.job(section, "shrinking", short(variant), pmem);
                job.cfg.seed = job.cfg.seed.wrapping_add(draw);
                jobs.push(job);
            }
        }
        let ryoo = (PresetName::Ryoo, self.base.fast);
        for variant in [
            EngineVariant::Adaptive,
            EngineVariant::StaticGranularity(Granularity::MIB_2),
        ] {
            let job = self.job(
                "interval-granularity",
                "sparse-superpage",
                short(variant),
                ryoo,
            );
            jobs.push(job);
        }
        jobs
    }

    /// I: the real programs under free hindsight at each of [`CADENCES_MS`] (the real-program
    /// sections hold it every batch and at memtide's shortest epoch), and from the samples
    /// alone at each of [`cadence_columns_ms`] and every batch, at both fast-tier sizes.
    fn cadence_jobs(&self, real: &[String]) -> Vec<Job> {
        let choices: Vec<Choice> = CADENCES_MS
            .map(Choice::Cadence)
            .into_iter()
            .chain(
                cadence_columns_ms()
                    .into_iter()
                    .map(|ms| Choice::SampledCadence(Some(ms))),
            )
            .chain([Choice::SampledCadence(None)])
            .collect();
        let mut jobs = Vec::new();
        for t in real {
            for (section, fast) in CADENCE_SECTIONS.with_sizes(self.base.fast) {
                for &choice in &choices {
                    jobs.push(self.job(section, t, choice, (PresetName::Pmem, fast)));
                }
            }
        }
        jobs
    }

    /// H: the real programs at PMU-scale sampling periods, at both fast-tier sizes.
    fn period_jobs(&self, real: &[String]) -> Vec<Job> {
        let mut jobs = Vec::new();
        for t in real {
            for (section, fast) in PERIOD_SECTIONS.with_sizes(self.base.fast) {
                for sampler in PMU_SAMPLERS {
                    for p in PMU_POLICIES {
                        let choice = Choice::Period(p, sampler);
                        let mut job = self.job(section, t, choice, (PresetName::Pmem, fast));
                        job.cfg.sampler = sampler;
                        job.cfg.sample_rate = PMU_SAMPLE_RATE;
                        jobs.push(job);
                    }
                }
            }
        }
        jobs
    }

    /// G: the real programs under every policy with a small fast tier too (the main matrix
    /// has them at the suite's fast size).
    fn real_jobs(&self, real: &[String]) -> Vec<Job> {
        let small = (PresetName::Pmem, FastSize::Ratio(REAL_SMALL_FAST));
        let section = REAL_SECTIONS.small;
        real.iter()
            .flat_map(|t| {
                PolicyName::ALL
                    .iter()
                    .map(move |&p| self.job(section, t, Choice::Named(p), small))
            })
            .collect()
    }

    /// F: memtide on every trace under every sampler, at the suite's sample rate, with
    /// [`SAMPLER_SEEDS`] draws of the samples where the sampler draws them.
    fn sampler_jobs(&self, traces: &[Arc<dyn TraceSpec>]) -> Vec<Job> {
        let pmem = (PresetName::Pmem, self.base.fast);
        let mut jobs = Vec::new();
        for t in traces {
            for sampler in SamplerName::ALL {
                for draw in 0..sampler_draws(sampler) {
                    let choice = Choice::Sampled(sampler, draw);
                    let mut job = self.job("sampler", &t.name(), choice, pmem);
                    job.cfg.sampler = sampler;
                    job.cfg.seed = job.cfg.seed.wrapping_add(draw);
                    jobs.push(job);
                }
            }
        }
        jobs
    }

    /// D: BW-AWARE ratio sweep, capacity unconstrained.
    fn bandwidth_jobs(&self) -> Vec<Job> {
        let unconstrained = (PresetName::BwAware, FastSize::Ratio(1.0));
        let mut jobs = Vec::new();
        for w in ["bw-multistream", "pointer-chase"] {
            for f in BW_SHARES {
                jobs.push(self.job("bandwidth", w, Choice::Share(f), unconstrained));
            }
            for p in [
                PolicyName::Memtide,
                PolicyName::Interleave,
                PolicyName::NoMigration,
            ] {
                jobs.push(self.job("bandwidth", w, Choice::Named(p), unconstrained));
            }
        }
        jobs
    }

    /// E: other presets.
    fn preset_jobs(&self) -> Vec<Job> {
        let preset_traces = [
            "gups-hotset",
            "zipf-kv",
            "clustered-64k",
            "rw-mix",
            "phases",
            "oscillating",
        ];
        let mut jobs = Vec::new();
        for preset in [PresetName::Cxl, PresetName::RainbowPcm] {
            for w in preset_traces {
                for p in [
                    PolicyName::Memtide,
                    PolicyName::Oracle,
                    PolicyName::Tpp,
                    PolicyName::Hemem,
                    PolicyName::Memtis,
                    PolicyName::Damon,
                ] {
                    let fast = (preset, self.base.fast);
                    jobs.push(self.job(preset.name(), w, Choice::Named(p), fast));
                }
            }
        }
        jobs
    }
}

/// The real traces in `dir`: native captures (`*.mt`, `*.mt.zst`, `*.mt.gz`; the record
/// weight in their header) and lackey text (`*.lackey*`, replayed with
/// [`LACKEY_RECORD_WEIGHT`]), by name.
fn real_traces(dir: &Path) -> anyhow::Result<Vec<Arc<dyn TraceSpec>>> {
    let mut out: Vec<Arc<dyn TraceSpec>> = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        eprintln!("no trace directory {}: real traces skipped", dir.display());
        return Ok(out);
    };
    let mut paths: Vec<PathBuf> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
    paths.sort();
    for path in paths {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let (format, record_weight) = if name.contains(".lackey") {
            (super::trace::Format::Lackey, Some(LACKEY_RECORD_WEIGHT))
        } else if [".mt", ".mt.zst", ".mt.gz"]
            .iter()
            .any(|ext| name.ends_with(ext))
        {
            (super::trace::Format::Native, None)
        } else {
            continue;
        };
        out.push(Arc::new(FileTrace {
            path,
            format: Some(format),
            lenient: false,
            record_weight,
        }));
    }
    Ok(out)
}

fn execute(jobs: &[Job], threads: Option<usize>) -> anyhow::Result<Results> {
    let threads = threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from))
        .max(1);
    let bar = indicatif::ProgressBar::new(jobs.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let next = AtomicUsize::new(0);
    let out: Mutex<Vec<(usize, anyhow::Result<SimResult>)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(job) = jobs.get(i) else { break };
                    let r = build(job).and_then(|mut p| {
                        run::run(&*job.trace, &mut *p, &job.cfg).map_err(anyhow::Error::from)
                    });
                    bar.set_message(format!("{} / {}", job.trace.name(), job.choice.label()));
                    bar.inc(1);
                    if let Ok(mut o) = out.lock() {
                        o.push((i, r));
                    }
                }
            });
        }
    });
    bar.finish_and_clear();
    let mut results = Results::new();
    let done = out
        .into_inner()
        .map_err(|_| anyhow::anyhow!("a suite worker panicked"))?;
    for (i, r) in done {
        let job = &jobs[i];
        let r = r.with_context(|| format!("{} under {}", job.trace.name(), job.choice.label()))?;
        results.insert((job.section, job.trace.name(), job.choice.label()), r);
    }
    Ok(results)
}
