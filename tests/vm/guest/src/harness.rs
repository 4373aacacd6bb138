//! What the tests share with the runner (main.rs): the environment every test gets, how
//! a test reports a figure it measured, how it says it cannot run here, and the memory
//! hog of a loaded run.

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

/// `pfprof-guest hog <percent>`: keeps `percent` of the guest's memory dirty,
/// a write to every page each second, for as long as it runs (run.sh --load).
pub fn hog(percent: &str) -> anyhow::Result<()> {
    use anyhow::Context;
    let percent: u64 = percent.parse()?;
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let total_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no MemTotal in /proc/meminfo")?;
    let mut block = vec![0u8; (total_kib * 1024 * percent / 100) as usize];
    loop {
        for page in block.chunks_mut(4096) {
            page[0] = page[0].wrapping_add(1);
        }
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}
