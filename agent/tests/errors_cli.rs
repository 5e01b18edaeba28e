//! Every documented error of every subcommand (docs/operations.md, "Exit codes"), run through
//! the real binary: exactly one error line (clap's `error:` or memtide's `memtide: error:`),
//! the reason once, and the documented exit code.

mod support;

use std::{os::unix::fs::PermissionsExt as _, path::Path, process::Command};

/// One error case: the arguments, the exit code and what the error line must say.
struct Case {
    args: Vec<String>,
    code: i32,
    says: &'static str,
}

fn case(args: &[&str], code: i32, says: &'static str) -> Case {
    Case {
        args: args.iter().map(|arg| (*arg).to_owned()).collect(),
        code,
        says,
    }
}

fn check(case: &Case) -> Result<(), String> {
    let output = Command::new(support::memtide_bin())
        .args(&case.args)
        .env_remove("RUST_LOG")
        .output()
        .expect("running memtide");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|line| {
            line.starts_with("error:")
                || line.starts_with("memtide: error:")
                || line.contains(" ERROR ")
        })
        .collect();
    let mut problems = Vec::new();
    if output.status.code() != Some(case.code) {
        problems.push(format!(
            "exit {:?}, documented {}",
            output.status.code(),
            case.code
        ));
    }
    if errors.len() != 1 {
        problems.push(format!("{} error lines, not 1", errors.len()));
    }
    if let Some(line) = errors.first() {
        if !line.contains(case.says) {
            problems.push(format!("the error line does not say {:?}", case.says));
        }
        if line.matches("(os error").count() > 1 {
            problems.push("the reason is repeated".to_owned());
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "memtide {}: {}\n{stderr}",
            case.args.join(" "),
            problems.join("; ")
        ))
    }
}

fn check_all(cases: &[Case]) {
    let failures: Vec<String> = cases.iter().filter_map(|case| check(case).err()).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    path.display().to_string()
}

#[test]
fn configuration_errors_exit_2_from_check_config_run_and_status() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.toml").display().to_string();
    let syntax = write(dir.path(), "syntax.toml", "[agent]\nlisten_addr = 1\n");
    let value = write(dir.path(), "value.toml", "[sources]\nring_bytes = 1000\n");
    let engine = write(
        dir.path(),
        "engine.toml",
        "[engine.policy.capacity]\nhigh_watermark = 2.0\n",
    );
    let open = write(dir.path(), "open.toml", "");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    let mut cases = Vec::new();
    for (file, says) in [
        (&missing, "missing.toml: No such file"),
        (&syntax, "syntax.toml:2:1:"),
        (&value, "value.toml:2: sources.ring_bytes"),
        (
            &engine,
            "engine.toml:2: engine.policy.capacity.high_watermark: 2: must be within [0, 1]",
        ),
        (&open, "world-writable"),
    ] {
        cases.push(case(&["check-config", file], 2, says));
        cases.push(case(
            &["run", "--config", file, "--listen", "127.0.0.1:0"],
            2,
            says,
        ));
    }
    cases.push(case(
        &["status", "--config", &missing],
        2,
        "missing.toml: No such file",
    ));
    cases.push(case(&["check-config"], 2, "required arguments"));
    check_all(&cases);
}

#[test]
fn a_source_order_this_machine_cannot_run_is_a_check_config_error() {
    let pebs = Path::new("/sys/bus/event_source/devices/cpu/events/mem-loads").exists()
        || Path::new("/sys/bus/event_source/devices/cpu_core/events/mem-loads").exists();
    if pebs {
        eprintln!("skipping: this machine has a PMU with mem-loads, so pebs can run here");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "pebs.toml", "[sources]\norder = [\"pebs\"]\n");
    check_all(&[case(
        &["check-config", &file],
        2,
        "sources.order: no source it names can run",
    )]);
}

#[test]
fn run_names_what_is_not_there_once_with_the_fitting_hint() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = format!("127.0.0.1:{}", taken.local_addr().unwrap().port());
    check_all(&[
        case(
            &["run", "--pid", "999999999", "--listen", "127.0.0.1:0"],
            2,
            "name a running process",
        ),
        case(
            &[
                "run",
                "--cgroup",
                "memtide-no-such.slice",
                "--listen",
                "127.0.0.1:0",
            ],
            2,
            "name an existing cgroup",
        ),
        case(&["run", "--listen", "nowhere"], 2, "HOST:PORT"),
        case(
            &["run", "--observe", "--listen", &port],
            3,
            "another process listens there",
        ),
    ]);
    let output = Command::new(support::memtide_bin())
        .args(["run", "--pid", "999999999", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("cgroup"),
        "a pid's hint is about processes: {stderr}"
    );
}

