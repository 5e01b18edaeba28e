//! Other things that move pages between nodes: kernel NUMA balancing (mode 2 = memory tiering
//! promotion), reclaim-time demotion, running DAMON kdamonds with a `migrate_hot` or
//! `migrate_cold` scheme, and the user-space daemons numad and memtierd. memtide and any of
//! them would undo each other's moves; per configuration memtide warns (default) or refuses to
//! start. memtide never stops or reconfigures any of them.

use std::{fmt, path::Path};

use memtide_config::CoexistMode;
use serde::Serialize;

use crate::{
    sysfs::{self, HostRoot, SysfsError},
    topology,
};

/// User-space daemons known to migrate pages.
const DAEMONS: [&str; 2] = ["numad", "memtierd"];
/// DAMOS actions that move pages between nodes.
const MIGRATING_ACTIONS: [&str; 2] = ["migrate_hot", "migrate_cold"];

/// One competing mover.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Conflict {
    /// `/proc/sys/kernel/numa_balancing` is non-zero (value kept; 2 and 3 promote between tiers).
    NumaBalancing { mode: u32 },
    /// `/sys/kernel/mm/numa/demotion_enabled` is true.
    DemotionEnabled,
    /// A kdamond is running (`kdamonds/N/state` = on) with a scheme that migrates, or whose
    /// schemes cannot be listed.
    Kdamond { index: u32 },
    /// A known daemon is running.
    Daemon { name: String, pid: u32 },
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NumaBalancing { mode } => write!(
                f,
                "kernel NUMA balancing is on (numa_balancing={mode}: {})",
                topology::describe_numa_balancing(*mode)
            ),
            Self::DemotionEnabled => f.write_str("kernel demotion is enabled (demotion_enabled)"),
            Self::Kdamond { index } => {
                write!(f, "DAMON kdamond {index} is running a scheme that migrates")
            }
            Self::Daemon { name, pid } => write!(f, "{name} is running (pid {pid})"),
        }
    }
}

