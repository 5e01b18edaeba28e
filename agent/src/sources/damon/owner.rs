//! The record of the kdamond a memtide agent started, so the next agent can remove it if the
//! one that started it was killed.
//!
//! A kdamond lives in sysfs, not in the process: an agent killed by SIGKILL (the OOM killer, a
//! container runtime, `kill -9`) leaves its kdamond running, and since memtide never touches a
//! kdamond it did not start, the restarted agent would find DAMON busy and run without it.
//! So while its kdamond exists, an agent keeps a small file (`[sources.damon] owner_file`)
//! naming itself (pid and start time), the kdamond's thread and its targets. The next agent
//! removes the kdamond only when all of these hold:
//! - the file exists and the agent it names is gone (no such pid, or a different process
//!   under it, told by the start time);
//! - DAMON has exactly one kdamond, running `vaddr` operations;
//! - if it runs, its thread is the one recorded; its targets are the ones recorded.
//!
//! Anything else — no file, a live agent, a kdamond someone else (re)created since — leaves
//! DAMON alone and the source reports it busy, as before. The file is removed on a clean stop.

use std::{
    fs, io,
    path::{Path, PathBuf},
};

use memtide_host::{
    sysfs::{self, HostRoot},
    targets::ProcStat,
};

/// What an agent records about the kdamond it started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnerRecord {
    pub agent_pid: u32,
    /// The agent's start time (clock ticks after boot, `/proc/PID/stat`): with the pid, one
    /// process instance.
    pub agent_start: u64,
    /// The kdamond thread's pid while it runs.
    pub kdamond_pid: Option<u32>,
    /// The target pids, in DAMON's target order.
    pub targets: Vec<u32>,
}

impl OwnerRecord {
    /// A record for this process.
    pub fn for_this_agent(
        root: &HostRoot,
        kdamond_pid: Option<u32>,
        targets: &[u32],
    ) -> io::Result<Self> {
        let agent_pid = std::process::id();
        let stat = ProcStat::read(root, agent_pid).map_err(io::Error::other)?;
        Ok(Self {
            agent_pid,
            agent_start: stat.start_time,
            kdamond_pid,
            targets: targets.to_vec(),
        })
    }

    fn render(&self) -> String {
        let targets: Vec<String> = self.targets.iter().map(u32::to_string).collect();
        format!(
            "# The kdamond memtide agent {} started; removed when it stops cleanly.\n\
             agent_pid={}\nagent_start={}\nkdamond_pid={}\ntargets={}\n",
            self.agent_pid,
            self.agent_pid,
            self.agent_start,
            self.kdamond_pid
                .map_or_else(|| "-".to_owned(), |pid| pid.to_string()),
            targets.join(" ")
        )
    }

    fn parse(text: &str) -> Option<Self> {
        let value = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix('='))
                .map(str::trim)
        };
        Some(Self {
            agent_pid: value("agent_pid")?.parse().ok()?,
            agent_start: value("agent_start")?.parse().ok()?,
            kdamond_pid: match value("kdamond_pid")? {
                "-" => None,
                pid => Some(pid.parse().ok()?),
            },
            targets: value("targets")?
                .split_whitespace()
                .map(str::parse)
                .collect::<Result<_, _>>()
                .ok()?,
        })
    }

    /// Writes the record (atomically: a temporary file renamed over it).
    pub fn write(&self, path: &Path) -> io::Result<()> {
        if let Some(dir) = path.parent() {
            fs::create_dir_all(dir)?;
        }
        let temporary = temporary_path(path);
        fs::write(&temporary, self.render())?;
        fs::rename(&temporary, path)
    }

    /// The record at `path`; `None` when there is none or it is unreadable (a torn or foreign
    /// file proves nothing, so it cannot justify touching DAMON).
    pub fn read(path: &Path) -> Option<Self> {
        Self::parse(&fs::read_to_string(path).ok()?)
    }

    /// Whether the agent that wrote this record is gone.
    fn agent_is_gone(&self, root: &HostRoot) -> bool {
        match ProcStat::read(root, self.agent_pid) {
            Ok(stat) => stat.start_time != self.agent_start,
            // No such process (or it vanished while being read).
            Err(_) => !sysfs::exists(&root.path(format!("proc/{}", self.agent_pid))),
        }
    }
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Removes the record, if any.
pub fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(error) if error.kind() != io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// What DAMON's sysfs shows of kdamond 0, for comparison with a record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KdamondState {
    pub nr_kdamonds: u32,
    pub running: bool,
    pub pid: Option<u32>,
    pub operations: String,
    pub targets: Vec<u32>,
}

