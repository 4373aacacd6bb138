//! The command lines of the two binaries, `monitor` and `work`: here rather than in the
//! binaries so that the documentation generator (`examples/docs.rs`) writes the man pages
//! and shell completions from the very definitions the binaries parse with. The Debian
//! package installs them as `pfprof` and `pfprof-work`: each names itself after the name
//! it was started by.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::LazyLock;
use std::time::Duration;

use clap::builder::{PossibleValue, StringValueParser, StyledStr, TypedValueParser};
use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum, ValueHint};
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

/// The width `--help` is laid out for: clap (without its `wrap_help` feature, which would
/// bring a crate for the terminal's size) does not wrap, so the long help is wrapped
/// here and the short help is written to fit.
pub const HELP_WIDTH: usize = 80;

/// The headings the options are grouped under, in `--help` and in the man pages.
pub mod heading {
    pub const TARGET: &str = "Target";
    pub const FLEET: &str = "Fleet (many cgroups)";
    pub const PROFILE: &str = "Profile";
    pub const OUTPUT: &str = "Output";
    pub const EXPORTERS: &str = "Exporters";
}

/// One example of a command line: what it does, and the line with `{name}` for the
/// program's name. `--help` and the man pages show the same ones.
pub struct Example {
    pub what: &'static str,
    pub line: &'static str,
}

/// The examples of `monitor run`.
pub const RUN_EXAMPLES: &[Example] = &[
    Example {
        what: "Profile a command: its summary once it ends",
        line: "{name} run -- sort -o sorted.txt big.txt",
    },
    Example {
        what: "The rows to a CSV file and a plot of them",
        line: "{name} run -o prof.csv --plot prof.svg -- make -j4",
    },
    Example {
        what: "Nothing shown; the summary as JSON",
        line: "{name} run -q --summary run.json -- make",
    },
];

/// The examples of `monitor` without `run` (attaching, cgroups).
pub const ATTACH_EXAMPLES: &[Example] = &[
    Example {
        what: "10 rows of a second each, as pidstat -p 1234 1 10",
        line: "{name} -p 1234 --period 1s --count 10",
    },
    Example {
        what: "A minute of process 1234 in CSV",
        line: "{name} -p 1234 --mode relaxed --duration 1m > prof.csv",
    },
    Example {
        what: "A service's cgroup, served to Prometheus",
        line: "{name} --cgroup /sys/fs/cgroup/system.slice/nginx.service \\\n    --prometheus :9464 -o /dev/null",
    },
];

/// `examples` as `--help` shows them: each line, then what it does.
fn examples_help(name: &str, examples: &[&[Example]]) -> String {
    let mut text = String::from("Examples:\n");
    for example in examples.iter().flat_map(|e| e.iter()) {
        text.push_str(&format!(
            "  {}\n      {}\n",
            example.line.replace("{name}", name).replace('\n', "\n  "),
            example.what
        ));
    }
    text
}

/// The monitor's command line, for the program called `name`, as its binary parses it and
/// `--help` shows it (laid out for [`HELP_WIDTH`] columns).
pub fn monitor_command(name: &'static str) -> clap::Command {
    fit_help(monitor_definition(name))
}

/// The monitor's command line as defined, its help text unwrapped: what the man pages and
/// the shell completions are made from.
pub fn monitor_definition(name: &'static str) -> clap::Command {
    let after = format!(
        "{}\n{}",
        examples_help(name, &[RUN_EXAMPLES, ATTACH_EXAMPLES]),
        wrap(
            &format!(
                "`{name} run` prints the summary on standard error once the command ends; \
                 its samples go only where --output says. Without `run`, samples go to \
                 --output (with a live line of totals and rates on a terminal) or standard \
                 output (a table at a terminal). Durations take a unit (250ms, \
                 10s, 1m, 1h30m). `{name} run --help` shows run's options; `man {name}`, the \
                 output's columns and the exit statuses."
            ),
            HELP_WIDTH - 1
        )
    );
    let run_after = format!(
        "{}\n{}",
        examples_help(name, &[RUN_EXAMPLES]),
        wrap(
            &format!(
                "The standard input and output are the command's: samples go only where \
                 --output says (`-o -`: standard output). `man {name}-run`: the output's \
                 columns and the exit statuses."
            ),
            HELP_WIDTH - 1
        )
    );
    let command = Cli::command()
        .name(name)
        .bin_name(name)
        .version(version())
        .term_width(HELP_WIDTH)
        .override_usage(format!(
            "{name} [OPTIONS] -p PID...\n       \
             {name} [OPTIONS] --cgroup PATH\n       \
             {name} [OPTIONS] {{--cgroups-under DIR | --unit PATTERN}}... EXPORTER...\n       \
             {name} run [OPTIONS] [--] CMD [ARG]..."
        ))
        .after_help(after);
    details(export_short_help(command)).mut_subcommand("run", |run| {
        // What `run` refuses (or has no use for) is not offered: it is still parsed,
        // so that the refusal can say why.
        let run = ["pids", "cgroup", "cgroups_under", "units", "max_targets"]
            .into_iter()
            .fold(run, |run, id| run.mut_arg(id, |arg| arg.hide(true)))
            .term_width(HELP_WIDTH)
            .override_usage(format!("{name} run [OPTIONS] [--] CMD [ARG]..."))
            .after_help(run_after);
        export_short_help(run)
    })
}

