//! The `memtide` binary: argument parsing, logging, exit codes. All logic lives in the library.

mod cli;
mod exit;

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser as _;
use memtide_config::SourceKind;
use memtide_host::{
    probe::{BpfStatus, Probe, ProbeOptions, damon::OpsProbe},
    sysfs::HostRoot,
};
use memtide_sim::args::UsageError;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, ExecArgs, ProbeArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Run(args) = &cli.command {
        return agent(args, cli.verbose);
    }
    init_logging(cli.verbose, false);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => exit::report(&error),
    }
}

fn init_logging(verbose: u8, json: bool) {
    init_logging_at(verbose, "warn", json);
}

fn init_logging_at(verbose: u8, quiet_level: &str, json: bool) {
    let default = match verbose {
        0 => quiet_level,
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // Colours only on a terminal: the journal and log files get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

/// `memtide run`: the configuration decides the log format, so it is read before logging
/// starts; errors before that go to stderr plainly.
fn agent(args: &cli::RunArgs, verbose: u8) -> ExitCode {
    use memtide::daemon::{self, RunOptions};
    use memtide_config::LogFormat;
    let options = RunOptions {
        config: args.config.clone(),
        observe: args.observe,
        pids: args.pids.clone(),
        cgroups: args
            .cgroups
            .iter()
            .map(|path| {
                memtide_host::targets::select::relative_to_cgroup_v2_root(path).to_path_buf()
            })
            .collect(),
        listen: args.listen,
    };
    let json = match args.log_format.as_deref() {
        Some(format) => format == "json",
        None => daemon::load_config(&options)
            .map(|(config, _)| config.agent.log_format == LogFormat::Json)
            .unwrap_or(false),
    };
    // A service logs what it does: info unless asked otherwise.
    init_logging_at(verbose, "info", json);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("memtide")
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("memtide: error: starting the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(daemon::run(options)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let code = error.exit_code();
            // Once: a JSON log gets a JSON line (a plain one would break its parser), a human
            // one the same line as every other subcommand's errors.
            if json {
                tracing::error!("{error}");
            } else {
                eprintln!(
                    "memtide: error: {}",
                    exit::one_line(&anyhow::Error::new(error))
                );
            }
            ExitCode::from(code)
        }
    }
}

/// `memtide record`: samples to a native trace file.
fn record(args: &cli::RecordArgs) -> anyhow::Result<()> {
    use memtide::record::{RecordOptions, record};

    let duration = args.duration.map(std::time::Duration::from_secs_f64);
    let root = HostRoot::default();
    // What the command line names must be there: usage errors, before anything is set up.
    for pid in &args.pids {
        if !root.path(format!("proc/{pid}")).exists() {
            return Err(UsageError(format!(
                "--pid {pid}: no such process; name a running process"
            ))
            .into());
        }
    }
    let directory = match args.output.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => std::path::Path::new("."),
    };
    if !directory.is_dir() {
        return Err(UsageError(format!(
            "-o {}: {} is not a directory",
            args.output.display(),
            directory.display()
        ))
        .into());
    }
    let source = args.source.as_deref().map(|name| match name {
        "pebs" => SourceKind::Pebs,
        "ibs" => SourceKind::Ibs,
        _ => SourceKind::SwFault,
    });
    let options = RecordOptions {
        pids: args.pids.clone(),
        source,
        period: args.period,
        duration,
        out: args.output.clone(),
        ring_bytes: args.ring_bytes,
        root,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let summary = runtime.block_on(record(options))?;
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        let dropped: u64 = summary.dropped.values().sum();
        println!(
            "{}: {} records ({} loads, {} stores, {} of unknown kind) from pid {:?} with {} at period {}; {} dropped; stopped by {}",
            summary.path.display(),
            summary.records,
            summary.loads,
            summary.stores,
            summary.records - summary.loads - summary.stores,
            summary.pids,
            summary.source,
            summary.period,
            dropped,
            summary.stopped_by
        );
        for (reason, count) in summary.dropped.iter().filter(|(_, count)| **count > 0) {
            println!("  dropped ({reason}): {count}");
        }
    }
    Ok(())
}