impl KdamondState {
    /// Reads kdamond 0 under DAMON's admin directory; `None` if any part is missing or
    /// unreadable (then nothing is proven).
    pub fn read(admin: &Path) -> Option<Self> {
        let kdamond = admin.join("kdamonds/0");
        let context = kdamond.join("contexts/0");
        let nr_targets: usize = sysfs::read_parse(&context.join("targets/nr_targets")).ok()?;
        let targets = (0..nr_targets)
            .map(|index| {
                sysfs::read_parse(&context.join(format!("targets/{index}/pid_target"))).ok()
            })
            .collect::<Option<Vec<u32>>>()?;
        let pid: i64 = sysfs::read_parse(&kdamond.join("pid")).ok()?;
        Some(Self {
            nr_kdamonds: sysfs::read_parse(&admin.join("kdamonds/nr_kdamonds")).ok()?,
            running: sysfs::read_trimmed(&kdamond.join("state")).ok()? == "on",
            pid: u32::try_from(pid).ok().filter(|&pid| pid > 0),
            operations: sysfs::read_trimmed(&context.join("operations")).ok()?,
            targets,
        })
    }
}

/// Whether `state` is the kdamond `record` describes, left behind by an agent that is gone.
#[must_use]
pub fn is_left_behind(record: &OwnerRecord, state: &KdamondState, root: &HostRoot) -> bool {
    state.nr_kdamonds == 1
        && state.operations == "vaddr"
        && state.targets == record.targets
        && (!state.running || state.pid == record.kdamond_pid)
        && record.agent_is_gone(root)
}

/// Writes `proc/PID/stat` under the fixture root `root` for a process started at `start` ticks.
#[cfg(test)]
pub(crate) fn fake_process(root: &Path, pid: u32, start: u64) {
    let proc_dir = root.join(format!("proc/{pid}"));
    fs::create_dir_all(&proc_dir).unwrap();
    fs::write(
        proc_dir.join("stat"),
        format!("{pid} (memtide) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 {start} 0 0"),
    )
    .unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> OwnerRecord {
        OwnerRecord {
            agent_pid: 4242,
            agent_start: 777,
            kdamond_pid: Some(99),
            targets: vec![10, 11],
        }
    }

    fn state() -> KdamondState {
        KdamondState {
            nr_kdamonds: 1,
            running: true,
            pid: Some(99),
            operations: "vaddr".to_owned(),
            targets: vec![10, 11],
        }
    }

    fn root_with_process(pid: u32, start: u64) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fake_process(dir.path(), pid, start);
        dir
    }

    #[test]
    fn the_record_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/memtide/kdamond");
        let mut written = record();
        written.write(&path).unwrap();
        assert_eq!(OwnerRecord::read(&path), Some(written.clone()));
        written.kdamond_pid = None;
        written.targets.clear();
        written.write(&path).unwrap();
        assert_eq!(OwnerRecord::read(&path), Some(written));
        remove(&path).unwrap();
        assert_eq!(OwnerRecord::read(&path), None);
        remove(&path).unwrap();
    }

    #[test]
    fn a_torn_or_foreign_file_is_no_record() {
        for text in [
            "",
            "agent_pid=1\n",
            "agent_pid=x\nagent_start=1\nkdamond_pid=-\ntargets=\n",
            "agent_pid=1\nagent_start=1\nkdamond_pid=-\ntargets=1 two\n",
        ] {
            assert_eq!(OwnerRecord::parse(text), None, "{text:?}");
        }
    }

    #[test]
    fn only_the_recorded_kdamond_of_a_dead_agent_is_left_behind() {
        let no_agent = tempfile::tempdir().unwrap();
        let root = HostRoot::new(no_agent.path());
        assert!(is_left_behind(&record(), &state(), &root));
        // Off (every target exited): its thread is gone, the targets still match.
        let off = KdamondState {
            running: false,
            pid: None,
            ..state()
        };
        assert!(is_left_behind(&record(), &off, &root));

        let not_ours = [
            KdamondState {
                pid: Some(100),
                ..state()
            },
            KdamondState {
                targets: vec![10],
                ..state()
            },
            KdamondState {
                operations: "paddr".to_owned(),
                ..state()
            },
            KdamondState {
                nr_kdamonds: 2,
                ..state()
            },
        ];
        for state in not_ours {
            assert!(!is_left_behind(&record(), &state, &root), "{state:?}");
        }
    }

    #[test]
    fn a_live_agent_keeps_its_kdamond_and_a_reused_pid_does_not() {
        let alive = root_with_process(4242, 777);
        assert!(!is_left_behind(
            &record(),
            &state(),
            &HostRoot::new(alive.path())
        ));
        let reused = root_with_process(4242, 778);
        assert!(is_left_behind(
            &record(),
            &state(),
            &HostRoot::new(reused.path())
        ));
    }
}
