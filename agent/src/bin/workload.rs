//! `memtide-workload`: a process with memory whose hot and cold parts are known, driven over
//! stdin so tests (and people trying memtide out) can say exactly when it touches what.
//!
//! It prints `ready pid=P base=0xB size=S pages=N` once its buffer exists (untouched), then
//! answers one line per command:
//!
//! | command | effect | reply |
//! |---|---|---|
//! | `touch [FIRST COUNT]` | writes one byte in each page of the range (default: all); one page fault per page on a fresh buffer | `touched N` |
//! | `hot FIRST COUNT SECONDS [r\|rw]` | for SECONDS, sweeps the range reading (and with `rw` also writing) one word per page | `hot passes=P` |
//! | `churn ROUNDS` | ROUNDS times: touch every page, then give the pages back (`MADV_DONTNEED`); one fault per page per round, like a program that keeps mapping and unmapping a hot buffer | `churned faults=F` |
//! | `where [FIRST COUNT]` | asks move_pages (query mode) which node each page of the range is on | `where N0=A N1=B absent=C` (nodes ascending, `absent`: not resident) |
//! | `quit` (or end of input) | exits | — |
//!
//! Ranges are in pages from the start of the buffer. The workload is single-threaded on
//! purpose: `hot` blocks until done, so a test knows exactly when accesses happen.
use std::{
    io::{self, BufRead as _, Write as _},
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;

const PAGE: usize = 4096;

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
}

struct Buffer {
    storage: Vec<u8>,
    offset: usize,
    len: usize,
}

impl Buffer {
    /// A page-aligned buffer of `pages` pages that has not been touched: large allocations
    /// come straight from mmap, so its pages are not resident until written.
    fn new(pages: usize) -> Self {
        let len = pages * PAGE;
        let storage = vec![0u8; len + PAGE];
        let misalignment = storage.as_ptr() as usize % PAGE;
        let offset = if misalignment == 0 {
            0
        } else {
            PAGE - misalignment
        };
        Self {
            storage,
            offset,
            len,
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
        let deadline = Instant::now() + duration;
        let mut passes = 0u64;
        let mut sum = 0u64;
        while Instant::now() < deadline {
            let pages = &mut self.pages_mut()[range.clone()];
            for page in pages.chunks_mut(PAGE) {
                sum = sum.wrapping_add(u64::from(std::hint::black_box(page[8])));
                if write {
                    page[8] = page[8].wrapping_add(1);
                }
            }
            passes += 1;
        }
        std::hint::black_box(sum);
        passes
    }
}

/// Which node each page of `range` is on, as `where N0=A N1=B absent=C`.
fn where_(buffer: &Buffer, range: std::ops::Range<usize>) -> Result<String, String> {
    use memtide::sys::mempolicy::{Pid, query_pages};
    let pages: Vec<usize> = range.step_by(PAGE).map(|off| buffer.base() + off).collect();
    let mut nodes = std::collections::BTreeMap::new();
    let mut absent = 0usize;
    let mut status = Vec::new();
    for chunk in pages.chunks(1024) {
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

fn execute(buffer: &mut Buffer, line: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let reply = match words.as_slice() {
        ["touch", rest @ ..] => {
            parse_range(buffer, rest).map(|range| format!("touched {}", buffer.touch(range)))
        }
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
                    memtide::sys::process::discard_pages(buffer.pages_mut())
                        .map_err(|error| format!("madvise: {error}"))?;
                }
                Ok(format!("churned faults={faults}"))
            }),
        ["where", rest @ ..] => parse_range(buffer, rest).and_then(|range| where_(buffer, range)),
        ["quit"] => return None,
        _ => Err(format!("unknown command {line:?}")),
    };
    Some(reply.unwrap_or_else(|error| format!("error {error}")))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.no_thp
        && let Err(error) = memtide::sys::process::disable_thp()
    {
        eprintln!("memtide-workload: cannot disable THP: {error}");
        return ExitCode::FAILURE;
    }
    let mut buffer = Buffer::new(args.pages);
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
    for line in io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let Some(reply) = execute(&mut buffer, line.trim()) else {
            break;
        };
        if report(&mut out, reply).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}
