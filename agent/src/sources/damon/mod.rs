//! The DAMON source: memtide's own kdamond monitoring the targets' virtual address spaces,
//! with `damon:damon_aggregated` forwarded by a BPF tracepoint program into a ring buffer.
//!
//! Start-up order matters for clean failure: start the kdamond (refused, without a write, if
//! anyone else uses DAMON), read the tracepoint format, then load and attach the program.
//! Drop order is the reverse: the program is detached before the kdamond is stopped and
//! removed, so nothing memtide created outlives it.
//!
//! [`monitor`] drives the kdamond through DAMON's sysfs interface, [`owner`] records it so the
//! next agent can remove one a killed agent left, [`resolution`] sizes its regions to the
//! targets, and [`stream`] hands the regions the tracepoint reports to the targets they belong
//! to.

pub mod monitor;
pub mod owner;
pub mod resolution;
pub mod stream;

use std::{collections::BTreeMap, path::PathBuf};

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, MapData, RingBuf},
    programs::TracePoint,
};
use memtide_common::names;
use memtide_config::{DamonMonitorConfig, SourceKind};
use memtide_host::sysfs::HostRoot;
use tokio::sync::watch;

use self::monitor::{DamonError, DamonMonitor, damon_aggregated_offsets};
use super::{Delivery, HotnessSource, SourceError};
use crate::bpf::{self, BpfError, ProgramStats};

#[derive(Debug, thiserror::Error)]
pub enum DamonSourceError {
    #[error(
        "tracefs is not mounted (looked for {0:?}); mount it: mount -t tracefs nodev \
         /sys/kernel/tracing"
    )]
    NoTracefs(Vec<PathBuf>),
    #[error(transparent)]
    Damon(#[from] DamonError),
    #[error(transparent)]
    Bpf(#[from] BpfError),
    #[error("attaching to damon:damon_aggregated: {0}")]
    Attach(#[source] aya::programs::ProgramError),
}

/// Where tracefs is, if mounted.
pub fn find_tracefs(root: &HostRoot) -> Result<PathBuf, DamonSourceError> {
    let candidates = [
        root.path("sys/kernel/tracing"),
        root.path("sys/kernel/debug/tracing"),
    ];
    candidates
        .iter()
        .find(|path| path.join("events").is_dir())
        .cloned()
        .ok_or_else(|| DamonSourceError::NoTracefs(candidates.to_vec()))
}

/// A running DAMON source. Field order is drop order.
pub struct DamonSource {
    ring: Option<RingBuf<MapData>>,
    /// The monitored pids by DAMON target index, for the delivery task.
    targets: watch::Sender<Vec<u32>>,
    owner: Array<MapData, u32>,
    /// Holds the attached program; dropping it detaches.
    ebpf: Ebpf,
    monitor: DamonMonitor,
}

impl std::fmt::Debug for DamonSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DamonSource")
            .field("monitor", &self.monitor)
            .finish_non_exhaustive()
    }
}

impl DamonSource {
    /// Starts monitoring `pids` (at least one) with memtide's own kdamond.
    pub fn start(
        root: &HostRoot,
        config: &DamonMonitorConfig,
        pids: &[u32],
    ) -> Result<Self, DamonSourceError> {
        // DAMON first: a busy DAMON is refused before anything is written, and that is the
        // answer an operator needs. A kdamond started here is removed again (drop) if the
        // tracepoint side fails below.
        let monitor = DamonMonitor::start(root, config, pids)?;
        let tracefs = find_tracefs(root)?;
        let offsets = damon_aggregated_offsets(&tracefs)?;

        let mut loader = EbpfLoader::new();
        loader.override_global(names::GLOBAL_DAMON_OFFSETS, &offsets, true);
        let mut ebpf = bpf::load_object(&mut loader)?;
        let program = bpf::load_program(&mut ebpf, names::PROG_DAMON_AGGREGATED, TracePoint::load)?;
        program
            .attach("damon", "damon_aggregated")
            .map_err(DamonSourceError::Attach)?;
        let owner = bpf::take_map(&mut ebpf, names::MAP_DAMON_OWNER)?;
        let ring = bpf::take_map(&mut ebpf, names::MAP_DAMON_REGIONS)?;
        let mut source = Self {
            ring: Some(ring),
            targets: watch::Sender::new(pids.to_vec()),
            owner,
            ebpf,
            monitor,
        };
        source.publish_owner()?;
        Ok(source)
    }

    /// Tells the BPF program which kdamond's regions are ours.
    fn publish_owner(&mut self) -> Result<(), BpfError> {
        let pid = self.monitor.kdamond_pid().unwrap_or(0);
        self.owner.set(0, pid, 0).map_err(|source| BpfError::Map {
            name: names::MAP_DAMON_OWNER,
            source,
        })
    }

    /// Replaces the monitored processes (target index → pid changes with it).
    pub fn set_targets(&mut self, pids: &[u32]) -> Result<(), DamonSourceError> {
        self.monitor.set_targets(pids)?;
        self.publish_owner()?;
        self.targets.send_replace(pids.to_vec());
        Ok(())
    }

    /// Whether memtide's kdamond is off while it has targets (see [`DamonMonitor::stopped`]).
    pub fn stopped(&self) -> Result<bool, DamonSourceError> {
        Ok(self.monitor.stopped()?)
    }

    /// The pid of DAMON target `index`, as reported in [`DamonRegion::target`].
    #[must_use]
    pub fn target_pid(&self, index: u64) -> Option<u32> {
        self.monitor.target_pid(index)
    }

    /// Kernel-measured run time of the tracepoint program.
    #[must_use]
    pub fn program_stats(&self) -> Vec<ProgramStats> {
        bpf::program_stats(&self.ebpf)
    }

    /// The kdamond thread memtide started, while it runs.
    #[must_use]
    pub fn kdamond_pid(&self) -> Option<u32> {
        self.monitor.kdamond_pid()
    }

    /// `nr_accesses` of a region accessed at every sampling interval.
    #[must_use]
    pub fn max_nr_accesses(&self) -> u32 {
        self.monitor.config().max_nr_accesses()
    }

    /// The region ring, for [`run_damon_ring`]. Taken once.
    pub fn take_ring(&mut self) -> Option<RingBuf<MapData>> {
        self.ring.take()
    }

    /// Detaches the program, then stops and removes the kdamond, reporting failures (drop
    /// does the same but can only log them).
    pub fn stop(self) -> Result<(), DamonSourceError> {
        let Self {
            ring,
            targets,
            owner,
            ebpf,
            mut monitor,
        } = self;
        drop((ring, targets, owner, ebpf));
        monitor.stop()?;
        Ok(())
    }
}

impl HotnessSource for DamonSource {
    fn kind(&self) -> SourceKind {
        SourceKind::Damon
    }

    fn set_targets(&mut self, pids: &[u32]) -> Result<(), SourceError> {
        Ok(Self::set_targets(self, pids)?)
    }

    fn deliver(&mut self, delivery: Delivery) -> Result<tokio::task::JoinHandle<()>, SourceError> {
        let ring = self.take_ring().ok_or(SourceError::Delivering)?;
        let targets = self.targets.subscribe();
        Ok(stream::spawn(
            ring,
            targets,
            self.max_nr_accesses(),
            delivery,
        )?)
    }

    fn drop_counts(&self) -> BTreeMap<&'static str, u64> {
        BTreeMap::new()
    }

    fn program_stats(&self) -> Vec<ProgramStats> {
        Self::program_stats(self)
    }

    fn stopped(&self) -> Result<bool, SourceError> {
        Ok(Self::stopped(self)?)
    }
}
