//! /dev/pfprof's file operations: what its mmap and ioctls refuse, what its poll
//! reports, and a ring that can be neither pinned nor inherited (from the hostile
//! review of kmod/, docs/reliability.md, "A hostile local user").

use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use shared_layout::abi::{self, Info};
use shared_layout::Mode;

use crate::device::{
    add, attribute, follow, handshake, info, ioctl, raw_open, raw_session, set_mode, Mapping,
};
use crate::harness::Env;
use crate::klog;
use crate::kmod::{self, Profiled};

/// A shared mmap(len, offset) of the device: Ok(()) (unmapped again) or the errno.
fn try_mmap(file: &File, len: u64, offset: u64) -> std::result::Result<(), i32> {
    try_mmap_flags(file, len, offset, libc::MAP_SHARED)
}

fn try_mmap_flags(file: &File, len: u64, offset: u64, flags: i32) -> std::result::Result<(), i32> {
    // SAFETY: a fresh mapping of the device, unmapped right away.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            file.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(-1));
    }
    // SAFETY: we just mapped exactly this.
    unsafe { libc::munmap(p, len as usize) };
    Ok(())
}

fn expect_errno(what: &str, got: std::result::Result<(), i32>, errno: i32) -> Result<()> {
    ensure!(
        got == Err(errno),
        "{what}: expected errno {errno}, got {got:?}"
    );
    Ok(())
}

