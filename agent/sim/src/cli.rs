//! `memtide sim`, `memtide gen` and `memtide convert`: arguments and handlers (main.rs only
//! dispatches).

use std::{
    fs::File,
    io::{BufWriter, Write as _},
    path::{Path, PathBuf},
    sync::Arc,
};

use anyhow::{Context as _, anyhow, bail};
use clap::Args;
use memtide_config::EngineTable;
use memtide_core::policy::EpochConfig;

use super::{
    PolicyName,
    args::{UsageError, parse_fraction, parse_positive_u32, parse_size},
    density::DensityModel,
    model::{Preset, PresetName},
    run::{FastSize, SimConfig},
    sampler::SamplerName,
    suite::{SuiteArgs, run_suite},
    trace::{
        FileTrace, Format, RecordSource, TraceMeta, TraceSpec as _, native::NativeWriter,
        repeat::Repeated,
    },
    workload::{GenSpec, Generator, Workload},
};

/// Arguments of `memtide sim`.
#[derive(Debug, Args)]
pub struct SimArgs {
    /// Trace to replay (lackey, perf-script or native; .gz and .zst are decompressed).
    #[arg(long, value_name = "PATH", required_unless_present = "suite")]
    pub trace: Option<PathBuf>,

    /// Trace format; detected from the content when absent.
    #[arg(long, value_enum)]
    pub format: Option<Format>,

    /// Platform preset (latencies, bandwidths, costs).
    #[arg(long, value_enum, default_value = "pmem")]
    pub preset: PresetName,

    /// Fast-tier capacity as a fraction of the trace's footprint, in [0, 1]. Default 0.25.
    #[arg(long, value_name = "F", conflicts_with = "fast_capacity",
          value_parser = parse_fraction, allow_negative_numbers = true)]
    pub fast_ratio: Option<f64>,

    /// Fast-tier capacity: bytes, or a size with K, M, G or T (64M, 1.5G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub fast_capacity: Option<u64>,

    /// One sample per N records on average for the sampling policies (every sampler but
    /// swfault). Default: the density the agent's shipped defaults give a busy server of
    /// --cpus CPUs (at 32, one sample per 128,000 LLC misses: 8,000 records of 16 accesses);
    /// with --suite, 4 (the suite sweeps the densities itself); for a recording (`memtide
    /// record`), 1: its records are samples already, every one of which reaches the policy.
    #[arg(long, value_name = "N", value_parser = parse_positive_u32, allow_negative_numbers = true)]
    pub sample_rate: Option<u32>,

    /// CPUs of the server whose density the replay samples at, without --sample-rate: the
    /// agent's budget buys the machine 5,000 samples a second, which its CPUs' memory traffic
    /// (2×10^7 LLC misses a second each) shares out. Default 32.
    #[arg(long, value_name = "N", conflicts_with_all = ["sample_rate", "suite"],
          value_parser = parse_positive_u32, allow_negative_numbers = true)]
    pub cpus: Option<u32>,

    /// What the sampling source delivers: `ideal` (1 in N records, kind kept), `pebs` (loads
    /// past L2 and stores at the default period ratio), `ibs` (ops past L3, no kind) or
    /// `swfault` (first-touch page faults). pebs and ibs deliver as many samples as ideal; see
    /// docs/evaluation.md "Samplers" for the model.
    #[arg(long, value_enum, default_value = "ideal")]
    pub sampler: SamplerName,

    /// Accesses one trace record stands for (overrides the trace's own; lackey and perf-script
    /// traces declare 1). At least 1.
    #[arg(long, value_name = "K", value_parser = parse_positive_u32, allow_negative_numbers = true)]
    pub record_weight: Option<u32>,

    /// Policy to simulate.
    #[arg(long, value_enum, required_unless_present = "suite")]
    pub policy: Option<PolicyName>,

    /// Skip malformed trace lines (counted in `skipped_lines`) instead of failing.
    #[arg(long)]
    pub lenient: bool,

    /// An agent configuration file whose `[engine]` table is laid over the simulator's engine
    /// configuration for the preset: every key the table sets replaces the simulator's value;
    /// the keys it leaves out keep theirs. Tier latencies and bandwidths stay the preset's, as
    /// the daemon's come from the machine where its firmware declares them. For the policies
    /// that run memtide's engine (memtide, static-*), and for hindsight-epoch, which re-places
    /// once per the engine's shortest epoch; not with --suite, whose report documents the
    /// defaults.
    #[arg(long, value_name = "PATH", conflicts_with = "suite")]
    pub engine_config: Option<PathBuf>,

    /// Seed of the sampling.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Replay the trace this many times back to back: a long steady state, whose hot set a
    /// sparse sampler samples as a longer run would (first touch places memory once; every pass
    /// repeats the program's start-up). Under a policy that learns from samples alone, the
    /// passes after the second are fast-forwarded, with the same result: an hour of a
    /// server's passes takes seconds. Default 1.
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "suite",
          value_parser = parse_positive_u32, allow_negative_numbers = true)]
    pub repeat: u32,

    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,

    /// Run the evaluation suite (policies × workloads × presets) and write the report. Each
    /// section uses its own preset; --fast-ratio/--fast-capacity, --sample-rate and --seed apply.
    #[arg(long)]
    pub suite: bool,

    /// Suite: directory of the report (evaluation.md and the SVG plots).
    #[arg(long, value_name = "DIR", default_value = "docs")]
    pub out: PathBuf,

    /// Suite: directory of the captured real traces (*.lackey.zst).
    #[arg(long, value_name = "DIR", default_value = "traces")]
    pub traces: PathBuf,

    /// Suite: records per synthetic workload.
    #[arg(long, value_name = "N", default_value_t = 2_000_000)]
    pub records: u64,

    /// Suite: footprint of the synthetic workloads: bytes, or a size with K, M, G or T.
    #[arg(long, value_name = "SIZE", default_value = "256M", value_parser = parse_size)]
    pub footprint: u64,

    /// Suite: worker threads (default: available parallelism).
    #[arg(long)]
    pub jobs: Option<usize>,
}

