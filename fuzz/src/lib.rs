//! Helpers shared by memtide's fuzz targets (`fuzz_targets/*.rs`).
//!
//! Each target feeds one of the agent's parsers with arbitrary bytes and checks, besides "no
//! panic", a property that is cheap to state: a round trip, a count, an invariant of the result.
//! The list of targets and what each checks is in docs/reliability.md.

use std::{
    fs,
    io::{self, BufRead, BufReader},
    path::{Path, PathBuf},
};

use memtide_sim::trace::{RecordSource, TraceError, TraceRecord};

/// An in-memory trace input read through a `BufReader` of `capacity` bytes (a small capacity
/// makes records and lines straddle buffer boundaries).
#[must_use]
pub fn trace_input(bytes: &[u8], capacity: usize) -> Box<dyn BufRead + Send> {
    Box::new(BufReader::with_capacity(
        capacity,
        io::Cursor::new(bytes.to_vec()),
    ))
}

/// What a reader yielded until its end or its first error.
#[derive(Debug)]
pub struct Drained {
    pub records: Vec<TraceRecord>,
    pub error: Option<TraceError>,
}

/// Reads `source` to its end (or first error) in batches of `batch` records, checking that
/// `fill` appends exactly the count it returns and never more than asked.
pub fn drain(source: &mut dyn RecordSource, batch: usize) -> Drained {
    let mut records = Vec::new();
    loop {
        let before = records.len();
        match source.fill(&mut records, batch) {
            Ok(0) => {
                assert_eq!(
                    records.len(),
                    before,
                    "fill returned 0 but appended records"
                );
                return Drained {
                    records,
                    error: None,
                };
            }
            Ok(n) => {
                assert!(
                    n <= batch,
                    "fill returned {n} records for a batch of {batch}"
                );
                assert_eq!(
                    records.len() - before,
                    n,
                    "fill's count and its appends differ"
                );
            }
            Err(error) => {
                return Drained {
                    records,
                    error: Some(error),
                };
            }
        }
    }
}

/// Lines a line reader sees in `bytes` (`read_until(b'\n')` calls that return data).
#[must_use]
pub fn line_count(bytes: &[u8]) -> u64 {
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    newlines + u64::from(!bytes.is_empty() && bytes.last() != Some(&b'\n'))
}

/// Files of the `sysfs_topology` target's tree, in the order the input's NUL-separated parts
/// fill them (see [`SysfsTree`]).
pub const SYSFS_FILES: [&str; 31] = [
    "sys/devices/system/node/online",
    "sys/devices/system/node/has_memory",
    "sys/devices/system/node/node0/cpulist",
    "sys/devices/system/node/node0/meminfo",
    "sys/devices/system/node/node0/distance",
    "sys/devices/system/node/node0/access0/initiators/read_latency",
    "sys/devices/system/node/node0/access0/initiators/read_bandwidth",
    "sys/devices/system/node/node1/cpulist",
    "sys/devices/system/node/node1/meminfo",
    "sys/devices/system/node/node1/distance",
    "sys/devices/system/node/node1/access0/initiators/read_latency",
    "sys/devices/system/node/node1/access0/initiators/read_bandwidth",
    "sys/devices/system/node/node1/access0/initiators/write_latency",
    "sys/devices/virtual/memory_tiering/memory_tier4/nodelist",
    "sys/devices/virtual/memory_tiering/memory_tier22/nodelist",
    "sys/devices/system/cpu/online",
    "proc/meminfo",
    "sys/kernel/mm/transparent_hugepage/enabled",
    "proc/sys/kernel/numa_balancing",
    "sys/kernel/mm/numa/demotion_enabled",
    "proc/sys/kernel/osrelease",
    "sys/bus/event_source/devices/cpu/type",
    "sys/bus/event_source/devices/cpu/format/event",
    "sys/bus/event_source/devices/cpu/format/ldlat",
    "sys/bus/event_source/devices/cpu/events/mem-loads",
    "sys/bus/event_source/devices/cpu/events/mem-stores",
    "sys/bus/event_source/devices/ibs_op/type",
    "sys/bus/event_source/devices/ibs_op/format/l3missonly",
    "sys/kernel/mm/damon/admin/kdamonds/nr_kdamonds",
    "sys/kernel/mm/damon/admin/kdamonds/0/state",
    "sys/kernel/mm/damon/admin/kdamonds/0/pid",
];

/// A part that is exactly this byte leaves its file out (absent files are a case of their own
/// for most readers); parts past the input's end are absent too.
pub const ABSENT: &[u8] = b"\xff";

/// A throw-away file tree under the temporary directory, filled from a fuzz input: the input is
/// split at NUL bytes, part `i` becomes file [`SYSFS_FILES`]`[i]`, and the part after the last
/// file (if any) is returned as the trailing text. Removed on drop.
pub struct SysfsTree {
    root: PathBuf,
}

impl SysfsTree {
    /// Writes the tree for `data`; returns it and the trailing part (empty when there is none).
    pub fn write(data: &[u8]) -> io::Result<(Self, Vec<u8>)> {
        let root = std::env::temp_dir().join(format!("memtide-fuzz-sysfs-{}", std::process::id()));
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        fs::create_dir_all(&root)?;
        let tree = Self { root };
        let mut parts = data.split(|&b| b == 0);
        for file in SYSFS_FILES {
            let Some(part) = parts.next() else { break };
            if part == ABSENT {
                continue;
            }
            let path = tree.root.join(file);
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            fs::write(&path, part)?;
        }
        let rest: Vec<&[u8]> = parts.collect();
        Ok((tree, rest.join(&0)))
    }

    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for SysfsTree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// Formats a mapping the way the kernel's `show_map_vma` does, for the maps round trip.
#[must_use]
pub fn format_maps_line(m: &memtide_host::targets::maps::Mapping) -> String {
    use memtide_host::targets::maps::MappingKind;
    let p = m.perms;
    let flag = |on: bool, c: char| if on { c } else { '-' };
    let name = match &m.kind {
        MappingKind::Anonymous => String::new(),
        MappingKind::AnonNamed(name) => format!("[anon:{name}]"),
        MappingKind::Heap => "[heap]".to_owned(),
        MappingKind::Stack => "[stack]".to_owned(),
        MappingKind::File { path, deleted } => {
            format!("{path}{}", if *deleted { " (deleted)" } else { "" })
        }
        MappingKind::Special(name) => format!("[{name}]"),
    };
    format!(
        "{:08x}-{:08x} {}{}{}{} {:08x} {:02x}:{:02x} {:<26} {name}",
        m.start,
        m.end,
        flag(p.read, 'r'),
        flag(p.write, 'w'),
        flag(p.exec, 'x'),
        if p.shared { 's' } else { 'p' },
        m.offset,
        m.dev.0,
        m.dev.1,
        m.inode,
    )
}