pub fn device_refuses_bad_mmaps_and_bad_ioctls(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &[])?;
    {
        let file = raw_open()?;
        // Every opener has a session of its own.
        let second = raw_open().context("a second open")?;

        // What a session counts: processes that exist, named properly.
        let me = std::process::id() as i32;
        for (what, pid, flags, reserved, errno) in [
            ("pid 0", 0, 0, 0, libc::EINVAL),
            ("pid -1", -1, 0, 0, libc::EINVAL),
            ("unknown flags", me, 4, 0, libc::EINVAL),
            ("reserved set", me, 0, 1, libc::EINVAL),
            ("no such process", i32::MAX, 0, 0, libc::ESRCH),
        ] {
            expect_errno(
                &format!("ADD {what}"),
                add(&second, pid, flags, reserved),
                errno,
            )?;
        }
        ensure!(add(&second, me, 0, 0).is_ok(), "ADD of ourselves");
        expect_errno("ADD twice", add(&second, me, 0, 0), libc::EEXIST)?;
        for (what, bad) in [
            (
                "scope 3",
                abi::Follow {
                    scope: 3,
                    ..abi::Follow::default()
                },
            ),
            (
                "ALL with a pid",
                abi::Follow {
                    scope: abi::FOLLOW_ALL,
                    pid: me,
                    ..abi::Follow::default()
                },
            ),
            (
                "DESCENDANTS without a pid",
                abi::Follow {
                    scope: abi::FOLLOW_DESCENDANTS,
                    ..abi::Follow::default()
                },
            ),
            (
                "unknown flags",
                abi::Follow {
                    scope: abi::FOLLOW_ALL,
                    flags: 4,
                    ..abi::Follow::default()
                },
            ),
            (
                "reserved set",
                abi::Follow {
                    scope: abi::FOLLOW_ALL,
                    reserved: 1,
                    ..abi::Follow::default()
                },
            ),
        ] {
            expect_errno(
                &format!("FOLLOW {what}"),
                follow(&second, bad),
                libc::EINVAL,
            )?;
        }
        // Ended: nothing joins any more, and ending again is harmless.
        for _ in 0..2 {
            ensure!(
                ioctl(&second, abi::IOC_END, std::ptr::null_mut::<u8>()).is_ok(),
                "END"
            );
        }
        expect_errno("ADD after END", add(&second, me, 0, 0), libc::ESHUTDOWN)?;
        drop(second);

        // The handshake.
        let (ret, got) = info(&file, handshake());
        ensure!(ret.is_ok(), "INFO: {ret:?}");
        let size = abi::area_size(128);
        ensure!(got.area_size == size, "area_size {}", got.area_size);
        ensure!(
            got.slot_count == abi::slots_in(128),
            "slot_count {}",
            got.slot_count
        );
        ensure!(
            got.sample_size as usize == std::mem::size_of::<abi::Sample>()
                && got.period_ns == 50_000_000
                && got.faults_offset == size
                && got.faults_size == abi::area_size(256),
            "{got:?}"
        );
        let (ret, got) = info(
            &file,
            Info {
                abi_version: 99,
                ..Info::default()
            },
        );
        expect_errno("INFO with version 99", ret, libc::EPROTO)?;
        ensure!(
            got.abi_version == abi::ABI_VERSION,
            "EPROTO did not return the module's version"
        );
        for (what, bad) in [
            (
                "flags",
                Info {
                    flags: 1,
                    ..handshake()
                },
            ),
            (
                "reserved0",
                Info {
                    reserved0: 1,
                    ..handshake()
                },
            ),
            (
                "faults_offset",
                Info {
                    faults_offset: 1,
                    ..handshake()
                },
            ),
            (
                "faults_size",
                Info {
                    faults_size: 1,
                    ..handshake()
                },
            ),
            (
                "reserved",
                Info {
                    reserved: 1,
                    ..handshake()
                },
            ),
        ] {
            expect_errno(
                &format!("INFO with {what} set"),
                info(&file, bad).0,
                libc::EINVAL,
            )?;
        }

        // Mode selection and the strict-only ioctls.
        let mut ms = 20u32;
        expect_errno(
            "WAIT_FULL before a session",
            ioctl(&file, abi::IOC_WAIT_FULL, &mut ms),
            libc::EINVAL,
        )?;
        expect_errno(
            "WAKE_PRODUCER before a session",
            ioctl(&file, abi::IOC_WAKE_PRODUCER, std::ptr::null_mut::<u8>()),
            libc::EINVAL,
        )?;
        for bad in [abi::MODE_NONE, 3, u32::MAX] {
            expect_errno(
                &format!("SET_MODE {bad}"),
                set_mode(&file, bad),
                libc::EINVAL,
            )?;
        }
        set_mode(&file, abi::MODE_RELAXED).map_err(|e| anyhow::anyhow!("SET_MODE relaxed: {e}"))?;
        expect_errno(
            "WAIT_FULL in relaxed",
            ioctl(&file, abi::IOC_WAIT_FULL, &mut ms),
            libc::EINVAL,
        )?;
        set_mode(&file, abi::MODE_STRICT).map_err(|e| anyhow::anyhow!("SET_MODE strict: {e}"))?;
        expect_errno(
            "WAIT_FULL with nothing to wait for",
            ioctl(&file, abi::IOC_WAIT_FULL, &mut ms),
            libc::ETIMEDOUT,
        )?;
        ensure!(ioctl(&file, abi::IOC_WAKE_PRODUCER, std::ptr::null_mut::<u8>()).is_ok());
        for unknown in [
            abi::io(abi::IOC_MAGIC, 0x04),
            abi::io(0x42, 0x00),
            abi::IOC_INFO + 1,
        ] {
            expect_errno(
                &format!("ioctl {unknown:#x}"),
                ioctl(&file, unknown, std::ptr::null_mut::<u8>()),
                libc::ENOTTY,
            )?;
        }

        // Exactly two mapping shapes: the area, below; the faults region after it.
        let page = abi::PAGE_SIZE;
        expect_errno(
            "mmap at offset one page",
            try_mmap(&file, size - page, page),
            libc::EINVAL,
        )?;
        expect_errno(
            "mmap one page short",
            try_mmap(&file, size - page, 0),
            libc::EINVAL,
        )?;
        expect_errno(
            "mmap one page long",
            try_mmap(&file, size + page, 0),
            libc::EINVAL,
        )?;
        expect_errno(
            "private mmap",
            try_mmap_flags(&file, size, 0, libc::MAP_PRIVATE),
            libc::EINVAL,
        )?;
        ensure!(
            try_mmap(&file, size, 0).is_ok(),
            "the exact mapping was refused"
        );

        // The faults region: only once ATTRIBUTE made it, only whole, from its offset.
        let faults = abi::area_size(256);
        expect_errno(
            "mmap of the faults region before ATTRIBUTE",
            try_mmap(&file, faults, size),
            libc::EINVAL,
        )?;
        for (what, minor_sampling, flags, reserved) in [
            ("minor_sampling 0", 0, 0, 0),
            (
                "minor_sampling past the bound",
                abi::MINOR_SAMPLING_MAX + 1,
                0,
                0,
            ),
            ("flags", 61, 1, 0),
            ("reserved", 61, 0, 1),
        ] {
            let mut arg = abi::Attribute {
                minor_sampling,
                flags,
                reserved,
            };
            expect_errno(
                &format!("ATTRIBUTE with {what}"),
                ioctl(&file, abi::IOC_ATTRIBUTE, &mut arg),
                libc::EINVAL,
            )?;
        }
        attribute(&file, 61).map_err(|e| anyhow::anyhow!("ATTRIBUTE: {e}"))?;
        expect_errno("ATTRIBUTE again", attribute(&file, 61), libc::EBUSY)?;
        for (what, len, offset) in [
            ("one page short", faults - page, size),
            ("one page long", faults + page, size),
            ("a page past its offset", faults - page, size + page),
            ("a page before its offset", faults, size - page),
        ] {
            expect_errno(
                &format!("mmap of the faults region {what}"),
                try_mmap(&file, len, offset),
                libc::EINVAL,
            )?;
        }
        expect_errno(
            "private mmap of the faults region",
            try_mmap_flags(&file, faults, size, libc::MAP_PRIVATE),
            libc::EINVAL,
        )?;
        ensure!(
            try_mmap(&file, faults, size).is_ok(),
            "the faults region's exact mapping was refused"
        );
    }
    // Closed: a new opener gets a working device.
    let dev = kmod::follow_registrations().context("reopening after close")?;
    let area = dev.start(Mode::Strict)?;
    ensure!(area.slot_count() == abi::slots_in(128));
    drop((area, dev));
    module.unload()
}

