//! The processes memtide manages, and what it reads about them.
//!
//! - [`Target`]: one process, held through a pidfd so that a pid reused after the process exits
//!   is never touched;
//! - [`select`]: which processes are targets (pid, cgroup v2, name pattern, Kubernetes pod, an
//!   exclude list; never memtide itself, never kernel threads);
//! - [`maps`], [`numa_maps`], [`smaps`]: parsers for `/proc/PID/{maps,numa_maps,smaps}`;
//! - [`placement`]: the batched move_pages query telling which node each page is on, after
//!   [`pagemap`] says which pages are present.

pub mod maps;
pub mod numa_maps;
pub mod pagemap;
pub mod placement;
pub mod select;
pub mod smaps;

use std::{
    io,
    os::fd::{AsFd as _, OwnedFd},
    path::{Path, PathBuf},
};

use serde::Serialize;

use crate::{
    sys::pidfd,
    sysfs::{self, HostRoot, SysfsError},
};

/// `PF_KTHREAD` in `/proc/PID/stat`'s flags field (include/linux/sched.h).
const PF_KTHREAD: u64 = 0x0020_0000;

/// A failure concerning one target process.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// A file about the process could not be read or parsed.
    #[error("pid {pid}: {source}")]
    Read {
        pid: u32,
        #[source]
        source: SysfsError,
    },
    /// The process has exited (or never existed): its pidfd reports it, or the kernel says
    /// `ESRCH`.
    #[error("pid {pid}: the process has exited")]
    Exited { pid: u32 },
    /// memtide never manages itself.
    #[error("pid {pid}: refusing to target memtide itself")]
    IsSelf { pid: u32 },
    /// Kernel threads have no user memory to move.
    #[error("pid {pid} ({comm}): refusing to target a kernel thread")]
    KernelThread { pid: u32, comm: String },
    /// A system call on the process failed.
    #[error("pid {pid}: {call}: {source}")]
    Syscall {
        pid: u32,
        call: &'static str,
        #[source]
        source: io::Error,
    },
    /// A selector that cannot be resolved (no such cgroup, no such pod).
    #[error("{}: {what}", path.display())]
    Selector { path: PathBuf, what: String },
}

impl TargetError {
    /// The error for a failed system call on `pid`; `ESRCH` becomes [`Self::Exited`].
    #[must_use]
    pub fn syscall(pid: u32, call: &'static str, source: io::Error) -> Self {
        if source.raw_os_error() == Some(libc::ESRCH) {
            Self::Exited { pid }
        } else {
            Self::Syscall { pid, call, source }
        }
    }

    /// Whether the error means the process is gone.
    #[must_use]
    pub const fn is_exited(&self) -> bool {
        matches!(self, Self::Exited { .. })
    }
}

/// What `/proc/PID/stat` says about a process.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ProcStat {
    pub pid: u32,
    /// The command name (up to 15 bytes; may contain spaces and parentheses).
    pub comm: String,
    pub state: char,
    pub ppid: u32,
    /// `PF_*` flags.
    pub flags: u64,
    /// Start time in clock ticks after boot: with the pid, identifies a process instance.
    pub start_time: u64,
    /// The CPU the task last ran on.
    pub processor: Option<u32>,
}

impl ProcStat {
    /// Parses `/proc/PID/stat`. `comm` sits in parentheses and may itself contain `)` and
    /// spaces, so the fields are counted from the last `)`.
    pub fn parse(path: &Path, text: &str) -> Result<Self, SysfsError> {
        let bad = || SysfsError::parse(path, text.trim(), "a /proc/PID/stat line");
        let open = text.find('(').ok_or_else(bad)?;
        let close = text.rfind(')').ok_or_else(bad)?;
        if close < open {
            return Err(bad());
        }
        let pid = text[..open].trim().parse().map_err(|_| bad())?;
        let comm = text[open + 1..close].to_owned();
        let fields: Vec<&str> = text[close + 1..].split_whitespace().collect();
        // After comm: state(0) ppid(1) pgrp session tty_nr tpgid flags(6) ... starttime(19).
        let field = |i: usize| fields.get(i).copied().ok_or_else(bad);
        Ok(Self {
            pid,
            comm,
            state: field(0)?.chars().next().ok_or_else(bad)?,
            ppid: field(1)?.parse().map_err(|_| bad())?,
            flags: field(6)?.parse().map_err(|_| bad())?,
            start_time: field(19)?.parse().map_err(|_| bad())?,
            processor: fields.get(36).and_then(|cpu| cpu.parse().ok()),
        })
    }

