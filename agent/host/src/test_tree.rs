//! Fixture trees of /proc and /sys for the tests of this crate, under a temporary root.

use std::{fs, path::Path};

/// Writes `content` to `rel` under `root`, making the directories on the way.
pub(crate) fn write(root: &Path, rel: &str, content: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}