/// Arguments of `memtide gen`.
#[derive(Debug, Args)]
pub struct GenArgs {
    #[arg(long, value_enum)]
    pub workload: Workload,
    /// Footprint: bytes, or a size with K, M, G or T (64M, 1G).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub footprint: u64,
    /// Records to write.
    #[arg(long, value_name = "N")]
    pub records: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output file (native format; a .zst or .gz name compresses it).
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

/// Arguments of `memtide convert`.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// Trace to read (lackey, perf-script or native; .gz and .zst are decompressed).
    #[arg(long, value_name = "PATH")]
    pub trace: PathBuf,
    /// Trace format; detected from the content when omitted.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Accesses one record stands for, written into the output's header (a capture that kept 1
    /// access in K: K), so that no replay needs `--record-weight`. Default: the input's own.
    #[arg(long, value_name = "K", value_parser = parse_positive_u32, allow_negative_numbers = true)]
    pub record_weight: Option<u32>,
    /// Skip (and count) malformed lines instead of failing.
    #[arg(long)]
    pub lenient: bool,
    /// Output file (native format; a .zst or .gz name compresses it).
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

/// `memtide convert`: any trace to the native format, with its record weight in the header.
pub fn convert(args: &ConvertArgs) -> anyhow::Result<()> {
    input_file("--trace", &args.trace)?;
    output_file("--out", &args.out)?;
    if std::fs::canonicalize(&args.out).ok() == std::fs::canonicalize(&args.trace).ok()
        && args.out.exists()
    {
        return Err(usage(format!(
            "--out {} is the trace being read: choose another output file",
            args.out.display()
        )));
    }
    let spec = FileTrace {
        path: args.trace.clone(),
        format: args.format,
        lenient: args.lenient,
        record_weight: args.record_weight,
    };
    let mut source = spec.open().with_context(|| reading(&args.trace))?;
    let meta = source.meta().clone();
    let records = write_native(&mut *source, &meta, &args.out)?;
    let skipped = source.skipped();
    eprintln!(
        "wrote {records} records (record weight {}) to {}{}",
        meta.record_weight,
        args.out.display(),
        if skipped > 0 {
            format!("; skipped {skipped} malformed lines")
        } else {
            String::new()
        }
    );
    Ok(())
}

/// Writes every record of `source` to `out` in the native format with `meta`'s header,
/// compressed by the name's extension (.zst, .gz); returns the records written. The
/// compressor's last frame is finished explicitly, so a full disk is an error, not a
/// truncated trace.
fn write_native(
    source: &mut dyn RecordSource,
    meta: &TraceMeta,
    out: &Path,
) -> anyhow::Result<u64> {
    let file = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let name = out.to_string_lossy();
    let writing =
        |e: std::io::Error| anyhow::Error::new(e).context(format!("writing {}", out.display()));
    let file = BufWriter::with_capacity(1 << 16, file);
    if name.ends_with(".zst") {
        let sink = zstd::stream::write::Encoder::new(file, 3).map_err(writing)?;
        let (records, sink) = copy_records(source, meta, sink)?;
        sink.finish().map_err(writing)?.flush().map_err(writing)?;
        Ok(records)
    } else if name.ends_with(".gz") {
        let sink = flate2::write::GzEncoder::new(file, flate2::Compression::default());
        let (records, sink) = copy_records(source, meta, sink)?;
        sink.finish().map_err(writing)?.flush().map_err(writing)?;
        Ok(records)
    } else {
        let (records, mut sink) = copy_records(source, meta, file)?;
        sink.flush().map_err(writing)?;
        Ok(records)
    }
}

/// Copies `source` into a native writer over `sink`; returns the records and the sink.
fn copy_records<W: std::io::Write>(
    source: &mut dyn RecordSource,
    meta: &TraceMeta,
    sink: W,
) -> anyhow::Result<(u64, W)> {
    let mut w = NativeWriter::new(sink, meta)?;
    let mut buf = Vec::with_capacity(8192);
    // A recording's time marks go along (a fill never spans two), so the copy replays on the
    // same clock.
    let mut marked = None;
    loop {
        buf.clear();
        let n = source.fill(&mut buf, 8192)?;
        if let Some(at) = source
            .clock()
            .filter(|&at| meta.time_marks && marked != Some(at))
        {
            w.mark(at)?;
            marked = Some(at);
        }
        if n == 0 {
            break;
        }
        w.write(&buf)?;
    }
    let records = w.records();
    Ok((records, w.finish()?))
}

/// `--engine-config`'s `[engine]` table, for a policy that runs memtide's engine.
fn engine_overrides(
    file: &Path,
    policy: PolicyName,
    preset: &Preset,
) -> anyhow::Result<EngineTable> {
    if !policy.reads_engine_config() {
        return Err(usage(format!(
            "--engine-config configures memtide's engine, which --policy {} does not run \
             (it applies to memtide, static-4k, static-64k and static-2m, and its shortest \
             epoch to hindsight-epoch)",
            policy.name()
        )));
    }
    // Everything wrong with the file is the caller's to fix.
    engine_table(file, preset).map_err(|error| usage(format!("{error:#}")))
}

/// The `[engine]` table of the agent configuration file at `path`, checked against the
/// simulator's configuration for `preset` (unknown keys, invalid values).
fn engine_table(path: &Path, preset: &Preset) -> anyhow::Result<EngineTable> {
    input_file("--engine-config", path)?;
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading --engine-config {}", path.display()))?;
    let Some(engine) = EngineTable::from_file(path, &text)? else {
        bail!(
            "{}: no [engine] table: --engine-config reads the [engine] table of an agent \
             configuration file (deploy/config/memtide.toml lists its keys)",
            path.display()
        );
    };
    super::policy::engine_config_with(preset, Some(&engine))
        .map_err(|e| anyhow!("{}: [engine]: {e}", path.display()))?;
    Ok(engine)
}

fn usage(message: String) -> anyhow::Error {
    anyhow::Error::new(UsageError(message))
}

/// An input file a flag names must be there: a usage error (exit 2) naming the flag, not a
/// failure deep in the replay.
fn input_file(flag: &str, path: &Path) -> anyhow::Result<()> {
    match std::fs::metadata(path) {
        Ok(metadata) if metadata.is_dir() => Err(usage(format!(
            "{flag} {}: a directory, not a file",
            path.display()
        ))),
        Ok(_) => Ok(()),
        Err(error) => Err(usage(format!("{flag} {}: {error}", path.display()))),
    }
}

/// An output file a flag names goes into a directory that must be there.
fn output_file(flag: &str, path: &Path) -> anyhow::Result<()> {
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    if directory.is_dir() {
        Ok(())
    } else {
        Err(usage(format!(
            "{flag} {}: {} is not a directory",
            path.display(),
            directory.display()
        )))
    }
}

/// The context of a trace that cannot be read; the trace's own error names the path (and,
/// where it knows it, the line).
fn reading(path: &Path) -> String {
    format!("reading the trace {}", path.display())
}

/// `memtide sim`.
pub fn sim(args: &SimArgs) -> anyhow::Result<()> {
    let preset = args.preset.preset();
    let mut cfg = SimConfig::new(preset);
    if let Some(f) = args.fast_ratio {
        cfg.fast = FastSize::Ratio(f);
    }
    if let Some(b) = args.fast_capacity {
        cfg.fast = FastSize::Bytes(b);
    }
    cfg.sample_rate = args.sample_rate.unwrap_or(cfg.sample_rate);
    cfg.sampler = args.sampler;
    cfg.seed = args.seed;
    if args.suite {
        let suite = SuiteArgs {
            records: args.records,
            footprint: args.footprint,
            out: args.out.clone(),
            traces: args.traces.clone(),
            jobs: args.jobs,
        };
        return run_suite(&suite, &cfg);
    }
    let (Some(path), Some(policy)) = (&args.trace, args.policy) else {
        return Err(usage(
            "--trace and --policy are required without --suite".to_owned(),
        ));
    };
    input_file("--trace", path)?;
    if let Some(file) = &args.engine_config {
        cfg.engine_overrides = Some(engine_overrides(file, policy, &preset)?);
    }
    let file = FileTrace {
        path: path.clone(),
        format: args.format,
        lenient: args.lenient,
        record_weight: args.record_weight,
    };
    let meta = file
        .open()
        .with_context(|| reading(&file.path))?
        .meta()
        .clone();
    cfg.sample_rate = trace_sample_rate(args, &meta, path, cfg.sample_rate)?;
    let spec = Repeated {
        inner: Arc::new(file),
        passes: args.repeat,
    };
    let r = super::simulate(&spec, policy, &cfg).with_context(|| {
        let with = args.engine_config.as_ref().map_or(String::new(), |f| {
            format!(" with --engine-config {}", f.display())
        });
        format!(
            "simulating {} under {}{with}",
            path.display(),
            policy.name()
        )
    })?;
    run_notes(&r, &cfg, &preset, meta.live_samples);
    if args.json {
        println!("{}", serde_json::to_string(&r)?);
    } else {
        print_text(&r);
    }
    Ok(())
}

/// One sample per how many records of the trace at `path` (with `meta`) the run takes: a
/// recording's samples all (or one in `--sample-rate`), a trace of accesses the density
/// `--cpus` models, unless `--sample-rate` says; `configured` otherwise.
fn trace_sample_rate(
    args: &SimArgs,
    meta: &TraceMeta,
    path: &Path,
    configured: u32,
) -> anyhow::Result<u32> {
    if meta.live_samples {
        if args.cpus.is_some() {
            return Err(usage(format!(
                "--cpus: {} is a recording, whose records are samples already (no server's \
                 density applies to them); --sample-rate N keeps one in N of them",
                path.display()
            )));
        }
        // Every recorded sample is one the agent's sampler delivered: thinning them again
        // would leave the policy a density no agent runs at.
        Ok(args.sample_rate.unwrap_or(1))
    } else if args.sample_rate.is_none() {
        Ok(modelled_sample_rate(meta, args.cpus))
    } else {
        Ok(configured)
    }
}

/// What a reader of the run's figures should know (on stderr): a recording's notes, or that
/// the trace spans less than two of the engine's first epochs.
fn run_notes(r: &super::run::SimResult, cfg: &SimConfig, preset: &Preset, recording: bool) {
    let first_epoch_ms = super::policy::engine_config_with(preset, cfg.engine_overrides.as_ref())
        .map_or(EpochConfig::default().initial_ms, |c| {
            c.policy.epoch.initial_ms
        });
    let short = r.simulated_clock_s < 2.0 * first_epoch_ms as f64 / 1000.0;
    if recording {
        recording_notes(r, cfg, short);
    } else if short {
        eprintln!(
            "memtide: note: the trace spans only {:.3} s of simulated time ({} records past the LLC × {} accesses × {:.1} ns), less than two of the engine's first epochs; if the trace was sampled, pass --record-weight (scripts/capture-lackey-traces.sh keeps 1 in 64)",
            r.simulated_clock_s,
            r.memory_records,
            r.record_weight,
            cfg.access_pace_ns(r.mlp)
        );
    }
}

/// The sample rate of the density the agent's defaults give a busy server of `cpus` CPUs
/// (default [`DensityModel::PRODUCTION_CPUS`]), for the records of a trace with `meta`; says so
/// on stderr.
fn modelled_sample_rate(meta: &TraceMeta, cpus: Option<u32>) -> u32 {
    let weight = meta.record_weight;
    let model = DensityModel::shipped(cpus.unwrap_or(DensityModel::PRODUCTION_CPUS));
    let rate = model.records_per_sample(weight);
    eprintln!(
        "memtide: note: sampling one record in {rate}: the density the agent's defaults give a busy {}-CPU server (one sample per {:.0} LLC misses, {weight} accesses a record); --sample-rate N or --cpus N for another",
        model.cpus,
        model.misses_per_sample()
    );
    rate
}

/// What the replay of a recording (`memtide record`) did with it, on stderr: its samples went
/// to the policy as recorded, and a recording too short for the engine's epochs needs a longer
/// recording, not a different weight.
fn recording_notes(r: &super::run::SimResult, cfg: &SimConfig, short: bool) {
    let thinned = if cfg.sample_rate > 1 {
        format!(", one in {} of them (--sample-rate)", cfg.sample_rate)
    } else {
        String::new()
    };
    eprintln!(
        "memtide: note: replayed a recording: {} recorded samples over {:.1} s of its recorded time, each standing for {} events (its sample period); the policy received {}{thinned}",
        r.records, r.simulated_clock_s, r.record_weight, r.samples
    );
    if short {
        eprintln!(
            "memtide: note: the recording spans only {:.3} s, less than two of the engine's first epochs; record for longer (memtide record --duration)",
            r.simulated_clock_s
        );
    }
}

/// The human-readable summary of one replay.
fn print_text(r: &super::run::SimResult) {
    println!(
        "policy {}  trace {}  preset {}\n  records {}  footprint {} MiB  fast {} MiB\n  fast hit ratio {:.4}  fast write ratio {:.4}\n  migrated {:.1} MiB (4k {:.1} / 64k {:.1} / 2m {:.1} MiB) in {} ops; shootdowns {}, splits {}, ping-pong pages {}\n  huge pages kept {}/{}\n  projected {:.4} s vs all-fast {:.4} s ({:.3}×)",
        r.policy,
        r.trace,
        r.preset,
        r.records,
        r.footprint_bytes >> 20,
        r.fast_capacity_bytes >> 20,
        r.fast_hit_ratio,
        r.fast_write_ratio,
        mib(r.migrated_bytes),
        mib(r.migrated_bytes_by_granularity.k4),
        mib(r.migrated_bytes_by_granularity.k64),
        mib(r.migrated_bytes_by_granularity.m2),
        r.migrations,
        r.tlb_shootdowns,
        r.huge_page_splits,
        r.pingpong_pages,
        r.huge_pages_kept,
        r.huge_pages_total,
        r.projected_time_s,
        r.all_fast_time_s,
        r.relative_time,
    );
    println!("  sampler {}  samples {}", r.sampler, r.samples);
    if r.skipped_lines > 0 {
        println!("  skipped malformed lines: {}", r.skipped_lines);
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// `memtide gen`.
pub fn generate(args: &GenArgs) -> anyhow::Result<()> {
    output_file("--out", &args.out)?;
    let spec = GenSpec {
        workload: args.workload,
        footprint: args.footprint,
        records: args.records,
        seed: args.seed,
    };
    let mut g = Generator::new(spec);
    let meta = g.meta().clone();
    let n = write_native(&mut g, &meta, &args.out)?;
    eprintln!("wrote {n} records to {}", args.out.display());
    Ok(())
}
