//! The workload's memory: pages laid out plain, spread over a sparse span or in clusters,
//! each filled with a pattern that tells its index and version, placed on nodes and verified.

use std::{
    io,
    time::{Duration, Instant},
};

use memtide_core::units;
use memtide_host::sys::mempolicy::{self, Mode, NodeMask};

/// memtide's page and superpage, in the type the buffer's offsets and lengths are counted in.
pub(super) const PAGE_SIZE: usize = units::PAGE_SIZE as usize;
pub(super) const SUPERPAGE_SIZE: usize = units::SUPERPAGE_SIZE as usize;

/// The pattern word `word` of page `page` at `version`.
pub(super) fn pattern(page: usize, version: u32, word: usize) -> u64 {
    let page = page as u64;
    (page.wrapping_add(1))
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        ^ (u64::from(version) << 40)
        ^ (word as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
}

/// Pieces a `--span` region is allocated in, at most (see the module docs).
pub(super) const SPAN_PIECE: usize = 1 << 30;

/// One allocation holding part of the buffer, its pages from `offset` (2 MiB-aligned) on.
pub(super) struct Piece {
    pub(super) storage: Vec<u8>,
    pub(super) offset: usize,
    /// Usable bytes from `offset`.
    pub(super) len: usize,
}

/// Where each page of the buffer is: kept apart from the memory so `where` can answer while a
/// background sweep owns the buffer.
#[derive(Clone, Debug)]
pub(super) struct Layout {
    /// Address of each piece's usable start.
    pub(super) bases: Vec<usize>,
    /// Usable bytes per piece (the last may have fewer).
    pub(super) piece: usize,
    /// Bytes from one run's start to the next: `PAGE_SIZE`, or with `--span` the span's share.
    pub(super) stride: usize,
    /// Adjacent pages per run: 1 unless `--cluster`.
    pub(super) cluster: usize,
    pub(super) pages: usize,
}

impl Layout {
    /// Piece and byte position within its usable part of page `index`.
    pub(super) fn locate(&self, index: usize) -> (usize, usize) {
        let at = index / self.cluster * self.stride + index % self.cluster * PAGE_SIZE;
        (at / self.piece, at % self.piece)
    }

    pub(super) fn address(&self, index: usize) -> usize {
        let (piece, within) = self.locate(index);
        self.bases[piece] + within
    }
}

pub(super) struct Buffer {
    pub(super) pieces: Vec<Piece>,
    pub(super) layout: Layout,
    /// Bytes of pages (`pages * PAGE_SIZE`).
    pub(super) len: usize,
    /// Pattern version of each page (what `verify` expects).
    pub(super) versions: Vec<u32>,
}

impl Buffer {
    /// A 2 MiB-aligned buffer of `pages` pages that has not been touched: large allocations
    /// come straight from mmap, so its pages are not resident until written.
    pub(super) fn new(pages: usize) -> Self {
        let len = pages * PAGE_SIZE;
        Self::with_layout(pages, PAGE_SIZE, 1, len.max(PAGE_SIZE))
    }

    /// `pages` pages in runs of `cluster` spread over an untouched region of `span` bytes (see
    /// the module docs).
    pub(super) fn spread(pages: usize, span: usize, cluster: usize) -> Result<Self, String> {
        let stride = span
            .checked_div(pages.div_ceil(cluster))
            .map_or(0, |share| share / PAGE_SIZE * PAGE_SIZE);
        if stride < cluster * PAGE_SIZE || stride == 0 {
            return Err(format!(
                "a span of {span} bytes cannot hold {pages} pages of {PAGE_SIZE} bytes in runs of {cluster}"
            ));
        }
        Ok(Self::with_layout(pages, stride, cluster, SPAN_PIECE))
    }

    /// Runs of `cluster` pages `stride` bytes apart over pieces of `piece` usable bytes each (a
    /// multiple of `PAGE_SIZE`; a page never straddles two pieces since the stride is whole pages
    /// too).
    pub(super) fn with_layout(pages: usize, stride: usize, cluster: usize, piece: usize) -> Self {
        let total = pages.div_ceil(cluster) * stride;
        let count = total.div_ceil(piece).max(1);
        let pieces: Vec<Piece> = (0..count)
            .map(|n| {
                let len = (total - (n * piece).min(total)).min(piece);
                let storage = vec![0u8; len + SUPERPAGE_SIZE];
                let misalignment = storage.as_ptr() as usize % SUPERPAGE_SIZE;
                let offset = if misalignment == 0 {
                    0
                } else {
                    SUPERPAGE_SIZE - misalignment
                };
                Piece {
                    storage,
                    offset,
                    len,
                }
            })
            .collect();
        let layout = Layout {
            bases: pieces
                .iter()
                .map(|p| p.storage.as_ptr() as usize + p.offset)
                .collect(),
            piece,
            stride,
            cluster,
            pages,
        };
        Self {
            pieces,
            layout,
            len: pages * PAGE_SIZE,
            versions: vec![0; pages],
        }
    }

    pub(super) fn base(&self) -> usize {
        self.layout.bases[0]
    }

    pub(super) fn page(&self, index: usize) -> &[u8] {
        let (piece, within) = self.layout.locate(index);
        let piece = &self.pieces[piece];
        &piece.storage[piece.offset + within..piece.offset + within + PAGE_SIZE]
    }

    pub(super) fn page_mut(&mut self, index: usize) -> &mut [u8] {
        let (piece, within) = self.layout.locate(index);
        let piece = &mut self.pieces[piece];
        &mut piece.storage[piece.offset + within..piece.offset + within + PAGE_SIZE]
    }

    /// The byte range of pages `first..first + count`, or an error naming the bad bound.
    pub(super) fn range(
        &self,
        first: usize,
        count: usize,
    ) -> Result<std::ops::Range<usize>, String> {
        let pages = self.len / PAGE_SIZE;
        match first.checked_add(count) {
            Some(end) if end <= pages => Ok(first * PAGE_SIZE..end * PAGE_SIZE),
            _ => Err(format!(
                "range {first}+{count} outside the {pages}-page buffer"
            )),
        }
    }

    pub(super) fn touch(&mut self, range: std::ops::Range<usize>) -> usize {
        for index in range.start / PAGE_SIZE..range.end / PAGE_SIZE {
            // black_box: the write must happen although nothing reads it back.
            self.page_mut(index)[0] = std::hint::black_box(1);
        }
        range.len() / PAGE_SIZE
    }

    /// Gives every page back to the kernel (`MADV_DONTNEED`): packed pages in one call per
    /// piece, spread ones page by page (not the untouched span between them).
    pub(super) fn discard(&mut self) -> io::Result<()> {
        if self.layout.stride == PAGE_SIZE {
            for piece in &mut self.pieces {
                let (start, len) = (piece.offset, piece.len);
                memtide_host::sys::process::discard_pages(&mut piece.storage[start..start + len])?;
            }
        } else {
            for index in 0..self.layout.pages {
                memtide_host::sys::process::discard_pages(self.page_mut(index))?;
            }
        }
        Ok(())
    }

    /// Sweeps the range until `duration` has passed; returns the number of full passes.
    pub(super) fn hot(
        &mut self,
        range: std::ops::Range<usize>,
        duration: Duration,
        write: bool,
    ) -> u64 {
        let pages: Vec<usize> = (range.start / PAGE_SIZE..range.end / PAGE_SIZE).collect();
        let deadline = Instant::now() + duration;
        let mut passes = 0u64;
        while Instant::now() < deadline {
            self.sweep(&pages, Sweep::from_write(write));
            passes += 1;
        }
        passes
    }

    /// One pass over `pages` (page indices).
    pub(super) fn sweep(&mut self, pages: &[usize], how: Sweep) {
        let mut sum = 0u64;
        for &index in pages {
            match how {
                Sweep::Read | Sweep::ReadWrite => {
                    let value = std::hint::black_box(self.page(index)[8]);
                    sum = sum.wrapping_add(u64::from(value));
                    if how == Sweep::ReadWrite {
                        // A store of the value just read: the page is written (dirty, accessed)
                        // and the pattern stays intact.
                        self.page_mut(index)[8] = std::hint::black_box(value);
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

    pub(super) fn write_pattern(&mut self, index: usize) {
        let version = self.versions[index];
        let page = self.page_mut(index);
        for (word, bytes) in page.chunks_exact_mut(8).enumerate() {
            bytes.copy_from_slice(&pattern(index, version, word).to_le_bytes());
        }
    }

    /// Writes the next pattern version into every page of the range.
    pub(super) fn fill(&mut self, range: std::ops::Range<usize>) -> usize {
        for index in range.start / PAGE_SIZE..range.end / PAGE_SIZE {
            self.versions[index] = self.versions[index].wrapping_add(1);
            self.write_pattern(index);
        }
        range.len() / PAGE_SIZE
    }

    /// Pages of the range whose contents differ from their pattern, and the first of them.
    pub(super) fn verify(&self, range: std::ops::Range<usize>) -> (usize, Option<usize>) {
        let mut bad = 0;
        let mut first = None;
        for index in range.start / PAGE_SIZE..range.end / PAGE_SIZE {
            let version = self.versions[index];
            let page = self.page(index);
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
    /// pattern (first touch allocates), then gives the range the default policy back. Packed
    /// pages only (`--span` excludes `--node` and `--place`): the range is one address range.
    pub(super) fn allocate_on(&mut self, node: u32, first: usize, count: usize) -> io::Result<()> {
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
pub(super) enum Sweep {
    Read,
    ReadWrite,
    Rewrite,
}

impl Sweep {
    pub(super) fn from_write(write: bool) -> Self {
        if write { Self::ReadWrite } else { Self::Read }
    }

    pub(super) fn parse(word: &str) -> Result<Self, String> {
        match word {
            "r" => Ok(Self::Read),
            "rw" => Ok(Self::ReadWrite),
            "rewrite" => Ok(Self::Rewrite),
            other => Err(format!("bad mode {other:?} (r, rw or rewrite)")),
        }
    }
}
