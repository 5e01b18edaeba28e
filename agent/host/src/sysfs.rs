//! Small helpers shared by every reader of `/sys` and `/proc`.
//!
//! Every reader takes a [`HostRoot`] (below-style): `/` on a real machine, a fixture directory in
//! tests. Errors carry the path they failed on. Helpers named `*_optional` return `Ok(None)` when
//! the file does not exist, for files whose absence means something (a kernel without the
//! feature), and `Err` for anything else (permission, malformed content).

use std::{
    fmt, fs, io,
    path::{Path, PathBuf},
    str::FromStr,
};

/// Upper bound on the number of entries a cpu/node list may expand to. Real machines have at
/// most a few thousand CPUs; the bound keeps a malformed `0-4294967295` from allocating gigabytes.
pub const MAX_LIST_ENTRIES: usize = 1 << 16;

/// The root of the file system the readers look at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRoot {
    root: PathBuf,
}

impl Default for HostRoot {
    fn default() -> Self {
        Self {
            root: PathBuf::from("/"),
        }
    }
}

impl HostRoot {
    /// A root at `root` (a fixture tree, or `/`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root directory itself.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether this is the real machine's `/` (so writes and syscalls concern this machine).
    #[must_use]
    pub fn is_host(&self) -> bool {
        self.root == Path::new("/")
    }

    /// `relative` (for example `"sys/devices/system/node"`) under the root. A leading `/` is
    /// ignored, so `"/sys/x"` and `"sys/x"` name the same file.
    #[must_use]
    pub fn path(&self, relative: impl AsRef<Path>) -> PathBuf {
        let relative = relative.as_ref();
        let relative = relative.strip_prefix("/").unwrap_or(relative);
        self.root.join(relative)
    }
}

impl fmt::Display for HostRoot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.root.display())
    }
}

/// A failure to read or understand one file under `/sys` or `/proc`.
#[derive(Debug, thiserror::Error)]
pub enum SysfsError {
    /// The file could not be read (or written).
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file was read but its content is not what the kernel writes there.
    #[error("{}: cannot parse {value:?} as {expected}", path.display())]
    Parse {
        path: PathBuf,
        value: String,
        expected: String,
    },
}

impl SysfsError {
    /// The file the error is about.
    #[must_use]
    pub fn path(&self) -> &Path {
        match self {
            Self::Io { path, .. } | Self::Parse { path, .. } => path,
        }
    }

    /// A parse error for `value` read from `path`.
    pub fn parse(path: &Path, value: &str, expected: impl Into<String>) -> Self {
        Self::Parse {
            path: path.to_path_buf(),
            value: value.to_owned(),
            expected: expected.into(),
        }
    }

    fn io(path: &Path, source: io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// Pauses between reads of a file that answered EBUSY, ms: about 1.5 s in all (CI once saw
/// two agent starts 180 ms apart both find DAMON's lock taken).
const BUSY_RETRY_MS: [u64; 13] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 256, 256, 256, 256];

/// Runs `read` again while it fails with EBUSY, at most [`BUSY_RETRY_MS`] times. Some sysfs
/// files answer a read with EBUSY while another reader or writer holds their lock: DAMON's
/// kdamond `state` takes `damon_sysfs_lock` with a trylock (since the 2025 use-after-free fix
/// in `state_show`, which this project's 6.18 host has), so two tools reading DAMON at the same
/// moment is enough.
/// That is contention, not an answer; any other error is returned at once.
fn retry_busy<T>(mut read: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut pauses = BUSY_RETRY_MS.iter();
    loop {
        match read() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => match pauses.next() {
                Some(&ms) => std::thread::sleep(std::time::Duration::from_millis(ms)),
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// Reads `path` and trims surrounding white space (sysfs files end in a newline).
pub fn read_trimmed(path: &Path) -> Result<String, SysfsError> {
    retry_busy(|| fs::read_to_string(path))
        .map(|s| s.trim().to_owned())
        .map_err(|e| SysfsError::io(path, e))
}

/// Like [`read_trimmed`], but `Ok(None)` when the file does not exist.
pub fn read_optional(path: &Path) -> Result<Option<String>, SysfsError> {
    match retry_busy(|| fs::read_to_string(path)) {
        Ok(s) => Ok(Some(s.trim().to_owned())),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(SysfsError::io(path, e)),
    }
}

/// Reads `path` and parses its trimmed content as `T`.
pub fn read_parse<T: FromStr>(path: &Path) -> Result<T, SysfsError> {
    let value = read_trimmed(path)?;
    parse_value(path, &value)
}

/// Like [`read_parse`], but `Ok(None)` when the file does not exist.
pub fn read_parse_optional<T: FromStr>(path: &Path) -> Result<Option<T>, SysfsError> {
    read_optional(path)?
        .map(|value| parse_value(path, &value))
        .transpose()
}

fn parse_value<T: FromStr>(path: &Path, value: &str) -> Result<T, SysfsError> {
    value
        .parse()
        .map_err(|_| SysfsError::parse(path, value, std::any::type_name::<T>()))
}

/// Writes `value` to `path` (sysfs control files: no truncation semantics, one write).
pub fn write_value(path: &Path, value: &str) -> Result<(), SysfsError> {
    fs::write(path, value).map_err(|e| SysfsError::io(path, e))
}

/// Whether `path` exists (a directory or file); I/O errors count as "does not exist".
#[must_use]
pub fn exists(path: &Path) -> bool {
    path.exists()
}

/// The entries of `dir` named `<prefix><number>` (for example `node0`, `memory_tier4`), sorted
/// by number, with their paths. `Ok(None)` if `dir` does not exist.
pub fn numbered_entries(
    dir: &Path,
    prefix: &str,
) -> Result<Option<Vec<(u32, PathBuf)>>, SysfsError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SysfsError::io(dir, e)),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| SysfsError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(number) = name.strip_prefix(prefix) else {
            continue;
        };
        if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(n) = number.parse::<u32>() {
            found.push((n, entry.path()));
        }
    }
    found.sort_unstable_by_key(|(n, _)| *n);
    Ok(Some(found))
}

/// The names of the entries of `dir`, sorted. `Ok(None)` if `dir` does not exist.
pub fn dir_names(dir: &Path) -> Result<Option<Vec<String>>, SysfsError> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(SysfsError::io(dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| SysfsError::io(dir, e))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_owned());
        }
    }
    names.sort_unstable();
    Ok(Some(names))
}

