//! Builds the BPF object (crate `memtide-ebpf`) with aya-build and leaves it in OUT_DIR, where
//! `src/bpf.rs` embeds it. Needs nightly + rust-src and bpf-linker: `scripts/bootstrap.sh host`.
//!
//! With `AYA_BUILD_SKIP=1` (linting, docs, distro builds without the BPF tool chain) the object
//! is replaced by an empty file and the agent reports "built without BPF" at run time.
//!
//! aya-build forwards every line of the nested cargo build as a `cargo:warning`, which buries a
//! `make run` under ~35 lines of "Compiling ..." before the agent starts. So the script runs
//! itself again as a child that does the build, and shows the child's warnings only when the
//! build fails (cargo prints a failed build script's output in full).
use std::{env, fs, path::PathBuf, process::Command};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

const EBPF_PACKAGE: &str = "memtide-ebpf";
/// Name of the `[[bin]]` of the BPF crate, i.e. the file aya-build leaves in OUT_DIR.
const EBPF_BINARY: &str = "memtide";

/// Set in the child that really builds the BPF object.
const CHILD: &str = "MEMTIDE_BPF_BUILD_CHILD";
/// A warning of aya-build's own worth showing on success: the object was not built.
const SKIPPED: &str = "cargo:warning=AYA_BUILD_SKIP";

fn main() -> anyhow::Result<()> {
    if env::var_os(CHILD).is_some() {
        return build_bpf_object();
    }
    let exe = env::current_exe().context("locating the build script")?;
    let child = Command::new(&exe)
        .env(CHILD, "1")
        .output()
        .with_context(|| format!("running {} to build the BPF object", exe.display()))?;
    let stdout = String::from_utf8_lossy(&child.stdout);
    if !child.status.success() {
        print!("{stdout}");
        eprint!("{}", String::from_utf8_lossy(&child.stderr));
        return Err(anyhow!(
            "building the BPF object ({EBPF_PACKAGE}) failed: {}; its output is above",
            child.status
        ));
    }
    for line in stdout.lines() {
        if !line.starts_with("cargo:warning=") || line.starts_with(SKIPPED) {
            println!("{line}");
        }
    }
    Ok(())
}

fn build_bpf_object() -> anyhow::Result<()> {
    let metadata = cargo_metadata::MetadataCommand::new()
        .no_deps()
        .exec()
        .context("cargo metadata")?;
    let ebpf_package = metadata
        .packages
        .into_iter()
        .find(|package| package.name.as_str() == EBPF_PACKAGE)
        .ok_or_else(|| anyhow!("{EBPF_PACKAGE} not found in the workspace"))?;
    let root_dir = ebpf_package
        .manifest_path
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", ebpf_package.manifest_path))?;
    // The common crate is a dependency of the BPF binary; changes there must rebuild it.
    let common_dir = root_dir.join("../common");
    println!("cargo:rerun-if-changed={common_dir}");

    aya_build::build_ebpf(
        [Package {
            name: EBPF_PACKAGE,
            root_dir: root_dir.as_str(),
            ..Package::default()
        }],
        Toolchain::default(),
    )?;

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").context("OUT_DIR not set")?);
    let object = out_dir.join(EBPF_BINARY);
    if !object.exists() {
        // AYA_BUILD_SKIP: aya-build returned without building anything.
        fs::write(&object, b"").with_context(|| format!("writing {}", object.display()))?;
    }
    Ok(())
}
