//! Running DAMON virtual-address monitoring for memtide's targets, through sysfs.
//!
//! memtide only ever uses DAMON when nobody else does: it starts from `nr_kdamonds == 0`,
//! creates exactly one kdamond, and on stop (or drop) turns it off and removes it. It never
//! writes to DAMON's sysfs while a kdamond it did not create exists: writing `nr_kdamonds`
//! would tear down (or fail with EBUSY on) someone else's monitoring. The one kdamond it
//! removes without having created it is the one its ownership record proves a killed memtide
//! agent left behind (see [`super::owner`]).
//!
//! The tracepoint `damon:damon_aggregated` reports regions by target *index*; this module
//! keeps the index → pid table ([`DamonMonitor::target_pid`]).

use memtide_config::DamonMonitorConfig;
use std::path::{Path, PathBuf};

use memtide_common::DamonFieldOffsets;

use super::{
    owner::{self, KdamondState, OwnerRecord},
    resolution,
};
use memtide_host::probe::damon::ADMIN_DIR;
use memtide_host::sysfs::{self, HostRoot, SysfsError};

#[derive(Debug, thiserror::Error)]
pub enum DamonError {
    #[error(
        "DAMON is not available: {} does not exist (kernel without CONFIG_DAMON_SYSFS)",
        .0.display()
    )]
    NotPresent(PathBuf),
    #[error(
        "DAMON is busy: {0} kdamond(s) exist that memtide did not start (or that a killed \
         memtide left without a record in [sources.damon] owner_file); memtide never stops or \
         reconfigures them. Stop them yourself (echo off > .../kdamonds/N/state; echo 0 > \
         .../nr_kdamonds) or choose another source"
    )]
    Busy(u32),
    #[error(
        "DAMON has no virtual-address operations here (avail_operations: {0}); memtide needs \
         vaddr (CONFIG_DAMON_VADDR)"
    )]
    NoVaddr(String),
    #[error("DAMON sysfs: {0}")]
    Sysfs(#[from] SysfsError),
    #[error("tracepoint format {}: {what}", path.display())]
    Format { path: PathBuf, what: String },
}

/// The kdamond memtide started. Stopped and removed on [`DamonMonitor::stop`] or drop.
#[derive(Debug)]
pub struct DamonMonitor {
    admin: PathBuf,
    config: DamonMonitorConfig,
    /// Target index → pid, as last committed.
    targets: Vec<u32>,
    kdamond_pid: Option<u32>,
    owned: bool,
    /// Where the ownership record lives (under the host root); `None`: no record kept.
    owner_file: Option<PathBuf>,
    root: HostRoot,
    /// Warn only once that the record could not be written.
    owner_file_failed: bool,
}

impl DamonMonitor {
    /// Creates and starts one kdamond monitoring `pids` with vaddr operations.
    pub fn start(
        root: &HostRoot,
        config: &DamonMonitorConfig,
        pids: &[u32],
    ) -> Result<Self, DamonError> {
        let admin = root.path(ADMIN_DIR);
        let nr_path = admin.join("kdamonds/nr_kdamonds");
        if !sysfs::exists(&nr_path) {
            return Err(DamonError::NotPresent(admin));
        }
        let owner_file =
            (!config.owner_file.as_os_str().is_empty()).then(|| root.path(&config.owner_file));
        let existing: u32 = sysfs::read_parse(&nr_path)?;
        if existing != 0 && !remove_left_behind(root, &admin, owner_file.as_deref())? {
            return Err(DamonError::Busy(existing));
        }
        sysfs::write_value(&nr_path, "1").map_err(|error| match &error {
            SysfsError::Io { source, .. } if source.raw_os_error() == Some(libc::EBUSY) => {
                DamonError::Busy(1)
            }
            _ => DamonError::Sysfs(error),
        })?;
        // From here on the kdamond is ours; drop removes it again if setup fails.
        let mut monitor = Self {
            admin,
            config: config.clone(),
            targets: Vec::new(),
            kdamond_pid: None,
            owned: true,
            owner_file,
            root: root.clone(),
            owner_file_failed: false,
        };
        monitor.record_ownership();
        monitor.configure(pids)?;
        Ok(monitor)
    }

    fn kdamond(&self) -> PathBuf {
        self.admin.join("kdamonds/0")
    }

    fn context(&self) -> PathBuf {
        self.kdamond().join("contexts/0")
    }