/// poll(2) on the device: the revents it reports within `timeout_ms`.
fn poll(file: &File, timeout_ms: i32) -> Result<i16> {
    let mut fds = libc::pollfd {
        fd: file.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let ret = unsafe { libc::poll(&mut fds, 1, timeout_ms) };
    ensure!(ret >= 0, "poll: {}", std::io::Error::last_os_error());
    Ok(fds.revents)
}

pub fn poll_reports_ready_samples_and_the_end_of_the_session(env: &Env) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=10"])?;
    let file = raw_session()?;
    set_mode(&file, abi::MODE_RELAXED).map_err(|e| anyhow::anyhow!("SET_MODE: {e}"))?;
    let idle = poll(&file, 100)?;
    ensure!(idle == 0, "poll with nothing registered: {idle:#x}");

    let mut sleeper = Profiled::spawn(&["faults", "0", "0", "stay"])?;
    kmod::register(sleeper.pid)?;
    let ready = poll(&file, 5000)?;
    ensure!(
        ready == libc::POLLIN,
        "poll with samples written: {ready:#x}"
    );

    kmod::unregister(sleeper.pid)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while poll(&file, 1000)? & libc::POLLHUP == 0 {
        ensure!(
            Instant::now() < deadline,
            "no POLLHUP after the last process left"
        );
    }
    drop(file);
    sleeper.reap()?;
    module.unload()
}

pub fn the_ring_can_be_neither_pinned_nor_inherited_and_maps_read_only(env: &Env) -> Result<()> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &[])?;
    let file = raw_open()?;
    let map = Mapping::new(&file)?;
    let base = map.word64(0).as_ptr().cast::<libc::c_void>();

    // vmsplice() pins pages (get_user_pages()): refused.
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe(2) to fill.
    ensure!(unsafe { libc::pipe(fds.as_mut_ptr()) } == 0, "pipe");
    // SAFETY: pipe(2) just gave us both descriptors; each is owned once, here.
    let (rx, tx) = unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) };
    let iov = libc::iovec {
        iov_base: base,
        iov_len: abi::PAGE_SIZE as usize,
    };
    // SAFETY: the iovec covers a page of our live mapping.
    let spliced = unsafe { libc::vmsplice(tx.as_raw_fd(), &iov, 1, 0) };
    let splice_errno = std::io::Error::last_os_error().raw_os_error();
    drop((rx, tx));
    // MADV_DOFORK would let children inherit it: refused.
    // SAFETY: advice on our own live mapping.
    let dofork = unsafe { libc::madvise(base, map.size(), libc::MADV_DOFORK) };
    let dofork_errno = std::io::Error::last_os_error().raw_os_error();
    drop(map);
    // A read-only shared mapping of a read-only open is a shared mapping.
    let ro = fs::OpenOptions::new().read(true).open(abi::DEVICE_PATH)?;
    let size = abi::area_size(abi::BUFFER_PAGES_DEFAULT.into());
    // SAFETY: a fresh shared read-only mapping of the device, unmapped below.
    let ro_map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size as usize,
            libc::PROT_READ,
            libc::MAP_SHARED,
            ro.as_raw_fd(),
            0,
        )
    };
    let ro_errno = std::io::Error::last_os_error().raw_os_error();
    if ro_map != libc::MAP_FAILED {
        // SAFETY: we mapped exactly this range.
        unsafe { libc::munmap(ro_map, size as usize) };
    }
    drop((file, ro));
    crate::harness::figure(&format!(
        "ring: vmsplice {spliced} ({splice_errno:?}), MADV_DOFORK {dofork} ({dofork_errno:?}), \
         read-only shared mapping {}",
        if ro_map == libc::MAP_FAILED {
            format!("refused ({ro_errno:?})")
        } else {
            "mapped".into()
        }
    ));
    ensure!(
        spliced < 0 && splice_errno == Some(libc::EFAULT),
        "vmsplice of the ring: {spliced} ({splice_errno:?})"
    );
    ensure!(
        dofork < 0 && dofork_errno == Some(libc::EINVAL),
        "MADV_DOFORK on the ring: {dofork} ({dofork_errno:?})"
    );
    ensure!(
        ro_map != libc::MAP_FAILED,
        "a read-only shared mapping: {ro_errno:?}"
    );
    module.unload()?;
    mark.ensure_clean()
}
