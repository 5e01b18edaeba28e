//! `perf script` output of `perf mem record` (Intel PEBS, AMD IBS) or of
//! `perf record -e page-faults -d` (first touches, on machines without a PMU): one sample a line,
//! with the sample's data address.
//!
//! `perf script` prints the data address only when the capture sampled it (`-d`; `perf mem
//! record` adds it) and `addr` is among the printed fields. The page-fault lines below are perf
//! 6.1's (abbreviated); the `perf mem record` ones follow perf's source
//! (`tools/perf/builtin-script.c`: field defaults per event type, and the order addr, data_src,
//! weight, ip), as the machine they were checked on has no PMU.
//!
//! Accepted:
//! 1. `perf script -F pid,tid,event,addr,data_src` (recommended; `pid`, `pid,tid` and more
//!    fields after `addr`, such as `weight`, are accepted too):
//!    ```text
//!    22792/22792 page-faults:     55a7fc37b424      1e05080021 |OP N/A|LVL N/A or N/A|SNP N/A|...
//!     1234 cpu/mem-loads,ldlat=30/P:     7ffd1c2f8e40         68100142 |OP LOAD|LVL L1 hit|...  47
//!    ```
//!    `perf record -e page-faults` without `-d` has no address to print: `perf script -F addr`
//!    then refuses with "Samples for 'page-faults' event do not have ADDR attribute set".
//! 2. the default layout (`perf script` with no `-F`) of a `perf mem record` capture on Intel:
//!    for raw PMU events perf prints the address by default, with its symbol and dso, then the
//!    data source, the weight and the instruction pointer:
//!    ```text
//!     sqlite3  4711 [001] 12345.678901:  10007 cpu/mem-stores/P:  55d4c8a0b2c8 [unknown] ([heap])  68100142 |OP STORE|...  0  55d4c7e1a3f0 sqlite3VdbeExec+0x1a (/usr/bin/sqlite3)
//!    ```
//!
//! Refused, naming the `-F` fields to use (or skipped and counted under `--lenient`):
//! - a hex value followed by a symbol and a `(dso)` with no data source after it. That is how
//!   the default layout prints the instruction pointer of every event perf prints no address
//!   for by default: software events such as page faults (even when recorded with `-d`) and,
//!   per perf's source, events of PMUs other than the core one, such as AMD's `ibs_op//`:
//!    ```text
//!             python3 22792 11313.894933:          1 page-faults:  ffffffff8175336a elf_load+0x28a ([kernel.kallsyms])
//!             python3 22792 11313.894988:          1 page-faults:      7f24e20beb70 _start+0x0 (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)
//!    ```
//!   `-F pid,event,addr,sym,dso` prints the address in exactly this shape, so it is refused
//!   too; `-F pid,tid,event,addr,ip,sym` (no dso) is read, its first hex being the address.
//! - a kernel-space address ([`KERNEL_SPACE_START`]): an instruction pointer printed instead
//!   of the address, or a kernel data access, which memtide does not tier;
//! - an event with nothing after it (`-F` without `addr`, or a call chain from `-g`, whose
//!   frames follow on lines of their own).
//!
//! Skipped and counted in `skipped_lines` even without `--lenient`: address 0, which perf prints
//! for a sample that has no data address (an IBS op that is no load or store) and for a fault
//! on the null page. A correct capture holds them: one of a Rust test binary held two, from
//! std's `statx(0, NULL, ...)` probe (`0 [unknown] ([unknown]) ffffffff81c3d8f3
//! strncpy_from_user` with `-F ...,addr,ip,sym,dso`). There is no memory behind them to tier and
//! no `-F` set that avoids them, so refusing them would only make every such capture need
//! `--lenient`.
//!
//! What the reader cannot tell: `-F ...,ip` or `-F ...,ip,sym` without `addr` prints user-space
//! instruction pointers in the shape of addresses; only the kernel-space ones are refused.
//!
//! The event is the first token ending in `:` that is not a time stamp; the address is the next
//! token (hex, `0x` optional). Loads and stores are told apart by the event name (`load`,
//! `store`) or else by the decoded data source (`|OP LOAD|`, `|OP STORE|`); otherwise the kind is
//! unknown. The pid is the last decimal token before the event that is not a period; processes
//! are kept apart by a per-trace process index in bits 48..56 of the address. Lines starting
//! with `#` and blank lines are skipped.

