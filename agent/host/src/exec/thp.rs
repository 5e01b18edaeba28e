//! Transparent huge pages around migration: splitting before a sub-2 MiB move, collapsing
//! after a dense promotion.
//!
//! Linux has no system call that splits a THP of another process. The debugfs file
//! `/sys/kernel/debug/split_huge_pages` (CONFIG_DEBUG_FS, root) accepts `PID,0xSTART,0xEND` and
//! splits every THP mapped in that range; it is a debug interface, so its absence is normal and
//! the executor then falls back (see [`SplitOutcome::Unavailable`]). Collapse goes through
//! `process_madvise(MADV_COLLAPSE)` (Linux 6.1).

use std::path::PathBuf;

use memtide_core::units::SUPERPAGE_SIZE;

use crate::sysfs::{self, HostRoot};

/// What a split attempt did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SplitOutcome {
    Split,
    /// No split interface; the move proceeds and the kernel migrates the whole huge page.
    Unavailable(&'static str),
    /// The interface refused (the error text is kept for logs).
    Failed(String),
}

/// The debugfs split interface under `root`.
#[derive(Clone, Debug)]
pub struct Splitter {
    path: PathBuf,
}

impl Splitter {
    #[must_use]
    pub fn new(root: &HostRoot) -> Self {
        Self {
            path: root.path("sys/kernel/debug/split_huge_pages"),
        }
    }

    /// Whether the interface exists (debugfs mounted, CONFIG_DEBUG_FS, and readable to us).
    #[must_use]
    pub fn available(&self) -> bool {
        self.path.exists()
    }

    /// The line the kernel expects for `[start, end)` of `pid`.
    #[must_use]
    pub fn command(pid: u32, start: u64, end: u64) -> String {
        format!("{pid},{start:#x},{end:#x}")
    }

    /// Splits the huge pages of `pid` in `[start, end)`.
    #[must_use]
    pub fn split(&self, pid: u32, start: u64, end: u64) -> SplitOutcome {
        if !self.available() {
            return SplitOutcome::Unavailable("debugfs split_huge_pages not available");
        }
        match sysfs::write_value(&self.path, &Self::command(pid, start, end)) {
            Ok(()) => SplitOutcome::Split,
            Err(e) => SplitOutcome::Failed(e.to_string()),
        }
    }
}

/// The 2 MiB-aligned cover of `[start, end)`.
#[must_use]
pub const fn huge_cover(start: u64, end: u64) -> (u64, u64) {
    (
        start & !(SUPERPAGE_SIZE - 1),
        end.div_ceil(SUPERPAGE_SIZE) * SUPERPAGE_SIZE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_command_and_cover() {
        assert_eq!(
            Splitter::command(42, 0x7f00_0020_0000, 0x7f00_0040_0000),
            "42,0x7f0000200000,0x7f0000400000"
        );
        assert_eq!(huge_cover(0x20_1000, 0x20_2000), (0x20_0000, 0x40_0000));
        assert_eq!(huge_cover(0x20_0000, 0x40_0000), (0x20_0000, 0x40_0000));
    }

    #[test]
    fn split_on_fixture_writes_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let root = HostRoot::new(dir.path());
        let splitter = Splitter::new(&root);
        assert!(matches!(
            splitter.split(1, 0, SUPERPAGE_SIZE),
            SplitOutcome::Unavailable(_)
        ));
        let file = dir.path().join("sys/kernel/debug/split_huge_pages");
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(&file, "").unwrap();
        assert_eq!(splitter.split(7, 0x20_0000, 0x40_0000), SplitOutcome::Split);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "7,0x200000,0x400000"
        );
    }
}