    fn configure(&mut self, pids: &[u32]) -> Result<(), DamonError> {
        sysfs::write_value(&self.kdamond().join("contexts/nr_contexts"), "1")?;
        let context = self.context();
        let available = sysfs::read_trimmed(&context.join("avail_operations"))?;
        if !available.split_whitespace().any(|op| op == "vaddr") {
            return Err(DamonError::NoVaddr(available));
        }
        sysfs::write_value(&context.join("operations"), "vaddr")?;
        let intervals = context.join("monitoring_attrs/intervals");
        sysfs::write_value(
            &intervals.join("sample_us"),
            &self.config.sample_us.to_string(),
        )?;
        sysfs::write_value(&intervals.join("aggr_us"), &self.config.aggr_us.to_string())?;
        sysfs::write_value(
            &intervals.join("update_us"),
            &self.config.update_us.to_string(),
        )?;
        // max before min: the kernel rejects min > max at every intermediate step, and the
        // minimum never exceeds the maximum (`resolution::min_regions`).
        let regions = context.join("monitoring_attrs/nr_regions");
        sysfs::write_value(&regions.join("max"), &self.config.max_regions.to_string())?;
        self.write_targets(pids)?;
        self.write_min_regions(pids)?;
        if !pids.is_empty() {
            sysfs::write_value(&self.kdamond().join("state"), "on")?;
            self.kdamond_pid = self.read_pid()?;
        }
        self.record_ownership();
        Ok(())
    }

    /// Writes the ownership record with the current kdamond thread and targets. A failure
    /// costs only the clean-up after a SIGKILL, so it is logged (once), never fatal.
    fn record_ownership(&mut self) {
        let Some(path) = &self.owner_file else {
            return;
        };
        let written = OwnerRecord::for_this_agent(&self.root, self.kdamond_pid, &self.targets)
            .and_then(|record| record.write(path));
        if let Err(error) = written
            && !self.owner_file_failed
        {
            self.owner_file_failed = true;
            tracing::warn!(
                path = %path.display(),
                %error,
                "cannot record the kdamond memtide started ([sources.damon] owner_file): if \
                 this agent is killed, the next one will find DAMON busy"
            );
        }
    }

    fn write_targets(&mut self, pids: &[u32]) -> Result<(), SysfsError> {
        let targets = self.context().join("targets");
        sysfs::write_value(&targets.join("nr_targets"), &pids.len().to_string())?;
        for (index, pid) in pids.iter().enumerate() {
            sysfs::write_value(
                &targets.join(format!("{index}/pid_target")),
                &pid.to_string(),
            )?;
        }
        self.targets = pids.to_vec();
        Ok(())
    }

    /// Asks DAMON for regions no larger than `region_bytes` of the span `pids` cover together
    /// (see [`resolution`]). Committed with the targets.
    fn write_min_regions(&self, pids: &[u32]) -> Result<(), SysfsError> {
        let span = resolution::targets_span(&self.root, pids);
        let min = resolution::min_regions(&self.config, span);
        let path = self.context().join("monitoring_attrs/nr_regions/min");
        sysfs::write_value(&path, &min.to_string())?;
        tracing::debug!(
            min_regions = min,
            span_mib = span >> 20,
            "DAMON regions for the targets"
        );
        Ok(())
    }

    fn read_pid(&self) -> Result<Option<u32>, SysfsError> {
        let pid: i64 = sysfs::read_parse(&self.kdamond().join("pid"))?;
        Ok(u32::try_from(pid).ok().filter(|&pid| pid > 0))
    }

    fn state(&self) -> Result<String, SysfsError> {
        sysfs::read_trimmed(&self.kdamond().join("state"))
    }

    /// Replaces the monitored processes. Running: committed online (`state` ← `commit`);
    /// an empty list turns the kdamond off, a non-empty one turns it (back) on.
    pub fn set_targets(&mut self, pids: &[u32]) -> Result<(), DamonError> {
        let running = self.state()? == "on";
        if pids.is_empty() {
            if running {
                sysfs::write_value(&self.kdamond().join("state"), "off")?;
            }
            self.targets.clear();
            self.kdamond_pid = None;
            self.record_ownership();
            return Ok(());
        }
        self.write_targets(pids)?;
        self.write_min_regions(pids)?;
        let state = if running { "commit" } else { "on" };
        sysfs::write_value(&self.kdamond().join("state"), state)?;
        self.kdamond_pid = self.read_pid()?;
        self.record_ownership();
        Ok(())
    }

