//! `perf script` output of `perf mem record`. Two field layouts are documented and tested:
//!
//! 1. the recommended one, `perf script -F pid,event,addr,data_src,weight`:
//!    ```text
//!      1234 cpu/mem-loads,ldlat=30/P:     7ffd1c2f8e40         68100142 |OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK No|BLK  N/A       47
//!    ```
//! 2. the default layout (`perf script` with no `-F`), which starts with the command name and
//!    carries a time stamp and a period:
//!    ```text
//!     sqlite3  1234 [001] 12345.678901:      10007 cpu/mem-stores/P:     55d4c8a0b2c8 ...
//!    ```
//!    `pid/tid` (from `-F pid,tid`) is accepted where a pid is.
//!
//! The event is the first token ending in `:` that is not a time stamp; the address is the next
//! token (hex, `0x` optional). Loads and stores are told apart by the event name (`load`,
//! `store`) or else by the decoded data source (`|OP LOAD|`, `|OP STORE|`); otherwise the kind is
//! unknown. The pid is the last decimal token before the event that is not a period; processes
//! are kept apart by a per-trace process index in bits 48..56 of the address. Lines starting
//! with `#` and blank lines are skipped.

use std::{collections::HashMap, io::BufRead};

use super::{AccessKind, PID_SHIFT, RecordSource, TraceError, TraceMeta, TraceRecord, read_line};

/// One parsed line: pid (if any), address and kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerfLine {
    pub pid: Option<u32>,
    pub addr: u64,
    pub kind: AccessKind,
}

fn is_timestamp(t: &str) -> bool {
    let t = t.trim_end_matches(':');
    t.split_once('.').is_some_and(|(a, b)| {
        !a.is_empty()
            && !b.is_empty()
            && a.bytes().all(|c| c.is_ascii_digit())
            && b.bytes().all(|c| c.is_ascii_digit())
    })
}

fn parse_pid(t: &str) -> Option<u32> {
    t.split_once('/').map_or(t, |(p, _)| p).parse().ok()
}

/// Parses one access line (the reader skips comments and blank lines before calling this).
pub fn parse_line(line: &str) -> Result<PerfLine, &'static str> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    let ev = toks
        .iter()
        .position(|t| t.len() > 1 && t.ends_with(':') && !is_timestamp(t))
        .ok_or("no event field (a token ending in ':')")?;
    let addr_tok = toks.get(ev + 1).ok_or("no address after the event")?;
    let hex = addr_tok.trim_start_matches("0x");
    let addr = u64::from_str_radix(hex, 16).map_err(|_| "bad hex address")?;
    let event = toks[ev].to_ascii_lowercase();
    let kind = if event.contains("store") {
        AccessKind::Store
    } else if event.contains("load") {
        AccessKind::Load
    } else if line.contains("|OP STORE") {
        AccessKind::Store
    } else if line.contains("|OP LOAD") {
        AccessKind::Load
    } else {
        AccessKind::Unknown
    };
    // Default layout: comm pid [cpu] time: period event: — the pid precedes "[cpu]" or the
    // time stamp; with -F pid,... it is the first token.
    let before = &toks[..ev];
    let pid = before
        .iter()
        .position(|t| t.starts_with('[') || is_timestamp(t))
        .map_or_else(
            || before.first().and_then(|t| parse_pid(t)),
            |i| i.checked_sub(1).and_then(|j| parse_pid(before[j])),
        );
    Ok(PerfLine { pid, addr, kind })
}

/// Streams `perf script` output.
pub struct PerfReader {
    input: Box<dyn BufRead + Send>,
    meta: TraceMeta,
    lenient: bool,
    line: u64,
    skipped: u64,
    pids: HashMap<u32, u64>,
    buf: Vec<u8>,
}

impl PerfReader {
    #[must_use]
    pub fn new(input: Box<dyn BufRead + Send>, lenient: bool) -> Self {
        Self {
            input,
            meta: TraceMeta::default(),
            lenient,
            line: 0,
            skipped: 0,
            pids: HashMap::new(),
            buf: Vec::with_capacity(256),
        }
    }
}

