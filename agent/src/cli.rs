//! The `memtide` command line. One variant of [`Command`] per subcommand; `run`, `exec`,
//! `status`, `sim`, `gen`, `record` and `check-config` slot in next to `probe`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use memtide_core::units::PAGE_SIZE;

/// memtide: keep hot memory in the fast tier and cold memory in the slow tier, from user space.
#[derive(Debug, Parser)]
#[command(
    name = "memtide",
    version,
    about,
    propagate_version = true,
    after_help = crate::exit::EXIT_CODES
)]
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
    /// Replay a memory-access trace through a placement policy and a tier model (or, with
    /// --suite, run the evaluation suite and write docs/evaluation.md).
    Sim(memtide_sim::cli::SimArgs),
    /// Generate a synthetic workload trace (native format).
    Gen(memtide_sim::cli::GenArgs),
    /// Convert a trace (lackey, perf script) to the native format, its record weight in the
    /// header: `memtide convert --trace t.lackey --record-weight 64 --out t.mt.zst`.
    Convert(memtide_sim::cli::ConvertArgs),
    /// Launch a program with an initial NUMA placement (set_mempolicy, then execve): memtide
    /// does not stay around. `memtide exec --placement bw-aware -- ./server --port 80`
    Exec(ExecArgs),
    /// Run the agent: sample, plan and migrate (or only observe), serving /metrics, /healthz,
    /// /readyz and /status. Stops cleanly on SIGTERM or SIGINT; SIGHUP reloads the config.
    Run(RunArgs),
    /// Ask the running agent what it is doing: one row per target.
    Status(StatusArgs),
    /// Record the memory accesses of running processes (PEBS, IBS or software page-fault
    /// samples) to a trace in the simulator's native format: `memtide record --pid 1234
    /// --duration 60 -o app.mt.zst`, then `memtide sim --trace app.mt.zst`.
    Record(RecordArgs),
    /// Check a configuration file: syntax (with line and column), values, and the nodes it
    /// names against this machine. Exits 0 when the file is usable.
    CheckConfig(CheckConfigArgs),
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// Configuration file [default: /etc/memtide/memtide.toml if it exists, else built-in
    /// defaults].
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Plan but never migrate; metrics and `memtide status` show what would have moved.
    #[arg(long)]
    pub(crate) observe: bool,

    /// Manage this process too (repeatable), on top of the configured targets.
    #[arg(long = "pid", value_name = "PID")]
    pub(crate) pids: Vec<u32>,

    /// Manage the processes of this cgroup v2 directory (repeatable), relative to the
    /// cgroup v2 root (/sys/fs/cgroup, or /sys/fs/cgroup/unified on a hybrid host) or
    /// absolute under it.
    #[arg(long = "cgroup", value_name = "PATH")]
    pub(crate) cgroups: Vec<PathBuf>,

    /// Address for the HTTP endpoints, IP:PORT or HOST:PORT [default: [agent] listen,
    /// 127.0.0.1:9477].
    #[arg(long, value_name = "ADDR", value_parser = memtide_config::resolve_address)]
    pub(crate) listen: Option<std::net::SocketAddr>,

    /// Log line format on stderr [default: [agent] log_format, human].
    #[arg(long, value_parser = ["human", "json"])]
    pub(crate) log_format: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RecordArgs {
    /// A process to record (repeatable; each gets its own process index in the trace).
    #[arg(long = "pid", value_name = "PID", required = true)]
    pub(crate) pids: Vec<u32>,

    /// The trace file; a name ending in .zst or .gz is compressed.
    #[arg(
        short,
        long,
        default_value = "memtide-record.mt.zst",
        value_name = "FILE"
    )]
    pub(crate) output: PathBuf,

    /// Stop after this many seconds [default: when every process has exited, or on Ctrl-C].
    #[arg(long, value_name = "SECONDS", value_parser = positive_seconds, allow_negative_numbers = true)]
    pub(crate) duration: Option<f64>,

    /// Sampling source [default: the best this machine has].
    #[arg(long, value_parser = ["pebs", "ibs", "swfault"])]
    pub(crate) source: Option<String>,

    /// Sample one event in PERIOD [default: the period that keeps sampling within 1 % of a
    /// core at the expected event rate]. Each record stands for PERIOD events.
    #[arg(long, value_name = "PERIOD", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) period: Option<u64>,

    /// Size of the BPF sample ring: a power of two from 4K to 2G, in bytes or with K, M or G.
    #[arg(long, default_value = "4M", value_name = "SIZE", value_parser = ring_size)]
    pub(crate) ring_bytes: u32,

    /// Print the summary as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The agent's HTTP address, IP:PORT or HOST:PORT [default: [agent] listen of --config,
    /// else 127.0.0.1:9477].
    #[arg(long, value_name = "ADDR", value_parser = memtide_config::resolve_address)]
    pub(crate) address: Option<std::net::SocketAddr>,

    /// The agent's configuration file, for its `[agent] listen` [default:
    /// /etc/memtide/memtide.toml if it exists].
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,

    /// Print the agent's JSON instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckConfigArgs {
    /// The file to check.
    #[arg(value_name = "FILE", required_unless_present = "print_defaults")]
    pub(crate) file: Option<PathBuf>,

    /// Print the built-in defaults as TOML instead (the shipped file documents each key).
    #[arg(long, conflicts_with = "file")]
    pub(crate) print_defaults: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    /// bw-aware: spread pages by tier bandwidth (weighted interleave where the kernel has it);
    /// interleave: evenly over every node; fast-first: fast nodes first, spill to slow ones.
    #[arg(long, default_value = "bw-aware", value_parser = ["bw-aware", "interleave", "fast-first"])]
    pub(crate) placement: String,

    /// Write bandwidth-derived weights to /sys/kernel/mm/mempolicy/weighted_interleave/nodeN
    /// (a machine-wide setting) before launching. Without it the kernel's weights are used.
    #[arg(long)]
    pub(crate) write_weights: bool,

    /// Print the policy that would be used and exit without launching.
    #[arg(long)]
    pub(crate) dry_run: bool,

    /// Read /sys under this directory instead of / (fixture trees; implies nothing is written).
    #[arg(long, hide = true, default_value = "/", value_name = "PATH")]
    pub(crate) root: PathBuf,

    /// The program and its arguments.
    #[arg(required = true, last = true, value_name = "CMD")]
    pub(crate) command: Vec<std::ffi::OsString>,
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