    /// The pid of DAMON target `index` (the tracepoint's `target_id`).
    #[must_use]
    pub fn target_pid(&self, index: u64) -> Option<u32> {
        usize::try_from(index)
            .ok()
            .and_then(|index| self.targets.get(index).copied())
    }

    /// The kdamond thread's pid while it runs.
    #[must_use]
    pub fn kdamond_pid(&self) -> Option<u32> {
        self.kdamond_pid
    }

    /// Whether the kdamond still runs. DAMON stops a vaddr kdamond by itself once every
    /// target has exited; the caller then restarts it with the live targets.
    pub fn is_running(&self) -> Result<bool, DamonError> {
        Ok(self.state()? == "on")
    }

    /// Whether the kdamond is off although it has targets to watch: someone turned it off
    /// (or removed it), or every target exited (DAMON then stops a vaddr kdamond by itself).
    pub fn stopped(&self) -> Result<bool, DamonError> {
        Ok(!self.targets.is_empty() && !self.is_running()?)
    }

    #[must_use]
    pub fn config(&self) -> &DamonMonitorConfig {
        &self.config
    }

    /// Turns the kdamond off and removes it. Idempotent.
    pub fn stop(&mut self) -> Result<(), DamonError> {
        if !self.owned {
            return Ok(());
        }
        let state_path = self.kdamond().join("state");
        if sysfs::read_optional(&state_path)?.as_deref() == Some("on") {
            sysfs::write_value(&state_path, "off")?;
        }
        sysfs::write_value(&self.admin.join("kdamonds/nr_kdamonds"), "0")?;
        self.owned = false;
        self.kdamond_pid = None;
        if let Some(path) = &self.owner_file
            && let Err(error) = owner::remove(path)
        {
            tracing::warn!(path = %path.display(), %error, "removing the kdamond record");
        }
        Ok(())
    }
}

/// Removes the kdamond a killed agent left behind, if `owner_file` proves it was that agent's
/// (see [`owner`]); `Ok(false)` leaves DAMON untouched.
fn remove_left_behind(
    root: &HostRoot,
    admin: &Path,
    owner_file: Option<&Path>,
) -> Result<bool, DamonError> {
    let Some(path) = owner_file else {
        return Ok(false);
    };
    let Some(record) = OwnerRecord::read(path) else {
        return Ok(false);
    };
    let Some(state) = KdamondState::read(admin) else {
        return Ok(false);
    };
    if !owner::is_left_behind(&record, &state, root) {
        return Ok(false);
    }
    if state.running {
        sysfs::write_value(&admin.join("kdamonds/0/state"), "off")?;
    }
    sysfs::write_value(&admin.join("kdamonds/nr_kdamonds"), "0")?;
    if let Err(error) = owner::remove(path) {
        tracing::warn!(path = %path.display(), %error, "removing the kdamond record");
    }
    tracing::warn!(
        agent_pid = record.agent_pid,
        kdamond_pid = ?record.kdamond_pid,
        targets = ?record.targets,
        "removed the kdamond a memtide agent that is gone left running (killed without a clean stop)"
    );
    Ok(true)
}

impl Drop for DamonMonitor {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::error!(%error, "could not stop the kdamond memtide started");
        }
    }
}

/// Reads the field offsets of `damon:damon_aggregated` from tracefs' format file.
pub fn damon_aggregated_offsets(tracefs: &Path) -> Result<DamonFieldOffsets, DamonError> {
    let path = tracefs.join("events/damon/damon_aggregated/format");
    let text = sysfs::read_trimmed(&path)?;
    parse_format(&text).map_err(|what| DamonError::Format { path, what })
}