use std::collections::HashMap;

use super::{
    AccessKind, PID_SHIFT, TraceRecord,
    text::{LineFormat, TextLine, TextReader},
};

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

/// Addresses from here up are kernel space. On x86-64 the kernel half starts at
/// 0xffff_8000_0000_0000 with 4-level paging and at 0xff00_0000_0000_0000 with 5-level paging,
/// and user space ends below 2^47 or 2^56: the top bit tells them apart under either.
pub const KERNEL_SPACE_START: u64 = 1 << 63;

/// The `perf script` fields every refusal names: they print the data address for page-fault
/// captures (`perf record -e page-faults -d`, which has no weight to print) and for `perf mem
/// record` ones alike.
macro_rules! script_fields {
    () => {
        "pid,tid,event,addr,data_src"
    };
}

/// `perf script -F` fields that print what the reader needs.
pub const SCRIPT_FIELDS: &str = script_fields!();

const NO_EVENT: &str = "no event field (a token ending in ':')";
const BAD_HEX: &str = concat!(
    "bad hex address after the event; print the data address with `perf script -F ",
    script_fields!(),
    "`"
);
const NO_ADDRESS: &str = concat!(
    "no address after the event, so `addr` is not among the printed fields (or `-g` call chains \
     follow); print with `perf script -F ",
    script_fields!(),
    "` from a capture made with `perf record -d` or `perf mem record`"
);
const INSTRUCTION_POINTER: &str = concat!(
    "a hex value followed by a symbol and a (dso) but no data source, which is how `perf script` \
     prints the instruction pointer when `addr` is not among its fields (the default for page \
     faults); print with `perf script -F ",
    script_fields!(),
    "`"
);
const KERNEL_ADDRESS: &str = concat!(
    "kernel-space address, an instruction pointer printed instead of the data address or a \
     kernel access memtide does not tier; print with `perf script -F ",
    script_fields!(),
    "` from a `perf record -d` or `perf mem record` capture, or pass --lenient to skip kernel \
     samples"
);
/// Why a line yields no record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineError {
    /// Not a `perf script` sample line.
    NotASample(&'static str),
    /// A `perf script` sample line without a user-space data address: printed without `addr`,
    /// or a kernel-space address.
    NoDataAddress(&'static str),
    /// A sample at address 0: no memory to tier; always skipped and counted.
    NullAddress,
}

impl LineError {
    /// One sentence: what was found and which `perf script` fields to print instead.
    #[must_use]
    pub const fn reason(self) -> &'static str {
        match self {
            Self::NotASample(r) | Self::NoDataAddress(r) => r,
            Self::NullAddress => {
                "address 0: a sample with no data address, or a fault on the null page"
            }
        }
    }
}

/// Parses one access line (the reader skips comments and blank lines before calling this).
pub fn parse_line(line: &str) -> Result<PerfLine, LineError> {
    let toks: Vec<&str> = line.split_whitespace().collect();
    let ev = toks
        .iter()
        .position(|t| t.len() > 1 && t.ends_with(':') && !is_timestamp(t))
        .ok_or(LineError::NotASample(NO_EVENT))?;
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
    let Some(addr_tok) = toks.get(ev + 1) else {
        // Without a pid the line is likely not perf's at all; format detection relies on it.
        return Err(if pid.is_some() {
            LineError::NoDataAddress(NO_ADDRESS)
        } else {
            LineError::NotASample(NO_ADDRESS)
        });
    };
    let hex = addr_tok.trim_start_matches("0x");
    let addr = u64::from_str_radix(hex, 16).map_err(|_| LineError::NotASample(BAD_HEX))?;
    if addr == 0 {
        return Err(LineError::NullAddress);
    }
    // An address printed with `sym,dso` and an instruction pointer look the same; only an
    // address is followed by the data source (perf prints addr, data_src, weight, ip in that
    // order), so a (dso) without one is taken for the instruction pointer.
    let rest = &toks[ev + 2..];
    let data_src = rest.iter().any(|t| t.starts_with("|OP"));
    let dso =
        rest.iter().any(|t| t.starts_with('(')) && rest.last().is_some_and(|t| t.ends_with(')'));
    if dso && !data_src {
        return Err(LineError::NoDataAddress(INSTRUCTION_POINTER));
    }
    if addr >= KERNEL_SPACE_START {
        return Err(LineError::NoDataAddress(KERNEL_ADDRESS));
    }
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
    Ok(PerfLine { pid, addr, kind })
}