/// `--ring-bytes`: a size the BPF ring takes.
fn ring_size(text: &str) -> Result<u32, String> {
    let bytes = memtide_sim::args::parse_size(text)?;
    match u32::try_from(bytes) {
        Ok(bytes) if u64::from(bytes) >= PAGE_SIZE && bytes.is_power_of_two() => Ok(bytes),
        _ => Err(format!(
            "{text} is not a power of two in the accepted range [4K, 2G]"
        )),
    }
}

/// A duration in seconds, above 0.
fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 => Ok(seconds),
        Ok(_) => Err(format!(
            "{text} is outside the accepted range: seconds above 0"
        )),
        Err(_) => Err(format!("{text:?} is not a number of seconds")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_and_durations_name_what_is_accepted() {
        assert_eq!(ring_size("4M"), Ok(4 << 20));
        assert_eq!(ring_size("4096"), Ok(4096));
        assert!(ring_size("3M").unwrap_err().contains("[4K, 2G]"));
        assert!(ring_size("4G").unwrap_err().contains("[4K, 2G]"));
        assert_eq!(positive_seconds("1.5"), Ok(1.5));
        assert!(positive_seconds("0").unwrap_err().contains("above 0"));
        assert!(positive_seconds("-2").unwrap_err().contains("above 0"));
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory as _;
        Cli::command().debug_assert();
    }
}