/// The options [`ExportOptions`] defines: each with a short help of its own for `-h` (the
/// first of its long help's sentences is too long for a line) and what its value is to
/// the shell completions.
const EXPORT_PRESENTATION: &[(&str, &str, ValueHint)] = &[
    ("prometheus", "Serve the metrics at ADDR", ValueHint::Other),
    ("otlp", "Push the metrics to a collector", ValueHint::Url),
    ("headers", "A header for every push", ValueHint::Other),
    ("compression", "Compress each push", ValueHint::Other),
    (
        "textfile",
        "Write node_exporter files in DIR",
        ValueHint::DirPath,
    ),
    ("linger", "Final values stay DUR", ValueHint::Other),
    ("linger_scrapers", "Scrapers to wait for", ValueHint::Other),
];

/// `command`'s exporter options as [`EXPORT_PRESENTATION`] says, their whole text as the
/// long help.
fn export_short_help(command: clap::Command) -> clap::Command {
    EXPORT_PRESENTATION
        .iter()
        .fold(command, |command, &(id, short, hint)| {
            command.mut_arg(id, |arg| {
                let arg = arg.value_hint(hint);
                match arg.get_long_help().or(arg.get_help()).cloned() {
                    Some(long) => arg.help(short).long_help(long),
                    None => arg.help(short),
                }
            })
        })
}

/// The workload generator's command line, for the program called `name`.
pub fn work_command(name: &'static str) -> clap::Command {
    fit_help(work_definition(name))
}

/// The workload generator's command line as defined (for its man page and completions).
pub fn work_definition(name: &'static str) -> clap::Command {
    details(WorkArgs::command())
        .name(name)
        .bin_name(name)
        .version(env!("CARGO_PKG_VERSION"))
        .term_width(HELP_WIDTH)
        .after_help(format!(
            "Example:\n  {name} 256 R 50000 10 --sleep-ms 200\n      \
             256 MiB, 10 iterations of 50000 random accesses, 200 ms apart"
        ))
}

/// `command` (its subcommands too) without the first paragraph of a long help or long
/// about that is the short one (clap's derive makes a doc comment's first paragraph the
/// short help, and the whole the long): `--help` and the man pages give the details
/// alone, the summary they would repeat being the NAME line or `-h`'s.
fn details(command: clap::Command) -> clap::Command {
    fn rest(short: Option<&StyledStr>, long: Option<&StyledStr>) -> Option<String> {
        let (short, long) = (short?.to_string(), long?.to_string());
        let (first, rest) = long.split_once("\n\n")?;
        (first.trim_end_matches('.') == short.trim_end_matches('.')).then(|| rest.to_owned())
    }
    let about = rest(command.get_about(), command.get_long_about());
    let command = match about {
        Some(about) => command.long_about(about),
        None => command,
    };
    let names: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    let command = command.mut_args(|arg| match rest(arg.get_help(), arg.get_long_help()) {
        Some(long) => arg.long_help(long),
        None => arg,
    });
    names.iter().fold(command, |command, name| {
        command.mut_subcommand(name, details)
    })
}

/// `command` with each option's long help (`--help`'s, which clap shows from the 11th
/// column and does not wrap) wrapped to [`HELP_WIDTH`].
fn fit_help(command: clap::Command) -> clap::Command {
    /// `--help` shows an option's help below it, indented this much.
    const INDENT: usize = 10;
    let fit = |arg: clap::Arg| {
        let long = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string());
        match long {
            Some(text) => arg.long_help(wrap(&text, HELP_WIDTH - 1 - INDENT)),
            None => arg,
        }
    };
    let names: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    let about = command
        .get_long_about()
        .map(|about| wrap(&about.to_string(), HELP_WIDTH - 1));
    let command = match about {
        Some(about) => command.long_about(about),
        None => command,
    };
    names.iter().fold(command.mut_args(fit), |command, name| {
        command.mut_subcommand(name, fit_help)
    })
}

