//! A cgroup as the profile's target (`monitor --cgroup`), in both backends: a
//! process moved in and out between rounds of work, counted exactly while it
//! is inside, its children forked inside too.

use std::fs;
use std::io::{self, BufRead, BufReader};
use std::process::{ChildStdout, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use shared_layout::abi::monotonic_ns;

use crate::device::samplers;
use crate::kmod::{self, Profiled};
use crate::monitor::{csv_column, finished, within};
use crate::{harness::Env, klog};

const ROOT: &str = "/sys/fs/cgroup";

/// cgroup2 at /sys/fs/cgroup (the initramfs mounts none).
fn mount_cgroup2() -> Result<()> {
    if fs::read_to_string("/proc/self/mounts")?.contains(" /sys/fs/cgroup cgroup2 ") {
        return Ok(());
    }
    fs::create_dir_all(ROOT)?;
    let out = Command::new("/bin/busybox")
        .args(["mount", "-t", "cgroup2", "none", ROOT])
        .output()?;
    ensure!(out.status.success(), "mounting cgroup2: {out:?}");
    Ok(())
}

/// The thread that looks at the target's processes for the monitor `monitor`: the
/// kernel session's sampler (a kthread named after its opener), or the procfs
/// backend's sampling thread; waited for while the monitor starts.
fn sampler_of(backend: &str, monitor: u32) -> Result<u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let found = if backend == "kernel" {
            samplers()?.into_iter().find(|&pid| {
                fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == format!("pfprof/{monitor}"))
            })
        } else {
            fs::read_dir(format!("/proc/{monitor}/task"))?
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
                .find(|tid| {
                    fs::read_to_string(format!("/proc/{monitor}/task/{tid}/comm"))
                        .is_ok_and(|c| c.trim() == "pfprof-sampler")
                })
        };
        if let Some(sampler) = found {
            return Ok(sampler);
        }
        ensure!(
            Instant::now() < deadline,
            "the {backend} backend's monitor {monitor} has no sampler after 60 s"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

/// The monitor's CSV as it comes on its standard output (a pipe: the rows are flushed
/// after every batch), read by a thread of its own; each row's `mono_ns` is when the
/// sampler read the counts of its last sample (the module's `ktime_get_ns()` after the
/// collection, the procfs backend's clock before the poll), which says when it looked.
struct Rows {
    lines: Receiver<io::Result<String>>,
    /// Every line so far, the metadata and header included.
    text: String,
    mono_ns_column: Option<usize>,
    /// Every row's `mono_ns`, in order.
    stamps: Vec<u64>,
    /// The thread that looks, for what says how it ran when it did not look.
    sampler: u32,
    /// The longest [`Rows::look_after`] waited.
    longest_wait: Duration,
}

impl Rows {
    fn read(stdout: ChildStdout, sampler: u32) -> Rows {
        let (sender, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let failed = line.is_err();
                if sender.send(line).is_err() || failed {
                    break;
                }
            }
        });
        Rows {
            lines,
            text: String::new(),
            mono_ns_column: None,
            stamps: Vec::new(),
            sampler,
            longest_wait: Duration::ZERO,
        }
    }

    fn take(&mut self, line: String) -> Result<()> {
        if !line.starts_with('#') {
            match self.mono_ns_column {
                None => {
                    let column = line.split(',').position(|name| name == "mono_ns");
                    self.mono_ns_column =
                        Some(column.with_context(|| format!("no mono_ns in {line:?}"))?);
                }
                Some(column) => self.stamps.push(
                    line.split(',')
                        .nth(column)
                        .and_then(|stamp| stamp.parse().ok())
                        .with_context(|| format!("no mono_ns in the row {line:?}"))?,
                ),
            }
        }
        self.text.push_str(&line);
        self.text.push('\n');
        Ok(())
    }

    /// Waits until a whole look of the sampler began after `since` (`CLOCK_MONOTONIC`
    /// ns): two rows stamped after it, since the module stamps a sample once its
    /// collection is done, so the first may have read the counts before `since`; the
    /// second's collection began after the first's stamp. Strict mode (the monitor's
    /// default) loses no sample: one the ring had no room for is merged into the next,
    /// under the later stamp.
    fn look_after(&mut self, since: u64) -> Result<()> {
        const LIMIT: Duration = Duration::from_secs(60);
        let start = Instant::now();
        while self.stamps.iter().rev().take_while(|&&t| t > since).count() < 2 {
            match self
                .lines
                .recv_timeout(LIMIT.saturating_sub(start.elapsed()))
            {
                Ok(line) => self.take(line.context("reading the monitor's rows")?)?,
                Err(RecvTimeoutError::Timeout) => bail!(
                    "no look of the sampler {} began in 60 s after {since} ns ({} rows, the \
                     last stamped {:?} ns): {}",
                    self.sampler,
                    self.stamps.len(),
                    self.stamps.last(),
                    how_it_ran(self.sampler)
                ),
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("the monitor's rows ended while waiting for a look after {since} ns")
                }
            }
        }
        self.longest_wait = self.longest_wait.max(start.elapsed());
        Ok(())
    }

    /// Every row's `mono_ns` and minor faults, once the monitor has ended (and closed
    /// its output).
    fn minor(mut self) -> Result<Vec<(u64, u64)>> {
        while let Ok(line) = self.lines.recv() {
            self.take(line.context("reading the monitor's rows")?)?;
        }
        let minor = csv_column(&self.text, "minor")?;
        ensure!(minor.len() == self.stamps.len(), "rows without mono_ns");
        Ok(self.stamps.into_iter().zip(minor).collect())
    }
}

