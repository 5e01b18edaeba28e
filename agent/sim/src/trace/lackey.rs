//! valgrind lackey `--trace-mem=yes` output:
//!
//! ```text
//! ==12345== Lackey, an example Valgrind tool        (tool messages: skipped)
//! I  0401d50,3                                      (instruction fetch: skipped)
//!  L 1ffefffd78,8                                   (load)
//!  S 04223ff0,8                                     (store)
//!  M 0421e2a0,4                                     (modify = load + store: one store)
//! ```
//! Addresses are hex without `0x`. Blank lines are skipped; anything else is malformed.

use super::{
    TraceRecord,
    text::{LineFormat, TextLine, TextReader},
};

/// Parses one line: `Ok(Some(record))` for a data access, `Ok(None)` for lines to skip.
pub fn parse_line(line: &str) -> Result<Option<TraceRecord>, &'static str> {
    let line = line.trim_end_matches(['\n', '\r']);
    if line.trim().is_empty() || line.starts_with("==") || line.starts_with("--") {
        return Ok(None);
    }
    let b = line.as_bytes();
    if b[0] == b'I' {
        return Ok(None);
    }
    if b[0] != b' ' || b.len() < 4 || b[2] != b' ' {
        return Err("not a lackey access line");
    }
    let (addr, size) = line[3..]
        .trim_start()
        .split_once(',')
        .ok_or("missing ',size'")?;
    let addr = u64::from_str_radix(addr, 16).map_err(|_| "bad hex address")?;
    size.trim().parse::<u32>().map_err(|_| "bad access size")?;
    match b[1] {
        b'L' => Ok(Some(TraceRecord::load(addr))),
        b'S' | b'M' => Ok(Some(TraceRecord::store(addr))),
        _ => Err("unknown access kind (expected L, S or M)"),
    }
}

/// Lackey's lines: a load, a store, or a line of the tool's to pass over.
#[derive(Clone, Copy, Debug, Default)]
pub struct Lackey;

impl LineFormat for Lackey {
    const NAME: &'static str = "lackey trace";

    fn parse(&mut self, line: &str) -> Result<TextLine, &'static str> {
        Ok(parse_line(line)?.map_or(TextLine::Other, TextLine::Access))
    }

    fn quoted(line: &str) -> &str {
        line.trim_end()
    }
}

/// Streams a lackey trace.
pub type LackeyReader = TextReader<Lackey>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{RecordSource as _, buf, read_all};

    #[test]
    fn parses_lines() {
        assert_eq!(
            parse_line(" L 1ffefffd78,8").unwrap(),
            Some(TraceRecord::load(0x1f_feff_fd78))
        );
        assert_eq!(
            parse_line(" M 0421e2a0,4\n").unwrap(),
            Some(TraceRecord::store(0x0421_e2a0))
        );
        assert_eq!(parse_line("I  04001d50,3").unwrap(), None);
        assert_eq!(parse_line("==1== Lackey").unwrap(), None);
        assert!(parse_line(" X 0421e2a0,4").is_err());
        assert!(parse_line(" L zz,4").is_err());
        assert!(parse_line(" L 0421e2a0").is_err());
        assert!(parse_line("garbage").is_err());
        assert!(parse_line(" L").is_err());
    }

    #[test]
    fn errors_carry_line_numbers_or_are_counted() {
        let text: &'static [u8] = b"==1== x\nI  0400,3\n L 1000,8\n L oops,8\n S 2000,8\n";
        let err = read_all(&mut LackeyReader::new(buf(text), false)).unwrap_err();
        assert!(
            err.to_string().starts_with("line 4: bad hex address"),
            "{err}"
        );
        let mut r = LackeyReader::new(buf(text), true);
        let recs = read_all(&mut r).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(r.skipped(), 1);
    }
}
