//! The kernel side: `/dev/pfprof`, served by pfprof.ko.
//!
//! Every open is a session of its own (pfprof.h, "Sessions"). [`Device::open`] does
//! the `PFPROF_IOC_INFO` handshake; [`Device::add`] and [`Device::follow`] say which
//! processes the session counts and [`Ender`] ends it; [`Device::start`]
//! selects a mode (the module reinitializes the control page) and maps the area, and [`DeviceWaiter`] sleeps and wakes
//! through the module's ioctls instead of futexes: the producer is the
//! module's sampler, which sleeps in the kernel.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use memmap2::MmapOptions;

use crate::abi::{self, Info};
use crate::area::{Area, LayoutError, SemKind};
use crate::faults::FaultsRegion;
use crate::mode::Mode;
use crate::wait::{WaitError, Waiter};

/// Why the device cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{} does not exist: the pfprof module is not loaded", path.display())]
    NotLoaded { path: PathBuf },
    #[error("permission denied opening {}: install the udev rule /usr/share/pfprof/udev/99-pfprof.rules (kmod/99-pfprof.rules in the source) or run as root", path.display())]
    PermissionDenied { path: PathBuf },
    #[error("the module speaks ABI version {module}, this monitor speaks {ours}: {}", rebuild_advice(*ours, *module))]
    AbiMismatch { ours: u32, module: u32 },
    #[error("too many sessions open on {}: close another monitor of this user, or raise the module's max_sessions", path.display())]
    TooManySessions { path: PathBuf },
    #[error("process {pid} does not exist")]
    NoSuchProcess { pid: u32 },
    #[error("not allowed to profile process {pid}: it belongs to another user (profile it as that user or as root)")]
    NotAllowed { pid: u32 },
    #[error("process {pid} is profiled by this session already")]
    AlreadyCounted { pid: u32 },
    #[error("process {pid} has more than {max} ancestors (parent, grandparent...): the pfprof module profiles no process that deep; profile one of its ancestors with its descendants, or use --backend procfs", max = abi::DEPTH_MAX)]
    TooDeep { pid: u32 },
    #[error("the session counts {max} processes already", max = abi::MEMBERS_MAX)]
    Full,
    #[error("the session has ended")]
    Ended,
    /// PFPROF_IOC_ATTRIBUTE's EPERM: the module's `attribution` parameter does not let
    /// this session's opener attribute faults.
    #[error("the pfprof module does not let this session's opener attribute faults (its attribution parameter)")]
    AttributionRefused,
    #[error("not a directory of a cgroup2 file system")]
    NotACgroup,
    #[error("this pfprof module or kernel takes no cgroups (rebuild the module from this source, or use --backend procfs)")]
    NoCgroups,
    #[error("the module's answer is inconsistent: {0}")]
    BadInfo(&'static str),
    #[error("the area the module mapped is not usable: {0}")]
    Layout(#[from] LayoutError),
    #[error("{op} on {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// An open `/dev/pfprof`: a session of its own. Closing it (dropping it, its waiters
/// and every [`Area`] it mapped) ends the session.
pub struct Device {
    file: Arc<File>,
    path: PathBuf,
    info: Info,
}

/// The module's ioctls. The request numbers are abi.rs's, which tests/layout.rs checks
/// against pfprof.h: the `_bad` forms take them as they are instead of encoding them a
/// second time.
mod ioctls {
    use crate::abi::{self, Info};

    nix::ioctl_readwrite_bad!(ioc_info, abi::IOC_INFO, Info);
    nix::ioctl_write_ptr_bad!(ioc_set_mode, abi::IOC_SET_MODE, u32);
    nix::ioctl_write_ptr_bad!(ioc_wait_full, abi::IOC_WAIT_FULL, u32);
    nix::ioctl_none_bad!(ioc_wake_producer, abi::IOC_WAKE_PRODUCER);
    nix::ioctl_write_ptr_bad!(ioc_add, abi::IOC_ADD, abi::AddProcess);
    nix::ioctl_write_ptr_bad!(ioc_follow, abi::IOC_FOLLOW, abi::Follow);
    nix::ioctl_none_bad!(ioc_end, abi::IOC_END);
    nix::ioctl_write_ptr_bad!(ioc_add_cgroup, abi::IOC_ADD_CGROUP, abi::AddCgroup);
    nix::ioctl_write_ptr_bad!(ioc_attribute, abi::IOC_ATTRIBUTE, abi::Attribute);
}
use ioctls::{
    ioc_add, ioc_add_cgroup, ioc_attribute, ioc_end, ioc_follow, ioc_info, ioc_set_mode,
    ioc_wait_full, ioc_wake_producer,
};

/// Which `/proc/pfprof/status` registrations a session takes in ([`Device::follow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Every registration by the opener's user of a process the opener may read.
    All,
    /// As `All`, by every user: their registrations join, and never end the session.
    AllUsers,
    /// Registrations by the opener's user of this process and its descendants.
    Descendants(u32),
}

/// The `io::Error` of a failed ioctl.
fn ioctl_result(ret: nix::Result<libc::c_int>) -> io::Result<()> {
    ret.map(drop).map_err(io::Error::from)
}

impl Device {
    /// Opens [`abi::DEVICE_PATH`].
    pub fn open() -> Result<Device, DeviceError> {
        Device::open_path(Path::new(abi::DEVICE_PATH))
    }

    /// Opens the device at `path` and checks that the module speaks our ABI.
    pub fn open_path(path: &Path) -> Result<Device, DeviceError> {
        let path = path.to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|e| open_error(path.clone(), e))?;

        let mut info = Info {
            abi_version: abi::ABI_VERSION,
            ..Info::default()
        };
        // SAFETY: IOC_INFO is _IOWR(.., struct pfprof_info), which Info mirrors; `info`
        // is a live local.
        ioctl_result(unsafe { ioc_info(file.as_raw_fd(), &mut info) })
            .map_err(|e| info_error(path.clone(), &info, e))?;
        if info.sample_size as usize != size_of::<abi::Sample>() {
            return Err(DeviceError::BadInfo("sample_size differs from ours"));
        }
        if info.area_size <= abi::DATA_OFFSET || info.area_size % abi::PAGE_SIZE != 0 {
            return Err(DeviceError::BadInfo(
                "area_size is not whole pages beyond the control page",
            ));
        }
        Ok(Device {
            file: Arc::new(file),
            path,
            info,
        })
    }

    /// What the module answered in the handshake.
    pub fn info(&self) -> Info {
        self.info
    }

    /// Process `pid` joins the session, counted from now, or since it started with
    /// `whole_life` (a command held before exec); with `inherit`, with its descendants.
    pub fn add(&self, pid: u32, inherit: bool, whole_life: bool) -> Result<(), DeviceError> {
        let mut flags = inherit_flags(inherit);
        if whole_life {
            flags |= abi::TARGET_WHOLE_LIFE;
        }
        let arg = abi::AddProcess {
            pid: pid_arg(pid)?,
            flags,
            reserved: 0,
        };
        // SAFETY: IOC_ADD is _IOW(.., struct pfprof_target), which AddProcess mirrors;
        // `arg` is a live local.
        ioctl_result(unsafe { ioc_add(self.file.as_raw_fd(), &arg) })
            .map_err(|e| self.target_error("PFPROF_IOC_ADD", pid, e))
    }

    /// From now on, the registrations `follow` names join the session (with their
    /// descendants if `inherit`), those made already at once.
    pub fn follow(&self, follow: Follow, inherit: bool) -> Result<(), DeviceError> {
        let (scope, users, pid) = match follow {
            Follow::All => (abi::FOLLOW_ALL, 0, 0),
            Follow::AllUsers => (abi::FOLLOW_ALL, abi::FOLLOW_OTHER_USERS, 0),
            Follow::Descendants(pid) => (abi::FOLLOW_DESCENDANTS, 0, pid),
        };
        let arg = abi::Follow {
            scope,
            flags: inherit_flags(inherit) | users,
            pid: pid_arg(pid)?,
            reserved: 0,
        };
        // SAFETY: IOC_FOLLOW is _IOW(.., struct pfprof_follow), which Follow mirrors;
        // `arg` is a live local.
        ioctl_result(unsafe { ioc_follow(self.file.as_raw_fd(), &arg) })
            .map_err(|e| self.target_error("PFPROF_IOC_FOLLOW", pid, e))
    }

    /// The processes of the cgroup2 directory `dir` (and of its descendant cgroups) are
    /// the session's, each counted while it is inside (pfprof.h, PFPROF_IOC_ADD_CGROUP).
    pub fn add_cgroup(&self, dir: BorrowedFd<'_>) -> Result<(), DeviceError> {
        let arg = abi::AddCgroup {
            fd: dir.as_raw_fd(),
            flags: 0,
            reserved: 0,
        };
        // SAFETY: IOC_ADD_CGROUP is _IOW(.., struct pfprof_cgroup_target), which
        // AddCgroup mirrors; `arg` is a live local.
        ioctl_result(unsafe { ioc_add_cgroup(self.file.as_raw_fd(), &arg) }).map_err(|e| {
            match e.raw_os_error() {
                Some(libc::EBADF | libc::ENOTDIR) => DeviceError::NotACgroup,
                Some(libc::ENOTTY | libc::EOPNOTSUPP) => DeviceError::NoCgroups,
                Some(libc::ESHUTDOWN) => DeviceError::Ended,
                _ => self.io("PFPROF_IOC_ADD_CGROUP", e),
            }
        })
    }

    /// What ends the session (`PFPROF_IOC_END`), from any thread: its processes leave
    /// after their last sample, and the module then cancels the ring.
    pub fn ender(&self) -> Ender {
        Ender {
            file: Arc::clone(&self.file),
            path: self.path.clone(),
        }
    }

    fn target_error(&self, op: &'static str, pid: u32, e: io::Error) -> DeviceError {
        target_error(pid, e).unwrap_or_else(|e| self.io(op, e))
    }

    /// Starts the ring in `mode` and maps the area. What the session's processes did
    /// before is reported in its first sample.
    pub fn start(&self, mode: Mode) -> Result<Arc<Area>, DeviceError> {
        let raw = mode.as_raw();
        // SAFETY: IOC_SET_MODE is _IOW(.., __u32); `raw` is a live local.
        ioctl_result(unsafe { ioc_set_mode(self.file.as_raw_fd(), &raw) })
            .map_err(|e| self.io("PFPROF_IOC_SET_MODE", e))?;
        let len = usize::try_from(self.info.area_size)
            .map_err(|_| DeviceError::BadInfo("area_size does not fit in memory"))?;
        let map = MmapOptions::new()
            .len(len)
            .map_raw(&*self.file)
            .map_err(|e| self.io("mmap", e))?;
        let area = Area::attach(map)?;
        if area.mode() != mode {
            return Err(DeviceError::BadInfo(
                "the area's mode is not the one the session started in",
            ));
        }
        Ok(Arc::new(area))
    }

    /// Asks the module to record where the session's processes fault, one minor fault in
    /// `minor_sampling` (every major one), and maps the faults region it writes them to.
    pub fn attribute(&self, minor_sampling: u32) -> Result<FaultsRegion, DeviceError> {
        let attribution = abi::Attribute {
            minor_sampling,
            flags: 0,
            reserved: 0,
        };
        // SAFETY: IOC_ATTRIBUTE is _IOW(.., struct pfprof_attribution), which Attribute
        // mirrors; `attribution` is a live local.
        ioctl_result(unsafe { ioc_attribute(self.file.as_raw_fd(), &attribution) }).map_err(
            |e| match e.raw_os_error() {
                Some(libc::EPERM) => DeviceError::AttributionRefused,
                _ => self.io("PFPROF_IOC_ATTRIBUTE", e),
            },
        )?;
        let len = usize::try_from(self.info.faults_size)
            .map_err(|_| DeviceError::BadInfo("faults_size does not fit in memory"))?;
        let map = MmapOptions::new()
            .offset(self.info.faults_offset)
            .len(len)
            .map_raw(&*self.file)
            .map_err(|e| self.io("mmap of the faults region", e))?;
        Ok(FaultsRegion::attach(map)?)
    }

    /// The waiter a strict consumer of this device sleeps and wakes with.
    pub fn waiter(&self) -> DeviceWaiter {
        DeviceWaiter {
            file: Arc::clone(&self.file),
        }
    }

    fn io(&self, op: &'static str, source: io::Error) -> DeviceError {
        DeviceError::Io {
            op,
            path: self.path.clone(),
            source,
        }
    }
}

