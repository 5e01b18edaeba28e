//! DAMON status (Linux 5.18+ sysfs interface under `/sys/kernel/mm/damon/admin`).
//!
//! memtide never stops, starts or reconfigures a kdamond it did not create. Writing
//! `kdamonds/nr_kdamonds` removes and recreates *every* kdamond directory (and fails with EBUSY
//! while one runs), so DAMON counts as free for memtide only when `nr_kdamonds` is 0.
//!
//! `avail_operations` (which address spaces DAMON can monitor: `vaddr`, `fvaddr`, `paddr`) only
//! exists inside a context directory. When no kdamond exists, [`OpsProbe::CreateIfNone`] creates
//! one idle kdamond with one context, reads the file and removes the kdamond again (restoring
//! `nr_kdamonds` to 0 on every path). Nothing is ever written when a kdamond already exists. If
//! that is not allowed or fails, the answer comes from the kernel config
//! (`/boot/config-$(uname -r)`: `CONFIG_DAMON_VADDR` gives vaddr and fvaddr, `CONFIG_DAMON_PADDR`
//! gives paddr). [`DamonStatus::operations_source`] says where the answer came from.
//!
//! The tracepoint `damon:damon_aggregated` is looked up in tracefs (`/sys/kernel/tracing` or
//! `/sys/kernel/debug/tracing`); when tracefs is not mounted, `/proc/kallsyms` still tells
//! whether the kernel has it.

use std::{
    fs,
    io::{self, BufRead as _},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::sysfs::{self, HostRoot, SysfsError};

/// The DAMON sysfs admin directory, relative to the root.
pub const ADMIN_DIR: &str = "sys/kernel/mm/damon/admin";

/// Whether reading DAMON's status may write to sysfs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpsProbe {
    /// Never write. With no kdamond, operations come from the kernel config.
    ReadOnly,
    /// With no kdamond at all (`nr_kdamonds` = 0), create one idle kdamond to read
    /// `avail_operations` and remove it again. Never touches an existing kdamond.
    CreateIfNone,
}

/// A kdamond's `state` file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KdamondState {
    On,
    Off,
    /// Anything else the kernel may print in the future.
    Other(String),
}

