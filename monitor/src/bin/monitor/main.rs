//! `monitor`: profiles page faults and CPU time of processes, from the pfprof module's
//! ring (kernel backend) or from /proc (procfs backend), in the strict or relaxed protocol.
//! This file only parses the arguments (defined in `monitor::cli`) and turns errors into
//! messages and exit codes; the profile itself is `monitor::profile`.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::Path;
use std::process::ExitCode;

use clap::FromArgMatches;
use monitor::backend::install;
use monitor::backend::kernel::Kernel;
use monitor::backend::procfs::Procfs;
use monitor::backend::BackendError;
use monitor::cli::{self, BackendChoice, Cli, Command, Options};
use monitor::export::ExportError;
use monitor::fleet::{FleetRequest, Selector};
use monitor::output::error::OutputError;
use monitor::output::summary::{SummaryRequest, SummaryStyle};
use monitor::output::writer::{Destination, Format};
use monitor::profile::error::ProfileError;
use monitor::profile::{self, Request};
use monitor::system::exit::Blame;
use shared_layout::abi::DEVICE_PATH;
use shared_layout::device::DeviceError;

fn main() -> ExitCode {
    let command_line = || cli::monitor_command(monitor::program_name());
    let cli = Cli::from_arg_matches(&command_line().get_matches())
        .unwrap_or_else(|e| e.format(&mut command_line()).exit());
    let (options, command) = match cli.command {
        Some(Command::Run { options, command }) => (options, Some(command)),
        None => (cli.options, None),
    };
    if command.is_some() && options.cgroup.is_some() {
        command_line()
            .error(
                clap::error::ErrorKind::ArgumentConflict,
                "--cgroup profiles a cgroup: use it without `run`",
            )
            .exit();
    }
    if command.is_some() && !options.pids.is_empty() {
        command_line()
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
        cli::monitor_command(monitor::program_name())
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
            format: Format::Csv,
            output: Destination::Nowhere,
            plot: None,
            command: None,
            pids: Vec::new(),
            cgroup: None,
            period_ms: options.period.or(options.period_ms),
            inherit: !options.no_inherit,
            // From one set of events for every target (fleet_faults.rs).
            attribution: attribution(options.no_attribution, options.minor_sampling),
            export: options.export,
            summary: SummaryRequest {
                file: None,
                style: SummaryStyle::Text,
                quiet: true,
            },
            duration: None,
            count: None,
            supervised: None,
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
    let name = monitor::program_name();
    let mut message = format!("{name}: error: {:#}\n", anyhow::Error::new(e));
    if let Some(advice) = advice {
        message += &format!("{name}: {advice}\n");
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
    // A person at a terminal reads a table; anything else is read by a program.
    let format = options.format.unwrap_or_else(|| {
        if output == Destination::Stdout && std::io::stdout().is_terminal() {
            Format::Table
        } else {
            Format::Csv
        }
    });
    let summary_style = (options.summary_format)
        .unwrap_or_else(|| SummaryStyle::for_file(options.summary.as_deref()));
    let request = Request {
        mode: options.mode,
        interval: options.interval,
        format,
        output,
        plot: options.plot,
        command,
        pids: options.pids,
        cgroup: options.cgroup,
        period_ms: options.period.or(options.period_ms),
        summary: SummaryRequest {
            file: options.summary,
            style: summary_style,
            quiet: options.quiet,
        },
        duration: options.duration,
        count: options.count,
        inherit: !options.no_inherit,
        attribution: attribution(options.no_attribution, options.minor_sampling),
        export: options.export,
        supervised: None,
    };
    match backend {
        BackendChoice::Kernel => profile::profile::<Kernel>(request),
        _ => profile::profile::<Procfs>(request),
    }
}

/// Faults attributed, one minor fault in this many recorded, unless `--no-attribution`.
fn attribution(no_attribution: bool, minor_sampling: Option<u64>) -> Option<u64> {
    (!no_attribution)
        .then_some(minor_sampling.unwrap_or(monitor::attribution::DEFAULT_MINOR_SAMPLING))
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
        ProfileError::Backend(BackendError::Device(DeviceError::AbiMismatch { ours, module })) => {
            if module < ours {
                install::when_module_older(&release())
            } else {
                install::when_module_newer(
                    install::loaded_module_version(Path::new(install::MODULE_VERSION_FILE))
                        .as_deref(),
                )
            }
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
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn the_modules_refusals_are_usage_errors_that_say_what_to_do() {
        let device = PathBuf::from(DEVICE_PATH);
        // The messages name the program as it was started (this test's binary).
        let name = monitor::program_name();
        let refused = |e| failure(ProfileError::Backend(BackendError::Device(e)));
        assert_eq!(
            refused(DeviceError::PermissionDenied {
                path: device.clone()
            }),
            (
                format!(
                    "{name}: error: cannot use the pfprof module: permission denied opening \
                     /dev/pfprof: install the udev rule /usr/share/pfprof/udev/99-pfprof.rules \
                     (kmod/99-pfprof.rules in the source) or run as root\n\
                     {name}: --backend procfs works without the module\n"
                ),
                2
            )
        );
        assert_eq!(
            refused(DeviceError::TooManySessions { path: device }),
            (
                format!(
                    "{name}: error: cannot use the pfprof module: too many sessions open on \
                     /dev/pfprof: close another monitor of this user, or raise the module's \
                     max_sessions\n{name}: --backend procfs works without the module\n"
                ),
                2
            )
        );
        assert_eq!(
            refused(DeviceError::NotAllowed { pid: 42 }),
            (
                format!(
                    "{name}: error: cannot use the pfprof module: not allowed to profile \
                     process 42: it belongs to another user (profile it as that user or as \
                     root)\n{name}: check the pid with `ps -p 42` and that it is yours\n"
                ),
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
                "{name}: error: cannot use the pfprof module: the module speaks ABI version \
                 {}, this monitor speaks {ours}: the module is older",
                ours - 1
            )),
            "{message}"
        );
        assert!(
            message.ends_with(&format!(
                "{name}: {}\n",
                install::when_module_older(&release())
            )),
            "{message}"
        );
        // A newer one: the monitor's package of the module's version.
        let (message, code) = refused(DeviceError::AbiMismatch {
            ours,
            module: ours + 1,
        });
        assert_eq!(code, 2);
        assert!(message.contains("the monitor is older"), "{message}");
        assert!(
            message.ends_with(&format!(
                "{name}: {}\n",
                install::when_module_newer(
                    install::loaded_module_version(Path::new(install::MODULE_VERSION_FILE))
                        .as_deref()
                )
            )),
            "{message}"
        );
    }
}