/// A cpu or node list that is not in the kernel's `0-3,8,10-11` format.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid cpu/node list: {0}")]
pub struct InvalidList(String);

/// Parses the kernel's cpu list format (`bitmap_parselist`): `"0-3,8,10-11"` → `[0,1,2,3,8,10,11]`.
/// An empty string (a CPU-less node's `cpulist`) is an empty list. Also accepts the stride form
/// `0-7:2/4` (used-size/group-size) the kernel accepts. The result is sorted and deduplicated.
pub fn parse_cpulist(list: &str) -> Result<Vec<u32>, InvalidList> {
    let list = list.trim();
    let mut out = Vec::new();
    if list.is_empty() {
        return Ok(out);
    }
    for part in list.split(',') {
        let part = part.trim();
        let (range, stride) = match part.split_once(':') {
            Some((range, stride)) => (range, Some(stride)),
            None => (part, None),
        };
        let (start, end) = match range.split_once('-') {
            Some((a, b)) => (parse_u32(a, part)?, parse_u32(b, part)?),
            None => {
                let n = parse_u32(range, part)?;
                (n, n)
            }
        };
        if start > end {
            return Err(InvalidList(format!("range {part:?} is reversed")));
        }
        let (used, group) = match stride {
            None => (1, 1),
            Some(stride) => {
                let (used, group) = stride
                    .split_once('/')
                    .ok_or_else(|| InvalidList(format!("stride in {part:?} lacks '/'")))?;
                let (used, group) = (parse_u32(used, part)?, parse_u32(group, part)?);
                if used == 0 || group == 0 || used > group {
                    return Err(InvalidList(format!("bad stride in {part:?}")));
                }
                (used, group)
            }
        };
        let span = usize::try_from(end - start).unwrap_or(usize::MAX);
        if span >= MAX_LIST_ENTRIES || out.len() + span >= MAX_LIST_ENTRIES {
            return Err(InvalidList(format!("range {part:?} is implausibly large")));
        }
        let mut n = start;
        loop {
            if (n - start) % group < used {
                out.push(n);
            }
            if n == end {
                break;
            }
            n += 1;
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Node lists (`/sys/devices/system/node/online`, `memory_tierN/nodelist`) use the cpu list format.
pub fn parse_nodelist(list: &str) -> Result<Vec<u32>, InvalidList> {
    parse_cpulist(list)
}

fn parse_u32(s: &str, part: &str) -> Result<u32, InvalidList> {
    s.trim()
        .parse()
        .map_err(|_| InvalidList(format!("{s:?} in {part:?} is not a number")))
}

/// Reads a cpu/node list file.
pub fn read_list(path: &Path) -> Result<Vec<u32>, SysfsError> {
    let value = read_trimmed(path)?;
    parse_cpulist(&value).map_err(|e| SysfsError::parse(path, &value, e.to_string()))
}

/// Like [`read_list`], but `Ok(None)` when the file does not exist.
pub fn read_list_optional(path: &Path) -> Result<Option<Vec<u32>>, SysfsError> {
    match read_optional(path)? {
        None => Ok(None),
        Some(value) => parse_cpulist(&value)
            .map(Some)
            .map_err(|e| SysfsError::parse(path, &value, e.to_string())),
    }
}

/// Formats a sorted list back into the kernel's compact form: `[0,1,2,3,8]` → `"0-3,8"`.
#[must_use]
pub fn format_list(items: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < items.len() {
        let start = items[i];
        let mut end = start;
        while i + 1 < items.len() && items[i + 1] == end.saturating_add(1) {
            i += 1;
            end = items[i];
        }
        if !out.is_empty() {
            out.push(',');
        }
        if start == end {
            out.push_str(&start.to_string());
        } else {
            out.push_str(&format!("{start}-{end}"));
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn busy() -> io::Error {
        io::Error::from_raw_os_error(libc::EBUSY)
    }

    #[test]
    fn a_busy_file_is_read_again_and_other_errors_are_not() {
        // Contended twice (another DAMON reader held the lock), then the answer.
        let mut calls = 0;
        let value = retry_busy(|| {
            calls += 1;
            if calls <= 2 { Err(busy()) } else { Ok("on") }
        });
        assert_eq!((value.unwrap(), calls), ("on", 3));
        // Contended for good: the EBUSY comes back after the bounded retries.
        let mut calls = 0;
        let value: io::Result<()> = retry_busy(|| {
            calls += 1;
            Err(busy())
        });
        assert_eq!(value.unwrap_err().raw_os_error(), Some(libc::EBUSY));
        assert_eq!(calls, BUSY_RETRY_MS.len() + 1);
        // Anything else is an answer: no retry.
        let mut calls = 0;
        let value: io::Result<()> = retry_busy(|| {
            calls += 1;
            Err(io::Error::from_raw_os_error(libc::EACCES))
        });
        assert!(value.is_err());
        assert_eq!(calls, 1);
    }

    #[test]
    fn host_root_joins_relative_and_absolute() {
        let root = HostRoot::new("/tmp/fx");
        assert_eq!(root.path("sys/a"), PathBuf::from("/tmp/fx/sys/a"));
        assert_eq!(root.path("/sys/a"), PathBuf::from("/tmp/fx/sys/a"));
        assert!(!root.is_host());
        assert!(HostRoot::default().is_host());
        assert_eq!(HostRoot::default().path("proc/x"), PathBuf::from("/proc/x"));
    }

    #[test]
    fn cpulist_forms() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpulist("").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpulist("\n").unwrap(), Vec::<u32>::new());
        assert_eq!(parse_cpulist("5").unwrap(), vec![5]);
        assert_eq!(parse_cpulist("3,1,1-2").unwrap(), vec![1, 2, 3]);
        assert_eq!(parse_cpulist("0-7:2/4").unwrap(), vec![0, 1, 4, 5]);
        assert_eq!(parse_nodelist("0,2").unwrap(), vec![0, 2]);
    }

    #[test]
    fn cpulist_rejects_garbage() {
        for bad in [
            "a",
            "1-",
            "-1",
            "3-1",
            "0-4294967295",
            "1,,2",
            "0-7:2",
            "0-7:5/4",
            "0-7:0/4",
        ] {
            assert!(parse_cpulist(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn list_round_trip_format() {
        assert_eq!(format_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_list(&[]), "");
        assert_eq!(format_list(&[4]), "4");
    }

    #[test]
    fn read_errors_carry_path() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope");
        let err = read_trimmed(&missing).unwrap_err();
        assert_eq!(err.path(), missing);
        assert!(err.to_string().starts_with(&missing.display().to_string()));
        assert!(read_optional(&missing).unwrap().is_none());

        let file = dir.path().join("n");
        fs::write(&file, "12x\n").unwrap();
        let err = read_parse::<u32>(&file).unwrap_err();
        assert!(matches!(&err, SysfsError::Parse { value, .. } if value == "12x"));
        assert!(
            err.to_string().contains(&file.display().to_string()),
            "{err}"
        );

        fs::write(&file, "0-2,x\n").unwrap();
        let err = read_list(&file).unwrap_err();
        assert_eq!(err.path(), file);

        fs::write(&file, " 42\n").unwrap();
        assert_eq!(read_parse::<u32>(&file).unwrap(), 42);
        assert_eq!(read_parse_optional::<u32>(&missing).unwrap(), None);
    }

    #[test]
    fn numbered_entries_sorted_and_filtered() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["node10", "node2", "nodeX", "node", "possible", "node0"] {
            fs::create_dir(dir.path().join(name)).unwrap();
        }
        let found: Vec<u32> = numbered_entries(dir.path(), "node")
            .unwrap()
            .unwrap()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(found, vec![0, 2, 10]);
        assert!(
            numbered_entries(&dir.path().join("x"), "node")
                .unwrap()
                .is_none()
        );
    }

    proptest! {
        #[test]
        fn cpulist_never_panics(s in "[0-9,:/ -]{0,24}") {
            let _ = parse_cpulist(&s);
        }

        #[test]
        fn cpulist_format_round_trips(mut v in proptest::collection::vec(0u32..4096, 0..64)) {
            v.sort_unstable();
            v.dedup();
            prop_assert_eq!(parse_cpulist(&format_list(&v)).unwrap(), v);
        }
    }
}
