//! `memtide-workload`: a process with memory whose hot and cold parts are known, driven over
//! stdin so tests (and people trying memtide out) can say exactly when it touches what.
//!
//! Its buffer starts on a 2 MiB boundary, so huge-page tests know which 2 MiB chunks are
//! whole. With `--node N` the workload allocates the buffer on node N (first touch under
//! `MPOL_BIND`, then the range's policy goes back to the default, so kernel NUMA balancing and
//! DAMON treat it like any other memory), writing the checksum pattern into every page;
//! `--place NODE:PAGES` (repeatable) does the same range by range from the start. It prints `ready pid=P base=0xB size=S pages=N` once its buffer exists (untouched without
//! `--node`), then answers one line per command:
//!
//! | command | effect | reply |
//! |---|---|---|
//! | `touch [FIRST COUNT]` | writes one byte in each page of the range (default: all); one page fault per page on a fresh buffer | `touched N` |
//! | `hot FIRST COUNT SECONDS [r\|rw]` | for SECONDS, sweeps the range reading (and with `rw` also writing back) one word per page | `hot passes=P` |
//! | `churn ROUNDS` | ROUNDS times: touch every page, then give the pages back (`MADV_DONTNEED`); one fault per page per round, like a program that keeps mapping and unmapping a hot buffer | `churned faults=F` |
//! | `where [FIRST COUNT [STRIDE K]]` | asks move_pages (query mode) which node each page of the range is on; with STRIDE and K only the first K pages of every STRIDE | `where N0=A N1=B absent=C` (nodes ascending, `absent`: not resident) |
//! | `fill [FIRST COUNT]` | writes the checksum pattern into every word of each page (a new version per page) | `filled N` |
//! | `verify [FIRST COUNT]` | compares every word of each page with the pattern of its current version | `verified pages=N mismatches=M` (mismatching pages; `first=P` names the first) |
//! | `start r\|rw\|rewrite FIRST COUNT [STRIDE K]` | starts a background thread that sweeps those pages until `stop`, pausing 1 ms between passes: `r` reads one word per page, `rw` also writes it back unchanged, `rewrite` writes every page whole with its next pattern version | `started pages=N` |
//! | `stop` | stops the background sweep | `stopped passes=P` |
//! | `quit` (or end of input) | exits | — |
//!
//! Ranges are in pages from the start of the buffer. While a background sweep runs, the buffer
//! belongs to that thread: only `where`, `stop` and `quit` are answered (others say `error
//! busy`), so the test knows exactly which accesses happen when. The pattern makes any page a
//! migration lost, mixed up or tore visible to `verify`: every 8-byte word depends on the
//! page's index, the page's version and the word's position.
use std::{
    io::{self, BufRead as _, Write as _},
    process::ExitCode,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    thread::JoinHandle,
    time::{Duration, Instant},
};

use clap::Parser;
use memtide_host::sys::mempolicy::{self, Mode, NodeMask};

const PAGE: usize = 4096;
const HUGE: usize = 2 << 20;
/// Pause between two passes of a background sweep.
const PAUSE: Duration = Duration::from_millis(1);

/// A process with known hot and cold memory, driven over stdin (see the module docs).
#[derive(Parser, Debug)]
#[command(name = "memtide-workload", version)]
struct Args {
    /// Buffer size in pages of 4 KiB.
    #[arg(long, default_value_t = 4096)]
    pages: usize,
    /// Keep transparent huge pages off, so each 4 KiB page faults on its own.
    #[arg(long)]
    no_thp: bool,
    /// Allocate the whole buffer on this NUMA node (writing the pattern) before `ready`.
    #[arg(long, conflicts_with = "place")]
    node: Option<u32>,
    /// `NODE:PAGES`, repeatable: allocate the next PAGES pages of the buffer on NODE (writing
    /// the pattern) before `ready`, in order from the start; pages not covered stay untouched.
    #[arg(long, value_parser = parse_place)]
    place: Vec<(u32, usize)>,
}

fn parse_place(text: &str) -> Result<(u32, usize), String> {
    let (node, pages) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: expected NODE:PAGES"))?;
    Ok((
        node.parse().map_err(|_| format!("bad node {node:?}"))?,
        pages
            .parse()
            .map_err(|_| format!("bad page count {pages:?}"))?,
    ))
}