impl RecordSource for PerfReader {
    fn meta(&self) -> &TraceMeta {
        &self.meta
    }

    fn fill(&mut self, out: &mut Vec<TraceRecord>, max: usize) -> Result<usize, TraceError> {
        let mut n = 0;
        while n < max {
            let more =
                read_line(&mut *self.input, &mut self.buf).map_err(|source| TraceError::Io {
                    path: format!("perf-script trace, line {}", self.line + 1).into(),
                    source,
                })?;
            if !more {
                break;
            }
            self.line += 1;
            let text = String::from_utf8_lossy(&self.buf);
            let t = text.trim();
            if t.is_empty() || t.starts_with('#') {
                continue;
            }
            match parse_line(t) {
                Ok(p) => {
                    let next = self.pids.len() as u64;
                    // 256 process indices fit in bits 48..56; later processes share the last.
                    let idx = *self.pids.entry(p.pid.unwrap_or(0)).or_insert(next.min(255));
                    out.push(TraceRecord {
                        addr: (p.addr & ((1 << PID_SHIFT) - 1)) | (idx << PID_SHIFT),
                        kind: p.kind,
                    });
                    n += 1;
                }
                Err(_) if self.lenient => self.skipped += 1,
                Err(reason) => {
                    return Err(TraceError::Malformed {
                        line: self.line,
                        reason,
                        text: t.chars().take(120).collect(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{buf, read_all};

    #[test]
    fn recommended_layout() {
        let l = parse_line(
            "  1234 cpu/mem-loads,ldlat=30/P:     7ffd1c2f8e40         68100142 |OP LOAD|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK No|BLK  N/A       47",
        )
        .unwrap();
        assert_eq!(
            l,
            PerfLine {
                pid: Some(1234),
                addr: 0x7ffd_1c2f_8e40,
                kind: AccessKind::Load
            }
        );
        let s =
            parse_line("1234/1240 cpu_core/mem-stores/P: 0x55d4c8a0b2c8 2 |OP STORE|LVL N/A| 0")
                .unwrap();
        assert_eq!((s.pid, s.kind), (Some(1234), AccessKind::Store));
    }

    #[test]
    fn default_layout() {
        let l = parse_line(
            "         sqlite3  4711 [001] 12345.678901:      10007 cpu/mem-stores/P:     55d4c8a0b2c8 sqlite3VdbeExec+0x1a (/usr/bin/sqlite3)",
        )
        .unwrap();
        assert_eq!(
            l,
            PerfLine {
                pid: Some(4711),
                addr: 0x55d4_c8a0_b2c8,
                kind: AccessKind::Store
            }
        );
        // IBS events say neither load nor store: the data source decides.
        let i =
            parse_line("python3 99 [000] 1.000001: 1 ibs_op//: 7f00 |OP LOAD|LVL L3 hit|").unwrap();
        assert_eq!((i.pid, i.kind), (Some(99), AccessKind::Load));
    }

    #[test]
    fn malformed_lines_report_line_numbers_and_pids_stay_apart() {
        let text: &'static [u8] = b"# header\n1 cpu/mem-loads/P: 1000 x\n2 cpu/mem-loads/P: 1000 x\n\n3 cpu/mem-loads/P: zzz\n";
        let err = read_all(&mut PerfReader::new(buf(text), false)).unwrap_err();
        assert!(
            err.to_string().starts_with("line 5: bad hex address"),
            "{err}"
        );
        let mut r = PerfReader::new(buf(text), true);
        let recs = read_all(&mut r).unwrap();
        assert_eq!(r.skipped(), 1);
        assert_eq!(recs[0].addr, 0x1000);
        assert_eq!(recs[1].addr, 0x1000 | (1 << PID_SHIFT));
        assert!(parse_line("no event here").is_err());
        assert!(parse_line("1 cpu/mem-loads/P:").is_err());
    }
}
