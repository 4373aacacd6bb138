//! The module under fault injection: every allocation of its open, mmap, ioctls
//! (ATTRIBUTE's events included), registrations and of an exec it records fails once
//! in turn, and each fails cleanly. From the hostile review of kmod/ (docs/reliability.md, "A hostile local
//! user").

use std::fs;
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use shared_layout::device::Device;
use shared_layout::{abi, Mode};

use crate::device::{add, attribute, errno_of, raw_open, set_mode, Mapping};
use crate::harness::{Env, Skipped};
use crate::klog;
use crate::kmod::{self, Profiled};
use crate::users::{open_to_all, setuid_copy, NOBODY};

/// `hardening-child exec-fail-walk <setuid program>` (as nobody): a session
/// of its own counting its tree, in which a child execs the setuid program
/// with its `n`th allocation from then on failing, for n = 1, 2, ... until
/// the exec, the module's probe of it and the program's start all pass; says
/// "exec <n>", how many allocations failed in turn.
pub fn exec_fail_walk(setuid: &str) -> Result<()> {
    use std::ffi::CString;
    let dev = Device::open()?;
    dev.add(std::process::id(), true, false)?;
    let path = CString::new(setuid)?;
    let args = [
        path.clone(),
        CString::new("child")?,
        CString::new("fail-nth-left")?,
    ];
    let mut argv: Vec<*const libc::c_char> = args.iter().map(|a| a.as_ptr()).collect();
    argv.push(std::ptr::null());
    let fail_nth = CString::new("/proc/thread-self/fail-nth")?;
    for n in 1..20_000u32 {
        let value = CString::new(n.to_string())?;
        // SAFETY: fork(2) in this single-threaded process; the child only makes
        // async-signal-safe calls on data prepared before it.
        let pid = unsafe { libc::fork() };
        ensure!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            // SAFETY: open, write, execv and _exit with pointers to live C strings.
            unsafe {
                let fd = libc::open(fail_nth.as_ptr(), libc::O_WRONLY);
                let len = value.as_bytes().len();
                if fd < 0 || libc::write(fd, value.as_ptr().cast(), len) != len as isize {
                    libc::_exit(5);
                }
                libc::execv(path.as_ptr(), argv.as_ptr());
                libc::_exit(4);
            }
        }
        let mut status = 0;
        // SAFETY: waitpid(2) for the child just forked, into a local.
        let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
        ensure!(
            waited == pid,
            "waitpid: {}",
            std::io::Error::last_os_error()
        );
        ensure!(
            !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 5),
            "the child could not arm fail-nth"
        );
        if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0 {
            println!("exec {}", n - 1);
            return Ok(());
        }
    }
    bail!("an exec still failed after 20000 allocations")
}

/// `/proc/thread-self/fail-nth`, held open: the `n`th fault-injection point
/// this thread reaches from now on fails. Opened once, so that neither setting
/// it nor asking it allocates anything (an open would take a fault point).
struct FailNth(fs::File);

impl FailNth {
    fn open() -> Result<FailNth> {
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/proc/thread-self/fail-nth")
            .context("opening fail-nth")?;
        Ok(FailNth(file))
    }

    fn set(&self, n: u32) -> Result<()> {
        use std::os::unix::fs::FileExt;
        self.0
            .write_at(n.to_string().as_bytes(), 0)
            .context("writing fail-nth")?;
        Ok(())
    }

    /// Whether the failure set was injected (then the file reads 0).
    fn injected(&self) -> Result<bool> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 16];
        let n = self.0.read_at(&mut buf, 0).context("reading fail-nth")?;
        Ok(std::str::from_utf8(&buf[..n])?.trim() == "0")
    }
}

/// Runs `op` with its 1st, 2nd, ... fault-injection point failing, until a
/// run goes through without reaching the one set: every allocation it makes
/// fails once. `op` must succeed or fail cleanly each time. Returns how many
/// points it went through.
fn fail_each_allocation(
    fail: &FailNth,
    what: &str,
    mut op: impl FnMut() -> Result<()>,
) -> Result<u32> {
    for n in 1..10_000 {
        fail.set(n)?;
        let result = op();
        let injected = fail.injected()?;
        fail.set(0)?;
        result.with_context(|| format!("{what} with its allocation {n} failing"))?;
        if !injected {
            return Ok(n - 1);
        }
    }
    bail!("{what}: still failing after 10000 allocations")
}

/// Debugfs knobs of a fault-injection capability.
fn fault_knob(capability: &str, knob: &str, value: &str) -> Result<()> {
    let path = format!("/sys/kernel/debug/{capability}/{knob}");
    fs::write(&path, value).with_context(|| format!("writing {path}"))
}