/// The pattern word `word` of page `page` at `version`.
fn pattern(page: usize, version: u32, word: usize) -> u64 {
    let page = page as u64;
    (page.wrapping_add(1))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        ^ (u64::from(version) << 40)
        ^ (word as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

struct Buffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
    /// Pattern version of each page (what `verify` expects).
    versions: Vec<u32>,
}

impl Buffer {
    /// A 2 MiB-aligned buffer of `pages` pages that has not been touched: large allocations
    /// come straight from mmap, so its pages are not resident until written.
    fn new(pages: usize) -> Self {
        let len = pages * PAGE;
        let storage = vec![0u8; len + HUGE];
        let misalignment = storage.as_ptr() as usize % HUGE;
        let offset = if misalignment == 0 {
            0
        } else {
            HUGE - misalignment
        };
        Self {
            storage,
            offset,
            len,
            versions: vec![0; pages],
        }
    }

    fn base(&self) -> usize {
        self.storage.as_ptr() as usize + self.offset
    }

    fn pages_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.offset..self.offset + self.len]
    }

    /// The byte range of pages `first..first + count`, or an error naming the bad bound.
    fn range(&self, first: usize, count: usize) -> Result<std::ops::Range<usize>, String> {
        let pages = self.len / PAGE;
        match first.checked_add(count) {
            Some(end) if end <= pages => Ok(first * PAGE..end * PAGE),
            _ => Err(format!(
                "range {first}+{count} outside the {pages}-page buffer"
            )),
        }
    }

    fn touch(&mut self, range: std::ops::Range<usize>) -> usize {
        let pages = &mut self.pages_mut()[range];
        for page in pages.chunks_mut(PAGE) {
            // black_box: the write must happen although nothing reads it back.
            page[0] = std::hint::black_box(1);
        }
        pages.len() / PAGE
    }

    /// Sweeps the range until `duration` has passed; returns the number of full passes.
    fn hot(&mut self, range: std::ops::Range<usize>, duration: Duration, write: bool) -> u64 {
        let pages: Vec<usize> = (range.start / PAGE..range.end / PAGE).collect();
        let deadline = Instant::now() + duration;
        let mut passes = 0u64;
        while Instant::now() < deadline {
            self.sweep(&pages, Sweep::from_write(write));
            passes += 1;
        }
        passes
    }

    /// One pass over `pages` (page indices).
    fn sweep(&mut self, pages: &[usize], how: Sweep) {
        let mut sum = 0u64;
        for &index in pages {
            match how {
                Sweep::Read | Sweep::ReadWrite => {
                    let start = self.offset + index * PAGE + 8;
                    let value = std::hint::black_box(self.storage[start]);
                    sum = sum.wrapping_add(u64::from(value));
                    if how == Sweep::ReadWrite {
                        // A store of the value just read: the page is written (dirty, accessed)
                        // and the pattern stays intact.
                        self.storage[start] = std::hint::black_box(value);
                    }
                }
                Sweep::Rewrite => {
                    self.versions[index] = self.versions[index].wrapping_add(1);
                    self.write_pattern(index);
                }
            }
        }
        std::hint::black_box(sum);
    }

    fn write_pattern(&mut self, index: usize) {
        let version = self.versions[index];
        let start = self.offset + index * PAGE;
        let page = &mut self.storage[start..start + PAGE];
        for (word, bytes) in page.chunks_exact_mut(8).enumerate() {
            bytes.copy_from_slice(&pattern(index, version, word).to_le_bytes());
        }
    }

    /// Writes the next pattern version into every page of the range.
    fn fill(&mut self, range: std::ops::Range<usize>) -> usize {
        for index in range.start / PAGE..range.end / PAGE {
            self.versions[index] = self.versions[index].wrapping_add(1);
            self.write_pattern(index);
        }
        range.len() / PAGE
    }

    /// Pages of the range whose contents differ from their pattern, and the first of them.
    fn verify(&self, range: std::ops::Range<usize>) -> (usize, Option<usize>) {
        let mut bad = 0;
        let mut first = None;
        for index in range.start / PAGE..range.end / PAGE {
            let version = self.versions[index];
            let start = self.offset + index * PAGE;
            let page = &self.storage[start..start + PAGE];
            let intact = page.chunks_exact(8).enumerate().all(|(word, bytes)| {
                let mut raw = [0u8; 8];
                raw.copy_from_slice(bytes);
                u64::from_le_bytes(raw) == pattern(index, version, word)
            });
            if !intact {
                bad += 1;
                first.get_or_insert(index);
            }
        }
        (bad, first)
    }

    /// Allocates pages `first..first + count` on `node`: binds the range there, writes the
    /// pattern (first touch allocates), then gives the range the default policy back.
    fn allocate_on(&mut self, node: u32, first: usize, count: usize) -> io::Result<()> {
        let range = self
            .range(first, count)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        let (start, len) = (self.base() + range.start, range.len());
        let bind = NodeMask::from_nodes([node])?;
        mempolicy::mbind(start, len, Mode::Bind, 0, &bind, 0)?;
        self.fill(range);
        mempolicy::mbind(start, len, Mode::Default, 0, &NodeMask::new(), 0)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sweep {
    Read,
    ReadWrite,
    Rewrite,
}

impl Sweep {
    fn from_write(write: bool) -> Self {
        if write { Self::ReadWrite } else { Self::Read }
    }

    fn parse(word: &str) -> Result<Self, String> {
        match word {
            "r" => Ok(Self::Read),
            "rw" => Ok(Self::ReadWrite),
            "rewrite" => Ok(Self::Rewrite),
            other => Err(format!("bad mode {other:?} (r, rw or rewrite)")),
        }
    }
}

/// Page indices of `[first, first + count)`, or with `STRIDE K` only the first K of every
/// STRIDE pages.
fn page_set(buffer_pages: usize, words: &[&str]) -> Result<Vec<usize>, String> {
    let number = |word: &str, what: &str| {
        word.parse::<usize>()
            .map_err(|_| format!("bad {what} {word:?}"))
    };
    let (first, count) = match words {
        [] => (0, buffer_pages),
        [first, count, ..] => (number(first, "first page")?, number(count, "page count")?),
        [_] => return Err("give FIRST and COUNT, or neither".to_owned()),
    };
    let (stride, keep) = match words.get(2..).unwrap_or_default() {
        [] => (1, 1),
        [stride, keep] => (number(stride, "stride")?, number(keep, "page count K")?),
        _ => return Err("give STRIDE and K, or neither".to_owned()),
    };
    if stride == 0 || keep == 0 || keep > stride {
        return Err(format!("need 0 < K <= STRIDE, got {keep} of {stride}"));
    }
    match first.checked_add(count) {
        Some(end) if end <= buffer_pages => Ok((first..end)
            .filter(|page| (page - first) % stride < keep)
            .collect()),
        _ => Err(format!(
            "range {first}+{count} outside the {buffer_pages}-page buffer"
        )),
    }
}

/// Which node each page is on, as `where N0=A N1=B absent=C`.
fn where_(base: usize, pages: &[usize]) -> Result<String, String> {
    use memtide_host::sys::mempolicy::{Pid, query_pages};
    let addresses: Vec<usize> = pages.iter().map(|page| base + page * PAGE).collect();
    let mut nodes = std::collections::BTreeMap::new();
    let mut absent = 0usize;
    let mut status = Vec::new();
    for chunk in addresses.chunks(1024) {
        query_pages(Pid::Current, chunk, &mut status).map_err(|e| format!("move_pages: {e}"))?;
        for s in &status {
            match s.node() {
                Some(n) => *nodes.entry(n).or_insert(0usize) += 1,
                None => absent += 1,
            }
        }
    }
    let mut reply = String::from("where");
    for (node, count) in nodes {
        reply.push_str(&format!(" N{node}={count}"));
    }
    reply.push_str(&format!(" absent={absent}"));
    Ok(reply)
}

fn parse_range(buffer: &Buffer, words: &[&str]) -> Result<std::ops::Range<usize>, String> {
    match words {
        [] => Ok(0..buffer.len),
        [first, count, ..] => {
            let first = first
                .parse()
                .map_err(|_| format!("bad first page {first:?}"))?;
            let count = count
                .parse()
                .map_err(|_| format!("bad page count {count:?}"))?;
            buffer.range(first, count)
        }
        [_] => Err("give FIRST and COUNT, or neither".to_owned()),
    }
}

/// A background sweep: the thread owns the buffer until it is stopped.
struct Background {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<(Buffer, u64)>,
}

impl Background {
    fn start(mut buffer: Buffer, pages: Vec<usize>, how: Sweep) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut passes = 0u64;
            while !flag.load(Ordering::Relaxed) {
                buffer.sweep(&pages, how);
                passes += 1;
                // A breather between passes: samplers that look every few milliseconds still
                // see every page accessed, and a small hot set does not keep a CPU busy that
                // the agent under test needs.
                std::thread::sleep(PAUSE);
            }
            (buffer, passes)
        });
        Self { stop, thread }
    }

    fn finish(self) -> Result<(Buffer, u64), String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| "the background sweep panicked".to_owned())
    }
}

