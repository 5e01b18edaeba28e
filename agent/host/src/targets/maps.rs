//! `/proc/PID/maps`: the mappings of a process, and which of them migration may touch.
//!
//! Line format (fs/proc/task_mmu.c `show_map_vma`):
//! `start-end perms offset major:minor inode` then, after padding, an optional name: a file path
//! (spaces kept as is, ` (deleted)` appended for unlinked files), `[heap]`, `[stack]`,
//! `[vdso]`, `[anon:NAME]` (prctl PR_SET_VMA_ANON_NAME; NAME may contain spaces), ...

use std::path::Path;

use serde::Serialize;

use crate::sysfs::SysfsError;

/// Permissions of a mapping (`rwxp` / `rwxs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Perms {
    pub read: bool,
    pub write: bool,
    pub exec: bool,
    /// `s`: a shared mapping (pages may be mapped by other processes).
    pub shared: bool,
}

impl Perms {
    fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() != 4 {
            return None;
        }
        let flag = |c: u8, yes: u8| match c {
            _ if c == yes => Some(true),
            b'-' => Some(false),
            _ => None,
        };
        Some(Self {
            read: flag(b[0], b'r')?,
            write: flag(b[1], b'w')?,
            exec: flag(b[2], b'x')?,
            shared: match b[3] {
                b's' => true,
                b'p' => false,
                _ => return None,
            },
        })
    }

    /// `---p`: a guard or reserved region with no accessible pages.
    #[must_use]
    pub const fn is_inaccessible(self) -> bool {
        !self.read && !self.write && !self.exec
    }
}

/// What backs a mapping, from its name column.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum MappingKind {
    /// No name: anonymous memory (malloc arenas, large Vec buffers).
    Anonymous,
    /// `[anon:NAME]` or `[anon_shmem:NAME]`: named anonymous memory.
    AnonNamed(String),
    Heap,
    /// `[stack]` (or `[stack:TID]` on old kernels).
    Stack,
    /// A file; `deleted` when the name ends in ` (deleted)` (unlinked files, memfd, SysV shm).
    File {
        path: String,
        deleted: bool,
    },
    /// Any other bracketed name: `[vdso]`, `[vvar]`, `[vsyscall]`, `[uprobes]`, ...
    Special(String),
}

/// One line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    pub perms: Perms,
    pub offset: u64,
    /// `major:minor` of the backing device.
    pub dev: (u32, u32),
    pub inode: u64,
    pub kind: MappingKind,
}

impl Mapping {
    #[must_use]
    pub const fn len(&self) -> u64 {
        self.end - self.start
    }

    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.end == self.start
    }

    #[must_use]
    pub const fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr < self.end
    }

    /// Whether memtide may move this mapping's pages: accessible, not a kernel special mapping
    /// (`[vdso]`, `[vvar]`, `[vsyscall]`, ...), and not a device file other than `/dev/zero`
    /// (device mappings are VM_IO/VM_PFNMAP and have no movable pages; `/dev/shm` and
    /// `/dev/hugepages` are tmpfs/hugetlbfs). smaps' `VmFlags` refine this ([`super::smaps`]). Page cache of ordinary
    /// files and shared memory qualify; their shared pages come back as `EACCES` per page.
    #[must_use]
    pub fn is_migratable(&self) -> bool {
        if self.perms.is_inaccessible() || self.is_empty() {
            return false;
        }
        match &self.kind {
            MappingKind::Special(_) => false,
            MappingKind::File { path, .. } => {
                !path.starts_with("/dev/")
                    || path == "/dev/zero"
                    || path.starts_with("/dev/shm/")
                    || path.starts_with("/dev/hugepages/")
            }
            MappingKind::Anonymous
            | MappingKind::AnonNamed(_)
            | MappingKind::Heap
            | MappingKind::Stack => true,
        }
    }

    /// Private anonymous memory (including heap, stack and named anonymous memory): what
    /// tiering is mostly about.
    #[must_use]
    pub fn is_private_anonymous(&self) -> bool {
        !self.perms.shared
            && matches!(
                self.kind,
                MappingKind::Anonymous
                    | MappingKind::AnonNamed(_)
                    | MappingKind::Heap
                    | MappingKind::Stack
            )
    }
}

fn parse_kind(name: &str) -> MappingKind {
    if name.is_empty() {
        return MappingKind::Anonymous;
    }
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        if let Some(anon) = inner
            .strip_prefix("anon:")
            .or_else(|| inner.strip_prefix("anon_shmem:"))
        {
            return MappingKind::AnonNamed(anon.to_owned());
        }
        return match inner {
            "heap" => MappingKind::Heap,
            "stack" => MappingKind::Stack,
            _ if inner.starts_with("stack:") => MappingKind::Stack,
            _ => MappingKind::Special(inner.to_owned()),
        };
    }
    match name.strip_suffix(" (deleted)") {
        Some(path) => MappingKind::File {
            path: path.to_owned(),
            deleted: true,
        },
        None => MappingKind::File {
            path: name.to_owned(),
            deleted: false,
        },
    }
}

/// Splits off the first white-space-delimited field of `s`, returning it and the rest (with
/// its leading white space intact).
pub(crate) fn next_field(s: &str) -> Option<(&str, &str)> {
    let s = s.trim_start_matches([' ', '\t']);
    if s.is_empty() {
        return None;
    }
    let end = s.find([' ', '\t']).unwrap_or(s.len());
    Some((&s[..end], &s[end..]))
}

