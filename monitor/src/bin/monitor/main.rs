//! `monitor`: profiles page faults and CPU time of processes, from the pfprof module's
//! ring (kernel backend) or from /proc (procfs backend), in the strict or relaxed protocol.
//! This file only parses the arguments and turns errors into messages and exit codes; the
//! profile itself is `monitor::profile`.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};
use monitor::backend::install;
use monitor::backend::kernel::Kernel;
use monitor::backend::procfs::Procfs;
use monitor::backend::BackendError;
use monitor::export::{ExportError, ExportOptions};
use monitor::fleet::{FleetRequest, Selector};
use monitor::output::error::OutputError;
use monitor::output::summary::{SummaryStyle, SummaryTarget};
use monitor::output::writer::{Destination, Format};
use monitor::profile::error::ProfileError;
use monitor::profile::{self, Request};
use monitor::system::duration::parse_duration;
use monitor::system::exit::Blame;
use shared_layout::abi::{self, DEVICE_PATH};
use shared_layout::device::DeviceError;
use shared_layout::Mode;

#[derive(Parser)]
#[command(
    name = "monitor",
    version,
    about = "Per-process page-fault profiler: minor and major faults and CPU time every period",
    after_help = "Examples:\n  \
        monitor run -- sort -o sorted.txt big.txt     (a live line, then the summary)\n  \
        monitor run --output prof.csv --plot prof.svg -- ./target/release/work 256 R 50000\n  \
        monitor run -q --summary run.json -- make     (the summary as JSON, nothing shown)\n  \
        monitor --pid 1234 --mode relaxed --interval 500ms --duration 1m > prof.csv\n  \
        monitor --pid 1234 --period 1s --count 10     (10 rows of a second, as pidstat 1 10)\n  \
        monitor --cgroup /sys/fs/cgroup/system.slice/nginx.service --prometheus :9464 -o /dev/null\n\n\
        `monitor run` shows a live line on a terminal and prints the summary on standard\n\
        error; its samples go only where --output says (`-o -`: standard output,\n\
        `-o /dev/stderr`: standard error). Without `run`, samples go to --output or\n\
        standard output. Durations take a unit (250ms, 10s, 1m, 1h30m); a number without\n\
        one is refused, but 0 where zero is taken.",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(flatten)]
    options: Options,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
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
struct Options {
    /// strict: no sample is ever lost; relaxed: the producer never waits.
    #[arg(long, default_value_t = Mode::Strict)]
    mode: Mode,
    /// Where samples come from: the pfprof module, or /proc. auto: the module when
    /// /dev/pfprof exists.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto)]
    backend: BackendChoice,
    /// Profile process PID (repeatable).
    #[arg(
        long = "pid",
        value_name = "PID",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX))
    )]
    pids: Vec<u32>,
    /// Profile every process in the cgroup v2 directory PATH and its descendant cgroups,
    /// as they enter and leave, each counted while inside, with the module or without.
    /// The profile ends when the cgroup is removed, or with Ctrl-C.
    #[arg(long, value_name = "PATH", conflicts_with = "pids")]
    cgroup: Option<PathBuf>,
    /// Profile every cgroup directly under the cgroup v2 directory DIR (repeatable), each
    /// as --cgroup would and exported on its own with target=its path (below a kubelet's
    /// kubepods cgroup: each container, labelled pod_uid, qos_class, container_id). Looked
    /// at again every --interval: a cgroup that appears or comes back is profiled. Needs
    /// --prometheus, --otlp or --textfile (one address, one push, one file for all);
    /// procfs backend only.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["pids", "cgroup"])]
    cgroups_under: Vec<PathBuf>,
    /// Profile the cgroup of every systemd unit named like PATTERN (`*` and `?`, e.g.
    /// 'nginx*.service'; repeatable), found by name under the cgroup2 mount, as
    /// --cgroups-under profiles each of its cgroups.
    #[arg(long = "unit", value_name = "PATTERN", conflicts_with_all = ["pids", "cgroup"])]
    units: Vec<String>,
    /// With --cgroups-under or --unit: the most targets exported at once (each is about 12
    /// series); those found beyond are left out, said on standard error.
    #[arg(long, value_name = "N", default_value_t = monitor::fleet::MAX_TARGETS,
          value_parser = clap::value_parser!(u16).range(1..))]
    max_targets: u16,
    /// Write samples to FILE (replaced only once the profile is complete); `-` is
    /// standard output, /dev/stderr standard error. Without it, `monitor run` writes no
    /// samples and the others write them to standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write the summary to FILE instead of standard error (replaced once complete).
    #[arg(long, value_name = "FILE")]
    summary: Option<PathBuf>,
    /// The summary as text (default) or as one JSON object (default for a --summary
    /// FILE ending in .json).
    #[arg(long, value_enum, value_name = "text|json")]
    summary_format: Option<SummaryStyle>,
    /// Print nothing on standard error but errors: no live line, no summary (a
    /// --summary FILE is still written).
    #[arg(long, short)]
    quiet: bool,
    /// End the profile after DUR, as SIGTERM does (`monitor run` sends it to its
    /// command, as timeout(1) does).
    #[arg(long, value_parser = parse_duration, value_name = "DUR")]
    duration: Option<Duration>,
    /// End the profile after N samples, as SIGTERM does: the rows, summary, plot and
    /// exports hold exactly the first N (`--period 1s --count 5`: pidstat's `1 5`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    count: Option<u64>,
    /// Format of the samples: csv or jsonl (JSON Lines, same keys as the CSV columns).
    #[arg(long, default_value = "csv", value_name = "csv|jsonl")]
    format: Format,
    /// Also draw the profile as an SVG (the name must end in .svg): a timeline of fault
    /// rates, memory, memory stall and CPU utilization, thrashing shaded.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// How often the monitor takes the samples that are ready (e.g. 1s, 250ms), in both
    /// modes: one wake-up per interval keeps its own cost low. The end of the profile is
    /// seen at once whatever the interval.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DUR")]
    interval: Duration,
    /// Sampling period of the procfs backend, whole milliseconds from 1ms to 10s (the
    /// module's is its period_ms parameter, within the same bounds).
    #[arg(long, value_parser = parse_period, value_name = "DUR", conflicts_with = "period_ms")]
    period: Option<u32>,
    /// The same as --period, as a number of milliseconds.
    #[arg(
        long,
        value_parser = clap::value_parser!(u32)
            .range(i64::from(abi::PERIOD_MS_MIN)..=i64::from(abi::PERIOD_MS_MAX)),
        value_name = "N"
    )]
    period_ms: Option<u32>,
    /// Count only the processes named (the command, the --pid processes, and with the
    /// module each process that registers itself), not their descendants. By default each
    /// counts with its descendants, as with `perf stat` and `time`: live ones as they run,
    /// reaped ones through its children's counts. One that leaves without being waited
    /// for (orphaned, or its parent does not wait) stops counting then; what it did
    /// before stays counted.
    #[arg(long)]
    no_inherit: bool,
    /// Do not attribute faults to the mappings and processes that took them (the procfs
    /// backend does, through perf events, where the kernel allows them; never with
    /// --cgroups-under or --unit, whose exports do not show where).
    #[arg(long, conflicts_with = "minor_sampling")]
    no_attribution: bool,
    /// Record one minor fault in N to attribute them (every major fault is recorded):
    /// the minor counts by mapping are estimates, N times what was recorded.
    #[arg(
        long,
        value_name = "N",
        default_value_t = monitor::attribution::DEFAULT_MINOR_PERIOD,
        value_parser = clap::value_parser!(u64).range(1..=1_000_000)
    )]
    minor_sampling: u64,
    #[command(flatten)]
    export: ExportOptions,
}

