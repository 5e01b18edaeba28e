//! Target processes for the tests of this crate that need THP under a known advice.

use std::io::BufRead as _;

/// A python child with 64 MiB of private anonymous memory under THP `advice` (an `mmap`
/// constant such as `MADV_HUGEPAGE`), touched by `touch` (Python lines using `m`); returns the
/// child and the mapping's start, or `None` (with the reason printed) where there is no
/// python3. The caller kills the child.
pub(crate) fn python_child(advice: &str, touch: &str) -> Option<(std::process::Child, u64)> {
    let script = format!(
        "import mmap, sys, time\n\
         m = mmap.mmap(-1, 64 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)\n\
         m.madvise(mmap.{advice})\n\
         {touch}\
         print('touched', flush=True)\n\
         time.sleep(60)\n"
    );
    let Ok(mut child) = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdout(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("skipped: no python3 to run a target");
        return None;
    };
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "touched");
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", child.id())).unwrap();
    let start = maps.lines().find_map(|l| {
        let (start, end) = l.split_whitespace().next()?.split_once('-')?;
        let start = u64::from_str_radix(start, 16).ok()?;
        (u64::from_str_radix(end, 16).ok()? - start == 64 << 20).then_some(start)
    });
    Some((child, start.expect("the 64 MiB mapping")))
}

/// A [`python_child`] whose first 8 MiB are written page by page under `MADV_HUGEPAGE`, and
/// the bytes of its mapping that smaps counts as `AnonHugePages`, read before the caller's
/// look (a failed smaps read panics).
pub(crate) fn huge_child() -> Option<(std::process::Child, u64, u64)> {
    let (child, start) = python_child(
        "MADV_HUGEPAGE",
        "for i in range(2048):\n    m[i << 12] = 1\n",
    )?;
    let smaps = crate::targets::Target::open(&crate::sysfs::HostRoot::default(), child.id())
        .and_then(|t| t.smaps());
    let anon_huge = smaps
        .expect("smaps of the child")
        .into_iter()
        .find(|e| e.mapping.start == start)
        .expect("the mapping in smaps")
        .anon_huge_kb
        << 10;
    Some((child, start, anon_huge))
}