/// `text` with each paragraph's words in lines of at most `width` characters (a word
/// longer than that alone on its line). Lines that begin with a space, as a list's, are
/// kept as they are.
pub fn wrap(text: &str, width: usize) -> String {
    let mut out = Vec::new();
    for paragraph in text.split("\n\n") {
        if paragraph.lines().any(|l| l.starts_with(' ')) {
            out.push(paragraph.to_owned());
            continue;
        }
        let mut lines: Vec<String> = Vec::new();
        let mut line = String::new();
        for word in paragraph.split_whitespace() {
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(word);
        }
        lines.push(line);
        out.push(lines.join("\n"));
    }
    out.join("\n\n")
}

/// A value parser that parses with `T`'s `FromStr` (its messages kept) and offers `names`
/// as the possible values: to shell completions, and to help unless hidden.
#[derive(Clone)]
pub struct Named<T> {
    names: &'static [(&'static str, &'static str)],
    parsed: std::marker::PhantomData<fn() -> T>,
}

/// `T` parsed from one of `names`: (name, what it means).
pub fn named<T>(names: &'static [(&'static str, &'static str)]) -> Named<T> {
    Named {
        names,
        parsed: std::marker::PhantomData,
    }
}

impl<T> TypedValueParser for Named<T>
where
    T: FromStr + Clone + Send + Sync + 'static,
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    type Value = T;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<T, clap::Error> {
        StringValueParser::new()
            .try_map(|s| s.parse::<T>())
            .parse_ref(cmd, arg, value)
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        Some(Box::new(
            self.names
                .iter()
                .map(|(name, help)| PossibleValue::new(*name).help(*help)),
        ))
    }
}

/// `--mode`'s values.
pub const MODES: &[(&str, &str)] = &[
    (
        "strict",
        "no sample is ever lost: the producer waits for room",
    ),
    (
        "relaxed",
        "the producer never waits: samples may be lost, and are counted",
    ),
];

/// `--format`'s values.
pub const FORMATS: &[(&str, &str)] = &[
    ("csv", "a header line, then one line a row"),
    (
        "jsonl",
        "JSON Lines: one object a row, keyed as the CSV's columns",
    ),
    (
        "table",
        "for a person: a line every --interval, rates a second and MiB \
         (the default when the samples go to standard output and it is a terminal)",
    ),
];

#[derive(Parser)]
#[command(
    name = "monitor",
    about = "Per-process page-fault profiler",
    long_about = "Profiles the page faults of processes: minor and major faults, CPU time, \
        resident memory and memory stall every period (50 ms unless --period says), from the \
        pfprof kernel module's ring or from /proc.\n\n\
        It attaches to running processes (-p PID), follows every process of a cgroup \
        (--cgroup), exports many cgroups at once (--cgroups-under, --unit), or starts a \
        command and profiles it from its first instruction (run). Rows go to --output or \
        standard output (a table at a terminal, CSV or JSON Lines); a summary (the totals, peak memory, where the \
        faults were, a thrashing verdict) goes to standard error; the metrics can be served \
        to Prometheus, pushed to an OpenTelemetry collector or written for node_exporter.",
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
    /// Run a command and profile it until it exits.
    ///
    /// Start CMD, profile it from its first instruction until it exits, and exit with its
    /// exit status (127: not found, 126: not executable), as time(1) and perf stat do.
    /// Samples go only to --output: the standard output is the command's. The summary
    /// follows on standard error once it ends; nothing is drawn while it runs (it shares
    /// the terminal).
    Run {
        // Before the options: a field after them would be shown under their last heading.
        /// The command to profile and its arguments (after `--`).
        #[arg(
            required = true,
            trailing_var_arg = true,
            value_name = "CMD",
            value_hint = ValueHint::CommandWithArguments
        )]
        command: Vec<OsString>,
        #[command(flatten)]
        options: Options,
    },
}