/// `--backend`: which [`monitor::backend::Backend`] produces the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum BackendChoice {
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
fn parse_period(s: &str) -> Result<u32, String> {
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

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (options, command) = match cli.command {
        Some(Command::Run { options, command }) => (options, Some(command)),
        None => (cli.options, None),
    };
    if command.is_some() && options.cgroup.is_some() {
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--cgroup profiles a cgroup: use it without `run`",
            )
            .exit();
    }
    if command.is_some() && !options.pids.is_empty() {
        Cli::command()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--pid attaches to running processes and `run` profiles the command it \
                 starts: use one or the other",
            )
            .exit();
    }
    if !options.cgroups_under.is_empty() || !options.units.is_empty() {
        return fleet(options, command.is_some());
    }
    match run(options, command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let (message, code) = failure(e);
            eprint!("{message}");
            ExitCode::from(code)
        }
    }
}

/// Refuses what a fleet monitor cannot do, with the reason, as clap refuses a usage error.
fn refuse_for_fleet(options: &Options, run: bool) {
    let refusal = if run {
        Some("--cgroups-under and --unit profile cgroups: use them without `run`")
    } else if options.backend == BackendChoice::Kernel {
        Some(
            "--cgroups-under and --unit need --backend procfs: with the module each target \
              would be a session of its own, which this monitor does not open",
        )
    } else if !options.export.any() {
        Some(
            "--cgroups-under and --unit export each target: give --prometheus ADDR, --otlp \
             [URL] or --textfile DIR",
        )
    } else if options.duration.is_some() || options.count.is_some() {
        Some(
            "--cgroups-under and --unit run until SIGTERM, each target until its cgroup is \
             removed: --duration and --count end one profile (--cgroup)",
        )
    } else if options.output.is_some() || options.plot.is_some() || options.summary.is_some() {
        Some(
            "--cgroups-under and --unit export each target: --output, --plot and \
              --summary are for one target (--cgroup)",
        )
    } else {
        None
    };
    if let Some(refusal) = refusal {
        Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, refusal)
            .exit();
    }
}

