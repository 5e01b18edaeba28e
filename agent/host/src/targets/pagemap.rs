//! `/proc/PID/pagemap`: which pages of a range are present, before the placement query asks
//! the kernel where they are.
//!
//! A move_pages query costs a VMA lookup and a page-table walk per page asked about, present
//! or not; on a sparse mapping (a 1 TiB heap with a few GiB touched) nearly all of a sweep's
//! pages are holes. pagemap answers for a whole 2 MiB hole in one page-table step, eight bytes
//! per page, so reading it first and asking move_pages about the present pages only makes a
//! query's cost follow the resident pages. Only the present bit (63) is read: it needs the
//! same access to the process as numa_maps (`PTRACE_MODE_READ`), not `CAP_SYS_ADMIN`, which
//! only the page frame numbers do.

use std::{
    fs::File,
    io,
    os::{fd::AsFd as _, unix::fs::FileExt as _},
};

use memtide_core::units::PAGE_SIZE;

use super::{Target, TargetError};
use crate::sys::pagemap_scan::{self, PAGE_IS_HUGE};

/// Bit 63 of a pagemap entry: the page is present in RAM (Documentation/admin-guide/mm/pagemap.rst).
const PRESENT: u64 = 1 << 63;
/// Entries read per system call (32 MiB of address space).
const ENTRIES_PER_READ: usize = 8192;

/// An open `/proc/PID/pagemap`.
#[derive(Debug)]
pub struct Pagemap {
    pid: u32,
    file: File,
    /// Read buffer, kept between calls: a query reads hundreds of 2 MiB superpages, each its
    /// own call.
    buf: Vec<u8>,
}

impl Target {
    /// Opens the process's `/proc/PID/pagemap`.
    pub fn pagemap(&self) -> Result<Pagemap, TargetError> {
        self.with_pid(|pid| {
            let file = File::open(self.root.path(format!("proc/{pid}/pagemap")))
                .map_err(|e| TargetError::syscall(pid, "open(/proc/PID/pagemap)", e))?;
            Ok(Pagemap {
                pid,
                file,
                buf: Vec::new(),
            })
        })
    }
}

impl Pagemap {
    /// Appends, for each page of `[start, end)` (page-aligned), whether it is present. Pages
    /// past the end of the address space read as not present.
    pub fn present(
        &mut self,
        start: u64,
        end: u64,
        out: &mut Vec<bool>,
    ) -> Result<(), TargetError> {
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.present_with(&mut buf, start, end, out);
        self.buf = buf;
        result
    }

    fn present_with(
        &self,
        buf: &mut Vec<u8>,
        start: u64,
        end: u64,
        out: &mut Vec<bool>,
    ) -> Result<(), TargetError> {
        let mut page = start / PAGE_SIZE;
        let last = end / PAGE_SIZE;
        while page < last {
            let entries =
                usize::try_from(last - page).map_or(ENTRIES_PER_READ, |n| n.min(ENTRIES_PER_READ));
            if buf.len() < entries * 8 {
                buf.resize(entries * 8, 0);
            }
            let want = &mut buf[..entries * 8];
            let got = self.read_at(want, page * 8)?;
            out.extend(want[..got - got % 8].chunks_exact(8).map(|entry| {
                u64::from_ne_bytes(entry.try_into().unwrap_or_default()) & PRESENT != 0
            }));
            // A short read ends the address space: the rest is not present.
            if got < want.len() {
                out.extend(std::iter::repeat_n(false, entries - got / 8));
            }
            page += entries as u64;
        }
        Ok(())
    }

    /// Appends the ranges of `[start, end)` (page-aligned) that huge pages map (PMD-mapped THP,
    /// hugetlb), in address order. `false` when the kernel cannot tell: `PAGEMAP_SCAN` needs
    /// Linux 6.7, and the caller then falls back to presuming.
    pub fn huge_ranges(&self, start: u64, end: u64, out: &mut Vec<(u64, u64)>) -> bool {
        let before = out.len();
        let known = pagemap_scan::scan(self.file.as_fd(), start, end, PAGE_IS_HUGE, out).is_ok();
        if !known {
            out.truncate(before);
        }
        known
    }

    /// Reads as much of `buf` as the file holds at `offset`.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> Result<usize, TargetError> {
        let mut got = 0;
        while got < buf.len() {
            match self.file.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(TargetError::syscall(self.pid, "read(/proc/PID/pagemap)", e));
                }
            }
        }
        Ok(got)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's own pagemap through the same reader (a target may not be memtide
    /// itself, so the file is opened directly).
    fn own() -> Pagemap {
        Pagemap {
            pid: std::process::id(),
            file: File::open("/proc/self/pagemap").unwrap(),
            buf: Vec::new(),
        }
    }

    #[test]
    fn touched_pages_read_present_and_untouched_ones_not() {
        const MIB: u64 = 1 << 20;
        // vec! of zeroes is calloc, which maps a region this large fresh: its pages stay
        // untouched until written. Touch one page in the first aligned 2 MiB block; a page
        // of another block stays a hole even if the kernel faults a huge page or an mTHP in.
        let mut region = vec![0u8; 8 * MIB as usize];
        let base = (region.as_ptr() as u64).next_multiple_of(2 * MIB);
        let offset = usize::try_from(base - region.as_ptr() as u64).unwrap();
        region[offset + PAGE_SIZE as usize] = 1;
        let untouched = base + 4 * MIB;
        let mut present = Vec::new();
        let mut pagemap = own();
        pagemap
            .present(base, base + 4 * PAGE_SIZE, &mut present)
            .unwrap();
        pagemap
            .present(untouched, untouched + PAGE_SIZE, &mut present)
            .unwrap();
        assert_eq!(present.len(), 5);
        assert!(present[1], "the touched page: {present:?}");
        assert!(!present[4], "a page of an untouched block: {present:?}");
        std::hint::black_box(&region);
    }

    #[test]
    fn pages_past_the_address_space_are_not_present() {
        let top = 1u64 << 57;
        let mut present = Vec::new();
        own()
            .present(top - 2 * PAGE_SIZE, top + 2 * PAGE_SIZE, &mut present)
            .unwrap();
        assert_eq!(present, [false; 4]);
    }
}