    /// Reads `/proc/PID/stat` under `root`.
    pub fn read(root: &HostRoot, pid: u32) -> Result<Self, TargetError> {
        let path = root.path(format!("proc/{pid}/stat"));
        let text = sysfs::read_trimmed(&path).map_err(|source| read_error(pid, source))?;
        Self::parse(&path, &text).map_err(|source| TargetError::Read { pid, source })
    }

    /// A kernel thread (no user memory), by its `PF_KTHREAD` flag, or kthreadd and its
    /// children.
    #[must_use]
    pub const fn is_kernel_thread(&self) -> bool {
        self.flags & PF_KTHREAD != 0 || self.pid == 2 || self.ppid == 2
    }
}

/// `NotFound` on a `/proc/PID` file means the process is gone.
fn read_error(pid: u32, source: SysfsError) -> TargetError {
    match &source {
        SysfsError::Io { source: io, .. }
            if matches!(io.kind(), io::ErrorKind::NotFound)
                || io.raw_os_error() == Some(libc::ESRCH) =>
        {
            TargetError::Exited { pid }
        }
        _ => TargetError::Read { pid, source },
    }
}

/// One managed process, held through a pidfd.
///
/// Every operation by pid goes through [`Target::with_pid`], which checks the pidfd before and
/// after: a pid is only reused after its process has exited *and been reaped*, and the pidfd
/// reports the exit, so a result obtained while the pidfd still says "alive" concerns this
/// process. (A reap and a wrap-around of the whole pid space within one system call is the
/// residual window; the kernel offers no pidfd-taking move_pages to close it.)
#[derive(Debug)]
pub struct Target {
    pid: u32,
    pidfd: OwnedFd,
    stat: ProcStat,
    /// The root its `/proc` files are read under, the one it was opened with.
    root: HostRoot,
}

impl Target {
    /// Opens process `pid` of this machine, whose `/proc` files are read under `root` from
    /// then on. Refuses memtide itself and kernel threads.
    pub fn open(root: &HostRoot, pid: u32) -> Result<Self, TargetError> {
        if pid == std::process::id() {
            return Err(TargetError::IsSelf { pid });
        }
        let pidfd =
            pidfd::pidfd_open(pid).map_err(|e| TargetError::syscall(pid, "pidfd_open", e))?;
        // Read after opening the pidfd: if the process is still alive afterwards, what was read
        // is about the process the pidfd names.
        let stat = ProcStat::read(root, pid)?;
        let target = Self {
            pid,
            pidfd,
            stat,
            root: root.clone(),
        };
        target.check_alive()?;
        if target.stat.is_kernel_thread() {
            return Err(TargetError::KernelThread {
                pid,
                comm: target.stat.comm,
            });
        }
        Ok(target)
    }

    #[must_use]
    pub const fn pid(&self) -> u32 {
        self.pid
    }

    /// `/proc/PID/stat` as read when the target was opened.
    #[must_use]
    pub const fn stat(&self) -> &ProcStat {
        &self.stat
    }

    /// The pidfd (for process_madvise).
    #[must_use]
    pub fn pidfd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// Whether the process has exited.
    pub fn exited(&self) -> Result<bool, TargetError> {
        pidfd::pidfd_exited(self.pidfd.as_fd())
            .map_err(|e| TargetError::syscall(self.pid, "poll(pidfd)", e))
    }

    /// `Err(Exited)` once the process has exited.
    pub fn check_alive(&self) -> Result<(), TargetError> {
        if self.exited()? {
            Err(TargetError::Exited { pid: self.pid })
        } else {
            Ok(())
        }
    }

    /// Runs `f` with the pid while the pidfd says the process is alive, before and after. An
    /// `ESRCH` from `f` (mapped through [`TargetError::syscall`]) is an exit too.
    pub fn with_pid<T>(
        &self,
        f: impl FnOnce(u32) -> Result<T, TargetError>,
    ) -> Result<T, TargetError> {
        self.check_alive()?;
        let result = f(self.pid);
        self.check_alive()?;
        result
    }

    /// Reads and parses `/proc/PID/<file>` with `parse` while the process is alive.
    fn read_proc<T>(
        &self,
        file: &str,
        parse: impl FnOnce(&Path, &str) -> Result<T, SysfsError>,
    ) -> Result<T, TargetError> {
        self.with_pid(|pid| {
            let path = self.root.path(format!("proc/{pid}/{file}"));
            let text = sysfs::read_trimmed(&path).map_err(|e| read_error(pid, e))?;
            parse(&path, &text).map_err(|source| TargetError::Read { pid, source })
        })
    }

    /// `/proc/PID/maps`.
    pub fn maps(&self) -> Result<Vec<maps::Mapping>, TargetError> {
        self.read_proc("maps", maps::parse)
    }

    /// `/proc/PID/numa_maps`.
    pub fn numa_maps(&self) -> Result<Vec<numa_maps::NumaMap>, TargetError> {
        self.read_proc("numa_maps", numa_maps::parse)
    }