/// Ends a [`Device`]'s session from wherever it is held.
#[derive(Clone)]
pub struct Ender {
    file: Arc<File>,
    path: PathBuf,
}

impl Ender {
    /// Ends the session.
    pub fn end(&self) -> Result<(), DeviceError> {
        // SAFETY: IOC_END is _IO: no argument.
        ioctl_result(unsafe { ioc_end(self.file.as_raw_fd()) }).map_err(|source| DeviceError::Io {
            op: "PFPROF_IOC_END",
            path: self.path.clone(),
            source,
        })
    }
}

/// Why the device could not be opened: the module's refusals (EACCES, EMFILE) and its
/// absence get errors of their own.
fn open_error(path: PathBuf, e: io::Error) -> DeviceError {
    match e.raw_os_error() {
        Some(libc::ENOENT | libc::ENXIO | libc::ENODEV) => DeviceError::NotLoaded { path },
        Some(libc::EACCES | libc::EPERM) => DeviceError::PermissionDenied { path },
        Some(libc::EMFILE) => DeviceError::TooManySessions { path },
        _ => DeviceError::Io {
            op: "open",
            path,
            source: e,
        },
    }
}

/// Why the handshake failed: EPROTO is the module's other ABI version, which it wrote
/// into `answer`.
fn info_error(path: PathBuf, answer: &Info, e: io::Error) -> DeviceError {
    match e.raw_os_error() {
        Some(libc::EPROTO) => DeviceError::AbiMismatch {
            ours: abi::ABI_VERSION,
            module: answer.abi_version,
        },
        _ => DeviceError::Io {
            op: "PFPROF_IOC_INFO",
            path,
            source: e,
        },
    }
}