#[derive(Args, Clone, Debug)]
pub struct Options {
    /// Attach to process PID (repeatable).
    ///
    /// Profile the running process PID, with its descendants unless --no-inherit. Repeat
    /// the option for more processes (-p 1 -p 2).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX)),
        value_hint = ValueHint::Other,
        help_heading = heading::TARGET
    )]
    pub pids: Vec<u32>,
    /// Profile the processes of a cgroup v2 directory.
    ///
    /// Profile every process in the cgroup v2 directory PATH and its descendant cgroups,
    /// as they enter and leave, each counted while inside, with the module or without.
    /// The profile ends when the cgroup is removed, or with Ctrl-C.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with = "pids",
        value_hint = ValueHint::DirPath,
        help_heading = heading::TARGET
    )]
    pub cgroup: Option<PathBuf>,
    /// Export each cgroup directly under DIR.
    ///
    /// Profile every cgroup directly under the cgroup v2 directory DIR (repeatable), each
    /// as --cgroup would and exported on its own with target=its path (below a kubelet's
    /// kubepods cgroup: each container, labelled pod_uid, qos_class, container_id, and
    /// namespace, pod, container from /var/log/pods and /var/log/containers). Looked
    /// at again every --interval: a cgroup that appears or comes back is profiled. Needs
    /// --prometheus, --otlp or --textfile (one address, one push, one file for all);
    /// procfs backend only.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with_all = ["pids", "cgroup"],
        value_hint = ValueHint::DirPath,
        help_heading = heading::FLEET
    )]
    pub cgroups_under: Vec<PathBuf>,
    /// Export each systemd unit named like PATTERN.
    ///
    /// Profile the cgroup of every systemd unit named like PATTERN (`*` and `?`, e.g.
    /// 'nginx*.service'; repeatable), found by name under the cgroup2 mount, as
    /// --cgroups-under profiles each of its cgroups.
    #[arg(
        long = "unit",
        value_name = "PATTERN",
        conflicts_with_all = ["pids", "cgroup"],
        value_hint = ValueHint::Other,
        help_heading = heading::FLEET
    )]
    pub units: Vec<String>,
    /// The most targets exported at once.
    ///
    /// With --cgroups-under or --unit: the most targets exported at once (each is about 12
    /// series); those found beyond are left out, said on standard error.
    #[arg(long, value_name = "N", default_value_t = crate::fleet::MAX_TARGETS,
          value_parser = clap::value_parser!(u16).range(1..),
          value_hint = ValueHint::Other, help_heading = heading::FLEET)]
    pub max_targets: u16,
    /// Ring protocol.
    ///
    /// The protocol of the ring the samples come through. strict: no sample is ever lost,
    /// the producer waits for room; relaxed: the producer never waits, and the samples it
    /// could not write are counted as lost.
    #[arg(
        long,
        default_value_t = Mode::Strict,
        value_name = "strict|relaxed",
        value_parser = named::<Mode>(MODES),
        hide_possible_values = true,
        help_heading = heading::PROFILE
    )]
    pub mode: Mode,
    /// Source: kernel, procfs or auto.
    ///
    /// Where samples come from: the pfprof module (kernel), or /proc (procfs). auto: the
    /// module when /dev/pfprof exists.
    #[arg(long, value_enum, default_value_t = BackendChoice::Auto, hide_possible_values = true,
          help_heading = heading::PROFILE)]
    pub backend: BackendChoice,
    /// A row's length [default: 50ms].
    ///
    /// The procfs backend's sampling period, whole milliseconds from 1ms to 10s (50ms
    /// unless given): each row covers one. The module's is its period_ms parameter, within
    /// the same bounds.
    #[arg(long, value_parser = parse_period, value_name = "DUR", conflicts_with = "period_ms",
          value_hint = ValueHint::Other, help_heading = heading::PROFILE)]
    pub period: Option<u32>,
    /// The same as --period, in milliseconds.
    #[arg(
        long,
        value_parser = clap::value_parser!(u32)
            .range(i64::from(abi::PERIOD_MS_MIN)..=i64::from(abi::PERIOD_MS_MAX)),
        value_name = "N",
        value_hint = ValueHint::Other,
        help_heading = heading::PROFILE
    )]
    pub period_ms: Option<u32>,
    /// How often the ready rows are taken.
    ///
    /// How often the monitor takes the samples that are ready (e.g. 1s, 250ms), in both
    /// modes: one wake-up per interval keeps its own cost low, and the rows are written
    /// then (a row is a --period). The end of the profile is seen at once whatever the
    /// interval.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DUR",
          value_hint = ValueHint::Other, help_heading = heading::PROFILE)]
    pub interval: Duration,
    /// End the profile after DUR.
    ///
    /// End the profile after DUR, as SIGTERM does (`run` sends it to its command, as
    /// timeout(1) does).
    #[arg(long, value_parser = parse_duration, value_name = "DUR",
          value_hint = ValueHint::Other, help_heading = heading::PROFILE)]
    pub duration: Option<Duration>,
    /// End the profile after N rows.
    ///
    /// End the profile after N samples, as SIGTERM does: the rows, summary, plot and
    /// exports hold exactly the first N (`--period 1s --count 5`: pidstat's `1 5`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          value_hint = ValueHint::Other, help_heading = heading::PROFILE)]
    pub count: Option<u64>,
    /// Count the processes named, not their descendants.
    ///
    /// Count only the processes named (the command, the --pid processes, and with the
    /// module each process that registers itself), not their descendants. By default each
    /// counts with its descendants, as with `perf stat` and `time`: live ones as they run,
    /// reaped ones through its children's counts. One that leaves without being waited
    /// for (orphaned, or its parent does not wait) stops counting then; what it did
    /// before stays counted.
    #[arg(long, help_heading = heading::PROFILE)]
    pub no_inherit: bool,
    /// Do not say which mappings took the faults.
    ///
    /// Do not attribute faults to the mappings and processes that took them (both backends
    /// do: the module with its own kernel counters, the procfs backend through perf events
    /// where the kernel allows them; never with --cgroups-under or --unit: 2 perf events
    /// per CPU per target).
    #[arg(long, conflicts_with = "minor_sampling", help_heading = heading::PROFILE)]
    pub no_attribution: bool,
    /// Record one minor fault in N [default: 61].
    ///
    /// Record one minor fault in N to attribute them (every major fault is recorded):
    /// the minor counts by mapping are estimates, N times what was recorded [default: 61].
    #[arg(
        long,
        value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..=1_000_000),
        value_hint = ValueHint::Other,
        help_heading = heading::PROFILE
    )]
    pub minor_sampling: Option<u64>,
    /// Write the rows to FILE (`-`: stdout).
    ///
    /// Write samples to FILE (replaced only once the profile is complete); `-` is
    /// standard output, /dev/stderr standard error. Without it, `run` writes no
    /// samples and the others write them to standard output.
    #[arg(long, short, value_name = "FILE", value_hint = ValueHint::FilePath,
          help_heading = heading::OUTPUT)]
    pub output: Option<PathBuf>,
    /// Format of the rows.
    ///
    /// Format of the samples: csv (a header line, then a line a row), jsonl (JSON Lines:
    /// an object a row, keyed as the CSV's columns) or table (for a person: a line every
    /// --interval, as pidstat's, with rates a second and memory in MiB). Default: table
    /// when the samples go to standard output and it is a terminal, csv otherwise.
    #[arg(
        long,
        value_name = "csv|jsonl|table",
        value_parser = named::<Format>(FORMATS),
        hide_possible_values = true,
        help_heading = heading::OUTPUT
    )]
    pub format: Option<Format>,
    /// Also draw the profile as an SVG.
    ///
    /// Also draw the profile as an SVG (the name must end in .svg): a timeline of fault
    /// rates, major faults by mapping (where attributed), memory, memory stall and CPU
    /// utilization, thrashing shaded.
    #[arg(long, value_name = "FILE.svg", value_hint = ValueHint::FilePath,
          help_heading = heading::OUTPUT)]
    pub plot: Option<PathBuf>,
    /// Write the summary to FILE.
    ///
    /// Write the summary to FILE instead of standard error (replaced once complete).
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath,
          help_heading = heading::OUTPUT)]
    pub summary: Option<PathBuf>,
    /// The summary as text or JSON.
    ///
    /// The summary as text (default) or as one JSON object (default for a --summary
    /// FILE ending in .json).
    #[arg(long, value_enum, value_name = "text|json", hide_possible_values = true,
          help_heading = heading::OUTPUT)]
    pub summary_format: Option<SummaryStyle>,
    /// Show nothing but errors.
    ///
    /// Print nothing on standard error but errors: no live line, no summary (a
    /// --summary FILE is still written).
    #[arg(long, short, help_heading = heading::OUTPUT)]
    pub quiet: bool,
    #[command(flatten, next_help_heading = heading::EXPORTERS)]
    pub export: ExportOptions,
}

