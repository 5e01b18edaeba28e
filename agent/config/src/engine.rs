//! `[engine]` on its own, laid over an engine configuration other than the defaults: the
//! simulator's `--engine-config` reads a configuration file's `[engine]` table and lays the keys
//! it sets over the configuration it made for a platform preset. The file's other tables must
//! be ones a configuration file has ([`TABLES`]) and are not read.
//!
//! The keys reach [`TieringConfig`] through the same `Deserialize` (unknown keys are errors)
//! and the same range checks as the daemon's whole-file parse.

use std::path::{Path, PathBuf};

use memtide_core::tiering::TieringConfig;

use crate::TABLES;

/// The keys a configuration file's `[engine]` table sets (`[engine.policy.*]` nested under
/// `policy`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineTable(toml::Table);

/// Why a configuration file's `[engine]` table cannot be read; each message starts with the
/// file's path.
#[derive(Debug, thiserror::Error)]
pub enum EngineFileError {
    /// Not TOML (the parser's message, with its line and column).
    #[error("{}: {message}", path.display())]
    Syntax { path: PathBuf, message: String },
    #[error(
        "{}: unknown table `{table}`: an agent configuration file has {}",
        path.display(),
        TABLES.map(|t| format!("[{t}]")).join(", ")
    )]
    UnknownTable { path: PathBuf, table: String },
    #[error("{}: `engine` must be a table: [engine]", path.display())]
    NotATable { path: PathBuf },
}

/// Why an `[engine]` table cannot configure an engine: a key it does not have, a value of the
/// wrong type, or one out of range.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EngineTableError(String);

impl EngineTable {
    /// The `[engine]` table of the configuration file `text`, read from `path` (named in
    /// errors); `None` when the file has none.
    pub fn from_file(path: &Path, text: &str) -> Result<Option<Self>, EngineFileError> {
        let mut file: toml::Table =
            toml::from_str(text).map_err(|error: toml::de::Error| EngineFileError::Syntax {
                path: path.to_path_buf(),
                message: error.to_string(),
            })?;
        if let Some(unknown) = file.keys().find(|k| !TABLES.contains(&k.as_str())) {
            return Err(EngineFileError::UnknownTable {
                path: path.to_path_buf(),
                table: unknown.clone(),
            });
        }
        match file.remove("engine") {
            Some(toml::Value::Table(engine)) => Ok(Some(Self(engine))),
            Some(_) => Err(EngineFileError::NotATable {
                path: path.to_path_buf(),
            }),
            None => Ok(None),
        }
    }

    /// `base` with every key this table sets replaced by the table's value; the keys it leaves
    /// out keep `base`'s. Unknown keys and invalid values are errors, as they are for the
    /// daemon.
    pub fn lay_over(&self, base: &TieringConfig) -> Result<TieringConfig, EngineTableError> {
        let mut table = toml::Table::try_from(base).map_err(|error| {
            EngineTableError(format!("the configuration laid under [engine]: {error}"))
        })?;
        lay_over(&mut table, &self.0);
        let config: TieringConfig =
            toml::Value::Table(table)
                .try_into()
                .map_err(|error: toml::de::Error| {
                    EngineTableError(error.to_string().trim_end().to_owned())
                })?;
        config
            .validate()
            .map_err(|error| EngineTableError(error.to_string()))?;
        Ok(config)
    }
}

/// Replaces `base`'s values with `over`'s, table by table.
fn lay_over(base: &mut toml::Table, over: &toml::Table) {
    for (key, value) in over {
        match (base.get_mut(key), value) {
            (Some(toml::Value::Table(inner)), toml::Value::Table(over_inner)) => {
                lay_over(inner, over_inner);
            }
            _ => {
                base.insert(key.clone(), value.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(text: &str) -> EngineTable {
        EngineTable::from_file(Path::new("e.toml"), text)
            .unwrap()
            .unwrap()
    }

    #[test]
    fn the_engine_table_is_read_and_the_other_tables_only_named() {
        let table = engine("[agent]\nnope = 1\n[engine]\ninterval_ms = 20\n");
        let config = table.lay_over(&TieringConfig::default()).unwrap();
        assert_eq!(config.engine.interval_ms, 20);
        let read = |text: &str| EngineTable::from_file(Path::new("e.toml"), text);
        assert!(read("[agent]\n").unwrap().is_none());
        assert_eq!(
            read("[engin]\n").unwrap_err().to_string(),
            "e.toml: unknown table `engin`: an agent configuration file has [agent], [targets], \
             [sources], [topology], [migration], [engine], [kubernetes]"
        );
        assert_eq!(
            read("engine = 1\n").unwrap_err().to_string(),
            "e.toml: `engine` must be a table: [engine]"
        );
        let syntax = read("[engine\n").unwrap_err().to_string();
        assert!(
            syntax.starts_with("e.toml: TOML parse error at line 1"),
            "{syntax}"
        );
    }

    #[test]
    fn an_engine_table_replaces_only_the_keys_it_sets() {
        let mut base = TieringConfig::default();
        base.policy.benefit.slow_read_ns = 777.0;
        let table = engine(concat!(
            "[engine]\ninterval_ms = 20\n",
            "[engine.policy.epoch]\nreuse_floor = true\n",
            "[engine.policy.benefit]\nmin_samples = 5\n",
        ));
        let mut expected = base.clone();
        expected.engine.interval_ms = 20;
        expected.policy.epoch.reuse_floor = true;
        expected.policy.benefit.min_samples = 5;
        assert_eq!(table.lay_over(&base).unwrap(), expected);
    }

    #[test]
    fn unknown_keys_and_invalid_values_are_refused() {
        let refusal = |text: &str| {
            engine(text)
                .lay_over(&TieringConfig::default())
                .unwrap_err()
                .to_string()
        };
        assert!(refusal("[engine.policy.epoch]\nnope = 1\n").contains("nope"));
        assert!(
            refusal("[engine.policy.capacity]\nhigh_watermark = 2.0\n").contains("high_watermark")
        );
        assert!(
            refusal("[engine.policy.epoch]\ninitial_ms = \"x\"\n")
                .contains("policy.epoch.initial_ms")
        );
    }
}