fn parse_format(text: &str) -> Result<DamonFieldOffsets, String> {
    let field = |name: &str, size: u32| -> Result<u32, String> {
        for line in text.lines() {
            let mut declaration = None;
            let mut offset = None;
            let mut field_size = None;
            for part in line.split(';') {
                let part = part.trim();
                if let Some(rest) = part.strip_prefix("field:") {
                    declaration = Some(rest.trim());
                } else if let Some(rest) = part.strip_prefix("offset:") {
                    offset = rest.trim().parse::<u32>().ok();
                } else if let Some(rest) = part.strip_prefix("size:") {
                    field_size = rest.trim().parse::<u32>().ok();
                }
            }
            let Some(declaration) = declaration else {
                continue;
            };
            if declaration
                .rsplit(|c: char| c.is_whitespace() || c == '*')
                .next()
                != Some(name)
            {
                continue;
            }
            let offset = offset.ok_or_else(|| format!("field {name} has no offset"))?;
            let field_size = field_size.ok_or_else(|| format!("field {name} has no size"))?;
            if field_size != size {
                return Err(format!(
                    "field {name} is {field_size} bytes, expected {size}"
                ));
            }
            return Ok(offset);
        }
        Err(format!("no field {name}"))
    };
    Ok(DamonFieldOffsets {
        target_id: field("target_id", 8)?,
        nr_regions: field("nr_regions", 4)?,
        start: field("start", 8)?,
        end: field("end", 8)?,
        nr_accesses: field("nr_accesses", 4)?,
        age: field("age", 4)?,
    })
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    /// The format file as read live on the 6.18 host (see docs/development.md).
    const FORMAT_6_18: &str = "name: damon_aggregated
ID: 767
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:unsigned long target_id;\toffset:8;\tsize:8;\tsigned:0;
\tfield:unsigned int nr_regions;\toffset:16;\tsize:4;\tsigned:0;
\tfield:unsigned long start;\toffset:24;\tsize:8;\tsigned:0;
\tfield:unsigned long end;\toffset:32;\tsize:8;\tsigned:0;
\tfield:unsigned int nr_accesses;\toffset:40;\tsize:4;\tsigned:0;
\tfield:unsigned int age;\toffset:44;\tsize:4;\tsigned:0;

print fmt: \"target_id=%lu nr_regions=%u %lu-%lu: %u %u\"";

    #[test]
    fn offsets_come_from_the_format_file() {
        let offsets = parse_format(FORMAT_6_18).unwrap();
        assert_eq!(
            offsets,
            DamonFieldOffsets {
                target_id: 8,
                nr_regions: 16,
                start: 24,
                end: 32,
                nr_accesses: 40,
                age: 44
            }
        );
    }

    #[test]
    fn a_moved_field_moves_its_offset_and_a_missing_one_is_an_error() {
        let moved = FORMAT_6_18.replace("offset:44;", "offset:48;");
        assert_eq!(parse_format(&moved).unwrap().age, 48);
        let missing = FORMAT_6_18.replace("unsigned int age;", "unsigned int aged;");
        assert_eq!(parse_format(&missing).unwrap_err(), "no field age");
        let resized =
            FORMAT_6_18.replace("start;\toffset:24;\tsize:8", "start;\toffset:24;\tsize:4");
        assert!(
            parse_format(&resized)
                .unwrap_err()
                .contains("start is 4 bytes")
        );
    }

    /// A fake admin tree shaped like the kernel's after `nr_kdamonds` = 1.
    fn admin_tree(nr_kdamonds: u32, avail: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let admin = dir.path().join(ADMIN_DIR);
        let ctx = admin.join("kdamonds/0/contexts/0");
        for sub in [
            "monitoring_attrs/intervals",
            "monitoring_attrs/nr_regions",
            "targets/0",
            "targets/1",
        ] {
            fs::create_dir_all(ctx.join(sub)).unwrap();
        }
        fs::write(admin.join("kdamonds/nr_kdamonds"), nr_kdamonds.to_string()).unwrap();
        fs::write(admin.join("kdamonds/0/state"), "off\n").unwrap();
        fs::write(admin.join("kdamonds/0/pid"), "-1\n").unwrap();
        fs::write(ctx.join("avail_operations"), avail).unwrap();
        dir
    }

    fn read(dir: &tempfile::TempDir, relative: &str) -> String {
        fs::read_to_string(dir.path().join(ADMIN_DIR).join(relative))
            .unwrap()
            .trim()
            .to_owned()
    }

    #[test]
    fn start_configures_vaddr_monitoring_of_the_targets_and_stop_removes_it() {
        let dir = admin_tree(0, "vaddr fvaddr paddr\n");
        let root = HostRoot::new(dir.path());
        let mut monitor =
            DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[41, 42]).unwrap();
        assert_eq!(read(&dir, "kdamonds/nr_kdamonds"), "1");
        assert_eq!(read(&dir, "kdamonds/0/contexts/0/operations"), "vaddr");
        assert_eq!(
            read(
                &dir,
                "kdamonds/0/contexts/0/monitoring_attrs/intervals/aggr_us"
            ),
            "100000"
        );
        assert_eq!(
            read(
                &dir,
                "kdamonds/0/contexts/0/monitoring_attrs/nr_regions/max"
            ),
            "1000"
        );
        // Neither target's maps can be read here: the configured floor.
        assert_eq!(
            read(
                &dir,
                "kdamonds/0/contexts/0/monitoring_attrs/nr_regions/min"
            ),
            "10"
        );
        assert_eq!(read(&dir, "kdamonds/0/contexts/0/targets/nr_targets"), "2");
        assert_eq!(
            read(&dir, "kdamonds/0/contexts/0/targets/1/pid_target"),
            "42"
        );
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
        assert_eq!(monitor.target_pid(1), Some(42));
        assert_eq!(monitor.target_pid(2), None);
        monitor.stop().unwrap();
        assert_eq!(read(&dir, "kdamonds/0/state"), "off");
        assert_eq!(read(&dir, "kdamonds/nr_kdamonds"), "0");
    }

    #[test]
    fn regions_follow_the_targets_span_when_they_change() {
        let dir = admin_tree(0, "vaddr\n");
        let root = HostRoot::new(dir.path());
        // 300 MiB in one mapping, then a second target of 100 MiB.
        for (pid, maps) in [
            (41, "7f0000000000-7f0012c00000 rw-p 00000000 00:00 0\n"),
            (42, "7f1000000000-7f1006400000 rw-p 00000000 00:00 0\n"),
        ] {
            fs::create_dir_all(dir.path().join(format!("proc/{pid}"))).unwrap();
            fs::write(dir.path().join(format!("proc/{pid}/maps")), maps).unwrap();
        }
        let min = "kdamonds/0/contexts/0/monitoring_attrs/nr_regions/min";
        let mut monitor =
            DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[41]).unwrap();
        assert_eq!(read(&dir, min), "150");
        monitor.set_targets(&[41, 42]).unwrap();
        assert_eq!(read(&dir, min), "200");
        assert_eq!(read(&dir, "kdamonds/0/state"), "commit");
    }

    /// A fatal error returns from `memtide run` through the monitor's drop: that alone must
    /// release the kdamond.
    #[test]
    fn dropping_a_running_monitor_removes_its_kdamond() {
        let dir = admin_tree(0, "vaddr paddr\n");
        let monitor = DamonMonitor::start(
            &HostRoot::new(dir.path()),
            &DamonMonitorConfig::default(),
            &[7],
        )
        .unwrap();
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
        drop(monitor);
        assert_eq!(read(&dir, "kdamonds/0/state"), "off");
        assert_eq!(read(&dir, "kdamonds/nr_kdamonds"), "0");
    }

    #[test]
    fn a_kdamond_turned_off_from_outside_reads_as_stopped() {
        let dir = admin_tree(0, "vaddr\n");
        let monitor = DamonMonitor::start(
            &HostRoot::new(dir.path()),
            &DamonMonitorConfig::default(),
            &[7],
        )
        .unwrap();
        assert!(!monitor.stopped().unwrap());
        fs::write(dir.path().join(ADMIN_DIR).join("kdamonds/0/state"), "off\n").unwrap();
        assert!(monitor.stopped().unwrap());
    }

    #[test]
    fn an_existing_kdamond_is_never_touched() {
        let dir = admin_tree(1, "paddr\n");
        fs::write(dir.path().join(ADMIN_DIR).join("kdamonds/0/state"), "on\n").unwrap();
        let error = DamonMonitor::start(
            &HostRoot::new(dir.path()),
            &DamonMonitorConfig::default(),
            &[1],
        )
        .unwrap_err();
        assert!(matches!(error, DamonError::Busy(1)), "{error}");
        assert_eq!(read(&dir, "kdamonds/nr_kdamonds"), "1");
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
        assert!(
            !dir.path()
                .join(ADMIN_DIR)
                .join("kdamonds/0/contexts/0/operations")
                .exists()
        );
    }

    /// This process's /proc/PID/stat under the fixture root, started at `start` ticks.
    fn fake_this_process(dir: &tempfile::TempDir, start: u64) {
        owner::fake_process(dir.path(), std::process::id(), start);
    }

    fn owner_record(dir: &tempfile::TempDir) -> Option<OwnerRecord> {
        OwnerRecord::read(&dir.path().join("run/memtide/kdamond"))
    }

    #[test]
    fn a_kdamond_left_by_a_killed_agent_is_removed_and_monitoring_starts() {
        let dir = admin_tree(0, "vaddr\n");
        let root = HostRoot::new(dir.path());
        fake_this_process(&dir, 1000);
        let killed = DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[41, 42]).unwrap();
        let record = owner_record(&dir).expect("the running agent keeps a record");
        assert_eq!(
            (
                record.agent_pid,
                record.agent_start,
                record.targets.as_slice()
            ),
            (std::process::id(), 1000, &[41, 42][..])
        );
        // SIGKILL: no drop, the kdamond and the record stay.
        std::mem::forget(killed);

        // While the agent that wrote the record lives, its kdamond is not touched.
        let error = DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[43]).unwrap_err();
        assert!(matches!(error, DamonError::Busy(1)), "{error}");
        assert_eq!(read(&dir, "kdamonds/0/contexts/0/targets/nr_targets"), "2");

        // Gone (its pid now names another process): the next agent takes over.
        fake_this_process(&dir, 2000);
        let mut next = DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[43]).unwrap();
        assert_eq!(read(&dir, "kdamonds/nr_kdamonds"), "1");
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
        assert_eq!(read(&dir, "kdamonds/0/contexts/0/targets/nr_targets"), "1");
        assert_eq!(
            read(&dir, "kdamonds/0/contexts/0/targets/0/pid_target"),
            "43"
        );
        let record = owner_record(&dir).unwrap();
        assert_eq!((record.agent_start, record.targets), (2000, vec![43]));
        next.set_targets(&[44, 45]).unwrap();
        assert_eq!(owner_record(&dir).unwrap().targets, vec![44, 45]);
        next.stop().unwrap();
        assert_eq!(owner_record(&dir), None, "a clean stop removes the record");
    }

    #[test]
    fn without_a_matching_record_a_left_kdamond_stays_busy() {
        let dir = admin_tree(0, "vaddr\n");
        let root = HostRoot::new(dir.path());
        fake_this_process(&dir, 1000);
        std::mem::forget(
            DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[41]).unwrap(),
        );
        fake_this_process(&dir, 2000);
        // Someone else reconfigured the kdamond since: other targets.
        fs::write(
            dir.path()
                .join(ADMIN_DIR)
                .join("kdamonds/0/contexts/0/targets/0/pid_target"),
            "77\n",
        )
        .unwrap();
        let error = DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[43]).unwrap_err();
        assert!(matches!(error, DamonError::Busy(1)), "{error}");
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
        // No record kept (owner_file empty): nothing proves whose it is.
        let unrecorded = DamonMonitorConfig {
            owner_file: PathBuf::new(),
            ..DamonMonitorConfig::default()
        };
        fs::write(
            dir.path()
                .join(ADMIN_DIR)
                .join("kdamonds/0/contexts/0/targets/0/pid_target"),
            "41\n",
        )
        .unwrap();
        let error = DamonMonitor::start(&root, &unrecorded, &[43]).unwrap_err();
        assert!(matches!(error, DamonError::Busy(1)), "{error}");
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
    }

    #[test]
    fn no_vaddr_is_a_clear_error_and_the_kdamond_it_made_is_removed() {
        let dir = admin_tree(0, "paddr\n");
        let error = DamonMonitor::start(
            &HostRoot::new(dir.path()),
            &DamonMonitorConfig::default(),
            &[1],
        )
        .unwrap_err();
        assert!(
            error.to_string().contains("no virtual-address operations"),
            "{error}"
        );
        assert_eq!(
            read(&dir, "kdamonds/nr_kdamonds"),
            "0",
            "cleaned up on failure"
        );
    }

    #[test]
    fn empty_target_list_turns_monitoring_off_and_back_on() {
        let dir = admin_tree(0, "vaddr paddr\n");
        let root = HostRoot::new(dir.path());
        let mut monitor = DamonMonitor::start(&root, &DamonMonitorConfig::default(), &[7]).unwrap();
        monitor.set_targets(&[]).unwrap();
        assert_eq!(read(&dir, "kdamonds/0/state"), "off");
        monitor.set_targets(&[8]).unwrap();
        assert_eq!(read(&dir, "kdamonds/0/state"), "on");
        assert_eq!(
            read(&dir, "kdamonds/0/contexts/0/targets/0/pid_target"),
            "8"
        );
        drop(monitor);
        assert_eq!(
            read(&dir, "kdamonds/nr_kdamonds"),
            "0",
            "drop stops what start made"
        );
    }
}
