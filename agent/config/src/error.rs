//! What goes wrong with a configuration file, and where in it: a syntax error's line and
//! column with the key its value sits at, a value's line from its dotted key.

use std::path::{Path, PathBuf};

/// A configuration that cannot be used, with where and how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}\n  hint: {hint}", path.display())]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        hint: String,
    },
    #[error("{}{}: {key}: {message}", path.display(), line.map_or_else(String::new, |line| format!(":{line}")))]
    Invalid {
        path: PathBuf,
        /// Where `key` is set in the file, when it is set there (not a default).
        line: Option<usize>,
        key: String,
        message: String,
    },
}

impl ConfigError {
    /// The key (dotted path) an invalid value sits at, when known.
    #[must_use]
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Invalid { key, .. } => Some(key),
            _ => None,
        }
    }

    /// `error`, from parsing `text` (read from `path`), at its line and column, naming the key
    /// whose value it is about.
    pub(crate) fn syntax(path: &Path, text: &str, error: &toml::de::Error) -> Self {
        let (line, column) = error
            .span()
            .map_or((1, 1), |span| line_column(text, span.start));
        let mut message = error.message().trim().to_owned();
        if let Some(key) = error.span().and_then(|span| key_at(text, span.start)) {
            message = format!("key `{key}`: {message}");
        }
        Self::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            hint: hint_for(&message),
            message,
        }
    }
}

/// The line where `key` (dotted: `engine.policy.capacity.high_watermark`) is set in `text`,
/// under its table's header; `None` when the file leaves it at its default.
#[must_use]
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    let mut in_table = table.is_empty();
    for (index, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let header = header.trim_start_matches('[');
            in_table = header.split(']').next().map(str::trim) == Some(table);
            continue;
        }
        if in_table
            && let Some((found, _)) = line.split_once('=')
            && found.trim().trim_matches('"') == name
        {
            return Some(index + 1);
        }
    }
    None
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |nl| before.len() - nl - 1)
        + 1;
    (line, column)
}

/// The dotted key (`section.key`) whose value sits at `offset`, for messages about values;
/// `None` when the offset points at a key itself (the message names it already).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    let line_start = before.rfind('\n').map_or(0, |nl| nl + 1);
    let line = text[line_start..].lines().next()?;
    let (key, _) = line.split_once('=')?;
    let key_column = line.len() - line.trim_start().len();
    if offset - line_start <= key_column {
        return None;
    }
    let section = before[..line_start]
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix('[').and_then(|l| l.strip_suffix(']')))
        .map(|s| s.trim_matches(|c| c == '[' || c == ']').to_owned());
    Some(match section {
        Some(section) => format!("{section}.{}", key.trim()),
        None => key.trim().to_owned(),
    })
}

fn hint_for(message: &str) -> String {
    if message.contains("unknown field") {
        "check the spelling against deploy/config/memtide.toml, which lists every key with its \
         default"
            .to_owned()
    } else if message.contains("invalid type") {
        "the value has the wrong type; deploy/config/memtide.toml shows each key's type".to_owned()
    } else if message.contains("unknown variant") {
        "use one of the values listed in the message".to_owned()
    } else {
        "see deploy/config/memtide.toml for the format".to_owned()
    }
}
