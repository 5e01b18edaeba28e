//! Rebuild the BPF object when bpf-linker changes (it is found on PATH, not as a dependency).
fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(error) => println!("cargo:warning=bpf-linker not found on PATH: {error}"),
    }
}
