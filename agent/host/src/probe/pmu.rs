//! Performance monitoring units under `/sys/bus/event_source/devices` and what memory sampling
//! they offer.
//!
//! Each PMU directory holds `type` (the `perf_event_attr.type` to open it with), `format/*`
//! (where each named field lives in `config`/`config1`/`config2`/`config3`, for example
//! `ldlat` = `config1:0-15`) and `events/*` (named events as term lists, for example
//! `mem-loads` = `event=0xcd,umask=0x1,ldlat=3`). Both are parsed generically so callers can
//! build a `perf_event_attr` with [`Pmu::encode`] instead of hard-coding bits.
//!
//! Which of them sample memory, and as which source, is [`classify`](super::sources::classify)'s.

use std::{collections::BTreeMap, fmt, path::Path};

use serde::Serialize;

use crate::sysfs::{self, HostRoot, SysfsError};

/// Where PMUs live under the root.
pub const PMU_DIR: &str = "sys/bus/event_source/devices";

/// The four config words of `perf_event_attr` a format field can live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConfigWord {
    Config,
    Config1,
    Config2,
    Config3,
}

impl ConfigWord {
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Config => "config",
            Self::Config1 => "config1",
            Self::Config2 => "config2",
            Self::Config3 => "config3",
        }
    }

    const fn index(self) -> usize {
        match self {
            Self::Config => 0,
            Self::Config1 => 1,
            Self::Config2 => 2,
            Self::Config3 => 3,
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "config" => Some(Self::Config),
            "config1" => Some(Self::Config1),
            "config2" => Some(Self::Config2),
            "config3" => Some(Self::Config3),
            _ => None,
        }
    }
}

/// An inclusive bit range `lo..=hi` within a 64-bit config word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BitRange {
    pub lo: u8,
    pub hi: u8,
}

impl BitRange {
    const fn width(self) -> u32 {
        (self.hi - self.lo) as u32 + 1
    }
}

/// One `format/<name>` file: `config:0-7`, `config1:0-15`, `config:0-7,32-35`, `config:63`.
/// Multiple ranges are filled low bits first, as the kernel's perf tool does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FormatField {
    pub word: ConfigWord,
    pub ranges: Vec<BitRange>,
}

impl FormatField {
    /// Parses the content of a format file.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        let (word, ranges) = text
            .split_once(':')
            .ok_or_else(|| "expected <configN>:<bits>".to_owned())?;
        let word = ConfigWord::parse(word.trim())
            .ok_or_else(|| format!("unknown config word {word:?}"))?;
        let ranges = ranges
            .split(',')
            .map(|range| {
                let (lo, hi) = match range.split_once('-') {
                    Some((lo, hi)) => (parse_bit(lo)?, parse_bit(hi)?),
                    None => {
                        let bit = parse_bit(range)?;
                        (bit, bit)
                    }
                };
                if lo > hi {
                    return Err(format!("bit range {range:?} is reversed"));
                }
                Ok(BitRange { lo, hi })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { word, ranges })
    }

    /// Total number of bits the field has.
    #[must_use]
    pub fn width(&self) -> u32 {
        self.ranges.iter().map(|r| r.width()).sum()
    }

    /// Puts `value` into `config`, or fails if it does not fit the field.
    pub fn encode(&self, value: u64, config: &mut PerfConfig) -> Result<(), String> {
        let width = self.width();
        if width < 64 && value >> width != 0 {
            return Err(format!("value {value:#x} does not fit {width} bits"));
        }
        let word = &mut config.words[self.word.index()];
        let mut rest = value;
        for range in &self.ranges {
            let w = range.width();
            let mask = if w == 64 { u64::MAX } else { (1u64 << w) - 1 };
            *word = (*word & !(mask << range.lo)) | ((rest & mask) << range.lo);
            rest = if w == 64 { 0 } else { rest >> w };
        }
        Ok(())
    }
}

impl fmt::Display for FormatField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", self.word.as_str())?;
        for (i, r) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if r.lo == r.hi {
                write!(f, "{}", r.lo)?;
            } else {
                write!(f, "{}-{}", r.lo, r.hi)?;
            }
        }
        Ok(())
    }
}

fn parse_bit(s: &str) -> Result<u8, String> {
    match s.trim().parse::<u8>() {
        Ok(bit) if bit < 64 => Ok(bit),
        _ => Err(format!("{s:?} is not a bit number 0-63")),
    }
}

/// The config words of a `perf_event_attr`: `config`, `config1`, `config2`, `config3`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PerfConfig {
    pub words: [u64; 4],
}

impl PerfConfig {
    #[must_use]
    pub const fn get(&self, word: ConfigWord) -> u64 {
        self.words[word.index()]
    }
}

/// The value of one term of an event string.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TermValue {
    /// `event=0xcd`, `ldlat=3`.
    Number(u64),
    /// A bare term (`edge`), meaning 1.
    Flag,
    /// `umask=?`: the user must supply the value.
    Placeholder,
}

