//! The command lines of the two binaries, `monitor` and `work`: here rather than in the
//! binaries so that the documentation generator (`examples/docs.rs`) writes the man pages
//! and shell completions from the very definitions the binaries parse with. The Debian
//! package installs them as `pfprof` and `pfprof-work`: each names itself after the name
//! it was started by.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::sync::LazyLock;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use shared_layout::abi;
use shared_layout::Mode;

use crate::export::ExportOptions;
use crate::output::summary::SummaryStyle;
use crate::output::writer::Format;
use crate::system::duration::parse_duration;
use crate::work::workload::Pattern;

/// `--version`: the version the packages, the module (`modinfo pfprof`) and this monitor
/// share, and the ABI of the module's device it speaks.
pub fn version() -> &'static str {
    static VERSION: LazyLock<String> = LazyLock::new(|| {
        format!(
            "{} (pfprof.ko ABI {})",
            env!("CARGO_PKG_VERSION"),
            abi::ABI_VERSION
        )
    });
    &VERSION
}

/// The monitor's command line, for the program called `name`.
pub fn monitor_command(name: &'static str) -> clap::Command {
    Cli::command()
        .name(name)
        .bin_name(name)
        .version(version())
        .after_help(format!(
            "Examples:\n  \
            {name} run -- sort -o sorted.txt big.txt     (a live line, then the summary)\n  \
            {name} run --output prof.csv --plot prof.svg -- make -j4\n  \
            {name} run -q --summary run.json -- make     (the summary as JSON, nothing shown)\n  \
            {name} --pid 1234 --mode relaxed --interval 500ms --duration 1m > prof.csv\n  \
            {name} --pid 1234 --period 1s --count 10     (10 rows of a second, as pidstat 1 10)\n  \
            {name} --cgroup /sys/fs/cgroup/system.slice/nginx.service --prometheus :9464 -o /dev/null\n\n\
            `{name} run` shows a live line on a terminal and prints the summary on standard\n\
            error; its samples go only where --output says (`-o -`: standard output,\n\
            `-o /dev/stderr`: standard error). Without `run`, samples go to --output or\n\
            standard output. Durations take a unit (250ms, 10s, 1m, 1h30m); a number without\n\
            one is refused, but 0 where zero is taken."
        ))
}

/// The workload generator's command line, for the program called `name`.
pub fn work_command(name: &'static str) -> clap::Command {
    WorkArgs::command()
        .name(name)
        .bin_name(name)
        .version(env!("CARGO_PKG_VERSION"))
}

#[derive(Parser)]
#[command(
    name = "monitor",
    about = "Per-process page-fault profiler: minor and major faults and CPU time every period",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(flatten)]
    pub options: Options,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Start CMD, profile it from its first instruction until it exits, and exit with
    /// its exit status (127: not found, 126: not executable). Samples go only to
    /// --output: the standard output is the command's.
    Run {
        #[command(flatten)]
        options: Options,
        /// The command to profile and its arguments (after `--`).
        #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
}

