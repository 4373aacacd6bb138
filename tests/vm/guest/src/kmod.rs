//! Loading the module, talking to /proc/pfprof/status, and the processes the
//! tests profile.

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi;
use shared_layout::device::{Device, Follow};

use crate::harness::Env;

/// The module, loaded; unloaded on drop if the test did not do it.
pub struct Module {
    loaded: bool,
}

fn busybox(args: &[&str]) -> Result<std::process::Output> {
    Command::new("/bin/busybox")
        .args(args)
        .output()
        .with_context(|| format!("running busybox {}", args.join(" ")))
}

/// `insmod pfprof.ko params...`: Ok(Err(stderr)) when insmod refused.
pub fn try_insmod(env: &Env, params: &[&str]) -> Result<std::result::Result<Module, String>> {
    let module = env.module.to_str().context("module path is not UTF-8")?;
    let mut args = vec!["insmod", module];
    args.extend_from_slice(params);
    let out = busybox(&args)?;
    if out.status.success() {
        crate::klog::record_module_range()?;
        Ok(Ok(Module { loaded: true }))
    } else {
        Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

pub fn insmod(env: &Env, params: &[&str]) -> Result<Module> {
    match try_insmod(env, params)? {
        Ok(m) => Ok(m),
        Err(e) => bail!("insmod {}: {e}", params.join(" ")),
    }
}

pub fn is_loaded() -> bool {
    Path::new("/sys/module/pfprof").exists()
}

/// `rmmod pfprof`: Ok(Err(stderr)) when rmmod refused.
pub fn try_rmmod() -> Result<std::result::Result<(), String>> {
    let out = busybox(&["rmmod", "pfprof"])?;
    if out.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(String::from_utf8_lossy(&out.stderr).trim().to_string()))
    }
}

impl Module {
    pub fn unload(mut self) -> Result<()> {
        self.loaded = false;
        match try_rmmod()? {
            Ok(()) => Ok(()),
            Err(e) => bail!("rmmod pfprof: {e}"),
        }
    }
}

impl Drop for Module {
    fn drop(&mut self) {
        if self.loaded {
            let _ = try_rmmod();
        }
    }
}

pub fn ensure_unloaded() -> Result<()> {
    if is_loaded() {
        if let Err(e) = try_rmmod()? {
            bail!("pfprof is still loaded and rmmod fails: {e}");
        }
    }
    Ok(())
}

/// One write of `bytes` to the status file: Ok(()) or the errno.
pub fn write_status(bytes: &[u8]) -> std::result::Result<(), i32> {
    let mut f = OpenOptions::new()
        .write(true)
        .open(abi::PROC_PATH)
        .map_err(|e| e.raw_os_error().unwrap_or(-1))?;
    match f.write(bytes) {
        Ok(n) if n == bytes.len() => Ok(()),
        Ok(_) => Err(-1),
        Err(e) => Err(e.raw_os_error().unwrap_or(-1)),
    }
}

/// A session that takes in every registration through /proc/pfprof/status, each process
/// counted on its own (a bare `monitor --no-inherit`).
pub fn follow_registrations() -> Result<Device> {
    let dev = Device::open()?;
    dev.follow(Follow::All, false)?;
    Ok(dev)
}

pub fn register(pid: u32) -> Result<()> {
    write_status(format!("R {pid}\n").as_bytes()).map_err(|e| anyhow::anyhow!("R {pid}: errno {e}"))
}

pub fn unregister(pid: u32) -> Result<()> {
    write_status(format!("U {pid}\n").as_bytes()).map_err(|e| anyhow::anyhow!("U {pid}: errno {e}"))
}

/// The registered pids as /proc/pfprof/status lists them.
pub fn registered() -> Result<Vec<u32>> {
    let text = std::fs::read_to_string(abi::PROC_PATH).context("reading the status file")?;
    text.lines()
        .map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            ensure!(fields.len() == 4, "status line {l:?} is not 4 fields");
            for f in &fields[1..] {
                f.parse::<u64>()
                    .with_context(|| format!("status line {l:?}"))?;
            }
            Ok(fields[0].parse()?)
        })
        .collect()
}

