//! The shipped configuration, deploy/config/memtide.toml, is exactly what
//! scripts/gen-default-config.py writes from the built binary's defaults and the config fields'
//! doc comments: a default or a field's documentation changed without regenerating the file
//! fails here, so the file users read never describes behaviour the code no longer has. (The
//! config crate's own test checks the values alone; the Kubernetes copy is checked against this
//! file by deploy/tests/check-deploy.sh.)

use std::{path::Path, process::Command};

#[test]
fn the_shipped_config_is_what_the_generator_writes() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let script = root.join("scripts/gen-default-config.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_memtide"))
        .output()
        .unwrap_or_else(|e| panic!("running python3 {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).expect("the generator writes UTF-8");
    let shipped_path = root.join("deploy/config/memtide.toml");
    let shipped = std::fs::read_to_string(&shipped_path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", shipped_path.display()));
    if generated != shipped {
        let first_difference = generated
            .lines()
            .zip(shipped.lines())
            .position(|(g, s)| g != s)
            .unwrap_or_else(|| generated.lines().count().min(shipped.lines().count()));
        panic!(
            "deploy/config/memtide.toml differs from what the generator writes (first at line \
             {}): regenerate it with `cargo build && python3 scripts/gen-default-config.py \
             target/debug/memtide > deploy/config/memtide.toml && bash \
             deploy/tests/sync-k8s-config.sh`",
            first_difference + 1
        );
    }
}