/// One `name=value` term.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventTerm {
    pub name: String,
    pub value: TermValue,
}

/// One `events/<name>` file: `event=0xcd,umask=0x1,ldlat=3`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct EventSpec {
    pub terms: Vec<EventTerm>,
}

impl EventSpec {
    /// Parses an event string.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("empty event string".to_owned());
        }
        let terms = text
            .split(',')
            .map(|term| {
                let term = term.trim();
                let (name, value) = match term.split_once('=') {
                    None => (term, TermValue::Flag),
                    Some((name, "?")) => (name, TermValue::Placeholder),
                    Some((name, value)) => (name, TermValue::Number(parse_number(value)?)),
                };
                let name = name.trim();
                if name.is_empty()
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                {
                    return Err(format!("bad term name in {term:?}"));
                }
                Ok(EventTerm {
                    name: name.to_owned(),
                    value,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { terms })
    }

    /// The numeric value of term `name`, if present and numeric (a flag counts as 1).
    #[must_use]
    pub fn value(&self, name: &str) -> Option<u64> {
        self.terms
            .iter()
            .find(|t| t.name == name)
            .and_then(|t| match t.value {
                TermValue::Number(n) => Some(n),
                TermValue::Flag => Some(1),
                TermValue::Placeholder => None,
            })
    }
}

impl fmt::Display for EventSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.terms.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            match t.value {
                TermValue::Number(n) => write!(f, "{}={n:#x}", t.name)?,
                TermValue::Flag => f.write_str(&t.name)?,
                TermValue::Placeholder => write!(f, "{}=?", t.name)?,
            }
        }
        Ok(())
    }
}

fn parse_number(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let parsed = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|_| format!("{s:?} is not a number"))
}

/// Why an event could not be turned into config words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("PMU {pmu} has no format field {term:?}")]
    UnknownTerm { pmu: String, term: String },
    #[error("PMU {pmu}: term {term:?} needs a value")]
    MissingValue { pmu: String, term: String },
    #[error("PMU {pmu}: term {term:?}: {reason}")]
    DoesNotFit {
        pmu: String,
        term: String,
        reason: String,
    },
}

/// One PMU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Pmu {
    pub name: String,
    /// `perf_event_attr.type` for this PMU.
    #[serde(rename = "type")]
    pub perf_type: u32,
    pub formats: BTreeMap<String, FormatField>,
    pub events: BTreeMap<String, EventSpec>,
}

impl Pmu {
    /// Reads one PMU directory (`.../devices/<name>`). `format/` and `events/` may be absent.
    /// Event side files (`<event>.scale`, `.unit`, `.per-pkg`, `.snapshot`) are skipped.
    pub fn read(dir: &Path) -> Result<Self, SysfsError> {
        let name = dir
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| {
                SysfsError::parse(dir, &dir.display().to_string(), "a PMU directory name")
            })?
            .to_owned();
        let perf_type = sysfs::read_parse(&dir.join("type"))?;
        let mut formats = BTreeMap::new();
        for field in sysfs::dir_names(&dir.join("format"))?.unwrap_or_default() {
            let path = dir.join("format").join(&field);
            let text = sysfs::read_trimmed(&path)?;
            let parsed = FormatField::parse(&text)
                .map_err(|e| SysfsError::parse(&path, &text, format!("a format field ({e})")))?;
            formats.insert(field, parsed);
        }
        let mut events = BTreeMap::new();
        for event in sysfs::dir_names(&dir.join("events"))?.unwrap_or_default() {
            if event.contains('.') {
                continue;
            }
            let path = dir.join("events").join(&event);
            let text = sysfs::read_trimmed(&path)?;
            let parsed = EventSpec::parse(&text)
                .map_err(|e| SysfsError::parse(&path, &text, format!("an event string ({e})")))?;
            events.insert(event, parsed);
        }
        Ok(Self {
            name,
            perf_type,
            formats,
            events,
        })
    }

    /// Whether the PMU has a named event.
    #[must_use]
    pub fn has_event(&self, name: &str) -> bool {
        self.events.contains_key(name)
    }

    /// Whether the PMU has a format field.
    #[must_use]
    pub fn has_format(&self, name: &str) -> bool {
        self.formats.contains_key(name)
    }

    /// Encodes `event` plus `overrides` (`("ldlat", 64)`) into config words through this PMU's
    /// format fields. Terms named `config`, `config1`, `config2`, `config3` set a whole word.
    pub fn encode(
        &self,
        event: &EventSpec,
        overrides: &[(&str, u64)],
    ) -> Result<PerfConfig, EncodeError> {
        let mut config = PerfConfig::default();
        let mut terms: Vec<(&str, Option<u64>)> = event
            .terms
            .iter()
            .map(|t| {
                let value = match t.value {
                    TermValue::Number(n) => Some(n),
                    TermValue::Flag => Some(1),
                    TermValue::Placeholder => None,
                };
                (t.name.as_str(), value)
            })
            .collect();
        for &(name, value) in overrides {
            match terms.iter_mut().find(|(n, _)| *n == name) {
                Some(slot) => slot.1 = Some(value),
                None => terms.push((name, Some(value))),
            }
        }
        for (term, value) in terms {
            let value = value.ok_or_else(|| EncodeError::MissingValue {
                pmu: self.name.clone(),
                term: term.to_owned(),
            })?;
            if let Some(field) = self.formats.get(term) {
                field
                    .encode(value, &mut config)
                    .map_err(|reason| EncodeError::DoesNotFit {
                        pmu: self.name.clone(),
                        term: term.to_owned(),
                        reason,
                    })?;
            } else if let Some(word) = ConfigWord::parse(term) {
                config.words[word.index()] = value;
            } else {
                return Err(EncodeError::UnknownTerm {
                    pmu: self.name.clone(),
                    term: term.to_owned(),
                });
            }
        }
        Ok(config)
    }
}

