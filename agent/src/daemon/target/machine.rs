//! The machine as every target's planner sees it: the nodes' sizes and free memory, and their
//! zones' watermarks. One snapshot serves all targets for [`SharedMachine::MAX_AGE`]: a
//! thousand targets planning each second must not each read every node's meminfo and parse
//! /proc/zoneinfo.

use std::{
    collections::BTreeMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use memtide_host::{
    exec::watermark::{self, NodeWatermarks},
    sysfs::HostRoot,
    topology::{self, ThpMode, Topology},
};

/// What the planners read of the machine.
#[derive(Clone, Debug)]
pub(super) struct MachineSnapshot {
    pub(super) topology: Option<Topology>,
    pub(super) watermarks: BTreeMap<u32, NodeWatermarks>,
    /// The THP mode; `None` on kernels without THP or when the file cannot be read.
    pub(super) thp: Option<ThpMode>,
}

/// The snapshot all targets share.
#[derive(Debug)]
pub struct SharedMachine {
    max_age: Duration,
    cached: Mutex<Cached>,
}

#[derive(Debug, Default)]
struct Cached {
    snapshot: Option<(Instant, MachineSnapshot)>,
    /// Pages moved since the snapshot was read.
    stale: bool,
}

impl Default for SharedMachine {
    fn default() -> Self {
        Self::new(Self::MAX_AGE)
    }
}

impl SharedMachine {
    /// How long a snapshot serves. Free memory changes under the agent anyway; the executor
    /// checks the watermarks again before it moves anything.
    pub const MAX_AGE: Duration = Duration::from_secs(1);
    /// How long a snapshot serves after pages moved: the fair shares want free memory that
    /// matches what the targets hold, but a thousand targets moving each second must not each
    /// read every node's meminfo and /proc/zoneinfo.
    pub const MAX_AGE_AFTER_MOVES: Duration = Duration::from_millis(200);

    #[must_use]
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            cached: Mutex::new(Cached::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        match self.cached.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        }
    }

    /// Says that pages just moved: the snapshot then serves for
    /// [`Self::MAX_AGE_AFTER_MOVES`] at most.
    pub(super) fn expire(&self) {
        self.lock().stale = true;
    }

    /// The current snapshot, read from `root` when the last one is older than the maximum age.
    pub(super) fn read(&self, root: &HostRoot) -> MachineSnapshot {
        let mut cached = self.lock();
        let max_age = match cached.stale {
            true => self.max_age.min(Self::MAX_AGE_AFTER_MOVES),
            false => self.max_age,
        };
        if let Some((at, snapshot)) = cached.snapshot.as_ref()
            && at.elapsed() < max_age
        {
            return snapshot.clone();
        }
        let snapshot = MachineSnapshot {
            topology: Topology::read(root).ok(),
            watermarks: watermark::read_watermarks(root).unwrap_or_default(),
            thp: topology::read_thp(root).ok().flatten(),
        };
        *cached = Cached {
            snapshot: Some((Instant::now(), snapshot.clone())),
            stale: false,
        };
        snapshot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_read_serves_every_target_until_it_is_old() {
        let dir = tempfile::tempdir().unwrap();
        let fixture = std::path::Path::new(memtide_host::FIXTURES).join("topology/cxl-cpuless/sys");
        crate::daemon::tests::copy_tree(&fixture, &dir.path().join("sys"));
        let root = HostRoot::new(dir.path());
        let node_dir = dir.path().join("sys/devices/system/node");
        let nodes = |shared: &SharedMachine| shared.read(&root).topology.map(|t| t.nodes.len());
        // A snapshot that never ages is read once: the change below goes unseen by it.
        let kept = SharedMachine::new(Duration::MAX);
        let fresh = SharedMachine::new(Duration::ZERO);
        assert_eq!((nodes(&kept), nodes(&fresh)), (Some(3), Some(3)));
        std::fs::remove_dir_all(node_dir.join("node2")).unwrap();
        std::fs::write(node_dir.join("online"), "0-1\n").unwrap();
        std::fs::write(node_dir.join("has_memory"), "0-1\n").unwrap();
        assert_eq!((nodes(&kept), nodes(&fresh)), (Some(3), Some(2)));
        // After moves, even a snapshot that never ages serves for 200 ms at most.
        kept.expire();
        std::thread::sleep(SharedMachine::MAX_AGE_AFTER_MOVES);
        assert_eq!(nodes(&kept), Some(2));
    }
}
