//! What the tests share with the runner (main.rs): the environment every test gets, how
//! a test reports a figure it measured, and how it says it cannot run here.

use std::path::PathBuf;

/// What every test gets: where the module is.
pub struct Env {
    pub module: PathBuf,
}

/// A figure a test measured (what docs/reliability.md reports), printed
/// above its verdict line.
pub fn figure(text: &str) {
    println!("  | {text}");
}

/// A test that cannot run on this kernel returns this error: it is reported
/// as skipped, with why, and counted apart from the passes.
#[derive(Debug)]
pub struct Skipped(pub String);

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Skipped {}
