//! /dev/pfprof driven by hand: raw sessions, their ioctls and mapped area for
//! monitors that misbehave on purpose, a strict consumer read to the session's end,
//! and the sampler kthreads sessions start.

use std::fs::{File, OpenOptions};
use std::mem::offset_of;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use memmap2::{MmapOptions, MmapRaw};
use shared_layout::abi::{self, AreaHeader, Info};
use shared_layout::device::DeviceWaiter;
use shared_layout::strict::{StrictConsumer, Take};
use shared_layout::Sample;

pub fn raw_open() -> Result<File> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(abi::DEVICE_PATH)
        .context("opening /dev/pfprof")
}

/// A session opened by hand that takes in every registration, each process on its own.
pub fn raw_session() -> Result<File> {
    let file = raw_open()?;
    follow(
        &file,
        abi::Follow {
            scope: abi::FOLLOW_ALL,
            ..abi::Follow::default()
        },
    )
    .map_err(|e| anyhow::anyhow!("FOLLOW all: errno {e}"))?;
    Ok(file)
}

/// One ioctl; Err(errno) on failure.
pub fn ioctl<T>(file: &File, request: u32, arg: *mut T) -> std::result::Result<(), i32> {
    // SAFETY: the tests pass pointers to live values of the size the request
    // encodes; the module must cope with the rest.
    let ret = unsafe { libc::ioctl(file.as_raw_fd(), request as _, arg) };
    if ret < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1));
    }
    Ok(())
}

pub fn set_mode(file: &File, mode: u32) -> std::result::Result<(), i32> {
    let mut mode = mode;
    ioctl(file, abi::IOC_SET_MODE, &mut mode)
}

pub fn info(file: &File, input: Info) -> (std::result::Result<(), i32>, Info) {
    let mut info = input;
    (ioctl(file, abi::IOC_INFO, &mut info), info)
}

pub fn handshake() -> Info {
    Info {
        abi_version: abi::ABI_VERSION,
        ..Info::default()
    }
}

/// The whole area mapped, accessed word by word like a (hostile) consumer.
pub struct Mapping {
    map: MmapRaw,
}

impl Mapping {
    pub fn new(file: &File) -> Result<Mapping> {
        let (ret, info) = info(file, handshake());
        ret.map_err(|e| anyhow::anyhow!("PFPROF_IOC_INFO: errno {e}"))?;
        let map = MmapOptions::new()
            .len(info.area_size as usize)
            .map_raw(file)
            .context("mapping /dev/pfprof")?;
        Ok(Mapping { map })
    }