/// `--cgroups-under`, `--unit`: one monitor for many cgroups.
fn fleet(options: Options, run: bool) -> ExitCode {
    refuse_for_fleet(&options, run);
    let selectors = (options.cgroups_under.iter().cloned().map(Selector::Under))
        .chain(options.units.iter().cloned().map(Selector::Unit))
        .collect();
    let request = FleetRequest {
        selectors,
        max_targets: usize::from(options.max_targets),
        template: Request {
            mode: options.mode,
            interval: options.interval,
            format: options.format,
            output: Destination::Nowhere,
            plot: None,
            command: None,
            pids: Vec::new(),
            cgroup: None,
            period_ms: options.period.or(options.period_ms),
            inherit: !options.no_inherit,
            // A target's where-the-faults-were would go nowhere (no output, no summary),
            // and each target's events are 2 per CPU: 256 targets on 64 CPUs are 32,768
            // file descriptors, and each counts every fault of its cgroup.
            attribution: None,
            export: options.export,
            summary: SummaryTarget {
                file: None,
                style: SummaryStyle::Text,
                quiet: true,
            },
            duration: None,
            count: None,
            fleet: None,
        },
    };
    match monitor::fleet::run(request) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let (message, code) = failure(e);
            eprint!("{message}");
            ExitCode::from(code)
        }
    }
}

/// What the user is told about `e`, with what to do when it is theirs to fix, and the
/// exit code.
fn failure(e: ProfileError) -> (String, u8) {
    let code = e.blame().exit_code();
    let advice = advice(&e);
    let mut message = format!("monitor: error: {:#}\n", anyhow::Error::new(e));
    if let Some(advice) = advice {
        message += &format!("monitor: {advice}\n");
    }
    (message, code)
}

fn run(options: Options, command: Option<Vec<OsString>>) -> Result<u8, ProfileError> {
    let backend = match options.backend {
        BackendChoice::Auto if Path::new(DEVICE_PATH).exists() => BackendChoice::Kernel,
        BackendChoice::Auto => BackendChoice::Procfs,
        chosen => chosen,
    };
    let output = match (options.output, &command) {
        (Some(path), _) => Destination::named(path),
        (None, Some(_)) => Destination::Nowhere,
        (None, None) => Destination::Stdout,
    };
    let summary_style = (options.summary_format)
        .unwrap_or_else(|| SummaryStyle::for_file(options.summary.as_deref()));
    let request = Request {
        mode: options.mode,
        interval: options.interval,
        format: options.format,
        output,
        plot: options.plot,
        command,
        pids: options.pids,
        cgroup: options.cgroup,
        period_ms: options.period.or(options.period_ms),
        summary: SummaryTarget {
            file: options.summary,
            style: summary_style,
            quiet: options.quiet,
        },
        duration: options.duration,
        count: options.count,
        inherit: !options.no_inherit,
        attribution: (!options.no_attribution).then_some(options.minor_sampling),
        export: options.export,
        fleet: None,
    };
    match backend {
        BackendChoice::Kernel => profile::profile::<Kernel>(request),
        _ => profile::profile::<Procfs>(request),
    }
}

/// The running kernel's release, as the commands of the advice name it.
fn release() -> String {
    install::running_release().unwrap_or_else(|| "$(uname -r)".into())
}