/// `perf script`'s lines; the process index each pid got, in the order they appeared.
#[derive(Clone, Debug, Default)]
pub struct PerfScript {
    pids: HashMap<u32, u64>,
}

impl LineFormat for PerfScript {
    const NAME: &'static str = "perf-script trace";

    fn parse(&mut self, line: &str) -> Result<TextLine, &'static str> {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            return Ok(TextLine::Other);
        }
        match parse_line(t) {
            Ok(p) => {
                let next = self.pids.len() as u64;
                // 256 process indices fit in bits 48..56; later processes share the last.
                let idx = *self.pids.entry(p.pid.unwrap_or(0)).or_insert(next.min(255));
                Ok(TextLine::Access(TraceRecord {
                    addr: (p.addr & ((1 << PID_SHIFT) - 1)) | (idx << PID_SHIFT),
                    kind: p.kind,
                }))
            }
            Err(LineError::NullAddress) => Ok(TextLine::Skipped),
            Err(e) => Err(e.reason()),
        }
    }

    fn quoted(line: &str) -> &str {
        line.trim()
    }
}

/// Streams `perf script` output.
pub type PerfReader = TextReader<PerfScript>;

#[cfg(test)]
mod tests {
    use std::io::{BufRead, Cursor};

    use super::*;
    use crate::trace::{Format, RecordSource as _, buf, detect, read_all};

    fn owned(text: String) -> Box<dyn BufRead + Send> {
        Box::new(Cursor::new(text.into_bytes()))
    }

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
        // perf mem record on Intel, no -F: the address (with its symbol and dso), the data
        // source, the weight, then the instruction pointer.
        let l = parse_line(
            "         sqlite3  4711 [001] 12345.678901:      10007 cpu/mem-stores/P:     55d4c8a0b2c8 [unknown] ([heap])         68100142 |OP STORE|LVL L1 hit|SNP None|TLB L1 or L2 hit|LCK No|BLK  N/A                0     55d4c7e1a3f0 sqlite3VdbeExec+0x1a (/usr/bin/sqlite3)",
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

    // Lines below are perf 6.1's, from `perf record -e page-faults -d -- python3 ...`.

    #[test]
    fn page_fault_layouts_with_addr_are_read() {
        let l = parse_line("22792/22792 page-faults:     55a7fc37b424      1e05080021 |OP N/A|LVL N/A or N/A|SNP N/A|TLB N/A|LCK N/A|BLK  N/A").unwrap();
        assert_eq!(
            l,
            PerfLine {
                pid: Some(22792),
                addr: 0x55a7_fc37_b424,
                kind: AccessKind::Unknown
            }
        );
        let a = parse_line("22792/22792 page-faults:     7f24e20d8110").unwrap();
        assert_eq!(a.addr, 0x7f24_e20d_8110);
        let t = parse_line("         python3 22792 11313.894933: page-faults:     55a7fc37b424")
            .unwrap();
        assert_eq!((t.pid, t.addr), (Some(22792), 0x55a7_fc37_b424));
        // addr before ip: the first hex is the address, whatever the kernel ip after it.
        let ip = parse_line(
            "22792/22792 page-faults:     55a7fc37b424 [unknown] ffffffff8175336a elf_load",
        )
        .unwrap();
        assert_eq!(ip.addr, 0x55a7_fc37_b424);
    }

    #[test]
    fn kernel_instruction_pointer_of_the_default_layout_is_refused() {
        let line = "         python3 22792 11313.894933:          1 page-faults:  ffffffff8175336a elf_load+0x28a ([kernel.kallsyms])";
        let err = parse_line(line).unwrap_err();
        assert_eq!(err, LineError::NoDataAddress(INSTRUCTION_POINTER));
        assert!(err.reason().contains(SCRIPT_FIELDS), "{}", err.reason());
        let text = format!("# captured\n{line}\n");
        let err = read_all(&mut PerfReader::new(owned(text), false)).unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("line 2: "), "{msg}");
        assert!(
            msg.contains("`perf script -F pid,tid,event,addr,data_src`"),
            "{msg}"
        );
    }