/// The module's refusal of process `pid` (ADD, FOLLOW), or `e` back when it is none.
fn target_error(pid: u32, e: io::Error) -> Result<DeviceError, io::Error> {
    Ok(match e.raw_os_error() {
        Some(libc::ESRCH) => DeviceError::NoSuchProcess { pid },
        Some(libc::EPERM | libc::EACCES) => DeviceError::NotAllowed { pid },
        Some(libc::EEXIST) => DeviceError::AlreadyCounted { pid },
        Some(libc::ELOOP) => DeviceError::TooDeep { pid },
        Some(libc::ENOSPC) => DeviceError::Full,
        Some(libc::ESHUTDOWN) => DeviceError::Ended,
        _ => return Err(e),
    })
}

/// A pid as the ABI's `__s32`: pids are below 2^22 on Linux.
fn pid_arg(pid: u32) -> Result<i32, DeviceError> {
    i32::try_from(pid).map_err(|_| DeviceError::NoSuchProcess { pid })
}

fn inherit_flags(inherit: bool) -> u32 {
    if inherit {
        abi::TARGET_INHERIT
    } else {
        0
    }
}

/// Sleeps in `PFPROF_IOC_WAIT_FULL` and wakes the module's sampler with
/// `PFPROF_IOC_WAKE_PRODUCER`: only the consumer's side of the protocol
/// runs in user space.
#[derive(Clone)]
pub struct DeviceWaiter {
    file: Arc<File>,
}