/// Either outcome is clean; anything but ENOMEM (or the op's own refusals) is not.
fn clean(r: std::result::Result<(), i32>, allowed: &[i32]) -> Result<()> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e == libc::ENOMEM || allowed.contains(&e) => Ok(()),
        Err(e) => bail!("errno {e}"),
    }
}

pub fn every_allocation_of_the_module_fails_cleanly_under_fault_injection(env: &Env) -> Result<()> {
    if !std::path::Path::new("/proc/thread-self/fail-nth").exists() {
        return Err(Skipped("this kernel has no fault injection (fail-nth)".into()).into());
    }
    // Sleeping allocations too (the module's are), pages of every order.
    for capability in ["failslab", "fail_page_alloc"] {
        fault_knob(capability, "ignore-gfp-wait", "N")?;
        fault_knob(capability, "verbose", "0")?;
    }
    fault_knob("fail_page_alloc", "min-order", "0")?;
    let mark = klog::Mark::now()?;
    let module = kmod::insmod(env, &["period_ms=10", "buffer_pages=4"])?;
    // A process with a child: ADD with a tree walks the process list.
    let mut parent = Command::new("/bin/busybox")
        .args(["sh", "-c", "sleep 30 & wait"])
        .spawn()?;
    let pid = parent.id();
    let registered = Profiled::spawn(&["faults", "16", "0", "stay"])?;
    kmod::register(registered.pid)?;
    let fail = FailNth::open()?;
    let mut points = Vec::new();

    points.push((
        "open",
        fail_each_allocation(&fail, "open", || {
            clean(raw_open().map(drop).map_err(|e| errno_of(&e)), &[])
        })?,
    ));
    let file = raw_open()?;
    points.push((
        "mmap",
        fail_each_allocation(&fail, "mmap", || {
            clean(Mapping::new(&file).map(drop).map_err(|e| errno_of(&e)), &[])
        })?,
    ));
    points.push((
        "ADD with a tree",
        fail_each_allocation(&fail, "ADD", || {
            clean(
                add(&file, pid as i32, abi::TARGET_INHERIT, 0),
                &[libc::EEXIST],
            )
        })?,
    ));
    // A session attributing faults: its region, each CPU's buffer, and, once its ring
    // starts, the events on every thread of the tree's process.
    points.push((
        "ATTRIBUTE with a process, then the start",
        fail_each_allocation(&fail, "ATTRIBUTE", || {
            let session = match raw_open() {
                Ok(session) => session,
                Err(e) => return clean(Err(errno_of(&e)), &[]),
            };
            clean(add(&session, pid as i32, abi::TARGET_INHERIT, 0), &[])?;
            clean(attribute(&session, 61), &[])?;
            clean(set_mode(&session, Mode::Relaxed.as_raw()), &[])
        })?,
    ));
    points.push((
        "FOLLOW",
        fail_each_allocation(&fail, "FOLLOW", || {
            clean(
                crate::device::follow(
                    &file,
                    abi::Follow {
                        scope: abi::FOLLOW_ALL,
                        ..abi::Follow::default()
                    },
                ),
                &[],
            )
        })?,
    ));
    points.push((
        "SET_MODE",
        fail_each_allocation(&fail, "SET_MODE", || {
            clean(set_mode(&file, Mode::Strict.as_raw()), &[])
        })?,
    ));
    let other = Profiled::spawn(&["faults", "16", "0", "stay"])?;
    points.push((
        "R",
        fail_each_allocation(&fail, "R", || {
            let r = kmod::write_status(format!("R {}\n", other.pid).as_bytes());
            clean(r, &[libc::EEXIST])
        })?,
    ));
    points.push((
        "U",
        fail_each_allocation(&fail, "U", || {
            let r = kmod::write_status(format!("U {}\n", other.pid).as_bytes());
            clean(r, &[libc::ENOENT])
        })?,
    ));
    // An exec that hides a process of a tree from its session (nobody's): the
    // exec, the module's record of it, the program's start.
    open_to_all()?;
    let setuid = setuid_copy()?;
    let mut walker =
        Profiled::spawn_mode("hardening-child", &["exec-fail-walk", setuid], Some(NOBODY))?;
    let said = walker.read_line()?;
    walker.reap()?;
    let execs: u32 = said
        .strip_prefix("exec ")
        .with_context(|| format!("the exec walk said {said:?}"))?
        .parse()?;
    points.push(("an exec hidden from its session", execs));
    // The session still works: it samples its tree.
    let map = Mapping::new(&file)?;
    drop((map, file));
    parent.kill()?;
    parent.wait()?;
    drop((registered, other));
    crate::harness::figure(&format!(
        "fault injection: every allocation failed once in turn: {}",
        points
            .iter()
            .map(|(what, n)| format!("{what} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    klog::ensure_module_slab_objects(0, "registrations or sessions after the walk")?;
    module.unload()?;
    mark.ensure_clean()
}