/// State and minflt of a process from /proc/<pid>/stat.
pub fn stat(pid: u32) -> Result<(char, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &text[text.rfind(')').context("no ) in stat")? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    let state = fields[0].chars().next().context("no state")?;
    Ok((state, fields[7].parse()?))
}

/// Minor and major faults of a process from /proc/<pid>/stat.
pub fn faults(pid: u32) -> Result<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &text[text.rfind(')').context("no ) in stat")? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Ok((fields[7].parse()?, fields[9].parse()?))
}

/// A copy of this binary playing a profiled process (see child.rs).
pub struct Profiled {
    pub pid: u32,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    reaped: bool,
}

pub struct Reaped {
    pub minflt: u64,
    pub majflt: u64,
    /// utime + stime, nanoseconds (each truncated to microseconds by wait4).
    pub cpu_ns: u64,
    pub status: i32,
}

/// CPU time (sum_exec_runtime, ns) of a process's main thread.
pub fn main_thread_cpu_ns(pid: u32) -> Result<u64> {
    Ok(main_thread_ran_and_waited_ns(pid)?.0)
}

/// A process's main thread's time on a CPU and waiting for one, ns
/// (`/proc/<pid>/schedstat`).
pub fn main_thread_ran_and_waited_ns(pid: u32) -> Result<(u64, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/schedstat"))?;
    let mut fields = text.split_whitespace().map(str::parse::<u64>);
    match (fields.next(), fields.next()) {
        (Some(ran), Some(waited)) => Ok((ran?, waited?)),
        _ => bail!("schedstat of {pid}: {text:?}"),
    }
}

impl Profiled {
    /// Starts `pfprof-guest child <args>` and waits until it is ready and
    /// asleep reading its stdin, so that it takes no fault until `go`.
    pub fn spawn(args: &[&str]) -> Result<Profiled> {
        let mut p = Profiled::spawn_raw(args, None)?;
        let line = p.read_line()?;
        ensure!(line == "ready", "child said {line:?} instead of ready");
        p.wait_asleep()?;
        Ok(p)
    }

    /// Starts `pfprof-guest child <args>`, as `uid` if given.
    pub fn spawn_raw(args: &[&str], uid: Option<u32>) -> Result<Profiled> {
        Profiled::spawn_mode("child", args, uid)
    }

    /// Starts `pfprof-guest <mode> <args>`, as `uid` if given.
    pub fn spawn_mode(mode: &str, args: &[&str], uid: Option<u32>) -> Result<Profiled> {
        let mut cmd = Command::new(std::env::current_exe()?);
        if let Some(uid) = uid {
            cmd.uid(uid).gid(uid);
        }
        let mut child = cmd
            .arg(mode)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("spawning a child")?;
        let pid = child.id();
        Ok(Profiled {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().context("no stdout")?),
            pid,
            reaped: false,
        })
    }

    pub fn read_line(&mut self) -> Result<String> {
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        ensure!(!line.is_empty(), "child closed its stdout");
        Ok(line.trim_end().to_string())
    }

    /// Waits until the child sleeps (in its read) with a stable fault count.
    pub fn wait_asleep(&self) -> Result<u64> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut last = None;
        loop {
            let (state, minflt) = stat(self.pid)?;
            if state == 'S' && last == Some(minflt) {
                return Ok(minflt);
            }
            last = (state == 'S').then_some(minflt);
            ensure!(
                Instant::now() < deadline,
                "child {} never fell asleep",
                self.pid
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Sends one byte: start (and, for churn, stop) the work.
    pub fn go(&mut self) -> Result<()> {
        self.send(b'g')
    }

    /// Sends `byte`: a round of `child rounds`.
    pub fn send(&mut self, byte: u8) -> Result<()> {
        let stdin = self.stdin.as_mut().context("stdin already closed")?;
        stdin.write_all(&[byte])?;
        stdin.flush()?;
        Ok(())
    }

    /// Waits until it has exited and has left the CPU, without reaping it.
    /// wait4() reads the CPU time of an exiting leader that may still be
    /// running on another CPU (its last slice not yet accounted), while the
    /// module reads it after the release, slice included: reaping only once
    /// it is off the CPU lets the two agree to the microsecond.
    pub fn wait_exited(&self) -> Result<()> {
        // SAFETY: siginfo is plain old data; all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointer to a local; pid is our unreaped child.
        let ret = unsafe {
            libc::waitid(
                libc::P_PID,
                self.pid,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        ensure!(ret == 0, "waitid: {}", std::io::Error::last_os_error());
        // A zombie is off the CPU within its final schedule(): far less.
        thread::sleep(Duration::from_millis(50));
        Ok(())
    }

    /// wait4() it: its own minor faults as its parent sees them.
    pub fn reap(&mut self) -> Result<Reaped> {
        self.stdin = None;
        let mut status = 0;
        // SAFETY: rusage is plain old data; all-zero is a valid value.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers to locals; pid is our unreaped child.
        let ret = unsafe { libc::wait4(self.pid as i32, &mut status, 0, &mut ru) };
        ensure!(
            ret == self.pid as i32,
            "wait4: {}",
            std::io::Error::last_os_error()
        );
        self.reaped = true;
        let ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
        Ok(Reaped {
            minflt: ru.ru_minflt as u64,
            majflt: ru.ru_majflt as u64,
            cpu_ns: ns(ru.ru_utime) + ns(ru.ru_stime),
            status,
        })
    }

    pub fn kill(&mut self) -> Result<()> {
        // SAFETY: plain syscall on our unreaped child.
        let ret = unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        ensure!(ret == 0, "kill: {}", std::io::Error::last_os_error());
        Ok(())
    }
}

impl Drop for Profiled {
    fn drop(&mut self) {
        if !self.reaped {
            let _ = self.kill();
            let _ = self.reap();
        }
    }
}