    #[test]
    fn user_instruction_pointer_of_the_default_layout_is_refused() {
        for line in [
            "         python3 22792 11313.894988:          1 page-faults:      7f24e20beb70 _start+0x0 (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)",
            "            bash 22792 11313.899794:        259 page-faults:      5640886ef0c1 initialize_traps+0x21 (/usr/bin/bash)",
            // -F pid,event,ip,sym,dso: the same shape.
            "22792 page-faults:      7f24e20beb70 _start (/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2)",
        ] {
            assert_eq!(
                parse_line(line),
                Err(LineError::NoDataAddress(INSTRUCTION_POINTER)),
                "{line}"
            );
        }
    }

    #[test]
    fn kernel_addresses_are_refused_and_zero_is_no_address() {
        let k = parse_line("22792/22792 page-faults:     ffffffff8175336a").unwrap_err();
        assert_eq!(k, LineError::NoDataAddress(KERNEL_ADDRESS));
        assert!(k.reason().contains(SCRIPT_FIELDS));
        // The lowest kernel address of x86-64's 5-level paging, and the highest user one.
        assert!(parse_line("1 cpu/mem-loads/P: ff00000000000000 0 |OP LOAD|").is_err());
        assert!(parse_line("1 cpu/mem-loads/P: 00ffffffffffffff 0 |OP LOAD|").is_ok());
        // From a real capture: the kernel faulted on a null user pointer (strncpy_from_user).
        let z = parse_line("31619/31619 page-faults:                0      1e05080021 |OP N/A|LVL N/A or N/A|SNP N/A|TLB N/A|LCK N/A|BLK  N/A").unwrap_err();
        assert_eq!(z, LineError::NullAddress);
    }

    #[test]
    fn null_addresses_are_skipped_and_counted_without_lenient() {
        let text = "22792/22792 page-faults: 55a7fc37b424\n22792/22792 page-faults: 0\n";
        let mut r = PerfReader::new(owned(text.into()), false);
        let recs = read_all(&mut r).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(r.skipped(), 1);
    }

    #[test]
    fn lines_without_an_address_are_refused() {
        // -F pid,event (perf prints the event and nothing else), and the first line of a -g
        // sample, whose call chain follows on lines of its own.
        for line in [
            "22792 page-faults: ",
            "true 29397 11594.927119:          1 page-faults: ",
        ] {
            let err = parse_line(line).unwrap_err();
            assert_eq!(err, LineError::NoDataAddress(NO_ADDRESS), "{line}");
            assert!(err.reason().contains(SCRIPT_FIELDS));
        }
        assert_eq!(
            parse_line("\tffffffff81753a0a load_elf_binary+0x66a ([kernel.kallsyms])"),
            Err(LineError::NotASample(NO_EVENT))
        );
    }

    #[test]
    fn lenient_skips_and_counts_refused_samples() {
        let text = "\
python3 22792 11313.894933: 1 page-faults: ffffffff8175336a elf_load+0x28a ([kernel.kallsyms])
22792/22792 page-faults: 55a7fc37b424
22792/22792 page-faults: ffffffff8175336a
22792/22792 page-faults: 0
22792/22792 page-faults:
python3 22792 11313.894988: 1 page-faults: 7f24e20beb70 _start+0x0 (/usr/lib/ld-linux-x86-64.so.2)
22792/22792 page-faults: 7f24e20d8110
";
        let err = read_all(&mut PerfReader::new(owned(text.into()), false)).unwrap_err();
        assert!(err.to_string().starts_with("line 1: "), "{err}");
        let mut r = PerfReader::new(owned(text.into()), true);
        let recs = read_all(&mut r).unwrap();
        assert_eq!(r.skipped(), 5);
        let addrs: Vec<u64> = recs.iter().map(|r| r.addr).collect();
        assert_eq!(addrs, [0x55a7_fc37_b424, 0x7f24_e20d_8110]);
    }

    #[test]
    fn refused_samples_are_still_detected_as_perf_script() {
        let mut p = buf(
            b"         python3 22792 11313.894933:          1 page-faults:  ffffffff8175336a elf_load+0x28a ([kernel.kallsyms])\n",
        );
        assert_eq!(detect(&mut *p).unwrap().unwrap(), Format::PerfScript);
        // An event-like token alone, with no pid before it, is not taken for perf's.
        let mut x = buf(b"Summary:\n");
        assert!(detect(&mut *x).unwrap().is_err());
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
