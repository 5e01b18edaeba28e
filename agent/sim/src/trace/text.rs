//! What the text formats ([`super::lackey`], [`super::perf`]) share: reading one line at a
//! time, numbering the lines for the errors, and passing over what `--lenient` allows. A
//! format says only what one line holds.

use std::io::BufRead;

use super::{RecordSource, TraceError, TraceMeta, TraceRecord, read_line};

/// What one line of a text trace holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextLine {
    Access(TraceRecord),
    /// Not an access (a blank line, a comment, a tool's message): passed over.
    Other,
    /// An access with no memory behind it to tier: passed over and counted in
    /// [`RecordSource::skipped`], `--lenient` or not.
    Skipped,
}

/// One text format, line by line.
pub trait LineFormat: Default + Send {
    /// The trace as an error names it (`lackey trace`).
    const NAME: &'static str;

    /// A line as read, its end of line included; `Err` says why it is malformed.
    fn parse(&mut self, line: &str) -> Result<TextLine, &'static str>;

    /// The part of a malformed line its error quotes.
    fn quoted(line: &str) -> &str;
}

/// Streams a text trace of format `F`.
pub struct TextReader<F> {
    input: Box<dyn BufRead + Send>,
    meta: TraceMeta,
    lenient: bool,
    line: u64,
    skipped: u64,
    buf: Vec<u8>,
    format: F,
}

impl<F: LineFormat> TextReader<F> {
    /// Reads `input`; with `lenient`, a malformed line is counted and passed over instead of
    /// ending the trace with an error.
    #[must_use]
    pub fn new(input: Box<dyn BufRead + Send>, lenient: bool) -> Self {
        Self {
            input,
            meta: TraceMeta::default(),
            lenient,
            line: 0,
            skipped: 0,
            buf: Vec::with_capacity(256),
            format: F::default(),
        }
    }
}

impl<F: LineFormat> RecordSource for TextReader<F> {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        let mut n = 0;
        while n < max {
            let more =
                read_line(&mut *self.input, &mut self.buf).map_err(|source| TraceError::Io {
                    path: format!("{}, line {}", F::NAME, self.line + 1).into(),
                    source,
                })?;
            if !more {
                break;
            }
            self.line += 1;
            let text = String::from_utf8_lossy(&self.buf);
            match self.format.parse(&text) {
                Ok(TextLine::Access(record)) => {
                    out.push(record);
                    n += 1;
                }
                Ok(TextLine::Other) => {}
                Ok(TextLine::Skipped) => self.skipped += 1,
                Err(_) if self.lenient => self.skipped += 1,
                Err(reason) => {
                    return Err(TraceError::Malformed {
                        line: self.line,
                        reason,
                        text: F::quoted(&text).chars().take(120).collect(),
                    });
                }
            }
        }
        Ok(n)
    }

    fn skipped(&self) -> u64 {
        self.skipped
    }
}
