//! A cgroup v2 directory selected with `--cgroup PATH` (every process in the cgroup or one
//! of its descendant cgroups, counted while it is inside): checked and held open, and the
//! cgroup's own count of its faults (`memory.stat`) to set beside the samples'. The procfs
//! backend counts its members itself ([`crate::backend::procfs::members`]), the module
//! from the open directory.

use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::Mode;
use nix::sys::statfs::{fstatfs, CGROUP2_SUPER_MAGIC};

use crate::system::procstat::{read_whole, ProcessCounters};

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    #[error("cannot open {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("{} is not a cgroup v2 directory (mounted cgroup2 file systems: {mounts})", path.display())]
    NotCgroup2 { path: PathBuf, mounts: String },
    #[error("reading {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}

/// A cgroup v2 directory, checked and held open.
#[derive(Debug)]
pub struct Cgroup {
    path: PathBuf,
    /// Its path below the cgroup2 mount (`/system.slice/x.service`): the `target` label.
    name: String,
    /// Held open for a backend that takes the cgroup from a descriptor (the module).
    fd: OwnedFd,
    /// Its `cgroup.procs` and `cgroup.stat`, held open: a fleet's pass over a thousand
    /// targets reads them every period, and read again from offset 0 the kernel lists
    /// them anew (`None` where either could not be opened: then opened at each pass).
    listing: Option<Listing>,
}

/// A cgroup's own files that say who is inside.
#[derive(Debug)]
struct Listing {
    procs: File,
    stat: File,
}

/// The mount points of cgroup2 file systems, from /proc/self/mountinfo.
pub fn cgroup2_mounts() -> Vec<PathBuf> {
    let Ok(info) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            (after.split_whitespace().next()? == "cgroup2")
                .then(|| before.split_whitespace().nth(4).map(mountinfo_path))?
        })
        .collect()
}

/// The mount point of a cgroup2 file system mounted at its (namespace's) root, where the
/// paths of `/proc/PID/cgroup` are: one mounting a cgroup below it (a bind mount, a
/// container's view of its own cgroup) would put them elsewhere.
pub fn cgroup2_root_mount() -> Option<PathBuf> {
    cgroup2_root_mount_in(&fs::read_to_string("/proc/self/mountinfo").ok()?)
}

/// [`cgroup2_root_mount`], from `mountinfo`'s text.
fn cgroup2_root_mount_in(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let mut fields = before.split_whitespace().skip(3);
        let (root, mount_point) = (fields.next()?, fields.next()?);
        (after.split_whitespace().next()? == "cgroup2" && root == "/")
            .then(|| mountinfo_path(mount_point))
    })
}

