//! The C side of the hint API as a C program sees it: `include/memtide_hint.h` compiles with
//! `-Wall -Werror`, the static library links with the flags the header documents, and a call
//! sets a memory policy on the range (read back with get_mempolicy) and refuses bad input with
//! `-EINVAL`.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

const PROGRAM: &str = r#"
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "memtide_hint.h"

int main(void) {
    size_t len = 1 << 20;
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED) return 2;
    memset(buf, 1, len);
    int fast = memtide_hint(buf, len, MEMTIDE_HINT_FAST);
    int mode = -1;
    unsigned long mask[16] = {0};
    /* MPOL_F_ADDR = 2: the policy of the range holding buf. */
    if (syscall(SYS_get_mempolicy, &mode, mask, 1024UL, buf, 2UL) != 0) return 3;
    int misaligned = memtide_hint(buf + 1, 4096, MEMTIDE_HINT_SLOW);
    int unknown = memtide_hint(buf, len, 7);
    int bandwidth = memtide_hint(buf, len, MEMTIDE_HINT_BANDWIDTH);
    int slow = memtide_hint(buf, len, MEMTIDE_HINT_SLOW);
    printf("fast=%d mode=%d misaligned=%d unknown=%d bandwidth=%d slow=%d\n", fast, mode,
           misaligned, unknown, bandwidth, slow);
    printf("FAST=%d SLOW=%d BANDWIDTH=%d\n", MEMTIDE_HINT_FAST, MEMTIDE_HINT_SLOW,
           MEMTIDE_HINT_BANDWIDTH);
    return 0;
}
"#;

/// Builds the static library the way the header tells C users to (`cargo build -p
/// memtide-hint --release`), into its own target directory: `cargo test` does not leave a
/// staticlib where a C build would look for it.
fn build_static_library(target_dir: &Path) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let build = Command::new(env!("CARGO"))
        .args([
            "build",
            "--offline",
            "--release",
            "-p",
            "memtide-hint",
            "--target-dir",
        ])
        .arg(target_dir)
        .current_dir(&workspace)
        .output()
        .expect("run cargo build");
    assert!(
        build.status.success(),
        "cargo build -p memtide-hint --release failed:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    target_dir.join("release/libmemtide_hint.a")
}

#[test]
fn a_c_program_compiles_links_and_sets_a_policy_through_the_header() {
    let Ok(cc) = Command::new("cc").arg("--version").output() else {
        eprintln!("skipping: no C compiler (cc) on PATH");
        return;
    };
    assert!(cc.status.success(), "cc --version failed");
    let dir = tempfile::tempdir().expect("tempdir");
    let library = build_static_library(&dir.path().join("target"));
    assert!(library.exists(), "{} missing", library.display());
    let source = dir.path().join("hint.c");
    let binary = dir.path().join("hint");
    std::fs::write(&source, PROGRAM).expect("write the C program");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let compile = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(&include)
        .arg(&source)
        .arg(&library)
        .args(["-lpthread", "-ldl", "-o"])
        .arg(&binary)
        .output()
        .expect("run cc");
    assert!(
        compile.status.success(),
        "the header or the library does not build a C program:\n{}",
        String::from_utf8_lossy(&compile.stderr)
    );
    let run = Command::new(&binary).output().expect("run the C program");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success(), "exit {}: {stdout}", run.status);
    let field = |name: &str| -> i32 {
        stdout
            .split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    assert_eq!(field("fast"), 0, "{stdout}");
    // MPOL_PREFERRED (1) or MPOL_PREFERRED_MANY (5): not the default policy any more.
    assert!(matches!(field("mode"), 1 | 5), "{stdout}");
    assert_eq!(field("misaligned"), -libc::EINVAL, "{stdout}");
    assert_eq!(field("unknown"), -libc::EINVAL, "{stdout}");
    assert_eq!(field("bandwidth"), 0, "{stdout}");
    assert_eq!(field("slow"), 0, "{stdout}");
    // The header's constants are the Rust enum's discriminants.
    use memtide_hint::Hint;
    assert_eq!(field("FAST"), Hint::Fast as i32, "{stdout}");
    assert_eq!(field("SLOW"), Hint::Slow as i32, "{stdout}");
    assert_eq!(field("BANDWIDTH"), Hint::Bandwidth as i32, "{stdout}");
}
