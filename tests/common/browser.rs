//! Helpers of the browser tests (headless Chromium driven by playwright-core).

use std::path::PathBuf;

/// Where a screenshot named `file` goes: `$CARGO_TARGET_DIR` or `target/`,
/// for people to look at.
pub fn screenshot_path(file: &str) -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::fs::create_dir_all(&dir).expect("target dir");
    dir.join(file)
}
