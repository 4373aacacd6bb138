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
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use memmap2::MmapOptions;

use crate::abi::{self, Info};
use crate::wait::{SemKind, WaitError, Waiter};
use crate::{Area, LayoutError, Mode};

/// Why the device cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{} does not exist: load the module first (insmod pfprof.ko, or modprobe pfprof after a DKMS install)", path.display())]
    NotLoaded { path: PathBuf },
    #[error("permission denied opening {}: install the udev rule kmod/99-pfprof.rules or run as root", path.display())]
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
    #[error("the session counts {max} processes already", max = abi::MEMBERS_MAX)]
    Full,
    #[error("the session has ended")]
    Ended,
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
    nix::ioctl_write_ptr_bad!(ioc_add, abi::IOC_ADD, abi::Target);
    nix::ioctl_write_ptr_bad!(ioc_follow, abi::IOC_FOLLOW, abi::Follow);
    nix::ioctl_none_bad!(ioc_end, abi::IOC_END);
}
use ioctls::{
    ioc_add, ioc_end, ioc_follow, ioc_info, ioc_set_mode, ioc_wait_full, ioc_wake_producer,
};

/// Which `/proc/pfprof/status` registrations a session takes in ([`Device::follow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Follow {
    /// Every registration of a process the session's opener may read.
    All,
    /// Registrations of this process and its descendants.
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
        let file = match OpenOptions::new().read(true).write(true).open(&path) {
            Ok(f) => f,
            Err(e) => {
                return Err(match e.raw_os_error() {
                    Some(libc::ENOENT | libc::ENXIO | libc::ENODEV) => {
                        DeviceError::NotLoaded { path }
                    }
                    Some(libc::EACCES | libc::EPERM) => DeviceError::PermissionDenied { path },
                    Some(libc::EMFILE) => DeviceError::TooManySessions { path },
                    _ => DeviceError::Io {
                        op: "open",
                        path,
                        source: e,
                    },
                })
            }
        };

        let mut info = Info {
            abi_version: abi::ABI_VERSION,
            ..Info::default()
        };
        // SAFETY: IOC_INFO is _IOWR(.., struct pfprof_info), which Info mirrors; `info`
        // is a live local.
        match ioctl_result(unsafe { ioc_info(file.as_raw_fd(), &mut info) }) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EPROTO) => {
                return Err(DeviceError::AbiMismatch {
                    ours: abi::ABI_VERSION,
                    module: info.abi_version,
                })
            }
            Err(e) => {
                return Err(DeviceError::Io {
                    op: "PFPROF_IOC_INFO",
                    path,
                    source: e,
                })
            }
        }
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
        let target = abi::Target {
            pid: pid_arg(pid)?,
            flags,
            reserved: 0,
        };
        // SAFETY: IOC_ADD is _IOW(.., struct pfprof_target), which Target mirrors;
        // `target` is a live local.
        ioctl_result(unsafe { ioc_add(self.file.as_raw_fd(), &target) })
            .map_err(|e| self.target_error("PFPROF_IOC_ADD", pid, e))
    }

    /// From now on, the registrations `follow` names join the session (with their
    /// descendants if `inherit`), those made already at once.
    pub fn follow(&self, follow: Follow, inherit: bool) -> Result<(), DeviceError> {
        let (scope, pid) = match follow {
            Follow::All => (abi::FOLLOW_ALL, 0),
            Follow::Descendants(pid) => (abi::FOLLOW_DESCENDANTS, pid),
        };
        let arg = abi::Follow {
            scope,
            flags: inherit_flags(inherit),
            pid: pid_arg(pid)?,
            reserved: 0,
        };
        // SAFETY: IOC_FOLLOW is _IOW(.., struct pfprof_follow), which Follow mirrors;
        // `arg` is a live local.
        ioctl_result(unsafe { ioc_follow(self.file.as_raw_fd(), &arg) })
            .map_err(|e| self.target_error("PFPROF_IOC_FOLLOW", pid, e))
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
        match e.raw_os_error() {
            Some(libc::ESRCH) => DeviceError::NoSuchProcess { pid },
            Some(libc::EPERM | libc::EACCES) => DeviceError::NotAllowed { pid },
            Some(libc::EEXIST) => DeviceError::AlreadyCounted { pid },
            Some(libc::ENOSPC) => DeviceError::Full,
            Some(libc::ESHUTDOWN) => DeviceError::Ended,
            _ => self.io(op, e),
        }
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
        "the module is older; rebuild and reload it from this source \
         (make -C kmod && sudo rmmod pfprof && sudo insmod kmod/pfprof.ko, or dkms install)"
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
    fn wait_timeouts_round_up_to_whole_milliseconds() {
        assert_eq!(timeout_ms(None), 0);
        assert_eq!(timeout_ms(Some(Duration::ZERO)), 1);
        assert_eq!(timeout_ms(Some(Duration::from_micros(1500))), 2);
        assert_eq!(timeout_ms(Some(Duration::from_secs(u64::MAX))), u32::MAX);
    }
}
