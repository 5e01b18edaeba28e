//! `memtide exec`: the policy it sets is the launched program's (inherited across execve).
mod support;

use std::process::Command;

fn memtide(args: &[&str]) -> std::process::Output {
    Command::new(support::memtide_bin())
        .args(args)
        .output()
        .expect("run memtide")
}

#[test]
fn launched_program_inherits_the_policy() {
    // The program prints its own numa_maps: every mapping carries the policy memtide set.
    for (placement, policy) in [
        ("interleave", "interleave:"),
        ("fast-first", "prefer (many):"),
    ] {
        let out = memtide(&[
            "exec",
            "--placement",
            placement,
            "--",
            "cat",
            "/proc/self/numa_maps",
        ]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = text.lines().collect();
        assert!(!lines.is_empty());
        assert!(
            lines.iter().all(|l| l.contains(policy)),
            "{placement}: expected {policy} on every line:\n{text}"
        );
    }
}

#[test]
fn exit_status_is_the_programs_and_errors_name_the_program() {
    let out = memtide(&["exec", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = memtide(&["exec", "--", "/nonexistent/program"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/program"));
    let out = memtide(&["exec", "--placement", "fastest", "--", "true"]);
    assert!(!out.status.success());
}

#[test]
fn dry_run_on_the_vm_fixture_picks_weighted_interleave_or_its_approximation() {
    let root = &format!("{}/topology/vm-hmat", memtide_host::FIXTURES);
    let out = memtide(&["exec", "--root", root, "--dry-run", "--", "true"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The fixture has no weighted_interleave directory: the subset approximation of 20:5.
    assert!(text.starts_with("preferred over nodes [0]"), "{text}");
    let out = memtide(&["exec", "--root", root, "--", "true"]);
    assert!(!out.status.success(), "a fixture root never launches");
}
