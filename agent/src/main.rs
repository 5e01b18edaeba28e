//! The `memtide` binary: argument parsing, logging, exit codes. All logic lives in the library.

mod cli;

use std::process::ExitCode;

use anyhow::{Context as _, bail};
use clap::Parser as _;
use memtide::{
    probe::{BpfStatus, Probe, ProbeOptions},
    sources::damon::OpsProbe,
    sysfs::HostRoot,
};
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, ProbeArgs};

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("memtide: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Probe(args) => probe(&args),
    }
}

fn probe(args: &ProbeArgs) -> anyhow::Result<()> {
    if !args.root.is_dir() {
        bail!("--root {}: not a directory", args.root.display());
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