/// `--backend`: which [`crate::backend::Backend`] produces the samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackendChoice {
    /// The module when /dev/pfprof exists, else /proc.
    Auto,
    /// The pfprof module's ring.
    Kernel,
    /// /proc, read every period.
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

/// `work`'s access patterns.
pub const PATTERNS: &[(&str, &str)] = &[
    ("R", "random accesses over the whole buffer"),
    ("L", "accesses with locality"),
];

/// The workload generator's arguments.
#[derive(Parser)]
#[command(
    name = "work",
    about = "Workload generator of pfprof's tests and examples",
    long_about = "Workload generator: makes random (R) or local (L) accesses to MiB of \
             memory it allocates, iteration after iteration; registers itself with the \
             pfprof module when it is loaded. With --file, also sweeps a shared file mapping, and \
             says how many faults each mapping should have taken."
)]
pub struct WorkArgs {
    /// Memory to allocate, in MiB (1 to 1024).
    #[arg(value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub mib: u16,
    /// R: random accesses; L: with locality.
    ///
    /// R: random accesses over the whole buffer; L: accesses with locality.
    #[arg(value_name = "R|L", value_parser = named::<Pattern>(PATTERNS), hide_possible_values = true)]
    pub pattern: Pattern,
    /// Memory accesses per iteration.
    pub accesses: u64,
    /// Number of iterations.
    #[arg(default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Pause between iterations, in ms.
    ///
    /// Pause between iterations, in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 1000)]
    pub sleep_ms: u64,
    /// Also sweep a shared mapping of FILE.
    ///
    /// Also create FILE (replacing it; removed at the end), map it shared, and write a
    /// byte to each of its pages every iteration, after the accesses: one fault a page
    /// and sweep. Then say how many faults each mapping should have taken.
    #[arg(long, value_name = "FILE", value_hint = ValueHint::FilePath)]
    pub file: Option<PathBuf>,
    /// The file's size in MiB (default: the buffer's).
    #[arg(long, value_name = "MIB", requires = "file",
          value_parser = clap::value_parser!(u16).range(1..=4096))]
    pub file_mib: Option<u16>,
    /// Make the sweeps' faults major.
    ///
    /// Before every sweep but the first, write the file's pages back and drop them from
    /// the page cache, so that the sweep's faults are major.
    #[arg(long, requires = "file")]
    pub evict: bool,
    /// Sweep only these MiB of the file (repeatable).
    ///
    /// Sweep only the file's pages from START to END MiB (repeatable: each range swept
    /// in turn, in the order given), and say what each range took.
    #[arg(long, value_name = "START-END", requires = "file", value_parser = parse_mib_range)]
    pub file_range: Vec<std::ops::Range<u16>>,
    /// Read each --file-range with code of its own.
    ///
    /// Read the first --file-range in work's function read_first_range, the second in
    /// read_second_range, the third with the C library's memchr, and say which read
    /// each.
    #[arg(long, requires = "file_range")]
    pub by_function: bool,
}

