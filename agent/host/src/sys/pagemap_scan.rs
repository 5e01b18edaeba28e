//! `PAGEMAP_SCAN` (Linux 6.7): the ranges of a process's address space whose pages share a
//! category, from one page-table walk, without reading eight bytes per page. memtide asks it
//! which superpages a huge page maps (`PAGE_IS_HUGE`: a PMD-mapped THP or hugetlb page).
//! Documentation/admin-guide/mm/pagemap.rst.

use std::{
    io,
    os::fd::{AsRawFd as _, BorrowedFd},
};

/// `_IOWR('f', 16, struct pm_scan_arg)`: direction read|write, 96-byte argument.
const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610;
/// The page is mapped by a PMD-level THP or a hugetlb page.
pub const PAGE_IS_HUGE: u64 = 1 << 6;
/// Regions returned per call: a call that fills them is continued from where it stopped.
const REGIONS_PER_CALL: usize = 256;

/// `struct pm_scan_arg` (include/uapi/linux/fs.h).
#[repr(C)]
struct PmScanArg {
    size: u64,
    flags: u64,
    start: u64,
    end: u64,
    walk_end: u64,
    vec: u64,
    vec_len: u64,
    max_pages: u64,
    category_inverted: u64,
    category_mask: u64,
    category_anyof_mask: u64,
    return_mask: u64,
}

/// `struct page_region`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PageRegion {
    start: u64,
    end: u64,
    categories: u64,
}

/// Appends to `out` the ranges of `[start, end)` (page-aligned) whose pages have every category
/// in `categories`, in address order, adjacent ranges merged. `pagemap` is an open
/// `/proc/PID/pagemap`. Kernels before 6.7 fail with `ENOTTY`.
pub fn scan(
    pagemap: BorrowedFd<'_>,
    start: u64,
    end: u64,
    categories: u64,
    out: &mut Vec<(u64, u64)>,
) -> io::Result<()> {
    let mut regions = vec![PageRegion::default(); REGIONS_PER_CALL];
    let mut at = start;
    while at < end {
        let mut arg = PmScanArg {
            size: size_of::<PmScanArg>() as u64,
            flags: 0,
            start: at,
            end,
            walk_end: 0,
            vec: regions.as_mut_ptr() as u64,
            vec_len: regions.len() as u64,
            max_pages: 0,
            category_inverted: 0,
            category_mask: categories,
            category_anyof_mask: 0,
            return_mask: categories,
        };
        // SAFETY: `arg` is a live, correctly sized `pm_scan_arg` the kernel reads and updates
        // (`walk_end`); `vec` points at `regions`, which holds `vec_len` `page_region`s the
        // kernel may write and which outlives the call. With `flags` 0 the scan only reads the
        // target's page tables.
        let ret = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, &raw mut arg) };
        if ret < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        let filled = usize::try_from(ret).unwrap_or(0).min(regions.len());
        for region in &regions[..filled] {
            match out.last_mut() {
                Some(last) if last.1 == region.start => last.1 = region.end,
                _ => out.push((region.start, region.end)),
            }
        }
        // The walk stops early only when `regions` is full; a walk that made no progress
        // would loop for ever.
        if arg.walk_end <= at {
            break;
        }
        at = arg.walk_end;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::{fs::File, os::fd::AsFd as _};

    use memtide_core::units::PAGE_SIZE;

    use super::*;

    const MIB: usize = 1 << 20;

    /// An anonymous mapping of `len` bytes, unmapped on drop.
    struct Anon {
        addr: *mut libc::c_void,
        len: usize,
    }

    impl Anon {
        fn new(len: usize) -> Self {
            // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
            let addr = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(
                addr,
                libc::MAP_FAILED,
                "mmap: {}",
                io::Error::last_os_error()
            );
            Self { addr, len }
        }
    }

    impl Drop for Anon {
        fn drop(&mut self) {
            // SAFETY: unmaps exactly the mapping `new` made, which nothing borrows any more.
            unsafe { libc::munmap(self.addr, self.len) };
        }
    }

    /// Advises `[start, start + len)` of a mapping this test owns and writes every page of it.
    fn advise_and_touch(start: usize, len: usize, advice: libc::c_int) {
        // SAFETY: the range lies inside a live mapping this test made; THP advice does not
        // change its contents.
        let ret = unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
        assert_eq!(ret, 0, "madvise: {}", io::Error::last_os_error());
        for page in (start..start + len).step_by(PAGE_SIZE as usize) {
            // SAFETY: `page` is a page of the live, writable mapping, written by this thread only.
            unsafe { std::ptr::write_volatile(page as *mut u8, 1) };
        }
    }

    /// `AnonHugePages` of this process's mapping that starts at `start`, in bytes.
    fn smaps_anon_huge(start: usize) -> u64 {
        let path = std::path::Path::new("/proc/self/smaps");
        let text = std::fs::read_to_string(path).unwrap();
        crate::targets::smaps::parse(path, &text)
            .unwrap()
            .into_iter()
            .find(|e| e.mapping.start == start as u64)
            .expect("the mapping in /proc/self/smaps")
            .anon_huge_kb
            << 10
    }

    #[test]
    fn huge_ranges_agree_with_smaps_and_small_pages_are_not_huge() {
        let map = Anon::new(16 * MIB);
        let base = (map.addr as usize).next_multiple_of(2 * MIB);
        let (huge, small) = (base, base + 4 * MIB);
        // Separate advice makes each its own VMA, so smaps reports it alone.
        advise_and_touch(huge, 4 * MIB, libc::MADV_HUGEPAGE);
        advise_and_touch(small, 4 * MIB, libc::MADV_NOHUGEPAGE);
        let pagemap = File::open("/proc/self/pagemap").unwrap();
        let mut found = Vec::new();
        match scan(
            pagemap.as_fd(),
            huge as u64,
            (small + 4 * MIB) as u64,
            PAGE_IS_HUGE,
            &mut found,
        ) {
            Err(e) if e.raw_os_error() == Some(libc::ENOTTY) => {
                println!("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7+): {e}");
                return;
            }
            other => other.unwrap(),
        }
        let found_bytes: u64 = found.iter().map(|&(s, e)| e - s).sum();
        assert_eq!(
            found_bytes,
            smaps_anon_huge(huge),
            "PAGEMAP_SCAN found {found:x?}"
        );
        assert!(
            found
                .iter()
                .all(|&(s, e)| s >= huge as u64 && e <= small as u64),
            "huge pages outside the MADV_HUGEPAGE range: {found:x?}"
        );
        if found_bytes == 0 {
            println!(
                "no THP was allocated for the MADV_HUGEPAGE range (THP disabled or memory \
                 fragmented): only the agreement with smaps was checked"
            );
        } else {
            assert_eq!(found, [(huge as u64, small as u64)]);
        }
    }
}