/// All PMUs of a machine, and the ones that could not be read.
#[derive(Debug, Default)]
pub struct PmuScan {
    /// Readable PMUs, sorted by name.
    pub pmus: Vec<Pmu>,
    /// PMU directories with unreadable or malformed files (they are left out of `pmus`).
    pub errors: Vec<SysfsError>,
}

impl PmuScan {
    /// Reads every PMU under `root`. A missing devices directory is an empty scan.
    pub fn read(root: &HostRoot) -> Result<Self, SysfsError> {
        let dir = root.path(PMU_DIR);
        let mut scan = Self::default();
        for name in sysfs::dir_names(&dir)?.unwrap_or_default() {
            match Pmu::read(&dir.join(&name)) {
                Ok(pmu) => scan.pmus.push(pmu),
                Err(e) => scan.errors.push(e),
            }
        }
        Ok(scan)
    }

    /// The PMU named `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<&Pmu> {
        self.pmus.iter().find(|p| p.name == name)
    }

    /// Names of all readable PMUs.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.pmus.iter().map(|p| p.name.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn format_fields() {
        let f = FormatField::parse("config1:0-15\n").unwrap();
        assert_eq!(f.word, ConfigWord::Config1);
        assert_eq!(f.ranges, vec![BitRange { lo: 0, hi: 15 }]);
        assert_eq!(f.width(), 16);
        assert_eq!(f.to_string(), "config1:0-15");
        let f = FormatField::parse("config:0-7,32-35").unwrap();
        assert_eq!(f.width(), 12);
        let f = FormatField::parse("config:63").unwrap();
        assert_eq!(f.ranges, vec![BitRange { lo: 63, hi: 63 }]);
        for bad in [
            "",
            "config",
            "config4:0",
            "config:64",
            "config:7-0",
            "config:a-b",
            "config:",
        ] {
            assert!(FormatField::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn split_field_encodes_low_bits_first() {
        let f = FormatField::parse("config:0-7,32-35").unwrap();
        let mut c = PerfConfig::default();
        f.encode(0x1c2, &mut c).unwrap();
        assert_eq!(c.get(ConfigWord::Config), 0x1_0000_00c2);
        assert!(f.encode(0x1000, &mut c).is_err());
        let full = FormatField::parse("config1:0-63").unwrap();
        full.encode(u64::MAX, &mut c).unwrap();
        assert_eq!(c.get(ConfigWord::Config1), u64::MAX);
    }

    #[test]
    fn event_strings() {
        let e = EventSpec::parse("event=0xcd,umask=0x1,ldlat=3\n").unwrap();
        assert_eq!(e.value("event"), Some(0xcd));
        assert_eq!(e.value("umask"), Some(1));
        assert_eq!(e.value("ldlat"), Some(3));
        assert_eq!(e.to_string(), "event=0xcd,umask=0x1,ldlat=0x3");
        let e = EventSpec::parse("event=0x01,umask=?,edge").unwrap();
        assert_eq!(e.terms[1].value, TermValue::Placeholder);
        assert_eq!(e.terms[2].value, TermValue::Flag);
        assert_eq!(e.value("umask"), None);
        for bad in ["", "event=zz", "=3", "event=0xcd,,umask=1", "ev ent=1"] {
            assert!(EventSpec::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "[a-z0-9=,:?x -]{0,32}") {
            let _ = EventSpec::parse(&s);
            let _ = FormatField::parse(&s);
        }

        #[test]
        fn encode_round_trips(lo in 0u8..64, len in 1u8..=64, value: u64) {
            let hi = lo.saturating_add(len - 1).min(63);
            let field = FormatField { word: ConfigWord::Config2, ranges: vec![BitRange { lo, hi }] };
            let width = u32::from(hi - lo) + 1;
            let value = if width == 64 { value } else { value & ((1u64 << width) - 1) };
            let mut c = PerfConfig::default();
            field.encode(value, &mut c).unwrap();
            prop_assert_eq!(c.get(ConfigWord::Config2) >> lo, value);
        }
    }
}