/// Where `memtide status` finds the agent: `--address`, else the configuration's `[agent]
/// listen` (an unspecified address, `0.0.0.0`, is reached on loopback), else the default.
fn agent_address(args: &cli::StatusArgs) -> anyhow::Result<std::net::SocketAddr> {
    use memtide_config::Config;
    if let Some(address) = args.address {
        return Ok(address);
    }
    let path = match &args.config {
        Some(path) => Some(path.clone()),
        None => Some(std::path::PathBuf::from(memtide_config::DEFAULT_PATH)).filter(|p| p.exists()),
    };
    let mut address = match path {
        Some(path) => Config::load(&path)?.agent.listen,
        None => Config::default().agent.listen,
    };
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(address)
}

/// `memtide status`: GET /status from the running agent.
fn status(args: &cli::StatusArgs) -> anyhow::Result<()> {
    use std::io::{Read as _, Write as _};
    let address = agent_address(args)?;
    let mut stream =
        std::net::TcpStream::connect_timeout(&address, std::time::Duration::from_secs(2))
            .with_context(|| {
                format!(
                    "connecting to the agent at {address} (is `memtide run` running? see --address)"
                )
            })?;
    stream.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    write!(
        stream,
        "GET /status HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .context("the agent's answer is not HTTP")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "the agent answered: {}",
            head.lines().next().unwrap_or(head)
        );
    }
    let status: memtide::daemon::status::AgentStatus =
        serde_json::from_str(body).context("parsing the agent's /status JSON")?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        print!("{}", status.to_table());
    }
    Ok(())
}

/// `memtide check-config`: exit 0 when usable; every problem on stderr otherwise.
fn check_config(args: &cli::CheckConfigArgs) -> anyhow::Result<()> {
    use memtide_config::Config;
    use memtide_host::topology::Topology;
    if args.print_defaults {
        print!("{}", toml::to_string_pretty(&Config::default())?);
        return Ok(());
    }
    let Some(path) = &args.file else {
        return Err(UsageError("give a FILE to check, or --print-defaults".to_owned()).into());
    };
    let config = Config::load(path)?;
    memtide_config::check_permissions(path)?;
    let root = HostRoot::default();
    let machine_nodes = Topology::read(&root)
        .ok()
        .map(|topology| topology.node_ids());
    // Each problem where the file sets its key, as a syntax error is: path:line: key: ...
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut problems: Vec<String> = config
        .problems(machine_nodes.as_deref())
        .iter()
        .map(
            |problem| match memtide_config::line_of(&text, &problem.key) {
                Some(line) => format!(":{line}: {problem}"),
                None => format!(": {problem}"),
            },
        )
        .collect();
    problems.extend(
        source_order_problem(&config.sources.order, &root).map(|problem| {
            let line = memtide_config::line_of(&text, "sources.order");
            format!(
                "{}: {problem}",
                line.map_or_else(String::new, |l| format!(":{l}"))
            )
        }),
    );
    if problems.is_empty() {
        println!("{}: ok", path.display());
        return Ok(());
    }
    for problem in &problems {
        eprintln!("memtide: error: {}{problem}", path.display());
    }
    Err(exit::Reported {
        count: problems.len(),
        code: exit::USAGE,
    }
    .into())
}

