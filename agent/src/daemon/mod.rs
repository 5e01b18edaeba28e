//! `memtide run`: the agent as a service.
//!
//! [`Daemon::start`] brings the agent up against an [`Environment`] (the machine's /proc and
//! /sys, and where hotness sources come from: the kernel, or a fake in tests), [`run`] does so
//! on this machine and turns SIGTERM, SIGINT and SIGHUP into [`Control`] messages. The life of
//! the agent is in `lifecycle` (start, event loop, shutdown); its state between events in
//! `agent`; each target runs in its own task (`target`): inputs → engine and planner → plan →
//! executor, then what the epoch did is published to metrics and status.

mod agent;
mod config;
pub mod http;
mod lifecycle;
mod limits;
pub mod notify;
mod pods;
mod publish;
mod sample_rate;
pub mod status;
pub mod target;
#[cfg(test)]
mod tests;

use std::{
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, RwLock},
};

use memtide_config::ConfigError;
use memtide_host::{exec::coexist, sysfs::HostRoot, sysfs::SysfsError};
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::mpsc,
    task::JoinHandle,
};

pub use self::config::load_config;
use self::status::AgentStatus;
use crate::{
    kube::KubeError,
    sources::{KernelSources, SourceFactory},
};

/// What the command line adds to the configuration file.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// `--config`; without it `/etc/memtide/memtide.toml` if it exists, else the defaults.
    pub config: Option<PathBuf>,
    pub observe: bool,
    pub pids: Vec<u32>,
    pub cgroups: Vec<PathBuf>,
    pub listen: Option<SocketAddr>,
}

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("reading the NUMA topology: {0}")]
    Topology(#[from] SysfsError),
    #[error("{0}")]
    Listen(std::io::Error),
    #[error(transparent)]
    Coexist(#[from] coexist::CoexistError),
    #[error("setting up the agent: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Kube(#[from] KubeError),
    /// A pid or cgroup named on the command line is not there at start.
    #[error("{flag} {value}: {source}; {}", named_target_hint(.flag))]
    NamedTarget {
        flag: &'static str,
        value: String,
        #[source]
        source: memtide_host::targets::TargetError,
    },
}

/// The fix for a `--pid` or `--cgroup` that is not there, fitting the flag.
fn named_target_hint(flag: &str) -> &'static str {
    if flag == "--pid" {
        "name a running process"
    } else {
        "name an existing cgroup v2 directory, relative to the cgroup v2 root or absolute under it"
    }
}

impl DaemonError {
    /// Process exit code (the scheme of `memtide --help`): 2 for configuration and
    /// command-line problems, 3 when the listen address cannot be listened on, 1 otherwise.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Config(_) | Self::Kube(_) | Self::NamedTarget { .. } => 2,
            Self::Listen(_) => 3,
            _ => 1,
        }
    }
}

/// What the agent runs against.
#[derive(Clone)]
pub struct Environment {
    /// Root of /proc and /sys: `/` on a real machine, a fixture tree in tests.
    pub root: HostRoot,
    /// Where the hotness source comes from.
    pub sources: Arc<dyn SourceFactory>,
}

impl Environment {
    /// This machine: its /proc and /sys, and its kernel's sources (PMU, DAMON, page faults).
    #[must_use]
    pub fn host() -> Self {
        Self {
            root: HostRoot::default(),
            sources: Arc::new(KernelSources),
        }
    }
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// What a running agent can be asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Read the configuration file again (SIGHUP).
    Reload,
    /// Stop: detach everything and exit (SIGTERM, SIGINT); `cause` is logged.
    Stop { cause: &'static str },
}

/// A running agent.
#[derive(Debug)]
pub struct Daemon {
    control: mpsc::UnboundedSender<Control>,
    status: Arc<RwLock<AgentStatus>>,
    address: SocketAddr,
    task: JoinHandle<()>,
}

impl Daemon {
    /// Starts the agent: configuration, tiers, endpoints, targets, source. Returns once it
    /// samples (or has found that no source starts); the event loop runs on.
    pub async fn start(options: RunOptions, env: Environment) -> Result<Self, DaemonError> {
        let (control, control_rx) = mpsc::unbounded_channel();
        let running = lifecycle::start(options, env, control_rx).await?;
        let status = Arc::clone(&running.agent.publishing.status);
        let address = running.address;
        let task = tokio::spawn(async move {
            let running = lifecycle::event_loop(running).await;
            lifecycle::shutdown(running).await;
        });
        Ok(Self {
            control,
            status,
            address,
            task,
        })
    }

    /// Where `/metrics`, `/healthz`, `/readyz` and `/status` are served.
    #[must_use]
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// What `/status` would answer now.
    #[must_use]
    pub fn status(&self) -> AgentStatus {
        publish::read_status(&self.status)
    }

    /// A sender of control messages, for signal handlers.
    #[must_use]
    pub fn controller(&self) -> mpsc::UnboundedSender<Control> {
        self.control.clone()
    }

    /// Asks for `command`. Never lost: the channel is unbounded, and only closed once the agent
    /// has stopped.
    pub fn send(&self, command: Control) {
        if self.control.send(command).is_err() {
            tracing::debug!(?command, "the agent has already stopped");
        }
    }

    /// Waits until the agent has stopped (after a [`Control::Stop`]).
    pub async fn wait(self) {
        if let Err(error) = self.task.await {
            std::panic::resume_unwind(error.into_panic());
        }
    }

    /// Stops the agent and waits for it.
    pub async fn stop(self) {
        self.send(Control::Stop { cause: "asked" });
        self.wait().await;
    }
}

/// Runs the agent on this machine until SIGTERM or SIGINT; SIGHUP reloads.
pub async fn run(options: RunOptions) -> Result<(), DaemonError> {
    // First, so a signal during start-up is acted on once the agent is up, not fatal.
    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let daemon = Daemon::start(options, Environment::host()).await?;
    let control = daemon.controller();
    let signals = tokio::spawn(async move {
        loop {
            let command = tokio::select! {
                _ = terminate.recv() => Control::Stop { cause: "SIGTERM" },
                _ = interrupt.recv() => Control::Stop { cause: "SIGINT" },
                _ = hangup.recv() => Control::Reload,
            };
            let stop = command != Control::Reload;
            if control.send(command).is_err() || stop {
                return;
            }
        }
    });
    daemon.wait().await;
    signals.abort();
    Ok(())
}
