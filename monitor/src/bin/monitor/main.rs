//! `monitor`: profiles page faults and CPU time of processes, from the pfprof module's
//! ring (kernel backend) or from /proc (procfs backend), in the strict or relaxed protocol.
//! This file only parses the arguments and turns errors into messages and exit codes; the
//! profile itself is `monitor::session`.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use monitor::backend::kernel::Kernel;
use monitor::backend::procfs::Procfs;
use monitor::error::{Blame, ProfileError};
use monitor::output::Destination;
use monitor::report::Format;
use monitor::session::{self, Request};
use shared_layout::abi::DEVICE_PATH;
use shared_layout::device::DeviceError;
use shared_layout::Mode;

#[derive(Parser)]
#[command(
    name = "monitor",
    version,
    about = "Per-process page-fault profiler: minor and major faults and CPU time every period",
    after_help = "Examples:\n  \
        monitor run --output prof.csv --plot prof.svg -- ./target/release/work 256 R 50000\n  \
        monitor run -- sort -o sorted.txt big.txt     (samples and summary on stderr)\n  \
        monitor --pid 1234 --mode relaxed --interval 500ms > prof.csv\n\n\
        Samples go to --output; without it, to standard output, except with `monitor run`,\n\
        whose command has the standard output: there they go to standard error (as with\n\
        `perf stat`). The summary goes to standard error.",
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
    /// its exit status (127: not found, 126: not executable). Samples go to --output or
    /// standard error: the standard output is the command's.
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
    /// Write samples to FILE (replaced only once the profile is complete).
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Format of the samples: csv or jsonl (JSON Lines, same keys as the CSV columns).
    #[arg(long, default_value = "csv", value_name = "csv|jsonl")]
    format: Format,
    /// Also draw the profile as an SVG (the name must end in .svg): accumulated faults and
    /// CPU utilization over time.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// How often the monitor takes the samples that are ready (e.g. 1s, 250ms), in both
    /// modes: one wake-up per interval keeps its own cost low. The end of the profile is
    /// seen at once whatever the interval.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DUR")]
    interval: Duration,
    /// Sampling period of the procfs backend, in ms (the module's is its period_ms
    /// parameter).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=60_000), value_name = "N")]
    period_ms: Option<u32>,
    /// Count only the processes named (the command, the --pid processes, and with the
    /// module each process that registers itself), not their descendants. By default each
    /// counts with its descendants, as with `perf stat` and `time`: live ones as they run,
    /// reaped ones through its children's counts. One that leaves without being waited
    /// for (orphaned, or its parent does not wait) stops counting then; what it did
    /// before stays counted.
    #[arg(long)]
    no_inherit: bool,
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

/// "1s", "250ms", "1.5s", or plain seconds.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let (number, unit) = match s.strip_suffix("ms") {
        Some(n) => (n, 1e-3),
        None => (s.strip_suffix('s').unwrap_or(s), 1.0),
    };
    let value: f64 = number
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a duration like 1s or 250ms"))?;
    Duration::try_from_secs_f64(value * unit)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{s:?} is not a positive duration"))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let (options, command) = match cli.command {
        Some(Command::Run { options, command }) => (options, Some(command)),
        None => (cli.options, None),
    };
    match run(options, command) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let blame = e.blame();
            let advice = advice(&e);
            eprintln!("monitor: error: {:#}", anyhow::Error::new(e));
            if let Some(advice) = advice {
                eprintln!("monitor: {advice}");
            }
            ExitCode::from(blame.exit_code())
        }
    }
}

fn run(options: Options, command: Option<Vec<OsString>>) -> Result<u8, ProfileError> {
    let backend = match options.backend {
        BackendChoice::Auto if std::path::Path::new(DEVICE_PATH).exists() => BackendChoice::Kernel,
        BackendChoice::Auto => BackendChoice::Procfs,
        chosen => chosen,
    };
    let output = match (options.output, &command) {
        (Some(path), _) => Destination::File(path),
        (None, Some(_)) => Destination::Stderr,
        (None, None) => Destination::Stdout,
    };
    let request = Request {
        mode: options.mode,
        interval: options.interval,
        format: options.format,
        output,
        plot: options.plot,
        command,
        pids: options.pids,
        period_ms: options.period_ms,
        inherit: !options.no_inherit,
    };
    match backend {
        BackendChoice::Kernel => session::profile::<Kernel>(request),
        _ => session::profile::<Procfs>(request),
    }
}

/// What the user can do about `e`, when it is theirs to fix.
fn advice(e: &ProfileError) -> Option<String> {
    Some(match e {
        ProfileError::Output { .. } => "choose another --output".into(),
        ProfileError::Plot { .. } => "choose another --plot".into(),
        ProfileError::Attach { pid, .. }
        | ProfileError::Device(
            DeviceError::NoSuchProcess { pid } | DeviceError::NotAllowed { pid },
        ) => format!("check the pid with `ps -p {pid}` and that it is yours"),
        ProfileError::Device(_) if e.blame() == Blame::Usage => {
            "--backend procfs works without the module".into()
        }
        ProfileError::NothingToProfile => {
            "processes can register themselves only with the pfprof module loaded".into()
        }
        ProfileError::PeriodMismatch { asked_ms, .. } => format!(
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
    fn durations_take_seconds_or_milliseconds() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn durations_must_be_positive_numbers() {
        for bad in ["0s", "-1s", "fast", "", "1h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
