//! Which cgroups a fleet monitor's selectors name now: the cgroups directly under a
//! `--cgroups-under` directory (below a kubelet's QoS and pod cgroups, its containers),
//! and the cgroups named like a `--unit` pattern anywhere under the cgroup2 mount.
//!
//! Each is named as `--cgroup` names one, by its path below the mount, built from the
//! root's name and the directory names read below it: a cgroup file system has no
//! symlinks, and none is followed, so no name leads outside the root.

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};

use super::kubepods::{classify, KubeCgroup};
use super::pattern::matches;
use crate::system::cgroup::{Cgroup, CgroupError};

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

/// A selector with its directory checked and resolved.
#[derive(Debug)]
pub struct Root {
    dir: PathBuf,
    /// Its path below the cgroup2 mount.
    name: String,
    /// `--unit`'s pattern; `None` for `--cgroups-under`.
    unit: Option<String>,
}

/// A cgroup a selector names.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Found {
    /// Its path below the cgroup2 mount: the `target` label.
    pub name: String,
    pub dir: PathBuf,
}

/// What one look found.
#[derive(Debug, Default)]
pub struct Discovered {
    /// Sorted by name, each once.
    pub found: Vec<Found>,
    /// Cgroups whose names are not UTF-8: no label value can name them faithfully.
    pub unnamed: Vec<PathBuf>,
}

/// Checks each selector's directory (a `--cgroups-under` that is not a cgroup v2
/// directory fails here, before anything runs); `--unit` looks from `mount`.
pub fn roots(selectors: &[Selector], mount: &Path) -> Result<Vec<Root>, CgroupError> {
    selectors
        .iter()
        .map(|selector| {
            let (dir, unit) = match selector {
                Selector::Under(dir) => (dir.as_path(), None),
                Selector::Unit(pattern) => (mount, Some(pattern.clone())),
            };
            let cgroup = Cgroup::open(dir)?;
            Ok(Root {
                dir: cgroup.path().to_path_buf(),
                name: cgroup.name().to_owned(),
                unit,
            })
        })
        .collect()
}

/// The cgroups the roots name now.
pub fn discover(roots: &[Root]) -> Discovered {
    let mut discovered = Discovered::default();
    for root in roots {
        match &root.unit {
            None => children(&root.dir, &root.name, &mut discovered),
            Some(pattern) => units(&root.dir, &root.name, pattern, UNIT_DEPTH, &mut discovered),
        }
    }
    discovered.found.sort();
    discovered.found.dedup_by(|a, b| a.name == b.name);
    discovered.unnamed.sort();
    discovered.unnamed.dedup();
    discovered
}

/// The cgroup directories directly in `dir` (named `name`), each with its name; those
/// whose names are not UTF-8 go to `unnamed`.
fn subdirectories(dir: &Path, name: &str, unnamed: &mut Vec<PathBuf>) -> Vec<Found> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        if !entry.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        match entry.file_name().to_str() {
            Some(child) => found.push(Found {
                name: join(name, child),
                dir: entry.path(),
            }),
            None => unnamed.push(entry.path()),
        }
    }
    found
}

/// The name of cgroup `child` in the cgroup named `parent`.
fn join(parent: &str, child: &str) -> String {
    format!("{}/{child}", parent.trim_end_matches('/'))
}

/// The targets directly in `dir`, descending through a kubelet's QoS and pod cgroups.
fn children(dir: &Path, name: &str, discovered: &mut Discovered) {
    for child in subdirectories(dir, name, &mut discovered.unnamed) {
        match classify(&child.name) {
            Some(KubeCgroup::Qos | KubeCgroup::Pod) => {
                children(&child.dir, &child.name, discovered)
            }
            _ => discovered.found.push(child),
        }
    }
}

/// The cgroups named like `pattern` in `dir` and below it, `depth` levels at most; not
/// below a match. A name that is not UTF-8 is no unit's (systemd escapes them).
fn units(dir: &Path, name: &str, pattern: &str, depth: usize, discovered: &mut Discovered) {
    for child in subdirectories(dir, name, &mut Vec::new()) {
        let base = Path::new(&child.name).file_name().and_then(OsStr::to_str);
        if base.is_some_and(|base| matches(pattern, base)) {
            discovered.found.push(child);
        } else if depth > 1 {
            units(&child.dir, &child.name, pattern, depth - 1, discovered);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_below_the_root_are_joined_without_a_double_slash() {
        assert_eq!(join("/", "a.service"), "/a.service");
        assert_eq!(
            join("/system.slice", "a.service"),
            "/system.slice/a.service"
        );
    }
}