/// The ioctl's timeout: whole milliseconds, rounded up, 0 for none.
fn timeout_ms(timeout: Option<Duration>) -> u32 {
    match timeout {
        None => 0,
        Some(t) => {
            let ms = t.as_nanos().div_ceil(1_000_000).max(1);
            u32::try_from(ms).unwrap_or(u32::MAX)
        }
    }
}

impl Waiter for DeviceWaiter {
    fn wait(&self, _area: &Area, sem: SemKind, timeout: Option<Duration>) -> Result<(), WaitError> {
        if sem == SemKind::Empty {
            return Err(WaitError::Io(io::Error::new(
                io::ErrorKind::Unsupported,
                "the module is the producer: user space never waits for a free slot",
            )));
        }
        let ms = timeout_ms(timeout);
        // SAFETY: IOC_WAIT_FULL is _IOW(.., __u32); `ms` is a live local.
        match ioctl_result(unsafe { ioc_wait_full(self.file.as_raw_fd(), &ms) }) {
            Ok(()) => Ok(()),
            Err(e) => match e.raw_os_error() {
                // The caller re-checks the count and canceled either way.
                Some(libc::ETIMEDOUT) => Ok(()),
                Some(libc::EINTR) => Err(WaitError::Interrupted),
                _ => Err(WaitError::Io(e)),
            },
        }
    }

    fn wake(&self, _area: &Area, sem: SemKind) -> Result<(), WaitError> {
        match sem {
            // SAFETY: IOC_WAKE_PRODUCER is _IO: no argument.
            SemKind::Empty => ioctl_result(unsafe { ioc_wake_producer(self.file.as_raw_fd()) })
                .map_err(WaitError::Io),
            // Only the consumer sleeps on full, and the module wakes it on
            // every up(full) whatever full.waiters says.
            SemKind::Full => Ok(()),
        }
    }
}

