//! The live targets of a selection, held through their pidfds and re-resolved at each refresh.

use std::{
    collections::{BTreeMap, BTreeSet},
    time::{Duration, Instant},
};

use super::Selection;
use crate::{
    sysfs::HostRoot,
    targets::{Target, TargetError},
};

/// What a [`TargetSet::refresh`] changed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    pub added: Vec<u32>,
    /// Exited, or no longer selected.
    pub removed: Vec<u32>,
    /// Selectors that could not be resolved this time (each names its path), skipped.
    pub problems: Vec<String>,
}

/// The live targets of a [`Selection`], each held through its pidfd.
#[derive(Debug, Default)]
pub struct TargetSet {
    targets: BTreeMap<u32, Target>,
    /// When each member's name and cgroup were last read.
    checked: BTreeMap<u32, Instant>,
}

impl TargetSet {
    /// How long a member's name and cgroup, once read, are trusted.
    pub const RECHECK: Duration = Duration::from_secs(10);

    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Re-resolves `selection` on this machine, whose `/proc` and `/sys` are under `root`: opens
    /// new members, drops exited or deselected ones. A member whose pid now names another process (its pidfd says exited) is dropped
    /// and, if still selected, reopened as the new process.
    ///
    /// Whether a selector still includes a member (its cgroup's members, its pid) is read at
    /// every refresh; its name and cgroup, which only an exec or a cgroup move change, every
    /// [`Self::RECHECK`]: re-reading three `/proc` files of each of a thousand targets every
    /// second costs more than the targets themselves (scripts/bench-scale.sh). A member that
    /// execs into an excluded name or moves into an excluded cgroup is dropped within it.
    pub fn refresh(
        &mut self,
        root: &HostRoot,
        selection: &Selection,
    ) -> Result<Changes, TargetError> {
        let now = Instant::now();
        let alive: BTreeSet<u32> = self
            .targets
            .iter()
            .filter(|(_, target)| target.exited().is_ok_and(|exited| !exited))
            .map(|(pid, _)| *pid)
            .collect();
        // Only live members are trusted: an exited one's pid may already name another
        // process, whose name and cgroup nobody has read.
        self.checked.retain(|pid, at| {
            now.saturating_duration_since(*at) < Self::RECHECK && alive.contains(pid)
        });
        let trusted: BTreeSet<u32> = self.checked.keys().copied().collect();
        let (selected, problems) =
            selection.resolve_each_trusting(root, std::process::id(), &trusted)?;
        let mut changes = Changes {
            problems: problems.iter().map(ToString::to_string).collect(),
            ..Changes::default()
        };
        self.targets.retain(|pid, _| {
            let keep = selected.contains(pid) && alive.contains(pid);
            if !keep {
                changes.removed.push(*pid);
            }
            keep
        });
        self.checked.retain(|pid, _| selected.contains(pid));
        for &pid in &selected {
            self.checked.entry(pid).or_insert(now);
        }
        for pid in selected {
            if self.targets.contains_key(&pid) {
                continue;
            }
            match Target::open(root, pid) {
                Ok(target) => {
                    self.targets.insert(pid, target);
                    changes.added.push(pid);
                }
                // Gone, or turned out to be a kernel thread: not a target, not an error.
                Err(
                    TargetError::Exited { .. }
                    | TargetError::KernelThread { .. }
                    | TargetError::IsSelf { .. },
                ) => {
                    self.checked.remove(&pid);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(changes)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Target> {
        self.targets.values()
    }

    #[must_use]
    pub fn get(&self, pid: u32) -> Option<&Target> {
        self.targets.get(&pid)
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }
}