/// Parses one maps line; `None` if it is not one.
#[must_use]
pub fn parse_line(line: &str) -> Option<Mapping> {
    let (range, rest) = next_field(line)?;
    let (perms, rest) = next_field(rest)?;
    let (offset, rest) = next_field(rest)?;
    let (dev, rest) = next_field(rest)?;
    let (inode, rest) = next_field(rest)?;
    let (start, end) = range.split_once('-')?;
    let (start, end) = (
        u64::from_str_radix(start, 16).ok()?,
        u64::from_str_radix(end, 16).ok()?,
    );
    if end < start {
        return None;
    }
    let (major, minor) = dev.split_once(':')?;
    // Only the padding before the name goes; the name itself may start or end with spaces.
    let name = rest
        .trim_start_matches([' ', '\t'])
        .trim_end_matches(['\n', '\r']);
    Some(Mapping {
        start,
        end,
        perms: Perms::parse(perms)?,
        offset: u64::from_str_radix(offset, 16).ok()?,
        dev: (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        ),
        inode: inode.parse().ok()?,
        kind: parse_kind(name),
    })
}

/// Parses the whole of a maps file; `path` is for errors. Empty lines are skipped, anything
/// else that does not parse is an error naming the line.
pub fn parse(path: &Path, text: &str) -> Result<Vec<Mapping>, SysfsError> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| parse_line(line).ok_or_else(|| SysfsError::parse(path, line, "a maps line")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
55d0c8a00000-55d0c8a21000 r--p 00000000 fd:01 1315009                    /usr/bin/memtide-workload
55d0c9e3c000-55d0c9e5d000 rw-p 00000000 00:00 0                          [heap]
7f2a3c000000-7f2a3c021000 rw-p 00000000 00:00 0 
7f2a40000000-7f2a40200000 rw-p 00000000 00:00 0                          [anon:my arena  two spaces]
7f2a40400000-7f2a40600000 rw-s 00000000 00:01 4242                       /memfd:shared buf (deleted)
7f2a40600000-7f2a40800000 rw-s 00000000 00:0f 12                         /dev/hugepages/huge file
7f2a40800000-7f2a40801000 ---p 00000000 00:00 0 
7f2a40900000-7f2a40901000 rw-s 00000000 00:06 88                         /dev/dri/card0
7f2a40a00000-7f2a40a10000 r--p 00000000 fd:01 77                         /tmp/my file.bin (deleted)
7ffd1a2b3000-7ffd1a2d4000 rw-p 00000000 00:00 0                          [stack]
7ffd1a3f0000-7ffd1a3f4000 r--p 00000000 00:00 0                          [vvar]
7ffd1a3f4000-7ffd1a3f6000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn parses_every_kind_of_line() {
        let maps = parse(Path::new("maps"), MAPS).unwrap();
        assert_eq!(maps.len(), 13);
        assert_eq!(
            maps[0].kind,
            MappingKind::File {
                path: "/usr/bin/memtide-workload".into(),
                deleted: false
            }
        );
        assert_eq!(maps[0].dev, (0xfd, 1));
        assert_eq!(maps[0].inode, 1_315_009);
        assert_eq!(maps[1].kind, MappingKind::Heap);
        assert_eq!(maps[2].kind, MappingKind::Anonymous);
        assert_eq!(maps[2].len(), 0x21000);
        assert_eq!(
            maps[3].kind,
            MappingKind::AnonNamed("my arena  two spaces".into())
        );
        assert_eq!(
            maps[4].kind,
            MappingKind::File {
                path: "/memfd:shared buf".into(),
                deleted: true
            }
        );
        assert!(maps[4].perms.shared);
        assert_eq!(
            maps[5].kind,
            MappingKind::File {
                path: "/dev/hugepages/huge file".into(),
                deleted: false
            }
        );
        assert_eq!(
            maps[8].kind,
            MappingKind::File {
                path: "/tmp/my file.bin".into(),
                deleted: true
            }
        );
        assert_eq!(maps[9].kind, MappingKind::Stack);
        assert_eq!(maps[12].kind, MappingKind::Special("vsyscall".into()));
        assert_eq!(maps[12].start, 0xffff_ffff_ff60_0000);
    }

    #[test]
    fn migratable_mappings() {
        let maps = parse(Path::new("maps"), MAPS).unwrap();
        let migratable: Vec<bool> = maps.iter().map(Mapping::is_migratable).collect();
        assert_eq!(
            migratable,
            [
                true, true, true, true, true,  // file, heap, anon, named anon, memfd
                true,  // hugetlbfs file (hugetlb pages migrate)
                false, // ---p guard
                false, // device
                true,  // deleted file
                true,  // stack
                false, false, false // vvar, vdso, vsyscall
            ]
        );
        assert!(maps[3].is_private_anonymous());
        assert!(!maps[4].is_private_anonymous());
        assert!(!maps[0].is_private_anonymous());
    }

    #[test]
    fn malformed_lines_are_errors_with_path() {
        for bad in [
            "zzzz-1000 rw-p 00000000 00:00 0",
            "2000-1000 rw-p 00000000 00:00 0",
            "1000-2000 rw-q 00000000 00:00 0",
            "1000-2000 rw-p 00000000 0000 0",
            "1000-2000 rw-p",
        ] {
            let err = parse(Path::new("/proc/9/maps"), bad).unwrap_err();
            assert!(err.to_string().starts_with("/proc/9/maps"), "{err}");
        }
        assert!(parse(Path::new("m"), "\n\n").unwrap().is_empty());
    }
}