/// `START-END` in MiB, START below END: a range of `work`'s file.
fn parse_mib_range(s: &str) -> Result<std::ops::Range<u16>, String> {
    let (start, end) = (s.split_once('-')).ok_or_else(|| format!("{s:?} is not START-END"))?;
    let mib = |n: &str| n.parse::<u16>().map_err(|e| format!("{n:?}: {e}"));
    let (start, end) = (mib(start)?, mib(end)?);
    if start >= end {
        return Err(format!("{s:?}: START must be below END"));
    }
    Ok(start..end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_lines_pass_clap_s_own_checks() {
        monitor_command("monitor").debug_assert();
        monitor_definition("pfprof").debug_assert();
        work_command("work").debug_assert();
    }

    #[test]
    fn wrap_fills_each_paragraph_to_the_width_and_keeps_indented_ones() {
        let text = "one two three four five six\n\nseven\n\n  kept   as is\n  too";
        assert_eq!(
            wrap(text, 10),
            "one two\nthree four\nfive six\n\nseven\n\n  kept   as is\n  too"
        );
        // A word longer than the width is alone on its line.
        assert_eq!(wrap("a verylongword b", 4), "a\nverylongword\nb");
    }

    #[test]
    fn mode_format_and_pattern_values_parse_to_what_they_name() {
        for (name, _) in MODES {
            assert_eq!(name.parse::<Mode>().unwrap().to_string(), *name);
        }
        for (name, _) in FORMATS {
            assert!(name.parse::<Format>().is_ok(), "{name}");
        }
        for (name, _) in PATTERNS {
            assert!(name.parse::<Pattern>().is_ok(), "{name}");
        }
    }
}