/// A `[sources] order` none of whose sources this machine offers: the agent would start,
/// serve metrics and sample nothing (it is not ready, and says so, but a check before a
/// deployment should say it first).
fn source_order_problem(order: &[SourceKind], root: &HostRoot) -> Option<String> {
    use memtide_host::probe::{self, damon::DamonStatus, pmu::PmuScan};
    if order.is_empty() {
        return None;
    }
    let pmus = PmuScan::read(root).unwrap_or_default();
    let damon = DamonStatus::read(root, OpsProbe::ReadOnly)
        .unwrap_or_else(|error| DamonStatus::unreadable(&error));
    let kernel =
        memtide_host::sysfs::read_trimmed(&root.path(probe::kernel::OSRELEASE)).unwrap_or_default();
    let bpf = check_bpf(root);
    let checks = probe::rank(&probe::SourceInputs {
        bpf_available: bpf.available,
        kernel: &kernel,
        pmus: &pmus,
        damon: &damon,
    });
    let mut reasons = Vec::new();
    for kind in order {
        let check = checks.iter().find(|check| check.kind == *kind)?;
        // The agent tries DAMON wherever it is present (what keeps it from running, a busy
        // kdamond, can change by the time it starts).
        let damon_present = *kind == SourceKind::Damon && damon.present;
        if check.usable || (damon_present && bpf.available) {
            return None;
        }
        reasons.push(format!("{kind}: {}", check.reason));
    }
    Some(format!(
        "sources.order: no source it names can run on this machine ({}); the agent would sample \
         nothing. `memtide probe` lists the sources this machine offers; an empty order picks \
         the best of them",
        reasons.join("; ")
    ))
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Probe(args) => probe(&args),
        Command::Sim(args) => memtide_sim::cli::sim(&args),
        Command::Gen(args) => memtide_sim::cli::generate(&args),
        Command::Convert(args) => memtide_sim::cli::convert(&args),
        Command::Exec(args) => exec(&args),
        Command::Status(args) => status(&args),
        Command::CheckConfig(args) => check_config(&args),
        Command::Record(args) => record(&args),
        Command::Run(_) => unreachable!("handled in main before logging starts"),
    }
}

/// `memtide exec`: sets the placement policy on this process and replaces it with the program.
fn exec(args: &ExecArgs) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;

    use memtide_config::TierOverride;
    use memtide_host::{
        exec::launch::{self, Placement},
        topology::tiering::TieredTopology,
    };

    let root = HostRoot::new(&args.root);
    let placement: Placement = args.placement.parse().map_err(anyhow::Error::msg)?;
    let tiered = TieredTopology::read(&root, &TierOverride::default())
        .context("reading the NUMA topology")?;
    if let Some(warning) = &tiered.classes.warning {
        tracing::warn!("{warning}");
    }
    let policy = launch::plan(
        placement,
        &tiered,
        launch::weighted_interleave_available(&root),
    )?;
    if args.dry_run {
        println!("{policy}");
        if !policy.weights.is_empty() {
            println!("weights: {:?}", policy.weights);
        }
        return Ok(());
    }
    if !root.is_host() {
        bail!("--root {root} is for --dry-run only: the policy would not match this machine");
    }
    if args.write_weights && !policy.weights.is_empty() {
        launch::write_weights(&root, &policy.weights)
            .context("writing weighted-interleave weights")?;
    }
    tracing::info!("{policy}");
    launch::apply(&policy)?;
    let (program, rest) = args
        .command
        .split_first()
        .context("no command given after --")?;
    let source = std::process::Command::new(program).args(rest).exec();
    Err(exit::ExecFailed {
        program: program.to_string_lossy().into_owned(),
        source,
    }
    .into())
}

fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    if !args.root.is_dir() {
        return Err(UsageError(format!("--root {}: not a directory", args.root.display())).into());
    }
    let root = HostRoot::new(&args.root);
    let bpf = check_bpf(&root);
    let options = ProbeOptions {
        damon_ops: if args.read_only || !root.is_host() {
            OpsProbe::ReadOnly
        } else {
            OpsProbe::CreateIfNone
        },
    };
    let report = Probe::collect_with(&root, bpf, options);
    if args.json {
        let json = serde_json::to_string_pretty(&report).context("serializing the probe report")?;
        println!("{json}");
    } else {
        print!("{}", report.to_table());
    }
    Ok(())
}

/// Loads memtide's BPF object into the running kernel (always the real one, whatever `--root`).
fn check_bpf(root: &HostRoot) -> BpfStatus {
    let suffix = if root.is_host() {
        String::new()
    } else {
        format!(" [checked on the running kernel, not on {root}]")
    };
    match memtide::bpf::probe_load() {
        Ok(detail) => BpfStatus {
            available: true,
            detail: format!("{detail}{suffix}"),
        },
        Err(e) => BpfStatus {
            available: false,
            detail: format!("{e}{suffix}"),
        },
    }
}