/// The buffer, or the background sweep that holds it.
enum Holder {
    Idle(Buffer),
    Running(Background),
    /// Only while a command moves the buffer between the two.
    Empty,
}

struct Workload {
    holder: Holder,
    base: usize,
    pages: usize,
}

impl Workload {
    fn execute(&mut self, line: &str) -> Option<String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match (words.as_slice(), &mut self.holder) {
            (["quit"], _) => return None,
            (["where", rest @ ..], _) => {
                page_set(self.pages, rest).and_then(|pages| where_(self.base, &pages))
            }
            (["stop"], Holder::Running(_)) => {
                let Holder::Running(background) =
                    std::mem::replace(&mut self.holder, Holder::Empty)
                else {
                    unreachable!("matched Running above")
                };
                background.finish().map(|(buffer, passes)| {
                    self.holder = Holder::Idle(buffer);
                    format!("stopped passes={passes}")
                })
            }
            (["stop"], _) => Err("no background sweep runs".to_owned()),
            (["start", mode, rest @ ..], Holder::Idle(_)) => Sweep::parse(mode)
                .and_then(|how| page_set(self.pages, rest).map(|pages| (how, pages)))
                .map(|(how, pages)| {
                    let Holder::Idle(buffer) = std::mem::replace(&mut self.holder, Holder::Empty)
                    else {
                        unreachable!("matched Idle above")
                    };
                    let count = pages.len();
                    self.holder = Holder::Running(Background::start(buffer, pages, how));
                    format!("started pages={count}")
                }),
            (_, Holder::Idle(buffer)) => execute_idle(buffer, &words, line),
            _ => Err("busy: a background sweep runs (stop it first)".to_owned()),
        };
        Some(reply.unwrap_or_else(|error| format!("error {error}")))
    }
}

