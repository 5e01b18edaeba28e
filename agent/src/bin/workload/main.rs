//! `memtide-workload`: a process with memory whose hot and cold parts are known, driven over
//! stdin so tests (and people trying memtide out) can say exactly when it touches what.
//!
//! Its buffer starts on a 2 MiB boundary, so huge-page tests know which 2 MiB chunks are
//! whole. With `--node N` the workload allocates the buffer on node N (first touch under
//! `MPOL_BIND`, then the range's policy goes back to the default, so kernel NUMA balancing and
//! DAMON treat it like any other memory), writing the checksum pattern into every page;
//! `--place NODE:PAGES` (repeatable) does the same range by range from the start.
//!
//! With `--span BYTES` (a count, or with a `K`, `M`, `G` or `T` suffix: powers of 1024) the
//! pages are spread instead over a sparse region of that size, one every `BYTES / pages`
//! (rounded down to whole pages): the process's virtual size grows with the span while the
//! commands touch the same number of pages, so an agent's cost against target size can be
//! measured at an equal fault rate (`scripts/bench-scale.sh`). The region is private anonymous
//! memory that is never touched except at those pages; past 1 GiB it is allocated in 1 GiB
//! pieces, because the kernel's default (heuristic) overcommit refuses one mapping larger than
//! RAM + swap but not many smaller ones (under `vm.overcommit_memory = 2` a span larger than
//! the commit limit cannot be had). Page addresses then follow each other at the stride within
//! a piece, not across pieces. With `--cluster K` the pages go in runs of K adjacent pages
//! instead, the runs spread evenly (one every `BYTES / runs`): `--pages 16384 --cluster 32`
//! touches 512 runs of 32 pages at any span, each inside one 2 MiB superpage while the run
//! stride is a multiple of 2 MiB, the same superpages-and-pages shape as 16,384 single pages
//! over 1 GiB. `--span` excludes `--node` and `--place`.
//!
//! It prints `ready pid=P base=0xB size=S pages=N` (`size`: the pages' bytes; with `--span`
//! also `span=BYTES stride=BYTES cluster=K`, `stride` from one run to the next, `base` the
//! first page) once its buffer exists (untouched without `--node`), then answers one line per
//! command:
//!
//! | command | effect | reply |
//! |---|---|---|
//! | `touch [FIRST COUNT]` | writes one byte in each page of the range (default: all); one page fault per page on a fresh buffer | `touched N` |
//! | `hot FIRST COUNT SECONDS [r\|rw]` | for SECONDS, sweeps the range reading (and with `rw` also writing back) one word per page | `hot passes=P` |
//! | `churn ROUNDS` | ROUNDS times: touch every page, then give the pages back (`MADV_DONTNEED`, page by page with `--span`); one fault per page per round, like a program that keeps mapping and unmapping a hot buffer | `churned faults=F` |
//! | `where [FIRST COUNT [STRIDE K]]` | asks move_pages (query mode) which node each page of the range is on; with STRIDE and K only the first K pages of every STRIDE | `where N0=A N1=B absent=C` (nodes ascending, `absent`: not resident) |
//! | `fill [FIRST COUNT]` | writes the checksum pattern into every word of each page (a new version per page) | `filled N` |
//! | `verify [FIRST COUNT]` | compares every word of each page with the pattern of its current version | `verified pages=N mismatches=M` (mismatching pages; `first=P` names the first) |
//! | `start r\|rw\|rewrite FIRST COUNT [STRIDE K]` | starts a background thread that sweeps those pages until `stop`, pausing 1 ms between passes: `r` reads one word per page, `rw` also writes it back unchanged, `rewrite` writes every page whole with its next pattern version | `started pages=N` |
//! | `stop` | stops the background sweep | `stopped passes=P` |
//! | `hint fast\|slow\|bandwidth FIRST COUNT` | marks the range with memtide's hint library (`memtide_hint`: an `mbind` policy for the fast or the slow tier, or interleaving, with the pages present moved to it); packed pages only | `hinted pages=N` |
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
    time::Duration,
};

use clap::Parser;

mod buffer;