#[test]
fn replay_and_trace_errors_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.mt").display().to_string();
    let generated = Command::new(support::memtide_bin())
        .args([
            "gen",
            "--workload",
            "stream",
            "--footprint",
            "1M",
            "--records",
            "100",
            "--out",
            &trace,
        ])
        .output()
        .unwrap();
    assert!(generated.status.success(), "{generated:?}");
    let missing = dir.path().join("missing.mt").display().to_string();
    let config = write(dir.path(), "e.toml", "[engine]\ntop_n = 4\n");
    let nowhere = "/nonexistent-dir/out.mt";
    check_all(&[
        case(
            &["sim", "--trace", &missing, "--policy", "memtide"],
            2,
            "--trace",
        ),
        case(
            &[
                "sim",
                "--trace",
                &trace,
                "--policy",
                "memtide",
                "--fast-ratio",
                "-1",
            ],
            2,
            "[0, 1]",
        ),
        case(
            &[
                "sim",
                "--trace",
                &trace,
                "--policy",
                "memtide",
                "--fast-ratio",
                "2",
            ],
            2,
            "[0, 1]",
        ),
        case(
            &[
                "sim",
                "--trace",
                &trace,
                "--policy",
                "memtide",
                "--record-weight",
                "0",
            ],
            2,
            "[1, ",
        ),
        case(
            &[
                "sim",
                "--trace",
                &trace,
                "--policy",
                "memtide",
                "--sample-rate",
                "0",
            ],
            2,
            "[1, ",
        ),
        case(
            &[
                "sim", "--trace", &trace, "--policy", "memtide", "--repeat", "0",
            ],
            2,
            "[1, ",
        ),
        case(
            &[
                "sim",
                "--trace",
                &trace,
                "--policy",
                "memtide",
                "--fast-capacity",
                "12Q",
            ],
            2,
            "64M",
        ),
        case(
            &[
                "sim",
                "--trace",
                &trace,
                "--policy",
                "no-migration",
                "--engine-config",
                &config,
            ],
            2,
            "--engine-config configures memtide's engine",
        ),
        case(
            &[
                "gen",
                "--workload",
                "stream",
                "--footprint",
                "lots",
                "--records",
                "1",
                "--out",
                &trace,
            ],
            2,
            "64M",
        ),
        case(
            &[
                "gen",
                "--workload",
                "stream",
                "--footprint",
                "1M",
                "--records",
                "1",
                "--out",
                nowhere,
            ],
            2,
            "not a directory",
        ),
        case(
            &["convert", "--trace", &missing, "--out", &trace],
            2,
            "--trace",
        ),
        case(
            &["convert", "--trace", &trace, "--out", &trace],
            2,
            "the trace being read",
        ),
        case(
            &[
                "convert",
                "--trace",
                &trace,
                "--record-weight",
                "0",
                "--out",
                nowhere,
            ],
            2,
            "[1, ",
        ),
    ]);
}

#[test]
fn record_exec_status_and_probe_errors() {
    let me = std::process::id().to_string();
    let dir = tempfile::tempdir().unwrap();
    let not_executable = write(dir.path(), "script", "#!/bin/sh\n");
    check_all(&[
        case(
            &["record", "--pid", "999999999", "--duration", "1"],
            2,
            "no such process",
        ),
        case(
            &["record", "--pid", &me, "--ring-bytes", "3M"],
            2,
            "[4K, 2G]",
        ),
        case(&["record", "--pid", &me, "--duration", "-1"], 2, "above 0"),
        case(
            &["record", "--pid", &me, "-o", "/nonexistent-dir/x.mt.zst"],
            2,
            "not a directory",
        ),
        case(
            &["exec", "--", "/nonexistent-command"],
            127,
            "cannot run /nonexistent-command",
        ),
        case(&["exec", "--", &not_executable], 126, "Permission denied"),
        case(&["exec"], 2, "required arguments"),
        case(&["status", "--address", "not-an-address"], 2, "HOST:PORT"),
        case(
            &["status", "--address", "127.0.0.1:1"],
            1,
            "connecting to the agent at 127.0.0.1:1",
        ),
        case(
            &["probe", "--root", "/nonexistent-root"],
            2,
            "not a directory",
        ),
        case(&["no-such-subcommand"], 2, "unrecognized subcommand"),
    ]);
}

#[test]
fn the_exit_codes_are_in_the_help_and_the_operations_guide() {
    let help = Command::new(support::memtide_bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md"),
    )
    .unwrap();
    for code in ["0", "1", "2", "3", "126", "127"] {
        assert!(
            help.lines()
                .any(|line| line.trim_start().starts_with(&format!("{code} "))),
            "--help does not list exit code {code}:\n{help}"
        );
        assert!(
            guide.contains(&format!("| {code} |")),
            "docs/operations.md does not list exit code {code}"
        );
    }
}