/// Which side to rebuild when the handshake finds two ABI versions: the older one.
fn rebuild_advice(ours: u32, module: u32) -> &'static str {
    if module < ours {
        "the module is older; replace it with one built from the monitor's source"
    } else {
        "the monitor is older; rebuild it from the module's source (cargo build --release -p monitor)"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_device_reports_that_the_module_is_not_loaded() {
        let err = Device::open_path(Path::new("/nonexistent/pfprof")).err();
        assert!(
            matches!(err, Some(DeviceError::NotLoaded { .. })),
            "{err:?}"
        );
    }

    #[test]
    fn a_file_that_is_not_the_device_fails_the_handshake() {
        let err = Device::open_path(Path::new("/dev/null")).err();
        assert!(
            matches!(
                err,
                Some(DeviceError::Io {
                    op: "PFPROF_IOC_INFO",
                    ..
                })
            ),
            "{err:?}"
        );
    }

    #[test]
    fn each_refusal_of_the_module_says_what_to_do() {
        let path = Path::new(abi::DEVICE_PATH);
        let opening =
            |errno| open_error(path.to_path_buf(), io::Error::from_raw_os_error(errno)).to_string();
        for errno in [libc::EACCES, libc::EPERM] {
            assert_eq!(
                opening(errno),
                "permission denied opening /dev/pfprof: install the udev rule \
                 /usr/share/pfprof/udev/99-pfprof.rules (kmod/99-pfprof.rules in the source) \
                 or run as root"
            );
        }
        assert_eq!(
            opening(libc::EMFILE),
            "too many sessions open on /dev/pfprof: close another monitor of this user, or \
             raise the module's max_sessions"
        );
        assert_eq!(
            opening(libc::ENOENT),
            "/dev/pfprof does not exist: the pfprof module is not loaded"
        );
        assert!(matches!(
            open_error(path.to_path_buf(), io::Error::from_raw_os_error(libc::EIO)),
            DeviceError::Io { op: "open", .. }
        ));
        let adding = |errno| match target_error(42, io::Error::from_raw_os_error(errno)) {
            Ok(refusal) => refusal.to_string(),
            Err(e) => panic!("errno {errno} is no refusal: {e}"),
        };
        for errno in [libc::EPERM, libc::EACCES] {
            assert_eq!(
                adding(errno),
                "not allowed to profile process 42: it belongs to another user (profile it \
                 as that user or as root)"
            );
        }
        assert_eq!(adding(libc::ESRCH), "process 42 does not exist");
        assert_eq!(
            adding(libc::EEXIST),
            "process 42 is profiled by this session already"
        );
        assert_eq!(
            adding(libc::ELOOP),
            "process 42 has more than 256 ancestors (parent, grandparent...): the pfprof \
             module profiles no process that deep; profile one of its ancestors with its \
             descendants, or use --backend procfs"
        );
        assert_eq!(adding(libc::ESHUTDOWN), "the session has ended");
        assert!(adding(libc::ENOSPC).starts_with("the session counts "));
        assert!(target_error(42, io::Error::from_raw_os_error(libc::EIO)).is_err());
        // The module answers EPROTO with its own version in the handshake.
        let handshake = |module| {
            let answer = Info {
                abi_version: module,
                ..Info::default()
            };
            info_error(
                path.to_path_buf(),
                &answer,
                io::Error::from_raw_os_error(libc::EPROTO),
            )
            .to_string()
        };
        let ours = abi::ABI_VERSION;
        assert_eq!(
            handshake(ours - 1),
            format!(
                "the module speaks ABI version {}, this monitor speaks {ours}: the module is \
                 older; replace it with one built from the monitor's source",
                ours - 1
            )
        );
        assert_eq!(
            handshake(ours + 1),
            format!(
                "the module speaks ABI version {}, this monitor speaks {ours}: the monitor is \
                 older; rebuild it from the module's source (cargo build --release -p monitor)",
                ours + 1
            )
        );
    }

    #[test]
    fn wait_timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(timeout_ms(None), 0);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 1);
        assert_eq!(timeout_ms(Some(Duration::from_micros(1500))), 2);
        assert_eq!(timeout_ms(Some(Duration::from_secs(u64::MAX))), u32::MAX);
    }
}
