//! Range checks shared by every tunable of the core (engine and policy configurations).

/// A configuration value out of its allowed range.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConfigError {
    #[error("{field} = {value}: {reason}")]
    OutOfRange {
        field: &'static str,
        value: String,
        reason: &'static str,
    },
}

pub(crate) fn check(
    ok: bool,
    field: &'static str,
    value: impl std::fmt::Display,
    reason: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            field,
            value: value.to_string(),
            reason,
        })
    }
}
