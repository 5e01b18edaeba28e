//! Builds the BPF object (crate `memtide-ebpf`) with aya-build and leaves it in OUT_DIR, where
//! `src/bpf.rs` embeds it. Needs nightly + rust-src and bpf-linker: `scripts/bootstrap.sh host`.
//!
//! With `AYA_BUILD_SKIP=1` (linting, docs, distro builds without the BPF tool chain) the object
//! is replaced by an empty file and the agent reports "built without BPF" at run time.
use std::{env, fs, path::PathBuf};

use anyhow::{Context as _, anyhow};
use aya_build::{Package, Toolchain};

const EBPF_PACKAGE: &str = "memtide-ebpf";
/// Name of the `[[bin]]` of the BPF crate, i.e. the file aya-build leaves in OUT_DIR.
const EBPF_BINARY: &str = "memtide";

fn main() -> anyhow::Result<()> {
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
