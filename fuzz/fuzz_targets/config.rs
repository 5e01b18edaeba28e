//! The configuration parser (`agent/config/src/lib.rs`: `Config::parse`, `Config::problems`).
//!
//! Properties: a syntax error points at a line and column that exist in the text and its
//! message starts with `path:line:column:`; a parsed configuration validates without panicking
//! (against no machine and against a two-node one), serializes back to TOML, and that TOML
//! parses to a configuration that serializes identically (parse ∘ print is a fixed point).
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use memtide_config::{Config, ConfigError};

/// The NUMA node ids of a two-node machine.
const TWO_NODES: &[u32] = &[0, 1];

fuzz_target!(|data: &[u8]| {
    // Config::load reads the file with read_to_string: only UTF-8 reaches the parser.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let path = Path::new("fuzz.toml");
    match Config::parse(path, text) {
        Ok(config) => {
            let _ = config.problems(None);
            let _ = config.validate(path, Some(TWO_NODES));
            let printed = toml::to_string(&config)
                .unwrap_or_else(|e| panic!("a parsed configuration does not serialize: {e}"));
            let again = Config::parse(path, &printed)
                .unwrap_or_else(|e| panic!("printed configuration does not parse: {e}\n{printed}"));
            let reprinted = toml::to_string(&again).expect("serialized once already");
            assert_eq!(printed, reprinted, "print(parse(print(config))) differs");
        }
        Err(error @ ConfigError::Syntax { .. }) => {
            let ConfigError::Syntax { line, column, .. } = &error else {
                unreachable!()
            };
            let (line, column) = (*line, *column);
            let lines: Vec<&str> = text.split('\n').collect();
            assert!(
                line >= 1 && line <= lines.len(),
                "line {line} of {}",
                lines.len()
            );
            assert!(
                column >= 1 && column <= lines[line - 1].len() + 1,
                "column {column} of line {line} ({} bytes)",
                lines[line - 1].len()
            );
            let message = error.to_string();
            assert!(
                message.starts_with(&format!("fuzz.toml:{line}:{column}: ")),
                "{message}"
            );
        }
        Err(other) => panic!("parse returned a non-syntax error: {other}"),
    }
});
