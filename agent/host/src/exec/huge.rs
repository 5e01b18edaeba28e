//! Which of the ranges a plan moves huge pages map, for the executor: a THP it splits before
//! moving part of it, a hugetlb page it moves whole.
//!
//! smaps answers per mapping, but to fill in its counts it walks every page table of the
//! process: 40 ms for 4 GiB of 4 KiB pages on the test machine, seconds for a server's hundreds
//! of GiB, and the executor asked on every plan that moved anything. `PAGEMAP_SCAN` (Linux 6.7)
//! over the ranges being moved costs what they cost, and answers per 2 MiB rather than per
//! mapping. It cannot tell a THP from a hugetlb page, but private anonymous memory is never
//! hugetlb (`MAP_HUGETLB` memory is a file of hugetlbfs), so only a huge page in a file or
//! shared mapping still needs smaps, as does a kernel without `PAGEMAP_SCAN`.

use memtide_core::units::SUPERPAGE_SIZE;

use super::ExecError;
use crate::targets::{Target, maps::Mapping};

/// `(start, end, hugetlb)`: a range huge pages map, and whether they are hugetlb pages (which
/// cannot be split).
pub type HugeRange = (u64, u64, bool);

/// The huge pages in and around `ranges` (each `[start, end)`): exactly the superpages they
/// map where `PAGEMAP_SCAN` can tell, else every mapping holding some (from smaps).
pub(super) fn huge_ranges(
    target: &Target,
    ranges: &[(u64, u64)],
) -> Result<Vec<HugeRange>, ExecError> {
    if ranges.is_empty() {
        return Ok(Vec::new());
    }
    let Some(huge) = huge_superpages(target, ranges) else {
        return from_smaps(target);
    };
    if huge.is_empty() {
        return Ok(Vec::new());
    }
    match in_private_anonymous(&huge, &target.maps()?) {
        Some(huge) => Ok(huge),
        None => from_smaps(target),
    }
}

/// The ranges huge pages map within the superpages `ranges` touch; `None` where the kernel
/// cannot say (no `PAGEMAP_SCAN`, or the pagemap cannot be opened).
fn huge_superpages(target: &Target, ranges: &[(u64, u64)]) -> Option<Vec<(u64, u64)>> {
    let pagemap = target.pagemap().ok()?;
    let mut covers: Vec<(u64, u64)> = ranges
        .iter()
        .filter(|&&(start, end)| start < end)
        .map(|&(start, end)| {
            (
                start / SUPERPAGE_SIZE * SUPERPAGE_SIZE,
                end.next_multiple_of(SUPERPAGE_SIZE),
            )
        })
        .collect();
    covers.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(covers.len());
    for (start, end) in covers {
        match merged.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => merged.push((start, end)),
        }
    }
    let mut huge = Vec::new();
    for (start, end) in merged {
        if !pagemap.huge_ranges(start, end, &mut huge) {
            return None;
        }
    }
    Some(huge)
}

/// `huge` as THP ranges when every mapping they lie in is private anonymous memory; `None`
/// when one lies in a file or shared mapping, where it may be hugetlb. `maps` is in address
/// order, as `/proc/PID/maps` lists it.
fn in_private_anonymous(huge: &[(u64, u64)], maps: &[Mapping]) -> Option<Vec<HugeRange>> {
    let anonymous = |&(start, end): &(u64, u64)| {
        let first = maps.partition_point(|m| m.end <= start);
        maps[first..]
            .iter()
            .take_while(|m| m.start < end)
            .all(|m| m.is_private_anonymous() && m.is_migratable())
    };
    huge.iter().all(anonymous).then(|| {
        huge.iter()
            .map(|&(start, end)| (start, end, false))
            .collect()
    })
}

/// Every migratable mapping holding huge pages, from smaps (a walk of all the page tables).
fn from_smaps(target: &Target) -> Result<Vec<HugeRange>, ExecError> {
    Ok(target
        .smaps()?
        .into_iter()
        .filter(|e| e.has_huge_pages() && e.is_migratable())
        .map(|e| (e.mapping.start, e.mapping.end, e.is_hugetlb()))
        .collect())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::{sysfs::HostRoot, targets::maps, test_child::huge_child};

    const MIB: u64 = 1 << 20;

    #[test]
    fn only_private_anonymous_memory_is_known_not_to_be_hugetlb() {
        let maps = maps::parse(
            Path::new("maps"),
            "\
7f0000000000-7f0000800000 rw-p 00000000 00:00 0 
7f0000800000-7f0000a00000 rw-p 00000000 00:00 0                          [anon:arena]
7f0000a00000-7f0000e00000 rw-s 00000000 00:0f 12                         /dev/hugepages/buf
7f0000e00000-7f0001000000 rw-s 00000000 00:01 4242                       /dev/zero (deleted)
",
        )
        .unwrap();
        let base = 0x7f00_0000_0000;
        let anon = [(base, base + 2 * MIB), (base + 6 * MIB, base + 10 * MIB)];
        assert_eq!(
            in_private_anonymous(&anon, &maps),
            Some(vec![
                (base, base + 2 * MIB, false),
                (base + 6 * MIB, base + 10 * MIB, false)
            ])
        );
        // A hugetlbfs file, shared anonymous memory (shmem), and a range running into either.
        for huge in [
            (base + 10 * MIB, base + 12 * MIB),
            (base + 14 * MIB, base + 16 * MIB),
            (base + 8 * MIB, base + 12 * MIB),
        ] {
            assert_eq!(in_private_anonymous(&[huge], &maps), None, "{huge:x?}");
        }
    }

    #[test]
    fn the_executor_finds_the_huge_pages_of_the_ranges_it_moves_as_smaps_counts_them() {
        let Some((mut child, start, anon_huge)) = huge_child() else {
            return;
        };
        let target = Target::open(&HostRoot::default(), child.id()).unwrap();
        let first = start.next_multiple_of(SUPERPAGE_SIZE);
        let whole = huge_ranges(&target, &[(start, start + 64 * MIB)]);
        // 64 KiB of the first superpage written, and a superpage never written.
        let chunk = huge_ranges(&target, &[(first + 64 * 1024, first + 128 * 1024)]);
        let untouched = huge_ranges(&target, &[(first + 20 * MIB, first + 22 * MIB)]);
        let scannable = huge_superpages(&target, &[(start, start + 64 * MIB)]).is_some();
        let _ = child.kill();
        let _ = child.wait();
        let (whole, chunk, untouched) = (whole.unwrap(), chunk.unwrap(), untouched.unwrap());
        if !scannable {
            println!("skipped: this kernel has no PAGEMAP_SCAN (Linux 6.7+)");
            return;
        }
        assert!(whole.iter().all(|&(_, _, hugetlb)| !hugetlb), "{whole:x?}");
        let found: u64 = whole.iter().map(|&(s, e, _)| e - s).sum();
        assert_eq!(found, anon_huge, "{whole:x?}");
        assert!(untouched.is_empty(), "{untouched:x?}");
        // A chunk's answer is its superpage's: huge exactly when the whole answer says so.
        let first_huge = whole.iter().any(|&(s, e, _)| s <= first && first < e);
        assert_eq!(
            chunk,
            if first_huge {
                vec![(first, first + 2 * MIB, false)]
            } else {
                vec![]
            }
        );
        if anon_huge == 0 {
            println!(
                "no THP was allocated for the child: only the agreement with smaps was checked"
            );
        }
    }
}