use self::buffer::{Buffer, Layout, PAGE_SIZE, Sweep};

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
    /// Spread the pages over a sparse region of this many bytes (suffix K, M, G or T: powers
    /// of 1024), one every span / pages bytes, instead of packing them.
    #[arg(long, value_parser = parse_bytes, conflicts_with_all = ["node", "place"])]
    span: Option<usize>,
    /// With `--span`: spread runs of this many adjacent pages rather than single pages.
    #[arg(long, requires = "span", value_parser = clap::value_parser!(u32).range(1..))]
    cluster: Option<u32>,
}

/// A byte count, optionally with a binary suffix: `4096`, `64G`, `1T`.
fn parse_bytes(text: &str) -> Result<usize, String> {
    let (digits, shift) = match text.char_indices().last() {
        Some((at, unit)) if unit.is_ascii_alphabetic() => {
            let shift = match unit.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(format!("{text:?}: the suffix is K, M, G or T")),
            };
            (&text[..at], shift)
        }
        _ => (text, 0),
    };
    digits
        .parse::<usize>()
        .ok()
        .and_then(|count| count.checked_mul(1 << shift))
        .ok_or_else(|| format!("bad byte count {text:?}"))
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
fn where_(layout: &Layout, pages: &[usize]) -> Result<String, String> {
    use memtide_host::sys::mempolicy::{Pid, query_pages};
    let addresses: Vec<usize> = pages.iter().map(|&page| layout.address(page)).collect();
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
    layout: Layout,
}

