//! Which cgroups a fleet monitor's selectors name now: the cgroups directly under a
//! `--cgroups-under` directory (below a kubelet's QoS and pod cgroups, its containers),
//! and the cgroups named like a `--unit` pattern anywhere under the cgroup2 mount.

use std::fs;
use std::path::{Path, PathBuf};

use super::kubepods::{classify, KubeCgroup};
use super::pattern::matches;

/// The deepest a `--unit` pattern is looked for below the mount (a user's units are at
/// `user.slice/user-1000.slice/user@1000.service/app.slice/x.service`: 5).
const UNIT_DEPTH: usize = 6;

/// One way of naming targets.
#[derive(Clone, Debug)]
pub enum Selector {
    /// `--cgroups-under DIR`.
    Under(PathBuf),
    /// `--unit PATTERN`.
    Unit(String),
}

/// The cgroup directories `selectors` name now, below `mount`, sorted, each once.
pub fn discover(selectors: &[Selector], mount: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for selector in selectors {
        match selector {
            Selector::Under(dir) => children(dir, mount, &mut found),
            Selector::Unit(pattern) => units(mount, pattern, UNIT_DEPTH, &mut found),
        }
    }
    found.sort();
    found.dedup();
    found
}

/// The cgroup directories directly in `dir` (a cgroup has no other directories).
fn subdirectories(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect()
}

/// The targets directly in `dir`, descending through a kubelet's QoS and pod cgroups.
fn children(dir: &Path, mount: &Path, found: &mut Vec<PathBuf>) {
    for child in subdirectories(dir) {
        let name = child.strip_prefix(mount).unwrap_or(&child);
        match classify(&format!("/{}", name.display())) {
            Some(KubeCgroup::Qos | KubeCgroup::Pod) => children(&child, mount, found),
            _ => found.push(child),
        }
    }
}

/// The cgroups named like `pattern` in `dir` and below it, `depth` levels at most; not
/// below a match.
fn units(dir: &Path, pattern: &str, depth: usize, found: &mut Vec<PathBuf>) {
    for child in subdirectories(dir) {
        let named = (child.file_name()).is_some_and(|n| matches(pattern, &n.to_string_lossy()));
        if named {
            found.push(child);
        } else if depth > 1 {
            units(&child, pattern, depth - 1, found);
        }
    }
}
