//! How `memtide` ends: one line per error on stderr (`memtide: error: ...`, the reason once),
//! and an exit code from one scheme for every subcommand, listed in `memtide --help` and
//! docs/operations.md ("Exit codes").

use memtide_config::ConfigError;
use memtide_sim::args::UsageError;

/// What `memtide --help` says about exit codes (docs/operations.md says the same).
pub(crate) const EXIT_CODES: &str = "\
Exit codes (every subcommand):
  0    success
  1    failure while running (the agent, a replay, a recording, a request to the agent)
  2    usage or configuration error: a bad flag or value, a configuration file that is missing
       or invalid (check-config: any problem with the file, or a [sources] order this machine
       cannot run), a --pid or --cgroup that is not there
  3    run: the HTTP address cannot be listened on (in use, or not permitted)
  126  exec: the command was found but cannot be executed
  127  exec: the command was not found";

/// Usage or configuration error.
pub(crate) const USAGE: u8 = 2;

/// `exec`'s command could not be run: 127 when it does not exist, 126 otherwise (the codes
/// shells use, so scripts that wrap `memtide exec` read them as they would a shell's).
#[derive(Debug, thiserror::Error)]
#[error("cannot run {program}: {source}")]
pub(crate) struct ExecFailed {
    pub(crate) program: String,
    #[source]
    pub(crate) source: std::io::Error,
}

impl ExecFailed {
    fn code(&self) -> u8 {
        if self.source.kind() == std::io::ErrorKind::NotFound {
            127
        } else {
            126
        }
    }
}

/// Errors a subcommand has printed itself (one line each); only the exit code is left.
#[derive(Debug, thiserror::Error)]
#[error("{count} problem(s) reported above")]
pub(crate) struct Reported {
    pub(crate) count: usize,
    pub(crate) code: u8,
}

/// The exit code for `error`.
pub(crate) fn code(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if let Some(reported) = cause.downcast_ref::<Reported>() {
            return reported.code;
        }
        if let Some(exec) = cause.downcast_ref::<ExecFailed>() {
            return exec.code();
        }
        if cause.is::<UsageError>() || cause.is::<ConfigError>() {
            return USAGE;
        }
    }
    1
}

/// `error` and its causes on one line, each reason once: an error whose message already
/// quotes its source (`path: No such file or directory`) does not repeat it.
pub(crate) fn one_line(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let message = cause.to_string();
        if text.contains(&message) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&message);
    }
    text
}

/// Prints `error` (unless it was printed already) and returns its exit code.
pub(crate) fn report(error: &anyhow::Error) -> std::process::ExitCode {
    if error.downcast_ref::<Reported>().is_none() {
        eprintln!("memtide: error: {}", one_line(error));
    }
    std::process::ExitCode::from(code(error))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_source_quoted_by_its_error_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let config = ConfigError::Read {
            path: "/x.toml".into(),
            source: io,
        };
        let error = anyhow::Error::new(config).context("loading");
        let line = one_line(&error);
        assert_eq!(line.matches("entity not found").count(), 1, "{line}");
        assert!(line.starts_with("loading: /x.toml: "), "{line}");
        assert_eq!(code(&error), USAGE);
    }

    #[test]
    fn exec_failures_use_the_shells_codes() {
        let failed = |kind| {
            anyhow::Error::new(ExecFailed {
                program: "x".into(),
                source: std::io::Error::from(kind),
            })
        };
        assert_eq!(code(&failed(std::io::ErrorKind::NotFound)), 127);
        assert_eq!(code(&failed(std::io::ErrorKind::PermissionDenied)), 126);
        assert_eq!(code(&anyhow::anyhow!("anything else")), 1);
        let usage = anyhow::Error::new(UsageError("--x 0".into()));
        assert_eq!(code(&usage.context("parsing")), USAGE);
    }
}