/// Refused to run beside other movers.
#[derive(Debug, thiserror::Error)]
pub enum CoexistError {
    #[error(transparent)]
    Read(#[from] SysfsError),
    #[error("refusing to run beside other page movers: {}", list(.0))]
    Refused(Vec<Conflict>),
}

fn list(conflicts: &[Conflict]) -> String {
    conflicts
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Finds every competing mover under `root`. `self_pid` is never reported.
pub fn detect(root: &HostRoot, self_pid: u32) -> Result<Vec<Conflict>, SysfsError> {
    let mut out = Vec::new();
    if let Some(mode) = topology::read_numa_balancing(root)?
        && mode != 0
    {
        out.push(Conflict::NumaBalancing { mode });
    }
    if topology::read_demotion_enabled(root)? == Some(true) {
        out.push(Conflict::DemotionEnabled);
    }
    let kdamonds = root.path("sys/kernel/mm/damon/admin/kdamonds");
    for (index, dir) in sysfs::numbered_entries(&kdamonds, "")?.unwrap_or_default() {
        if sysfs::read_optional(&dir.join("state"))?.as_deref() == Some("on")
            && kdamond_migrates(&dir)?
        {
            out.push(Conflict::Kdamond { index });
        }
    }
    for name in sysfs::dir_names(&root.path("proc"))?.unwrap_or_default() {
        let Ok(pid) = name.parse::<u32>() else {
            continue;
        };
        if pid == self_pid {
            continue;
        }
        // Processes come and go while we look: unreadable means gone.
        let Ok(Some(comm)) = sysfs::read_optional(&root.path(format!("proc/{pid}/comm"))) else {
            continue;
        };
        if DAEMONS.contains(&comm.as_str()) {
            out.push(Conflict::Daemon { name: comm, pid });
        }
    }
    Ok(out)
}

/// Whether a running kdamond moves pages between nodes: one of its schemes migrates. One that
/// only pages out (reclaim to swap), sets LRU priorities or THP hints, or monitors, undoes
/// none of memtide's moves (this project's machines boot with a `pageout` kdamond). Where its
/// contexts or schemes cannot be listed it counts as one.
fn kdamond_migrates(dir: &Path) -> Result<bool, SysfsError> {
    let Some(contexts) = sysfs::numbered_entries(&dir.join("contexts"), "")? else {
        return Ok(true);
    };
    for (_, context) in contexts {
        let Some(schemes) = sysfs::numbered_entries(&context.join("schemes"), "")? else {
            return Ok(true);
        };
        for (_, scheme) in schemes {
            match sysfs::read_optional(&scheme.join("action"))? {
                Some(action) if !MIGRATING_ACTIONS.contains(&action.as_str()) => {}
                _ => return Ok(true),
            }
        }
    }
    Ok(false)
}

/// Detects conflicts and applies `mode`: `Warn` logs each one and returns them, `Refuse`
/// fails when there is any.
pub fn check(root: &HostRoot, mode: CoexistMode) -> Result<Vec<Conflict>, CoexistError> {
    let conflicts = detect(root, std::process::id())?;
    match mode {
        CoexistMode::Refuse if !conflicts.is_empty() => Err(CoexistError::Refused(conflicts)),
        _ => {
            for conflict in &conflicts {
                tracing::warn!("{conflict}: it will move pages too and may undo memtide's moves");
            }
            Ok(conflicts)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_tree::write;

    #[test]
    fn finds_every_kind_of_mover() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "proc/sys/kernel/numa_balancing", "2\n");
        write(r, "sys/kernel/mm/numa/demotion_enabled", "true\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "2\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/0/state", "on\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/1/state", "off\n");
        // Running, but it only pages out and monitors: no mover.
        let k2 = "sys/kernel/mm/damon/admin/kdamonds/2";
        write(r, &format!("{k2}/state"), "on\n");
        write(r, &format!("{k2}/contexts/0/schemes/0/action"), "pageout\n");
        write(r, &format!("{k2}/contexts/0/schemes/1/action"), "stat\n");
        // Running with a migrate_cold scheme beside a pageout one: a mover.
        let k3 = "sys/kernel/mm/damon/admin/kdamonds/3";
        write(r, &format!("{k3}/state"), "on\n");
        write(r, &format!("{k3}/contexts/0/schemes/0/action"), "pageout\n");
        write(
            r,
            &format!("{k3}/contexts/0/schemes/1/action"),
            "migrate_cold\n",
        );
        write(r, "proc/100/comm", "numad\n");
        write(r, "proc/101/comm", "bash\n");
        write(r, "proc/102/comm", "memtierd\n");
        write(r, "proc/103/comm", "memtierd\n");
        let found = detect(&HostRoot::new(r), 103).unwrap();
        assert_eq!(
            found,
            vec![
                Conflict::NumaBalancing { mode: 2 },
                Conflict::DemotionEnabled,
                Conflict::Kdamond { index: 0 },
                Conflict::Kdamond { index: 3 },
                Conflict::Daemon {
                    name: "numad".into(),
                    pid: 100
                },
                Conflict::Daemon {
                    name: "memtierd".into(),
                    pid: 102
                },
            ]
        );
        assert!(
            found[0].to_string().contains("memory tiering"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn quiet_machine_and_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "proc/sys/kernel/numa_balancing", "0\n");
        write(r, "sys/kernel/mm/numa/demotion_enabled", "false\n");
        write(r, "proc/1/comm", "init\n");
        let root = HostRoot::new(r);
        assert!(detect(&root, 0).unwrap().is_empty());
        assert!(check(&root, CoexistMode::Refuse).unwrap().is_empty());
        write(r, "proc/sys/kernel/numa_balancing", "1\n");
        let err = check(&root, CoexistMode::Refuse).unwrap_err();
        assert!(err.to_string().contains("numa_balancing=1"), "{err}");
        assert_eq!(check(&root, CoexistMode::Warn).unwrap().len(), 1);
    }
}
