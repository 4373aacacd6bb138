//! `monitor`: profiles page faults and CPU time of processes, from the pfprof module's
//! ring (kernel backend) or from /proc (procfs backend), in the strict or relaxed protocol.

mod kernel;
mod procfs;
mod session;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use monitor::report::Format;
use shared_layout::abi::DEVICE_PATH;
use shared_layout::Mode;

use crate::session::Settings;

#[derive(Parser)]
#[command(
    name = "monitor",
    version,
    about = "Per-process page-fault profiler: minor and major faults and CPU time every period",
    after_help = "Examples:\n  \
        monitor run --output prof.csv --plot prof.svg -- work 256 R 50000\n  \
        monitor --pid 1234 --mode relaxed --interval 500ms\n\n\
        Samples go to standard output (or --output), the summary to standard error.",
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
    /// its exit status.
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
    #[arg(long, value_enum, default_value_t = Backend::Auto)]
    backend: Backend,
    /// Profile process PID (repeatable).
    #[arg(
        long = "pid",
        value_name = "PID",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX))
    )]
    pids: Vec<u32>,
    /// Write samples to FILE instead of standard output.
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Format of the samples: csv or jsonl (JSON Lines, same keys as the CSV columns).
    #[arg(long, default_value = "csv", value_name = "csv|jsonl")]
    format: Format,
    /// Also draw the profile as an SVG: accumulated faults and CPU utilization over time.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Relaxed mode: how often to drain the ring (e.g. 1s, 250ms).
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DUR")]
    interval: Duration,
    /// Sampling period of the procfs backend, in ms (the module's is its period_ms
    /// parameter).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=60_000), value_name = "N")]
    period_ms: Option<u32>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Backend {
    Auto,
    Kernel,
    Procfs,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Auto => "auto",
            Backend::Kernel => "kernel",
            Backend::Procfs => "procfs",
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

/// An error the user fixes by changing the invocation or the system (load the module,
/// pick another pid or path): exit code 2, like a usage error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Usage(pub String);

pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(Usage(message.into()))
}

/// Why a `--pid` failed, whichever backend tried it.
pub fn cannot_profile(pid: u32) -> String {
    format!("cannot profile process {pid}: check the pid with `ps -p {pid}` and that it is yours")
}

/// `context` that also marks the error as the user's to fix.
pub trait UsageContext<T> {
    fn usage_context<F: FnOnce() -> String>(self, message: F) -> anyhow::Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> UsageContext<T> for Result<T, E> {
    fn usage_context<F: FnOnce() -> String>(self, message: F) -> anyhow::Result<T> {
        self.map_err(|e| anyhow::Error::new(e).context(Usage(message())))
    }
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
            eprintln!("monitor: error: {e:#}");
            // Finds a Usage anywhere: as the error, or as a context on any layer.
            let is_usage = e.downcast_ref::<Usage>().is_some();
            ExitCode::from(if is_usage { 2 } else { 1 })
        }
    }
}

fn run(options: Options, command: Option<Vec<OsString>>) -> anyhow::Result<u8> {
    let backend = match options.backend {
        Backend::Auto if std::path::Path::new(DEVICE_PATH).exists() => Backend::Kernel,
        Backend::Auto => Backend::Procfs,
        chosen => chosen,
    };
    let settings = Settings::open(
        backend.to_string(),
        options.mode,
        options.format,
        options.output.as_deref(),
        options.plot.as_deref(),
        options.interval,
    )?;
    match backend {
        Backend::Kernel => kernel::profile(settings, &options.pids, command, options.period_ms),
        _ => procfs::profile(settings, &options.pids, command, options.period_ms),
    }
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
    fn a_usage_error_is_found_under_any_context() {
        let as_error = usage("bad pid").context("outer");
        let io: Result<(), _> = Err(std::io::Error::other("inner"));
        let as_context = io.usage_context(|| "bad path".into()).unwrap_err();
        for e in [as_error, as_context.context("outer")] {
            assert!(e.downcast_ref::<Usage>().is_some(), "{e:#}");
        }
        assert!(anyhow::anyhow!("plain").downcast_ref::<Usage>().is_none());
    }

    #[test]
    fn durations_must_be_positive_numbers() {
        for bad in ["0s", "-1s", "fast", "", "1h"] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
