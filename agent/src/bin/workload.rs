//! `memtide-workload`: a process with memory whose hot and cold parts are known, driven over
//! stdin so tests (and people trying memtide out) can say exactly when it touches what.
//!
//! It prints `ready pid=P base=0xB size=S pages=N` once its buffer exists (untouched), then
//! answers one line per command:
//!
//! | command | effect | reply |
//! |---|---|---|
//! | `touch` | writes one byte in every page (one page fault per page on a fresh buffer) | `touched N` |
//! | `quit` (or end of input) | exits | — |
use std::{
    io::{self, BufRead as _, Write as _},
    process::ExitCode,
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
        let reply = match line.trim() {
            "touch" => {
                let pages = buffer.pages_mut();
                for page in pages.chunks_mut(PAGE) {
                    // black_box: the write must happen although nothing reads it back.
                    page[0] = std::hint::black_box(1);
                }
                format!("touched {}", args.pages)
            }
            "quit" => break,
            other => format!("error unknown command {other:?}"),
        };
        if report(&mut out, reply).is_err() {
            break;
        }
    }
    ExitCode::SUCCESS
}