impl Workload {
    fn execute(&mut self, line: &str) -> Option<String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let reply = match (words.as_slice(), &mut self.holder) {
            (["quit"], _) => return None,
            (["where", rest @ ..], _) => {
                page_set(self.layout.pages, rest).and_then(|pages| where_(&self.layout, &pages))
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
                .and_then(|how| page_set(self.layout.pages, rest).map(|pages| (how, pages)))
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
            let pages = range.len() / PAGE_SIZE;
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
        ["hint", kind, first, count] => {
            let hint = match *kind {
                "fast" => Ok(memtide_hint::Hint::Fast),
                "slow" => Ok(memtide_hint::Hint::Slow),
                "bandwidth" => Ok(memtide_hint::Hint::Bandwidth),
                other => Err(format!("bad hint {other:?} (fast, slow or bandwidth)")),
            };
            let range = parse_range(buffer, &[first, count]);
            match (hint, range) {
                (Ok(hint), Ok(range)) if buffer.layout.stride == PAGE_SIZE => {
                    let pages = range.len() / PAGE_SIZE;
                    memtide_hint::hint(buffer.base() + range.start, range.len(), hint)
                        .map(|()| format!("hinted pages={pages}"))
                        .map_err(|error| format!("memtide_hint: {error}"))
                }
                (Ok(_), Ok(_)) => Err("hint needs packed pages (no --span)".to_owned()),
                (Err(error), _) | (_, Err(error)) => Err(error),
            }
        }
        ["churn", rounds] => rounds
            .parse::<usize>()
            .map_err(|_| format!("bad round count {rounds:?}"))
            .and_then(|rounds| {
                let mut faults = 0;
                for _ in 0..rounds {
                    faults += buffer.touch(0..buffer.len);
                    buffer
                        .discard()
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
    let mut buffer = match args.span {
        None => Buffer::new(args.pages),
        Some(span) => {
            match Buffer::spread(args.pages, span, args.cluster.map_or(1, |k| k as usize)) {
                Ok(buffer) => buffer,
                Err(error) => {
                    eprintln!("memtide-workload: {error}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
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
    let mut ready = format!(
        "ready pid={} base={:#x} size={} pages={}",
        std::process::id(),
        buffer.base(),
        args.pages * PAGE_SIZE,
        args.pages
    );
    if let Some(span) = args.span {
        ready.push_str(&format!(
            " span={span} stride={} cluster={}",
            buffer.layout.stride, buffer.layout.cluster
        ));
    }
    if report(&mut out, ready).is_err() {
        return ExitCode::FAILURE;
    }
    let mut workload = Workload {
        layout: buffer.layout.clone(),
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
    use super::{buffer::SUPERPAGE_SIZE, *};

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
        assert_eq!(buffer.base() % SUPERPAGE_SIZE, 0, "2 MiB aligned");
        assert_eq!(buffer.fill(0..8 * PAGE_SIZE), 8);
        assert_eq!(buffer.verify(0..8 * PAGE_SIZE), (0, None));
        buffer.sweep(&[1, 2], Sweep::Rewrite);
        buffer.sweep(&[0, 1, 2, 3], Sweep::ReadWrite);
        assert_eq!(
            buffer.verify(0..8 * PAGE_SIZE),
            (0, None),
            "rw keeps the pattern"
        );
        buffer.page_mut(5)[100] ^= 1;
        assert_eq!(buffer.verify(0..8 * PAGE_SIZE), (1, Some(5)));
        // A page holding another page's (or an older version's) contents is caught too.
        let six = buffer.page(6).to_vec();
        buffer.page_mut(5).copy_from_slice(&six);
        assert_eq!(buffer.verify(0..8 * PAGE_SIZE).0, 1);
        buffer.versions[6] += 1;
        assert_eq!(buffer.verify(6 * PAGE_SIZE..7 * PAGE_SIZE).0, 1);
    }

    #[test]
    fn spread_pages_sit_a_stride_apart_across_pieces() {
        assert_eq!(parse_bytes("4096"), Ok(4096));
        assert_eq!(parse_bytes("64G"), Ok(64 << 30));
        assert_eq!(parse_bytes("1t"), Ok(1 << 40));
        assert!(parse_bytes("1X").is_err() && parse_bytes("G").is_err());
        assert!(
            Buffer::spread(8, 7 * PAGE_SIZE, 1).is_err(),
            "span below the pages"
        );
        assert!(Buffer::spread(8, 7 * PAGE_SIZE, 4).is_err(), "runs overlap");
        assert_eq!(
            Buffer::spread(4, 1 << 30, 1).unwrap().layout.stride,
            256 << 20
        );
        // Runs of 3: 7 pages make 3 runs 5 pages apart (at 0-2, 5-7 and 10), in pieces of 8.
        assert_eq!(
            Buffer::spread(7, 15 * PAGE_SIZE, 3).unwrap().layout.stride,
            5 * PAGE_SIZE
        );
        let runs = Buffer::with_layout(7, 5 * PAGE_SIZE, 3, 8 * PAGE_SIZE);
        assert_eq!(runs.pieces.len(), 2);
        let at: Vec<_> = (0..7).map(|page| runs.layout.locate(page)).collect();
        assert_eq!(
            at,
            [0, 1, 2, 5, 6, 7, 10].map(|p| (
                (p * PAGE_SIZE) / (8 * PAGE_SIZE),
                (p * PAGE_SIZE) % (8 * PAGE_SIZE)
            ))
        );
        // 10 pages 3 pages apart (30 pages) in pieces of 8: 4 pieces, page 3 (at 9) the second
        // page of the second piece, page 9 (at 27) inside the shorter last one.
        let mut buffer = Buffer::with_layout(10, 3 * PAGE_SIZE, 1, 8 * PAGE_SIZE);
        assert_eq!(buffer.pieces.len(), 4);
        assert_eq!(buffer.layout.locate(3), (1, PAGE_SIZE));
        assert_eq!(buffer.layout.address(1), buffer.base() + 3 * PAGE_SIZE);
        assert_eq!(buffer.base() % SUPERPAGE_SIZE, 0, "2 MiB aligned");
        assert_eq!(buffer.fill(0..10 * PAGE_SIZE), 10);
        assert_eq!(buffer.verify(0..10 * PAGE_SIZE), (0, None));
        buffer.page_mut(9)[7] ^= 1;
        assert_eq!(buffer.verify(0..10 * PAGE_SIZE), (1, Some(9)));
        buffer.discard().unwrap();
        assert!((0..10).all(|page| buffer.page(page).iter().all(|&b| b == 0)));
        assert_eq!(buffer.touch(0..10 * PAGE_SIZE), 10);
        assert!((0..10).all(|page| buffer.page(page)[0] == 1));
    }

    #[test]
    fn only_where_and_stop_answer_while_a_sweep_runs() {
        let buffer = Buffer::new(4);
        let mut workload = Workload {
            layout: buffer.layout.clone(),
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