/// Commands that need the buffer itself.
fn execute_idle(buffer: &mut Buffer, words: &[&str], line: &str) -> Result<String, String> {
    match words {
        ["touch", rest @ ..] => {
            parse_range(buffer, rest).map(|range| format!("touched {}", buffer.touch(range)))
        }
        ["fill", rest @ ..] => {
            parse_range(buffer, rest).map(|range| format!("filled {}", buffer.fill(range)))
        }
        ["verify", rest @ ..] => parse_range(buffer, rest).map(|range| {
            let pages = range.len() / PAGE;
            match buffer.verify(range) {
                (0, _) => format!("verified pages={pages} mismatches=0"),
                (bad, first) => format!(
                    "verified pages={pages} mismatches={bad} first={}",
                    first.unwrap_or_default()
                ),
            }
        }),
        ["hot", first, count, seconds, mode @ ..] => {
            let write = match mode {
                [] | ["r"] => Ok(false),
                ["rw"] => Ok(true),
                other => Err(format!("bad mode {other:?} (r or rw)")),
            };
            let seconds = seconds
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| format!("bad duration {seconds:?}"));
            parse_range(buffer, &[first, count]).and_then(|range| {
                let passes = buffer.hot(range, Duration::from_secs_f64(seconds?), write?);
                Ok(format!("hot passes={passes}"))
            })
        }
        ["churn", rounds] => rounds
            .parse::<usize>()
            .map_err(|_| format!("bad round count {rounds:?}"))
            .and_then(|rounds| {
                let mut faults = 0;
                for _ in 0..rounds {
                    faults += buffer.touch(0..buffer.len);
                    memtide_host::sys::process::discard_pages(buffer.pages_mut())
                        .map_err(|error| format!("madvise: {error}"))?;
                }
                Ok(format!("churned faults={faults}"))
            }),
        _ => Err(format!("unknown command {line:?}")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.no_thp
        && let Err(error) = memtide_host::sys::process::disable_thp()
    {
        eprintln!("memtide-workload: cannot disable THP: {error}");
        return ExitCode::FAILURE;
    }
    let mut buffer = Buffer::new(args.pages);
    let mut layout = args.place.clone();
    if let Some(node) = args.node {
        layout.push((node, args.pages));
    }
    let mut first = 0;
    for (node, pages) in layout {
        if let Err(error) = buffer.allocate_on(node, first, pages) {
            eprintln!(
                "memtide-workload: cannot allocate pages {first}+{pages} on node {node}: {error}"
            );
            return ExitCode::FAILURE;
        }
        first += pages;
    }
    let mut out = io::stdout().lock();
    let report = |out: &mut io::StdoutLock<'_>, line: String| {
        writeln!(out, "{line}").and_then(|()| out.flush())
    };
    let ready = format!(
        "ready pid={} base={:#x} size={} pages={}",
        std::process::id(),
        buffer.base(),
        args.pages * PAGE,
        args.pages
    );
    if report(&mut out, ready).is_err() {
        return ExitCode::FAILURE;
    }
    let mut workload = Workload {
        base: buffer.base(),
        pages: args.pages,
        holder: Holder::Idle(buffer),
    };
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Some(reply) = workload.execute(line.trim()) else {
            break;
        };
        if report(&mut out, reply).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_sets_take_k_of_every_stride() {
        assert_eq!(page_set(8, &[]).unwrap(), (0..8).collect::<Vec<_>>());
        assert_eq!(page_set(8, &["2", "3"]).unwrap(), [2, 3, 4]);
        assert!(
            page_set(1024, &["512", "1024", "512", "2"]).is_err(),
            "past the end"
        );
        assert_eq!(
            page_set(1024, &["0", "1024", "512", "2"]).unwrap(),
            [0, 1, 512, 513]
        );
        assert!(
            page_set(8, &["0", "8", "2", "3"]).is_err(),
            "K above STRIDE"
        );
        assert!(page_set(8, &["0"]).is_err());
    }

    #[test]
    fn fill_then_verify_is_clean_and_a_flipped_byte_is_found() {
        let mut buffer = Buffer::new(8);
        assert_eq!(buffer.base() % HUGE, 0, "2 MiB aligned");
        assert_eq!(buffer.fill(0..8 * PAGE), 8);
        assert_eq!(buffer.verify(0..8 * PAGE), (0, None));
        buffer.sweep(&[1, 2], Sweep::Rewrite);
        buffer.sweep(&[0, 1, 2, 3], Sweep::ReadWrite);
        assert_eq!(
            buffer.verify(0..8 * PAGE),
            (0, None),
            "rw keeps the pattern"
        );
        let byte = buffer.offset + 5 * PAGE + 100;
        buffer.storage[byte] ^= 1;
        assert_eq!(buffer.verify(0..8 * PAGE), (1, Some(5)));
        // A page holding another page's (or an older version's) contents is caught too.
        let (five, six) = (buffer.offset + 5 * PAGE, buffer.offset + 6 * PAGE);
        buffer.storage.copy_within(six..six + PAGE, five);
        assert_eq!(buffer.verify(0..8 * PAGE).0, 1);
        buffer.versions[6] += 1;
        assert_eq!(buffer.verify(6 * PAGE..7 * PAGE).0, 1);
    }

    #[test]
    fn only_where_and_stop_answer_while_a_sweep_runs() {
        let buffer = Buffer::new(4);
        let mut workload = Workload {
            base: buffer.base(),
            pages: 4,
            holder: Holder::Idle(buffer),
        };
        assert_eq!(workload.execute("fill").unwrap(), "filled 4");
        assert_eq!(
            workload.execute("start rewrite 0 2").unwrap(),
            "started pages=2"
        );
        assert!(
            workload
                .execute("verify")
                .unwrap()
                .starts_with("error busy")
        );
        assert!(workload.execute("where 0 4").unwrap().starts_with("where "));
        std::thread::sleep(Duration::from_millis(20));
        assert!(
            workload
                .execute("stop")
                .unwrap()
                .starts_with("stopped passes=")
        );
        assert_eq!(
            workload.execute("verify").unwrap(),
            "verified pages=4 mismatches=0"
        );
        assert!(workload.execute("stop").unwrap().starts_with("error"));
        assert!(workload.execute("quit").is_none());
    }
}
