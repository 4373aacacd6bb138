//! What the monitor itself costs, for docs/benchmarks.md ("What the monitor costs"):
//! `/bin/monitor --pid P -o /dev/null` profiling one sleeping process for 10 s at 50 ms,
//! with the module and with the procfs backend, measured the same way in the same VM.

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use anyhow::{ensure, Context, Result};

use crate::{harness::Env, kmod};

const SPAN: Duration = Duration::from_secs(10);
/// Its start-up (exec, threads, the area) is over by then: from there on to `SPAN`, what
/// it costs per unit of time profiled.
const STARTED: Duration = Duration::from_secs(1);
const ROUNDS: u32 = 3;

/// A thread's name, CPU time (ns) and time slices, from its schedstat.
fn threads_of(pid: u32) -> Result<Vec<(String, u64, u64)>> {
    let mut threads = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task"))? {
        let path = task?.path();
        let comm = fs::read_to_string(path.join("comm"))?.trim().to_owned();
        let schedstat = fs::read_to_string(path.join("schedstat"))?;
        let fields: Vec<u64> = schedstat
            .split_whitespace()
            .map(|f| f.parse())
            .collect::<Result<_, _>>()?;
        ensure!(fields.len() == 3, "schedstat {schedstat:?}");
        threads.push((comm, fields[0], fields[2]));
    }
    Ok(threads)
}

/// The session sampler kthread of the process `opener` ("pfprof/<pid>").
fn sampler_of(opener: u32) -> Result<Option<u32>> {
    let comm = format!("pfprof/{opener}");
    for entry in fs::read_dir("/proc")? {
        let entry = entry?;
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        if fs::read_to_string(entry.path().join("comm")).is_ok_and(|c| c.trim() == comm) {
            return Ok(Some(pid));
        }
    }
    Ok(None)
}

/// Stops the monitor with SIGINT, as a user would, and reaps it: its user + system
/// time over its whole life, ns.
fn stop(pid: u32) -> Result<u64> {
    ensure!(
        // SAFETY: our own child, not reaped yet.
        unsafe { libc::kill(pid as i32, libc::SIGINT) } == 0,
        "kill: {}",
        std::io::Error::last_os_error()
    );
    let mut status = 0;
    // SAFETY: a zeroed rusage is valid, and wait4 fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointers to our own locals.
    let reaped = unsafe { libc::wait4(pid as i32, &mut status, 0, &mut usage) };
    ensure!(
        reaped == pid as i32,
        "wait4: {}",
        std::io::Error::last_os_error()
    );
    ensure!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the monitor ended with status {status:#x}"
    );
    let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1_000;
    Ok(ns(usage.ru_utime) + ns(usage.ru_stime))
}

/// `bench_`: the monitor's own CPU over 10 s, profiling one sleeping process at 50 ms,
/// with each backend and mode; runs only when a filter names it.
pub fn bench_monitor_cost_by_backend(env: &Env) -> Result<()> {
    let _module = kmod::insmod(env, &["period_ms=50"])?;
    for round in 1..=ROUNDS {
        for (backend, mode) in [
            ("kernel", "strict"),
            ("kernel", "relaxed"),
            ("procfs", "strict"),
            ("procfs", "relaxed"),
        ] {
            let mut sleeper = Command::new("sleep").arg("3600").spawn()?;
            let pid = sleeper.id().to_string();
            let stderr = format!("/tmp/cost-{backend}-{mode}.err");
            let monitor = Command::new("/bin/monitor")
                .args(["--backend", backend, "--mode", mode, "--pid", &pid])
                .args(if backend == "procfs" {
                    &["--period-ms", "50"][..]
                } else {
                    &[]
                })
                .args(["-o", "/dev/null"])
                .stdout(Stdio::null())
                .stderr(fs::File::create(&stderr)?)
                .spawn()
                .context("running /bin/monitor")?;
            let mpid = monitor.id();
            thread::sleep(STARTED);
            let kthread = sampler_of(mpid)?;
            let kthread_cpu = || kthread.map(kmod::main_thread_cpu_ns).transpose();
            let (started, kthread_started) = (threads_of(mpid)?, kthread_cpu()?);
            thread::sleep(SPAN - STARTED);
            let threads = threads_of(mpid)?;
            let kthread = kthread_cpu()?;
            let cpu = stop(mpid).with_context(|| {
                format!(
                    "monitor --backend {backend} --mode {mode}: {}",
                    fs::read_to_string(&stderr).unwrap_or_default()
                )
            })?;
            sleeper.kill()?;
            sleeper.wait()?;
            // Per SPAN, from what STARTED..SPAN cost.
            let scale = SPAN.as_secs_f64() / (SPAN - STARTED).as_secs_f64() / 1e6;
            let steady: u64 =
                threads.iter().map(|t| t.1).sum::<u64>() - started.iter().map(|t| t.1).sum::<u64>();
            let threads = threads
                .iter()
                .map(|(comm, ns, slices)| {
                    let (ns0, slices0) = started
                        .iter()
                        .find(|t| &t.0 == comm)
                        .map_or((0, 0), |t| (t.1, t.2));
                    format!(
                        "{comm} {:.1} ms/{slices} slices ({:.1} ms/{} after start-up)",
                        *ns as f64 / 1e6,
                        (ns - ns0) as f64 / 1e6,
                        slices - slices0
                    )
                })
                .collect::<Vec<_>>()
                .join(", ");
            let kthread = match (kthread_started, kthread) {
                (Some(k0), Some(k)) => format!(
                    "; the module's sampler kthread {:.1} ms ({:.1} ms per {} s after start-up)",
                    k as f64 / 1e6,
                    (k - k0) as f64 * scale,
                    SPAN.as_secs()
                ),
                _ => String::new(),
            };
            crate::harness::figure(&format!(
                "monitor cost: round {round}, {backend} {mode}: {:.1} ms CPU in {} s \
                 ({:.3}% of a CPU), {:.1} ms per {} s after start-up; threads (ms CPU/time \
                 slices before SIGINT): {threads}{kthread}",
                cpu as f64 / 1e6,
                SPAN.as_secs(),
                cpu as f64 / SPAN.as_nanos() as f64 * 100.0,
                steady as f64 * scale,
                SPAN.as_secs(),
            ));
        }
    }
    Ok(())
}