/// What says whether a sampler that did not look was spinning or stuck: its state,
/// its CPU time, its switches and where it waits.
fn how_it_ran(pid: u32) -> String {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // After the comm: state is the first field, utime and stime the 12th and 13th.
    let fields: Vec<&str> = stat
        .rfind(')')
        .map(|end| stat[end + 2..].split(' ').collect())
        .unwrap_or_default();
    let field = |i: usize| fields.get(i).copied().unwrap_or("?");
    let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let switches: Vec<&str> = status
        .lines()
        .filter(|l| l.contains("ctxt_switches"))
        .collect();
    let wchan = fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    // Where it runs: its kernel stack whenever it is off the CPU, five looks 100 ms
    // apart (CONFIG_STACKTRACE; a thread on the CPU shows none).
    let mut stacks: Vec<String> = Vec::new();
    for _ in 0..5 {
        let stack = fs::read_to_string(format!("/proc/{pid}/stack")).unwrap_or_default();
        let frames: Vec<&str> = stack
            .lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .collect();
        let stack = frames.join(" < ");
        if !stack.is_empty() && !stacks.contains(&stack) {
            stacks.push(stack);
        }
        thread::sleep(Duration::from_millis(100));
    }
    format!(
        "state {}, utime {} stime {} ticks, {}, wchan {wchan:?}, stacks: [{}]",
        field(0),
        field(11),
        field(12),
        switches.join(", "),
        stacks.join("] [")
    )
}

/// Moves `pid` (asleep) to `cgroup` once a look of the sampler has begun after its last
/// round (it has seen all of it where it was), and returns once another has begun after
/// the move (it sees the process where it is now): what is missed at a move, what came
/// between the last look and the move, is then zero, and no round is taken between two
/// looks that both find the process inside. (Fixed waits of 100 periods, then waits for
/// the sampler's sleeps, which a wait on a lock also makes, once counted a whole round
/// taken outside, on a loaded machine.)
/// Each move's time goes to `steps`, for a failure to show among the rows.
fn move_to(cgroup: &str, pid: u32, rows: &mut Rows, steps: &mut Vec<String>) -> Result<()> {
    rows.look_after(monotonic_ns())?;
    fs::write(format!("{cgroup}/cgroup.procs"), pid.to_string())
        .with_context(|| format!("moving {pid} to {cgroup}"))?;
    let moved = monotonic_ns();
    steps.push(format!("{moved} moved to {cgroup}"));
    rows.look_after(moved)
}