/// A path as mountinfo writes it: a space, tab, newline or backslash as `\` and three
/// octal digits.
fn mountinfo_path(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut path = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|_| bytes[i] == b'\\');
        match octal.and_then(|o| u8::from_str_radix(std::str::from_utf8(o).ok()?, 8).ok()) {
            Some(byte) => {
                path.push(byte);
                i += 4;
            }
            None => {
                path.push(bytes[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(path))
}

impl Cgroup {
    /// Opens `path`, which must be a directory of a cgroup2 file system.
    pub fn open(path: &Path) -> Result<Cgroup, CgroupError> {
        let fd = open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|source| CgroupError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        let mounts = cgroup2_mounts();
        let not_cgroup2 = || CgroupError::NotCgroup2 {
            path: path.to_path_buf(),
            mounts: match mounts.is_empty() {
                true => "none".to_owned(),
                false => (mounts.iter().map(|m| m.display().to_string()))
                    .collect::<Vec<_>>()
                    .join(", "),
            },
        };
        let magic = fstatfs(&fd).map_err(|_| not_cgroup2())?.filesystem_type();
        if magic != CGROUP2_SUPER_MAGIC {
            return Err(not_cgroup2());
        }
        // Where the open directory is (what symlinks or `..` in `path` led to), not what
        // the path names by now.
        let path = fs::read_link(fd_path(fd.as_fd())).unwrap_or_else(|_| path.to_path_buf());
        // The deepest mount it is under: its path there names it on every machine.
        let name = mounts
            .iter()
            .filter_map(|m| path.strip_prefix(m).ok())
            .min_by_key(|rest| rest.as_os_str().len())
            .map_or_else(
                || path.display().to_string(),
                |rest| format!("/{}", rest.display()),
            );
        let listing = (|| {
            Some(Listing {
                procs: open_below(fd.as_fd(), "cgroup.procs").ok()?,
                stat: open_below(fd.as_fd(), "cgroup.stat").ok()?,
            })
        })();
        Ok(Cgroup {
            path,
            name,
            fd,
            listing,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its path below the cgroup2 mount.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The open directory.
    pub fn fd(&self) -> &OwnedFd {
        &self.fd
    }

    /// The processes of this cgroup and of every cgroup below it; `None` once it is
    /// removed. Read through the open directory, never by its path again: a cgroup
    /// removed and made anew at the same path (a restarted service's) is not this one.
    pub fn processes(&self) -> Option<Vec<u32>> {
        let Some(listing) = &self.listing else {
            return processes_below(self.fd.as_fd());
        };
        // Read again from offset 0, the kernel lists them anew; a removed cgroup's files
        // fail with ENODEV.
        let mut buf = Vec::new();
        let procs = read_whole(&listing.procs, &mut buf).ok()?;
        let mut pids = pids_in(std::str::from_utf8(procs).ok()?);
        let stat = read_whole(&listing.stat, &mut buf).ok()?;
        // Most targets have no cgroup below: their directory is not listed at all.
        if descendants(std::str::from_utf8(stat).ok()?) != Some(0) {
            let mut dirs = child_dirs(self.fd.as_fd());
            gather_below(&mut pids, &mut dirs);
        }
        Some(pids)
    }

    /// Whether process `pid` is in this cgroup or one below it, by the cgroup v2 line of
    /// `/proc/<pid>/cgroup` (which an exiting process keeps: it cannot move any more);
    /// `None` once the process is gone.
    pub fn holds(&self, pid: u32) -> Option<bool> {
        let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
        Some(unified_path(&text).is_some_and(|path| below(&self.name, path)))
    }
}

/// The open directory `fd` as a path: /proc resolves it to that directory itself.
fn fd_path(fd: BorrowedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// The processes of the open cgroup directory `dir` and of every cgroup below it, each
/// file opened anew; `None` once it is removed.
fn processes_below(dir: BorrowedFd) -> Option<Vec<u32>> {
    let mut pids = read_procs(dir).ok()?;
    let mut dirs = child_dirs(dir);
    gather_below(&mut pids, &mut dirs);
    Some(pids)
}

/// Adds to `pids` the processes of the cgroups `dirs` and of every cgroup below them.
fn gather_below(pids: &mut Vec<u32>, dirs: &mut Vec<OwnedFd>) {
    while let Some(dir) = dirs.pop() {
        // A child cgroup removed meanwhile has no processes left to count.
        if let Ok(more) = read_procs(dir.as_fd()) {
            pids.extend(more);
            dirs.extend(child_dirs(dir.as_fd()));
        }
    }
}

/// `name` in the open cgroup directory `dir`, opened to read.
fn open_below(dir: BorrowedFd, name: &str) -> io::Result<File> {
    let fd = openat(dir, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())?;
    Ok(File::from(fd))
}

/// The pids of a `cgroup.procs` text.
fn pids_in(text: &str) -> Vec<u32> {
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

/// `nr_descendants` of a `cgroup.stat` text: the live cgroups below.
fn descendants(stat: &str) -> Option<u64> {
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_descendants "))
        .and_then(|n| n.trim().parse().ok())
}

/// The pids in the `cgroup.procs` of the open cgroup directory `dir`.
fn read_procs(dir: BorrowedFd) -> io::Result<Vec<u32>> {
    let mut text = String::new();
    open_below(dir, "cgroup.procs")?.read_to_string(&mut text)?;
    Ok(pids_in(&text))
}

/// The cgroups directly below the open cgroup directory `dir`, opened (a cgroup has no
/// other directories, and no symlinks: none is followed).
fn child_dirs(dir: BorrowedFd) -> Vec<OwnedFd> {
    let Ok(entries) = fs::read_dir(fd_path(dir)) else {
        return Vec::new();
    };
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    entries
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| openat(dir, e.file_name().as_os_str(), flags, Mode::empty()).ok())
        .collect()
}

/// The path of the cgroup v2 line (`0::/a/b`) of a `/proc/<pid>/cgroup`, without the
/// ` (deleted)` the kernel adds once that cgroup is removed.
fn unified_path(text: &str) -> Option<&str> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some(path.strip_suffix(" (deleted)").unwrap_or(path))
}

/// Whether the cgroup at `path` is the one at `name` or below it.
fn below(name: &str, path: &str) -> bool {
    name == "/"
        || path
            .strip_prefix(name)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// `pgfault` (every fault) and `pgmajfault` of the `memory.stat` of the cgroup at `dir`
/// (its subtree's, since its creation), as minor and major faults; `None` where the
/// memory controller is not enabled for it.
pub fn memory_faults(dir: &Path) -> Option<ProcessCounters> {
    let text = fs::read_to_string(dir.join("memory.stat")).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
    };
    let all: u64 = field("pgfault")?;
    let major = field("pgmajfault")?;
    Some(ProcessCounters {
        minor: all - major.min(all),
        major,
        cpu_ns: 0,
    })
}

/// The cgroup's own count of its faults (`memory.stat`) from the start of the profile, to
/// set beside the samples' whichever backend counted them.
pub struct FaultCheck {
    cgroup: Arc<Cgroup>,
    before: Option<ProcessCounters>,
}

impl FaultCheck {
    /// Reads the count now, before anything is sampled.
    pub fn start(cgroup: Arc<Cgroup>) -> FaultCheck {
        let before = memory_faults(cgroup.path());
        FaultCheck { cgroup, before }
    }

    /// What the cgroup counted since [`FaultCheck::start`], for the summary.
    pub fn note(&self) -> String {
        let name = self.cgroup.name();
        match self.before.zip(memory_faults(self.cgroup.path())) {
            Some((before, after)) => {
                let d = after.saturating_sub(before);
                format!(
                    "cgroup {name}: its memory.stat counted {} minor and {} major faults over \
                     the profile, every process in it included (the samples count those seen \
                     inside)",
                    d.minor, d.major
                )
            }
            None => format!(
                "cgroup {name}: no memory.stat (the memory controller is not enabled for it): \
                 no cross-check of the fault counts"
            ),
        }
    }
}

/// Where a test may make a cgroup of its own below the cgroup2 mount; `None` (said)
/// unless root: making cgroups takes it (CI's tests run as root).
#[cfg(test)]
pub(crate) fn test_cgroup_path(test: &str) -> Option<PathBuf> {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: no cgroup made, nothing checked");
        return None;
    }
    let mount = cgroup2_mounts()
        .into_iter()
        .next()
        .expect("a cgroup2 mount");
    Some(mount.join(format!("pfprof-test-{test}-{}", std::process::id())))
}

/// This process's own cgroup: a real one any user may read.
#[cfg(test)]
pub(crate) fn own_cgroup_for_test() -> Cgroup {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = (own.lines())
        .find_map(|line| line.strip_prefix("0::"))
        .expect("a cgroup v2 line");
    let mount = cgroup2_mounts()
        .into_iter()
        .next()
        .expect("a cgroup2 mount");
    Cgroup::open(&mount.join(path.trim_start_matches('/'))).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_that_is_not_a_cgroup_is_refused_and_says_where_cgroup2_is() {
        let err = Cgroup::open(Path::new("/tmp")).unwrap_err();
        assert!(matches!(err, CgroupError::NotCgroup2 { .. }), "{err}");
        let err = Cgroup::open(Path::new("/nonexistent-pfprof")).unwrap_err();
        assert!(matches!(err, CgroupError::Open { .. }), "{err}");
    }

    #[test]
    fn a_process_is_held_by_its_cgroup_and_every_ancestor_and_by_no_sibling() {
        let text = "4:memory:/elsewhere\n0::/a/bc/d (deleted)\n";
        let path = unified_path(text).unwrap();
        assert_eq!(path, "/a/bc/d");
        for name in ["/", "/a", "/a/bc", "/a/bc/d"] {
            assert!(below(name, path), "{name}");
        }
        for name in ["/a/b", "/a/bc/d/e", "/b"] {
            assert!(!below(name, path), "{name}");
        }
        assert_eq!(unified_path("4:memory:/x\n"), None);
    }

    #[test]
    fn the_cgroup2_mount_at_its_root_is_chosen_not_one_of_a_cgroup_below() {
        let info = "30 24 0:26 /kubepods.slice/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
                    31 24 0:26 / /host/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_root_mount_in(info), Some("/host/cgroup".into()));
        assert_eq!(cgroup2_root_mount_in(info.lines().next().unwrap()), None);
        // mountinfo writes a space in a path as \040 (and a backslash as \134).
        let escaped = "31 24 0:26 / /host\\040cg\\134x rw - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_root_mount_in(escaped), Some("/host cg\\x".into()));
        assert_eq!(mountinfo_path("/a\\9b\\0"), PathBuf::from("/a\\9b\\0"));
        assert_eq!(
            cgroup2_root_mount_in("32 24 0:27 / /proc rw - proc proc rw\n"),
            None
        );
    }

    #[test]
    fn cgroup2_mounts_are_read_from_mountinfo() {
        // Every Linux with cgroup2 mounts it somewhere; the test needs only one.
        for mount in cgroup2_mounts() {
            let cgroup = Cgroup::open(&mount).unwrap();
            assert_eq!(cgroup.name(), "/");
            assert_eq!(cgroup.holds(std::process::id()), Some(true));
            assert_eq!(cgroup.holds(u32::MAX), None);
        }
    }

    #[test]
    fn the_files_held_open_list_who_is_inside_now_and_below_once_a_cgroup_is_made_there() {
        let Some(dir) = test_cgroup_path("listing") else {
            return;
        };
        fs::create_dir(&dir).unwrap();
        let cgroup = Cgroup::open(&dir).unwrap();
        assert!(
            cgroup.listing.is_some(),
            "cgroup.procs and cgroup.stat held open"
        );
        let sleep = || {
            std::process::Command::new("sleep")
                .arg("60")
                .spawn()
                .unwrap()
        };
        let (mut top, mut below) = (sleep(), sleep());
        fs::write(dir.join("cgroup.procs"), top.id().to_string()).unwrap();
        assert_eq!(cgroup.processes(), Some(vec![top.id()]));
        fs::create_dir(dir.join("child")).unwrap();
        fs::write(dir.join("child/cgroup.procs"), below.id().to_string()).unwrap();
        let mut both = cgroup.processes().unwrap();
        both.sort_unstable();
        let mut expected = vec![top.id(), below.id()];
        expected.sort_unstable();
        for child in [&mut top, &mut below] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        fs::remove_dir(dir.join("child")).unwrap();
        fs::remove_dir(&dir).unwrap();
        assert_eq!(both, expected);
        assert_eq!(cgroup.processes(), None, "a removed cgroup lists nothing");
        assert_eq!(
            descendants("nr_descendants 3\nnr_dying_descendants 1\n"),
            Some(3)
        );
        assert_eq!(descendants("nr_dying_descendants 1\n"), None);
    }

    #[test]
    fn a_cgroup_removed_and_made_again_at_its_path_is_not_the_one_held_open() {
        let Some(dir) = test_cgroup_path("again") else {
            return;
        };
        fs::create_dir(&dir).unwrap();
        fs::create_dir(dir.join("child")).unwrap();
        let cgroup = Cgroup::open(&dir).unwrap();
        assert_eq!(cgroup.processes(), Some(Vec::new()));
        fs::remove_dir(dir.join("child")).unwrap();
        fs::remove_dir(&dir).unwrap();
        fs::create_dir(&dir).unwrap();
        let made_again = cgroup.processes();
        fs::remove_dir(&dir).unwrap();
        assert_eq!(
            made_again, None,
            "the cgroup held open was read at its old path"
        );
    }
}