impl KdamondState {
    fn parse(s: &str) -> Self {
        match s {
            "on" => Self::On,
            "off" => Self::Off,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One `kdamonds/N` directory.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Kdamond {
    pub index: u32,
    pub state: KdamondState,
    /// The kernel thread's pid while running (the file reads -1 when off).
    pub pid: Option<u32>,
    /// `contexts/0/operations` (the operations set this kdamond uses), if it has a context.
    pub operations: Option<String>,
}

/// DAMON as seen by memtide.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DamonStatus {
    /// The sysfs admin interface exists (`CONFIG_DAMON_SYSFS`).
    pub present: bool,
    /// `kdamonds/nr_kdamonds`.
    pub nr_kdamonds: u32,
    pub kdamonds: Vec<Kdamond>,
    /// Available operations sets, as the kernel names them (`vaddr`, `fvaddr`, `paddr`).
    pub operations: Vec<String>,
    /// Where `operations` came from.
    pub operations_source: String,
    /// The `damon:damon_aggregated` tracepoint exists.
    pub tracepoint: bool,
    /// How the tracepoint was found (or why not).
    pub tracepoint_detail: String,
}

impl DamonStatus {
    /// DAMON as absent because its status could not be read: `error` says why, where the
    /// operations' source would be.
    #[must_use]
    pub fn unreadable(error: &SysfsError) -> Self {
        Self {
            present: false,
            nr_kdamonds: 0,
            kdamonds: Vec::new(),
            operations: Vec::new(),
            operations_source: error.to_string(),
            tracepoint: false,
            tracepoint_detail: String::new(),
        }
    }

    /// Reads DAMON's status under `root`. Writes only with [`OpsProbe::CreateIfNone`] and only
    /// when no kdamond exists.
    pub fn read(root: &HostRoot, probe: OpsProbe) -> Result<Self, SysfsError> {
        let (tracepoint, tracepoint_detail) = tracepoint_status(root, "damon", "damon_aggregated")?;
        let admin = root.path(ADMIN_DIR);
        if !sysfs::exists(&admin) {
            return Ok(Self {
                present: false,
                nr_kdamonds: 0,
                kdamonds: Vec::new(),
                operations: Vec::new(),
                operations_source: format!("/{ADMIN_DIR} does not exist (no CONFIG_DAMON_SYSFS)"),
                tracepoint,
                tracepoint_detail,
            });
        }
        let kdamonds_dir = admin.join("kdamonds");
        let nr_kdamonds: u32 = sysfs::read_parse(&kdamonds_dir.join("nr_kdamonds"))?;
        let kdamonds = (0..nr_kdamonds)
            .map(|index| read_kdamond(&kdamonds_dir, index))
            .collect::<Result<Vec<_>, _>>()?;

        let mut operations = None;
        let mut notes = Vec::new();
        for k in &kdamonds {
            let rel = format!(
                "{ADMIN_DIR}/kdamonds/{}/contexts/0/avail_operations",
                k.index
            );
            if let Some(text) = sysfs::read_optional(&root.path(&rel))? {
                operations = Some((split_ops(&text), format!("/{rel}")));
                break;
            }
        }
        if operations.is_none() && nr_kdamonds == 0 {
            match probe {
                OpsProbe::ReadOnly => notes
                    .push("no kdamond to read avail_operations from, read-only probe".to_owned()),
                OpsProbe::CreateIfNone => match read_ops_via_temporary_kdamond(&kdamonds_dir) {
                    Ok(Some(ops)) => {
                        operations = Some((
                            ops,
                            format!(
                                "/{ADMIN_DIR}/kdamonds/0/contexts/0/avail_operations of a temporary kdamond (removed again)"
                            ),
                        ));
                    }
                    Ok(None) => {
                        notes.push("a kdamond appeared meanwhile; not touching it".to_owned());
                    }
                    Err(e) => {
                        tracing::info!("cannot create a temporary kdamond: {e}");
                        notes.push(format!("creating a temporary kdamond failed ({e})"));
                    }
                },
            }
        } else if operations.is_none() {
            notes.push("no existing kdamond has a context".to_owned());
        }
        let (operations, operations_source) = match operations {
            Some(found) => found,
            None => match operations_from_kernel_config(root)? {
                Some((ops, path)) => (ops, format!("kernel config {path} ({})", notes.join("; "))),
                None => (
                    Vec::new(),
                    format!("unknown: no kernel config in /boot ({})", notes.join("; ")),
                ),
            },
        };
        Ok(Self {
            present: true,
            nr_kdamonds,
            kdamonds,
            operations,
            operations_source,
            tracepoint,
            tracepoint_detail,
        })
    }

    /// Kdamonds that are running. memtide starts none while probing, so these belong to
    /// someone else.
    pub fn running(&self) -> impl Iterator<Item = &Kdamond> {
        self.kdamonds.iter().filter(|k| k.state == KdamondState::On)
    }

    /// Any kdamond runs.
    #[must_use]
    pub fn busy(&self) -> bool {
        self.running().next().is_some()
    }

    /// Pids of the running kdamonds.
    #[must_use]
    pub fn busy_pids(&self) -> Vec<u32> {
        self.running().filter_map(|k| k.pid).collect()
    }

    /// Whether the operations set `op` (`"vaddr"`, `"paddr"`) is available.
    #[must_use]
    pub fn has_operations(&self, op: &str) -> bool {
        self.operations.iter().any(|o| o == op)
    }

    /// memtide may create its own kdamond: the interface exists and holds no kdamond at all
    /// (creating one would otherwise destroy someone else's, running or idle).
    #[must_use]
    pub fn free_for_memtide(&self) -> bool {
        self.present && self.nr_kdamonds == 0
    }
}

fn split_ops(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_owned).collect()
}

fn read_kdamond(kdamonds_dir: &Path, index: u32) -> Result<Kdamond, SysfsError> {
    let dir = kdamonds_dir.join(index.to_string());
    let state = KdamondState::parse(&sysfs::read_trimmed(&dir.join("state"))?);
    let pid: i64 = sysfs::read_parse(&dir.join("pid"))?;
    let operations = sysfs::read_optional(&dir.join("contexts/0/operations"))?;
    Ok(Kdamond {
        index,
        state,
        pid: u32::try_from(pid).ok().filter(|&p| p > 0),
        operations,
    })
}

/// Restores `nr_kdamonds` to 0 when dropped, unless [`Self::finish`] already did.
struct RemoveTemporaryKdamond {
    nr_kdamonds: PathBuf,
    done: bool,
}

impl RemoveTemporaryKdamond {
    fn finish(mut self) -> Result<(), SysfsError> {
        self.done = true;
        sysfs::write_value(&self.nr_kdamonds, "0")
    }
}

impl Drop for RemoveTemporaryKdamond {
    fn drop(&mut self) {
        if !self.done
            && let Err(e) = sysfs::write_value(&self.nr_kdamonds, "0")
        {
            tracing::error!("could not remove the temporary kdamond memtide created: {e}");
        }
    }
}

/// Creates one idle kdamond with one context, reads `avail_operations` and removes the kdamond.
/// `Ok(None)` when a kdamond exists (then nothing is written).
fn read_ops_via_temporary_kdamond(kdamonds_dir: &Path) -> Result<Option<Vec<String>>, SysfsError> {
    let nr_path = kdamonds_dir.join("nr_kdamonds");
    // Check again right before writing: never recreate someone else's kdamonds.
    if sysfs::read_parse::<u32>(&nr_path)? != 0 {
        return Ok(None);
    }
    sysfs::write_value(&nr_path, "1")?;
    let guard = RemoveTemporaryKdamond {
        nr_kdamonds: nr_path,
        done: false,
    };
    sysfs::write_value(&kdamonds_dir.join("0/contexts/nr_contexts"), "1")?;
    let text = sysfs::read_trimmed(&kdamonds_dir.join("0/contexts/0/avail_operations"))?;
    guard.finish()?;
    Ok(Some(split_ops(&text)))
}

/// Operations the running kernel was built with, from `/boot/config-<osrelease>`.
fn operations_from_kernel_config(
    root: &HostRoot,
) -> Result<Option<(Vec<String>, String)>, SysfsError> {
    let Some(release) = sysfs::read_optional(&root.path("proc/sys/kernel/osrelease"))? else {
        return Ok(None);
    };
    let rel = format!("boot/config-{release}");
    let Some(text) = sysfs::read_optional(&root.path(&rel))? else {
        return Ok(None);
    };
    let enabled = |key: &str| {
        text.lines()
            .any(|l| l.trim() == format!("{key}=y") || l.trim() == format!("{key}=m"))
    };
    let mut ops = Vec::new();
    if enabled("CONFIG_DAMON_VADDR") {
        ops.extend(["vaddr".to_owned(), "fvaddr".to_owned()]);
    }
    if enabled("CONFIG_DAMON_PADDR") {
        ops.push("paddr".to_owned());
    }
    Ok(Some((ops, format!("/{rel}"))))
}

/// Tracefs mount points, in the order the kernel documentation recommends.
const TRACEFS_DIRS: [&str; 2] = ["sys/kernel/tracing", "sys/kernel/debug/tracing"];

/// Whether tracepoint `group:event` exists, and how that was found out.
pub fn tracepoint_status(
    root: &HostRoot,
    group: &str,
    event: &str,
) -> Result<(bool, String), SysfsError> {
    for dir in TRACEFS_DIRS {
        if !sysfs::exists(&root.path(format!("{dir}/events"))) {
            continue;
        }
        let rel = format!("{dir}/events/{group}/{event}");
        return Ok(if sysfs::exists(&root.path(&rel)) {
            (true, format!("tracefs: /{rel}"))
        } else {
            (false, format!("not in tracefs (/{dir}/events)"))
        });
    }
    let kallsyms = root.path("proc/kallsyms");
    let file = match fs::File::open(&kallsyms) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok((
                false,
                "tracefs not mounted and no /proc/kallsyms: unknown".to_owned(),
            ));
        }
        Err(e) => {
            return Err(SysfsError::Io {
                path: kallsyms,
                source: e,
            });
        }
    };
    let wanted = [
        format!("__tracepoint_{event}"),
        format!("__traceiter_{event}"),
    ];
    for line in io::BufReader::new(file).lines() {
        let line = line.map_err(|e| SysfsError::Io {
            path: kallsyms.clone(),
            source: e,
        })?;
        if line
            .split_whitespace()
            .nth(2)
            .is_some_and(|sym| wanted.iter().any(|w| w == sym))
        {
            return Ok((true, "kernel symbols (tracefs not mounted)".to_owned()));
        }
    }
    Ok((
        false,
        "not in kernel symbols (tracefs not mounted)".to_owned(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_tree::write;

    /// A DAMON admin tree with no kdamond, where `kdamonds/0` is pre-created so the plain file
    /// system behaves like sysfs after `echo 1 > nr_kdamonds`.
    fn free_damon(r: &Path) {
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "0\n");
        write(
            r,
            "sys/kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts",
            "0\n",
        );
        write(
            r,
            "sys/kernel/mm/damon/admin/kdamonds/0/contexts/0/avail_operations",
            "vaddr fvaddr paddr\n",
        );
    }

    #[test]
    fn temporary_kdamond_is_created_read_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        free_damon(r);
        let status = DamonStatus::read(&HostRoot::new(r), OpsProbe::CreateIfNone).unwrap();
        assert_eq!(status.operations, ["vaddr", "fvaddr", "paddr"]);
        assert!(
            status.operations_source.contains("temporary kdamond"),
            "{}",
            status.operations_source
        );
        assert!(status.free_for_memtide());
        let nr =
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")).unwrap();
        assert_eq!(nr, "0");
        let ctx =
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts"))
                .unwrap();
        assert_eq!(ctx, "1");
    }

    #[test]
    fn failed_temporary_kdamond_restores_and_falls_back_to_config() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "0\n");
        // No kdamonds/0 directory appears: writing nr_contexts fails.
        write(r, "proc/sys/kernel/osrelease", "6.12.0-test\n");
        write(
            r,
            "boot/config-6.12.0-test",
            "CONFIG_DAMON=y\nCONFIG_DAMON_VADDR=y\n# CONFIG_DAMON_PADDR is not set\n",
        );
        let status = DamonStatus::read(&HostRoot::new(r), OpsProbe::CreateIfNone).unwrap();
        assert_eq!(status.operations, ["vaddr", "fvaddr"]);
        assert!(
            status
                .operations_source
                .contains("creating a temporary kdamond failed"),
            "{}",
            status.operations_source
        );
        assert!(
            status
                .operations_source
                .contains("kernel config /boot/config-6.12.0-test"),
            "{}",
            status.operations_source
        );
        let nr =
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")).unwrap();
        assert_eq!(nr, "0", "nr_kdamonds was not restored");
    }

    #[test]
    fn read_only_never_writes() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        free_damon(r);
        let before =
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts"))
                .unwrap();
        let status = DamonStatus::read(&HostRoot::new(r), OpsProbe::ReadOnly).unwrap();
        assert!(status.operations.is_empty());
        assert!(
            status.operations_source.contains("read-only"),
            "{}",
            status.operations_source
        );
        let after =
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts"))
                .unwrap();
        assert_eq!(before, after);
    }

    #[test]
    fn existing_kdamond_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "1\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/0/state", "off\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/0/pid", "-1\n");
        write(
            r,
            "sys/kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts",
            "0\n",
        );
        let status = DamonStatus::read(&HostRoot::new(r), OpsProbe::CreateIfNone).unwrap();
        assert_eq!(
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds")).unwrap(),
            "1\n"
        );
        assert_eq!(
            fs::read_to_string(r.join("sys/kernel/mm/damon/admin/kdamonds/0/contexts/nr_contexts"))
                .unwrap(),
            "0\n"
        );
        assert!(!status.busy());
        assert!(!status.free_for_memtide());
        assert_eq!(status.kdamonds[0].pid, None);
        assert!(
            status
                .operations_source
                .contains("no existing kdamond has a context")
        );
    }

    #[test]
    fn malformed_damon_files_are_path_errors() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "one\n");
        let err = DamonStatus::read(&HostRoot::new(r), OpsProbe::ReadOnly).unwrap_err();
        assert!(err.path().ends_with("kdamonds/nr_kdamonds"), "{err}");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "2\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/0/state", "on\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/0/pid", "77\n");
        let err = DamonStatus::read(&HostRoot::new(r), OpsProbe::CreateIfNone).unwrap_err();
        assert!(err.path().ends_with("kdamonds/1/state"), "{err}");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds", "1\n");
        write(r, "sys/kernel/mm/damon/admin/kdamonds/0/pid", "seventy\n");
        let err = DamonStatus::read(&HostRoot::new(r), OpsProbe::ReadOnly).unwrap_err();
        assert!(err.path().ends_with("kdamonds/0/pid"), "{err}");
    }

    #[test]
    fn tracepoint_lookup_order() {
        let dir = tempfile::tempdir().unwrap();
        let r = dir.path();
        let root = HostRoot::new(r);
        let (found, detail) = tracepoint_status(&root, "damon", "damon_aggregated").unwrap();
        assert!(!found);
        assert!(detail.contains("unknown"), "{detail}");
        write(
            r,
            "proc/kallsyms",
            "0000000000000000 T _text\n0000000000000000 T __traceiter_damon_aggregated\n",
        );
        let (found, detail) = tracepoint_status(&root, "damon", "damon_aggregated").unwrap();
        assert!(found);
        assert!(detail.contains("kernel symbols"), "{detail}");
        write(r, "sys/kernel/tracing/events/sched/enable", "0\n");
        let (found, detail) = tracepoint_status(&root, "damon", "damon_aggregated").unwrap();
        assert!(!found, "tracefs is authoritative when mounted: {detail}");
        write(
            r,
            "sys/kernel/tracing/events/damon/damon_aggregated/id",
            "767\n",
        );
        let (found, detail) = tracepoint_status(&root, "damon", "damon_aggregated").unwrap();
        assert!(found);
        assert_eq!(
            detail,
            "tracefs: /sys/kernel/tracing/events/damon/damon_aggregated"
        );
    }
}