    /// `/proc/PID/smaps`.
    pub fn smaps(&self) -> Result<Vec<smaps::SmapsEntry>, TargetError> {
        self.read_proc("smaps", smaps::parse)
    }

    /// The CPUs the process's threads last ran on, one per thread (`/proc/PID/task/*/stat`):
    /// where its accesses come from when no sample says.
    pub fn thread_cpus(&self) -> Result<Vec<u32>, TargetError> {
        self.with_pid(|pid| {
            let tasks = self.root.path(format!("proc/{pid}/task"));
            let names = sysfs::dir_names(&tasks)
                .map_err(|e| read_error(pid, e))?
                .unwrap_or_default();
            Ok(names
                .iter()
                .filter_map(|tid| {
                    let path = tasks.join(tid).join("stat");
                    let text = std::fs::read_to_string(&path).ok()?;
                    ProcStat::parse(&path, &text).ok()?.processor
                })
                .collect())
        })
    }

    /// Bytes the process has locked in memory (`VmLck` of `/proc/PID/status`): whether its
    /// smaps, a page-table walk, is worth reading for the `lo` flag.
    pub fn locked_bytes(&self) -> Result<u64, TargetError> {
        self.read_proc("status", |path, text| {
            text.lines()
                .find_map(|line| line.strip_prefix("VmLck:"))
                .map_or(Ok(0), |value| {
                    value
                        .trim()
                        .trim_end_matches("kB")
                        .trim()
                        .parse::<u64>()
                        .map(|kb| kb.saturating_mul(1024))
                        .map_err(|_| SysfsError::parse(path, value.trim(), "VmLck: N kB"))
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_comm() {
        let text = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194560 100 0 0 0 5 3 0 0 20 0 1 0 98765 1000 200 18446744073709551615";
        let stat = ProcStat::parse(Path::new("stat"), text).unwrap();
        assert_eq!(stat.pid, 1234);
        assert_eq!(stat.comm, "my (odd) name");
        assert_eq!((stat.state, stat.ppid), ('S', 1));
        assert_eq!(stat.flags, 4_194_560);
        assert_eq!(stat.start_time, 98_765);
        assert_eq!(stat.processor, None, "a short line has no processor field");
        assert!(!stat.is_kernel_thread());
    }

    #[test]
    fn stat_names_the_cpu_the_task_last_ran_on() {
        // A whole line of Linux 6.x: processor is the 39th field.
        let text = "4242 (worker) R 1 4242 4242 0 -1 4194304 120 0 0 0 3 1 0 0 20 0 2 0 9876 \
                    12345678 300 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
        let stat = ProcStat::parse(Path::new("stat"), text).unwrap();
        assert_eq!(stat.processor, Some(3));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let cpus = Target::open(&HostRoot::default(), child.id())
            .unwrap()
            .thread_cpus();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(cpus.unwrap().len(), 1, "sleep has one thread");
    }

    #[test]
    fn kernel_threads_are_recognised() {
        let kworker =
            "57 (kworker/0:1-events) I 2 0 0 0 -1 69238880 0 0 0 0 0 0 0 0 20 0 1 0 200 0 0";
        let stat = ProcStat::parse(Path::new("stat"), kworker).unwrap();
        assert!(stat.is_kernel_thread());
        let kthreadd = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert!(
            ProcStat::parse(Path::new("stat"), kthreadd)
                .unwrap()
                .is_kernel_thread()
        );
    }

    #[test]
    fn malformed_stat() {
        for bad in [
            "",
            "12 (x",
            "12 x) S",
            "x (a) S 1 2 3 4 5 6",
            "12 (a) S 1 2",
        ] {
            assert!(
                ProcStat::parse(Path::new("/proc/12/stat"), bad).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn refuses_self() {
        let err = Target::open(&HostRoot::default(), std::process::id()).unwrap_err();
        assert!(matches!(err, TargetError::IsSelf { .. }), "{err}");
    }

    #[test]
    fn refuses_kernel_thread() {
        // kthreadd is pid 2 on every Linux system with a normal pid namespace.
        let stat = ProcStat::read(&HostRoot::default(), 2);
        if stat.is_ok_and(|s| s.comm == "kthreadd") {
            let err = Target::open(&HostRoot::default(), 2).unwrap_err();
            assert!(matches!(err, TargetError::KernelThread { .. }), "{err}");
        }
    }

    #[test]
    fn missing_process_is_exited() {
        let dir = tempfile::tempdir().unwrap();
        let err = ProcStat::read(&HostRoot::new(dir.path()), 42).unwrap_err();
        assert!(err.is_exited(), "{err}");
    }
}