    pub fn word32(&self, offset: usize) -> &AtomicU32 {
        assert!(offset.is_multiple_of(4) && offset + 4 <= self.map.len());
        // SAFETY: in bounds and aligned (checked above); the mapping lives as
        // long as `self`, and the module only touches it atomically too.
        unsafe { AtomicU32::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    pub fn word64(&self, offset: usize) -> &AtomicU64 {
        assert!(offset.is_multiple_of(8) && offset + 8 <= self.map.len());
        // SAFETY: as in word32.
        unsafe { AtomicU64::from_ptr(self.map.as_mut_ptr().add(offset).cast()) }
    }

    /// Takes the shared lock as the consumer (the module holds it briefly).
    pub fn lock_as_consumer(&self) -> Result<()> {
        let lock = self.word32(offset_of!(AreaHeader, lock));
        let deadline = Instant::now() + Duration::from_secs(5);
        // The acquire pairs with the module's store-release that frees the lock
        // (kmod/ring.c pfprof_lock_release).
        while lock
            .compare_exchange(
                abi::LOCK_FREE,
                abi::LOCK_CONSUMER,
                Ordering::Acquire,
                Ordering::Relaxed,
            )
            .is_err()
        {
            ensure!(
                Instant::now() < deadline,
                "the producer never released the lock"
            );
            std::hint::spin_loop();
        }
        Ok(())
    }

    /// Releases the lock [`Mapping::lock_as_consumer`] took.
    pub fn unlock_as_consumer(&self) {
        self.word32(offset_of!(AreaHeader, lock))
            .store(abi::LOCK_FREE, Ordering::Release);
    }

    pub fn deferred(&self) -> u64 {
        // Published with WRITE_ONCE (kmod/ring.c pfprof_defer): nothing to pair with.
        self.word64(offset_of!(AreaHeader, deferred))
            .load(Ordering::Relaxed)
    }

    pub fn write_seq(&self) -> u64 {
        self.word64(offset_of!(AreaHeader, write_seq))
            .load(Ordering::Acquire)
    }

    pub fn canceled(&self) -> bool {
        self.word32(offset_of!(AreaHeader, canceled))
            .load(Ordering::Acquire)
            != 0
    }

    /// The minor and major faults in slot `index`, as it holds them now.
    pub fn slot_faults(&self, index: u64) -> (u64, u64) {
        let slot = abi::slot_offset(index) as usize;
        let word = |offset| self.word64(slot + offset).load(Ordering::Relaxed);
        (
            word(offset_of!(abi::Sample, minor)),
            word(offset_of!(abi::Sample, major)),
        )
    }

    /// Bytes mapped: the whole area.
    pub fn size(&self) -> usize {
        self.map.len()
    }
}

pub fn add(file: &File, pid: i32, flags: u32, reserved: u64) -> std::result::Result<(), i32> {
    let mut arg = abi::AddProcess {
        pid,
        flags,
        reserved,
    };
    ioctl(file, abi::IOC_ADD, &mut arg)
}

/// PFPROF_IOC_ATTRIBUTE: record where the session's processes fault.
pub fn attribute(file: &File, minor_sampling: u32) -> std::result::Result<(), i32> {
    let mut arg = abi::Attribute {
        minor_sampling,
        ..abi::Attribute::default()
    };
    ioctl(file, abi::IOC_ATTRIBUTE, &mut arg)
}

pub fn follow(file: &File, arg: abi::Follow) -> std::result::Result<(), i32> {
    let mut arg = arg;
    ioctl(file, abi::IOC_FOLLOW, &mut arg)
}

/// Takes every sample until the session ends (the last process left).
pub fn take_until_ended(
    consumer: &mut StrictConsumer<DeviceWaiter>,
    out: &mut Vec<Sample>,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        ensure!(Instant::now() < deadline, "the session never ended");
        if consumer.take(out, Some(Duration::from_secs(1)))? == Take::Ended {
            return Ok(());
        }
    }
}

/// The sampler kthread's pid.
/// The sampler kthreads of every open session ("pfprof/<opener's pid>").
pub(crate) fn samplers() -> Result<Vec<u32>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if std::fs::read_to_string(entry.path().join("comm"))
            .is_ok_and(|c| c.starts_with("pfprof/"))
        {
            found.push(pid);
        }
    }
    Ok(found)
}

/// The sampler of the one session open.
pub fn sampler_pid() -> Result<u32> {
    match samplers()?.as_slice() {
        [one] => Ok(*one),
        many => bail!("{} session samplers, expected one: {many:?}", many.len()),
    }
}

/// Opens a session with `open` and finds the sampler kthread it started.
pub fn opened_with_sampler<T>(open: impl FnOnce() -> Result<T>) -> Result<(T, u32)> {
    let before = samplers()?;
    let session = open()?;
    let new: Vec<u32> = samplers()?
        .into_iter()
        .filter(|pid| !before.contains(pid))
        .collect();
    match new.as_slice() {
        [one] => Ok((session, *one)),
        other => bail!(
            "opening a session started {} samplers: {other:?}",
            other.len()
        ),
    }
}

/// How often it has gone to sleep: once per period while it samples.
pub fn wakeups(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .context("no voluntary_ctxt_switches")?;
    Ok(line.trim().parse()?)
}

/// The errno of the I/O error behind a failure (-1 without one).
pub fn errno_of(e: &anyhow::Error) -> i32 {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::raw_os_error)
        .unwrap_or(-1)
}