/// What the user can do about `e`, when it is theirs to fix.
fn advice(e: &ProfileError) -> Option<String> {
    Some(match e {
        ProfileError::Output(OutputError::File { .. }) => "choose another --output".into(),
        ProfileError::Output(OutputError::Plot { .. }) => "choose another --plot".into(),
        ProfileError::Output(OutputError::Summary { .. }) => "choose another --summary".into(),
        ProfileError::Backend(
            BackendError::Attach { pid, .. }
            | BackendError::Device(
                DeviceError::NoSuchProcess { pid } | DeviceError::NotAllowed { pid },
            ),
        ) => format!("check the pid with `ps -p {pid}` and that it is yours"),
        ProfileError::Backend(BackendError::Device(DeviceError::NotLoaded { .. })) => format!(
            "{}; or use --backend procfs, which works without the module",
            install::when_not_loaded(Path::new(install::MODULES_DIR), &release())
        ),
        ProfileError::Backend(BackendError::Device(DeviceError::AbiMismatch { ours, module }))
            if module < ours =>
        {
            install::when_module_older(&release())
        }
        ProfileError::Backend(BackendError::Device(_)) if e.blame() == Blame::Usage => {
            "--backend procfs works without the module".into()
        }
        ProfileError::Cgroup(_) => {
            "give a directory of the cgroup2 file system, e.g. /sys/fs/cgroup/system.slice".into()
        }
        ProfileError::Backend(BackendError::NothingToProfile) => {
            "processes can register themselves only with the pfprof module loaded".into()
        }
        ProfileError::Export(ExportError::Listen { .. } | ExportError::Address(_)) => {
            "choose another --prometheus address (port 0 takes a free one)".into()
        }
        ProfileError::Export(ExportError::Url { .. }) => {
            "e.g. --otlp https://collector:4318/v1/metrics, or --otlp alone to push where \
             OTEL_EXPORTER_OTLP_ENDPOINT says"
                .into()
        }
        ProfileError::Export(ExportError::Header { .. }) => {
            "give a header as --otlp-header Name=value; OTEL_EXPORTER_OTLP_HEADERS as \
             name=value,name=value with the values percent-encoded"
                .into()
        }
        ProfileError::Export(ExportError::Textfile { .. }) => {
            "choose a directory this user may write, e.g. node_exporter's \
             --collector.textfile.directory"
                .into()
        }
        ProfileError::Backend(BackendError::PeriodMismatch { asked_ms, .. }) => format!(
            "--period-ms {asked_ms} needs --backend procfs, or reload the module with \
             period_ms={asked_ms}"
        ),
        ProfileError::Spawn(spawn) => match spawn.blame() {
            Blame::CommandNotFound => "check the command's name and your PATH".into(),
            Blame::CommandNotExecutable => "check the command's permissions".into(),
            _ => return None,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modules_refusals_are_usage_errors_that_say_what_to_do() {
        let device = PathBuf::from(DEVICE_PATH);
        let refused = |e| failure(ProfileError::Backend(BackendError::Device(e)));
        assert_eq!(
            refused(DeviceError::PermissionDenied {
                path: device.clone()
            }),
            (
                "monitor: error: cannot use the pfprof module: permission denied opening \
                 /dev/pfprof: install the udev rule kmod/99-pfprof.rules or run as root\n\
                 monitor: --backend procfs works without the module\n"
                    .to_owned(),
                2
            )
        );
        assert_eq!(
            refused(DeviceError::TooManySessions { path: device }),
            (
                "monitor: error: cannot use the pfprof module: too many sessions open on \
                 /dev/pfprof: close another monitor of this user, or raise the module's \
                 max_sessions\nmonitor: --backend procfs works without the module\n"
                    .to_owned(),
                2
            )
        );
        assert_eq!(
            refused(DeviceError::NotAllowed { pid: 42 }),
            (
                "monitor: error: cannot use the pfprof module: not allowed to profile process \
                 42: it belongs to another user (profile it as that user or as root)\n\
                 monitor: check the pid with `ps -p 42` and that it is yours\n"
                    .to_owned(),
                2
            )
        );
        // An older module: how to replace it on this machine.
        let ours = shared_layout::abi::ABI_VERSION;
        let (message, code) = refused(DeviceError::AbiMismatch {
            ours,
            module: ours - 1,
        });
        assert_eq!(code, 2);
        assert!(
            message.starts_with(&format!(
                "monitor: error: cannot use the pfprof module: the module speaks ABI version \
                 {}, this monitor speaks {ours}: the module is older",
                ours - 1
            )),
            "{message}"
        );
        assert!(
            message.ends_with(&format!(
                "monitor: {}\n",
                install::when_module_older(&release())
            )),
            "{message}"
        );
    }
}