/// Minor faults of `pid` and of the children it reaped (stat fields 10 and 11).
fn minflt_with_children(pid: u32) -> Result<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = &text[text.rfind(')').context("no ) in stat")? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    Ok(fields[7].parse::<u64>()? + fields[8].parse::<u64>()?)
}

/// One round of `child rounds` (`l` itself, `f` through a child), and the
/// faults it took, children included; when it ran goes to `steps`.
fn round(p: &mut Profiled, kind: u8, steps: &mut Vec<String>) -> Result<u64> {
    let before = minflt_with_children(p.pid)?;
    let began = monotonic_ns();
    p.send(kind)?;
    ensure!(p.read_line()? == "done");
    p.wait_asleep()?;
    let faults = minflt_with_children(p.pid)? - before;
    steps.push(format!(
        "{began}..{} round {}: {faults} faults",
        monotonic_ns(),
        char::from(kind)
    ));
    Ok(faults)
}

pub fn a_cgroup_target_counts_exactly_what_its_processes_did_inside_in_both_backends(
    env: &Env,
) -> Result<()> {
    let module = kmod::insmod(env, &["period_ms=10"])?;
    mount_cgroup2()?;
    let mut said = Vec::new();
    for backend in ["kernel", "procfs"] {
        let cgroup = format!("{ROOT}/pfprof-{backend}");
        let inner = format!("{cgroup}/inner");
        fs::create_dir_all(&inner)?;
        let mark = klog::Mark::now()?;
        let mut p = Profiled::spawn(&["rounds", "500"])?;
        // Its rows on standard output (its default without -o): a file named by -o
        // appears only when the monitor ends.
        let mut monitor = Command::new("/bin/monitor")
            .args([
                "--backend",
                backend,
                "--period-ms",
                "10",
                "--cgroup",
                &cgroup,
            ])
            .args(["--interval", "100ms"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the monitor")?;
        let stdout = monitor.stdout.take().context("no stdout")?;
        let mut rows = Rows::read(stdout, sampler_of(backend, monitor.id())?);
        // Outside, inside (in a cgroup below), outside again, inside through a child.
        let (mut inside, mut steps) = (0, Vec::new());
        round(&mut p, b'l', &mut steps)?;
        move_to(&inner, p.pid, &mut rows, &mut steps)?;
        inside += round(&mut p, b'l', &mut steps)?;
        move_to(ROOT, p.pid, &mut rows, &mut steps)?;
        round(&mut p, b'l', &mut steps)?;
        move_to(&cgroup, p.pid, &mut rows, &mut steps)?;
        inside += round(&mut p, b'f', &mut steps)?;
        move_to(ROOT, p.pid, &mut rows, &mut steps)?;
        fs::remove_dir(&inner)?;
        fs::remove_dir(&cgroup)?;
        let stderr = finished(
            &format!("monitor --cgroup, {backend}"),
            within(monitor, Duration::from_secs(30))
                .with_context(|| format!("{backend} backend"))?,
        )?;
        p.reap()?;
        let longest_wait = rows.longest_wait;
        let minor = rows.minor()?;
        let sum: u64 = minor.iter().map(|&(_, faults)| faults).sum();
        said.push(format!(
            "{backend}: {sum} of {inside} in {} rows, a look waited for {} ms at most",
            minor.len(),
            longest_wait.as_millis()
        ));
        let faulting: Vec<String> = minor
            .iter()
            .filter(|&&(_, faults)| faults > 0)
            .map(|(mono_ns, faults)| format!("{mono_ns}: {faults}"))
            .collect();
        ensure!(
            sum == inside,
            "{backend} backend: the samples hold {sum} minor faults, the process took {inside} \
             inside the cgroup; what happened (CLOCK_MONOTONIC ns): [{}]; the rows with faults: \
             [{}]: {stderr}",
            steps.join("; "),
            faulting.join(", ")
        );
        mark.ensure_clean()?;
    }
    crate::harness::figure(&format!("cgroup target: {}", said.join("; ")));
    module.unload()
}
