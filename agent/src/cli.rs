//! The `memtide` command line. One variant of [`Command`] per subcommand; `run`, `exec`,
//! `status`, `sim`, `gen`, `record` and `check-config` slot in next to `probe`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// memtide: keep hot memory in the fast tier and cold memory in the slow tier, from user space.
#[derive(Debug, Parser)]
#[command(name = "memtide", version, about, propagate_version = true)]
pub(crate) struct Cli {
    /// More log output on stderr (-v info, -vv debug, -vvv trace). RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub(crate) verbose: u8,

    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Describe this machine: kernel, BPF, PMUs and sampling sources, DAMON, NUMA nodes and
    /// memory tiers, THP, NUMA balancing and demotion.
    Probe(ProbeArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub(crate) json: bool,

    /// Never write to sysfs. Without this, when DAMON has no kdamond at all, probe creates one
    /// idle kdamond to read `avail_operations` and removes it again (an existing kdamond is never
    /// touched).
    #[arg(long)]
    pub(crate) read_only: bool,

    /// Read /sys, /proc and /boot under this directory instead of / (fixture trees). The BPF
    /// check still runs on the real kernel; nothing is written under another root.
    #[arg(long, hide = true, default_value = "/", value_name = "PATH")]
    pub(crate) root: PathBuf,
}