#[derive(Args, Clone, Debug)]
pub struct Options {
    /// strict: no sample is ever lost; relaxed: the producer never waits.
    #[arg(long, default_value_t = Mode::Strict)]
    pub mode: Mode,
    /// Where samples come from: the pfprof module, or /proc. auto: the module when
    /// /dev/pfprof exists.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    pub backend: BackendChoice,
    /// Profile process PID (repeatable).
    #[arg(
        long = "pid",
        value_name = "PID",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX))
    )]
    pub pids: Vec<u32>,
    /// Profile every process in the cgroup v2 directory PATH and its descendant cgroups,
    /// as they enter and leave, each counted while inside, with the module or without.
    /// The profile ends when the cgroup is removed, or with Ctrl-C.
    #[arg(long, value_name = "PATH", conflicts_with = "pids")]
    pub cgroup: Option<PathBuf>,
    /// Profile every cgroup directly under the cgroup v2 directory DIR (repeatable), each
    /// as --cgroup would and exported on its own with target=its path (below a kubelet's
    /// kubepods cgroup: each container, labelled pod_uid, qos_class, container_id). Looked
    /// at again every --interval: a cgroup that appears or comes back is profiled. Needs
    /// --prometheus, --otlp or --textfile (one address, one push, one file for all);
    /// procfs backend only.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["pids", "cgroup"])]
    pub cgroups_under: Vec<PathBuf>,
    /// Profile the cgroup of every systemd unit named like PATTERN (`*` and `?`, e.g.
    /// 'nginx*.service'; repeatable), found by name under the cgroup2 mount, as
    /// --cgroups-under profiles each of its cgroups.
    #[arg(long = "unit", value_name = "PATTERN", conflicts_with_all = ["pids", "cgroup"])]
    pub units: Vec<String>,
    /// With --cgroups-under or --unit: the most targets exported at once (each is about 12
    /// series); those found beyond are left out, said on standard error.
    #[arg(long, value_name = "N", default_value_t = crate::fleet::MAX_TARGETS,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub max_targets: u16,
    /// Write samples to FILE (replaced only once the profile is complete); `-` is
    /// standard output, /dev/stderr standard error. Without it, `run` writes no
    /// samples and the others write them to standard output.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Write the summary to FILE instead of standard error (replaced once complete).
    #[arg(long, value_name = "FILE")]
    pub summary: Option<PathBuf>,
    /// The summary as text (default) or as one JSON object (default for a --summary
    /// FILE ending in .json).
    #[arg(long, value_enum, value_name = "text|json")]
    pub summary_format: Option<SummaryStyle>,
    /// Print nothing on standard error but errors: no live line, no summary (a
    /// --summary FILE is still written).
    #[arg(long, short)]
    pub quiet: bool,
    /// End the profile after DUR, as SIGTERM does (`run` sends it to its
    /// command, as timeout(1) does).
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    pub duration: Option<Duration>,
    /// End the profile after N samples, as SIGTERM does: the rows, summary, plot and
    /// exports hold exactly the first N (`--period 1s --count 5`: pidstat's `1 5`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub count: Option<u64>,
    /// Format of the samples: csv or jsonl (JSON Lines, same keys as the CSV columns).
    #[arg(long, default_value = "csv", value_name = "csv|jsonl")]
    pub format: Format,
    /// Also draw the profile as an SVG (the name must end in .svg): a timeline of fault
    /// rates, major faults by mapping (where attributed), memory, memory stall and CPU
    /// utilization, thrashing shaded.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// How often the monitor takes the samples that are ready (e.g. 1s, 250ms), in both
    /// modes: one wake-up per interval keeps its own cost low. The end of the profile is
    /// seen at once whatever the interval.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DUR")]
    pub interval: Duration,
    /// Sampling period of the procfs backend, whole milliseconds from 1ms to 10s (the
    /// module's is its period_ms parameter, within the same bounds).
    #[arg(long, value_parser = parse_period, value_name = "DUR", conflicts_with = "period_ms")]
    pub period: Option<u32>,
    /// The same as --period, as a number of milliseconds.
    #[arg(
        long,
        value_parser = clap::value_parser!(u32)
            .range(i64::from(abi::PERIOD_MS_MIN)..=i64::from(abi::PERIOD_MS_MAX)),
        value_name = "N"
    )]
    pub period_ms: Option<u32>,
    /// Count only the processes named (the command, the --pid processes, and with the
    /// module each process that registers itself), not their descendants. By default each
    /// counts with its descendants, as with `perf stat` and `time`: live ones as they run,
    /// reaped ones through its children's counts. One that leaves without being waited
    /// for (orphaned, or its parent does not wait) stops counting then; what it did
    /// before stays counted.
    #[arg(long)]
    pub no_inherit: bool,
    /// Do not attribute faults to the mappings and processes that took them (both backends
    /// do: the module with its own kernel counters, the procfs backend through perf events
    /// where the kernel allows them; never with --cgroups-under or --unit: 2 perf events
    /// per CPU per target).
    #[arg(long, conflicts_with = "minor_sampling")]
    pub no_attribution: bool,
    /// Record one minor fault in N to attribute them (every major fault is recorded):
    /// the minor counts by mapping are estimates, N times what was recorded [default: 61].
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..=1_000_000)
    )]
    pub minor_sampling: Option<u64>,
    #[command(flatten)]
    pub export: ExportOptions,
}

/// `--backend`: which [`crate::backend::Backend`] produces the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    Auto,
    Kernel,
    Procfs,
}

impl fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendChoice::Auto => "auto",
            BackendChoice::Kernel => "kernel",
            BackendChoice::Procfs => "procfs",
        })
    }
}

/// `--period`: a duration of whole milliseconds within the module's bounds.
pub fn parse_period(s: &str) -> Result<u32, String> {
    let period = parse_duration(s)?;
    let ms = u32::try_from(period.as_millis()).unwrap_or(u32::MAX);
    let bounds = abi::PERIOD_MS_MIN..=abi::PERIOD_MS_MAX;
    if Duration::from_millis(ms.into()) != period || !bounds.contains(&ms) {
        return Err(format!(
            "{s:?} is not a whole number of milliseconds from {}ms to {}ms",
            bounds.start(),
            bounds.end()
        ));
    }
    Ok(ms)
}

/// The workload generator's arguments.
#[derive(Parser)]
#[command(
    name = "work",
    about = "Workload generator: allocates MiB of memory and makes random (R) or local (L) \
             accesses to it, iteration after iteration; registers itself with the pfprof \
             module when it is loaded",
    long_about = None
)]
pub struct WorkArgs {
    /// Memory to allocate, in MiB (1 to 1024).
    #[arg(value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub mib: u16,
    /// R: random accesses over the whole buffer; L: accesses with locality.
    pub pattern: Pattern,
    /// Memory accesses per iteration.
    pub accesses: u64,
    /// Number of iterations.
    #[arg(default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Pause between iterations, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub sleep_ms: u64,
    /// Also create FILE (replacing it; removed at the end), map it shared, and write a
    /// byte to each of its pages every iteration, after the accesses: one fault a page
    /// and sweep. Then say how many faults each mapping should have taken.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// The file's size in MiB (default: the buffer's).
    #[arg(long, requires = "file", value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub file_mib: Option<u16>,
    /// Before every sweep but the first, write the file's pages back and drop them from
    /// the page cache, so that the sweep's faults are major.
    #[arg(long, requires = "file")]
    pub evict: bool,
}
