//! The man pages and shell completions of the Debian package (debian/rules runs it), made
//! from the binaries' own command lines (`monitor::cli`) under the names the package
//! installs them by, `pfprof` and `pfprof-work`:
//!
//!     cargo run -p monitor --example docs -- DIR
//!
//! writes DIR/man/pfprof.1, pfprof-run.1 and pfprof-work.1, and DIR/completions/ for bash
//! (pfprof.bash), zsh (_pfprof) and fish (pfprof.fish), each for both commands.
//!
//! A page is clap_mangen's sections (NAME, SYNOPSIS, DESCRIPTION, the options under their
//! headings) and those a reader of perf-stat(1) or pidstat(1) looks for: OUTPUT (every
//! column the rows have, from the code that writes them), EXIT STATUS, ENVIRONMENT (the
//! OpenTelemetry variables `--otlp` reads), EXAMPLES (the ones `--help` shows, set as
//! typed) and SEE ALSO. The completions are clap_complete's, with what it cannot know: the
//! process ids `-p` takes, and the command (and its arguments) after `run`'s options.
//!
//! `tests/reference.rs` includes this file and checks what it makes.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Arg, ValueHint};
use clap_complete::Shell;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;
use monitor::cli::{self, heading, Example};
use monitor::output::writer::csv_header;
use monitor::system::exit::{Blame, NOTHING_PUSHED};

#[allow(dead_code)] // Included by tests/reference.rs, which has its own main.
fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        bail!("usage: docs DIR (the man pages go to DIR/man, the completions to DIR/completions)");
    };
    write_all(&PathBuf::from(dir))
}

/// The installed names of the two programs.
pub const MONITOR: &str = "pfprof";
pub const WORK: &str = "pfprof-work";

/// Writes DIR/man/*.1 and DIR/completions/*.
pub fn write_all(dir: &Path) -> anyhow::Result<()> {
    let (man, completions) = (dir.join("man"), dir.join("completions"));
    for path in [&man, &completions] {
        fs::create_dir_all(path).with_context(|| format!("creating {}", path.display()))?;
    }
    for (name, page) in man_pages()? {
        let path = man.join(&name);
        fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    }
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        for (name, script) in completions_for(shell) {
            let path = completions.join(&name);
            fs::write(&path, script).with_context(|| format!("writing {}", path.display()))?;
        }
    }
    Ok(())
}

/// The commands as the pages and completions describe them: built, so that a
/// subcommand knows its full name (`pfprof run`).
fn commands() -> (clap::Command, clap::Command) {
    let mut monitor = cli::monitor_definition(MONITOR);
    monitor.build();
    let mut work = cli::work_definition(WORK);
    work.build();
    (monitor, work)
}

/// Each man page: its file name and its text.
pub fn man_pages() -> anyhow::Result<Vec<(String, String)>> {
    let (monitor, work) = commands();
    // `help` is a subcommand of the binary, not a page.
    let monitor = monitor.disable_help_subcommand(true);
    let run = monitor
        .find_subcommand("run")
        .context("the monitor has no `run`")?
        .clone();
    Ok(vec![
        (
            format!("{MONITOR}.1"),
            page(
                &monitor,
                &Extra {
                    output: true,
                    exits: &exit_statuses(false),
                    environment: true,
                    examples: &[cli::RUN_EXAMPLES, cli::ATTACH_EXAMPLES],
                    see_also: &["pfprof-run(1)", "pfprof-work(1)"],
                },
            )?,
        ),
        (
            format!("{MONITOR}-run.1"),
            page(
                &run,
                &Extra {
                    output: true,
                    exits: &exit_statuses(true),
                    environment: true,
                    examples: &[cli::RUN_EXAMPLES],
                    see_also: &["pfprof(1)", "pfprof-work(1)"],
                },
            )?,
        ),
        (
            format!("{WORK}.1"),
            page(
                &work,
                &Extra {
                    output: false,
                    exits: &[
                        ("0", "The iterations are done.".to_owned()),
                        (
                            "1",
                            "The memory or the file could not be mapped or written.".to_owned(),
                        ),
                        ("2", "Usage: the message says what was expected.".to_owned()),
                    ],
                    environment: false,
                    examples: &[&[Example {
                        what: "256 MiB, 10 iterations of 50000 random accesses, 200 ms apart, \
                               profiled",
                        line: "pfprof run -- {name} 256 R 50000 10 --sleep-ms 200",
                    }]],
                    see_also: &["pfprof(1)", "pfprof-run(1)"],
                },
            )?,
        ),
    ])
}

/// What a page has beyond the command line's own sections.
struct Extra<'a> {
    output: bool,
    exits: &'a [(&'static str, String)],
    environment: bool,
    examples: &'a [&'a [Example]],
    see_also: &'a [&'a str],
}

/// One page: clap_mangen's sections, the options grouped, then the extra ones.
fn page(command: &clap::Command, extra: &Extra) -> anyhow::Result<String> {
    let name = command
        .get_display_name()
        .unwrap_or(command.get_name())
        .to_owned();
    let man = Man::new(command.clone())
        .title(name.to_uppercase())
        .date(date())
        .source(format!("pfprof {}", env!("CARGO_PKG_VERSION")))
        .manual("User Commands");
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    man.render_name_section(&mut out)?;
    synopsis(command).to_writer(&mut out)?;
    man.render_description_section(&mut out)?;
    let mut options = Vec::new();
    man.render_options_section(&mut options)?;
    out.extend(subsections(&String::from_utf8(options)?).into_bytes());
    if command.get_subcommands().next().is_some() {
        man.render_subcommands_section(&mut out)?;
    }
    let mut roff = Roff::new();
    if extra.output {
        output_section(&mut roff)?;
    }
    exit_section(&mut roff, extra.exits);
    if extra.environment {
        environment_section(&mut roff);
    }
    examples_section(&mut roff, extra.examples, &name);
    see_also_section(&mut roff, extra.see_also);
    roff.to_writer(&mut out)?;
    if command.get_version().is_some() {
        man.render_version_section(&mut out)?;
    }
    Ok(String::from_utf8(out)?)
}

/// The page's date, YYYY-MM-DD: SOURCE_DATE_EPOCH's (dpkg-buildpackage sets it to the
/// changelog's, so that a rebuild makes the same pages), else today's.
fn date() -> String {
    let seconds = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0))
        });
    // Days since 1970-01-01 to a civil date (Howard Hinnant's days_from_civil, inverted).
    let z = seconds.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// SYNOPSIS: the usage lines `--help` shows (`{name} [OPTIONS] -p PID...`), each on its
/// own line, literal words in bold and what stands for a value in italics.
fn synopsis(command: &clap::Command) -> Roff {
    let usage = command.clone().render_usage().to_string();
    let usage = usage.trim_start_matches("Usage:");
    let mut roff = Roff::new();
    roff.control("SH", ["SYNOPSIS"]).control("nf", []);
    for line in usage.lines().filter(|l| !l.trim().is_empty()) {
        let mut inlines = Vec::new();
        for (i, word) in line.split_whitespace().enumerate() {
            if i > 0 {
                inlines.push(roman(" "));
            }
            inlines.extend(synopsis_word(word));
        }
        roff.text(inlines);
    }
    roff.control("fi", []);
    roff
}

/// A word of a usage line: brackets, braces, bars and `...` in roman, option names and
/// the program's in bold, placeholders (upper case, `<MIB>`) in italics.
fn synopsis_word(word: &str) -> Vec<Inline> {
    let mut inlines = Vec::new();
    let core = word.trim_start_matches(['[', '{', '<']);
    let prefix = &word[..word.len() - core.len()];
    let stripped = core.trim_end_matches([']', '}', '>', '.']);
    let suffix = &core[stripped.len()..];
    if !prefix.is_empty() {
        inlines.push(roman(prefix));
    }
    if stripped == "|" || stripped.is_empty() {
        inlines.push(roman(stripped));
    } else if (stripped.chars()).all(|c| c.is_ascii_uppercase() || c == '_' || c == '|') {
        inlines.push(italic(stripped));
    } else {
        inlines.push(bold(stripped));
    }
    if !suffix.is_empty() {
        inlines.push(roman(suffix));
    }
    inlines
}

/// clap_mangen's options, one section a heading (`.SH TARGET`), as subsections of
/// OPTIONS: `.SS Target`, after the options without a heading.
fn subsections(options: &str) -> String {
    let headings = [
        heading::TARGET,
        heading::FLEET,
        heading::PROFILE,
        heading::OUTPUT,
        heading::EXPORTERS,
    ];
    let mut out = String::new();
    let mut opened = false;
    for line in options.lines() {
        let title = line
            .strip_prefix(".SH ")
            .map(|t| t.trim_matches('"').replace("\\-", "-"));
        match title {
            Some(title) if title == "OPTIONS" => {
                opened = true;
                out.push_str(line);
            }
            Some(title) => {
                let heading = headings
                    .iter()
                    .find(|h| h.to_uppercase() == title)
                    .map_or(title.clone(), |h| (*h).to_owned());
                if !opened {
                    out.push_str(".SH OPTIONS\n");
                    opened = true;
                }
                write!(out, ".SS \"{heading}\"").unwrap();
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// What each column of the rows holds, by name.
const COLUMNS: &[(&str, &str)] = &[
    (
        "time_ms",
        "Milliseconds from the profile's start to the end of the row's period (the first \
         row ends a period in).",
    ),
    (
        "mono_ns",
        "The end of the row's period on CLOCK_MONOTONIC, in nanoseconds. The metadata's \
         clock_offset_ns added gives the wall-clock time, in nanoseconds since the Unix epoch.",
    ),
    (
        "minor",
        "Minor faults (served without I/O) in the period, of the profiled processes \
         (with their descendants unless --no-inherit).",
    ),
    (
        "major",
        "Major faults (that waited for I/O: a file's page read, swap-in) in the period.",
    ),
    (
        "cpu_ns",
        "CPU time (user and system) in the period, in nanoseconds.",
    ),
    (
        "cpu_util",
        "cpu_ns over the period's length: 1.0 is one CPU busy the whole period.",
    ),
    (
        "rss_anon",
        "Resident anonymous memory at the period's end, in bytes, summed over the profiled \
         processes that are alive.",
    ),
    (
        "rss_file",
        "Resident file-backed memory at the period's end, in bytes.",
    ),
    (
        "rss_shmem",
        "Resident shared memory (tmpfs, shared anonymous) at the period's end, in bytes.",
    ),
    ("swap", "Swapped-out memory at the period's end, in bytes."),
    (
        "stall_some_us",
        "Microseconds of the period in which some task of the system waited on memory (PSI, \
         /proc/pressure/memory).",
    ),
    (
        "stall_full_us",
        "Microseconds of the period in which every non-idle task waited on memory at once.",
    ),
    (
        "cgroup_stall_some_us",
        "As stall_some_us, in the --cgroup's memory.pressure; empty without --cgroup.",
    ),
    (
        "cgroup_stall_full_us",
        "As stall_full_us, in the --cgroup's memory.pressure; empty without --cgroup.",
    ),
    (
        "pswpin",
        "Pages swapped in, system-wide, in the period (/proc/vmstat).",
    ),
    ("pswpout", "Pages swapped out, system-wide, in the period."),
    (
        "workingset_refault_anon",
        "Evicted anonymous pages faulted back in, system-wide, in the period.",
    ),
    (
        "workingset_refault_file",
        "Evicted file pages faulted back in, system-wide, in the period.",
    ),
    (
        "pgscan_kswapd",
        "Pages scanned by kswapd, system-wide, in the period.",
    ),
    (
        "pgscan_direct",
        "Pages scanned by direct reclaim, system-wide, in the period.",
    ),
    (
        "pgmajfault",
        "Major faults of the whole system in the period.",
    ),
];

/// The columns the rows have (the CSV's header), each with what it holds; an error names
/// a column this file does not describe, or one it describes that the rows no longer have.
pub fn columns() -> anyhow::Result<Vec<(String, &'static str)>> {
    let header = csv_header();
    let names: Vec<&str> = header.split(',').collect();
    let undescribed: Vec<&str> = (names.iter().copied())
        .filter(|name| !COLUMNS.iter().any(|(c, _)| c == name))
        .collect();
    let gone: Vec<&str> = (COLUMNS.iter().map(|(c, _)| *c))
        .filter(|c| !names.contains(c))
        .collect();
    if !undescribed.is_empty() || !gone.is_empty() {
        bail!(
            "the man page's OUTPUT section (monitor/examples/docs.rs, COLUMNS) is behind the \
             rows: not described {undescribed:?}, no longer written {gone:?}"
        );
    }
    Ok(names
        .into_iter()
        .map(|name| {
            let (_, what) = COLUMNS.iter().find(|(c, _)| *c == name).unwrap();
            (name.to_owned(), *what)
        })
        .collect())
}

/// A paragraph of plain text.
fn paragraph(roff: &mut Roff, text: &str) {
    roff.control("PP", []).text([roman(text)]);
}

/// A tagged paragraph: `tag` in bold, then `text`.
fn item(roff: &mut Roff, tag: &str, text: &str) {
    roff.control("TP", []).text([bold(tag)]).text([roman(text)]);
}

fn output_section(roff: &mut Roff) -> anyhow::Result<()> {
    roff.control("SH", ["OUTPUT"]);
    paragraph(
        roff,
        "The samples go to --output, or without it to standard output (not under run, \
         whose standard output is the command's), in the format --format names:",
    );
    for (format, what) in cli::FORMATS {
        item(roff, format, what);
    }
    paragraph(
        roff,
        "A row of CSV or JSON Lines is one period (--period) of the profiled processes. \
         In CSV a first line \"# pfprof {...}\" holds the metadata as JSON (what was \
         profiled: command, pids or cgroup, and whether with descendants, inherit; host, \
         kernel, backend, mode, period_ms, start, start_unix_ns and clock_offset_ns); \
         then a header line names the columns, in the order below. In JSON Lines each \
         record says first what it is, in its \"event\" key: the metadata (\"start\"), \
         then the rows (\"row\", keyed by the columns' names) and, among them, where an \
         interval's faults were (\"where\") and thrashing bands (\"thrashing\").",
    );
    paragraph(
        roff,
        "The faults and CPU time are the period's; the memory is its level at the \
         period's end; the pressure columns are the whole system's (or the cgroup's) over \
         the period. A counter the kernel does not have is an empty field (null in JSON \
         Lines). The columns:",
    );
    for (name, what) in columns()? {
        item(roff, &name, what);
    }
    paragraph(
        roff,
        "The summary goes to standard error (or --summary FILE): the totals and rates, \
         the CPU time, the peaks of memory, where the faults were (by mapping and by \
         process), the memory stall and a thrashing verdict; under run, the command's \
         rusage and exit status as time -v gives them. --summary-format json writes it as \
         one JSON object.",
    );
    Ok(())
}

/// The exit statuses: (status, when); `run`: those of `pfprof run`, else those of a
/// profile without `run` and, marked, `run`'s.
fn exit_statuses(run: bool) -> Vec<(&'static str, String)> {
    let code = |blame: Blame| blame.exit_code();
    let mut statuses = Vec::new();
    if run {
        statuses.push((
            "the command's",
            "The command ended: its exit status, or 128 plus the signal's number when a \
             signal killed it, as shells say it."
                .to_owned(),
        ));
    } else {
        statuses.push((
            "0",
            "The profile is complete: the processes exited, the cgroup was removed, \
             --duration or --count was reached, or Ctrl-C, SIGTERM or SIGHUP ended it. \
             Under run: the command's status (below)."
                .to_owned(),
        ));
    }
    let run_only: [(&'static str, String); 4] = [
        (
            leak(code(Blame::CommandNotFound)),
            "The command was not found (as in shells).".to_owned(),
        ),
        (
            leak(code(Blame::CommandNotExecutable)),
            "The command was found but could not be executed.".to_owned(),
        ),
        (
            "130",
            "The profile was stopped before the command ended (a second Ctrl-C or SIGTERM)."
                .to_owned(),
        ),
        (
            "141",
            "The output was closed (a reader gone) before the command ended.".to_owned(),
        ),
    ];
    for (status, when) in run_only {
        let when = if run { when } else { format!("run: {when}") };
        statuses.push((status, when));
    }
    statuses.push((
        leak(NOTHING_PUSHED),
        format!(
            "--otlp: the profile is complete but the collector received not one push \
             (the summary says why){}.",
            if run {
                "; only when the command's status is 0"
            } else {
                ""
            }
        ),
    ));
    statuses.push((
        leak(code(Blame::Usage)),
        "Usage: the invocation, or what it names (a pid, a path, the module), is to be \
         fixed; the message says how."
            .to_owned(),
    ));
    statuses.push((leak(code(Blame::Internal)), "Any other error.".to_owned()));
    statuses
}

/// An exit code as the text of a page (a few, once).
fn leak(code: u8) -> &'static str {
    Box::leak(code.to_string().into_boxed_str())
}

fn exit_section(roff: &mut Roff, statuses: &[(&str, String)]) {
    roff.control("SH", ["EXIT STATUS"]);
    for (status, when) in statuses {
        item(roff, status, when);
    }
}

/// The variables `--otlp` reads: (names, what they set). Each setting of the exporter's
/// is read from the `_METRICS_` variable first, then the general one.
pub const ENVIRONMENT: &[(&[&str], &str)] = &[
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ],
        "Where --otlp without URL pushes: the first as given, the second with /v1/metrics \
         appended (default http://localhost:4318/v1/metrics).",
    ),
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ],
        "Only http/protobuf is spoken; another value is refused.",
    ),
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
            "OTEL_EXPORTER_OTLP_HEADERS",
        ],
        "Headers sent with every push, key=value pairs separated by commas, values \
         percent-encoded; --otlp-header adds to them, replacing a header of the same name.",
    ),
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ],
        "gzip or none (the default); --otlp-compression wins.",
    ),
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
            "OTEL_EXPORTER_OTLP_TIMEOUT",
        ],
        "The longest a push may take, in milliseconds (default 10000).",
    ),
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ],
        "A PEM file of the certificates trusted for https (default: Mozilla's roots, built \
         in).",
    ),
    (
        &[
            "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
        ],
        "PEM files of the client's certificate chain and key, for mutual TLS: both or \
         neither.",
    ),
    (
        &["OTEL_RESOURCE_ATTRIBUTES"],
        "key=value pairs separated by commas, added to the resource of every push (over \
         what is detected: host, OS, the monitor's process).",
    ),
    (
        &["OTEL_SERVICE_NAME"],
        "The resource's service.name (over OTEL_RESOURCE_ATTRIBUTES's).",
    ),
];

fn environment_section(roff: &mut Roff) {
    roff.control("SH", ["ENVIRONMENT"]);
    paragraph(
        roff,
        "With --otlp, the OpenTelemetry exporter's variables, read once at the start (a \
         mistake is refused before anything is profiled). For each setting the option wins, \
         then the _METRICS_ variable, then the general one.",
    );
    for (names, what) in ENVIRONMENT {
        roff.control("TP", []);
        for (i, name) in names.iter().enumerate() {
            if i > 0 {
                roff.control("TQ", []);
            }
            roff.text([bold(*name)]);
        }
        roff.text([roman(*what)]);
    }
}

/// EXAMPLES: each example's purpose, then its command line as typed, not filled.
fn examples_section(roff: &mut Roff, examples: &[&[Example]], name: &str) {
    let program = name.split('-').next().unwrap_or(name);
    roff.control("SH", ["EXAMPLES"]);
    for example in examples.iter().flat_map(|e| e.iter()) {
        roff.control("PP", [])
            .text([roman(format!("{}:", example.what))]);
        roff.control("RS", ["4"]).control("nf", []);
        let line = example
            .line
            .replace("{name}", if name == WORK { WORK } else { program });
        for line in line.lines() {
            roff.text([bold(line)]);
        }
        roff.control("fi", []).control("RE", []);
    }
}

fn see_also_section(roff: &mut Roff, own: &[&str]) {
    roff.control("SH", ["SEE ALSO"]);
    let mut pages: Vec<&str> = own.to_vec();
    pages.extend(["perf-stat(1)", "pidstat(1)", "time(1)", "proc(5)"]);
    let mut inlines = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        let (name, section) = page.split_once('(').unwrap_or((page, ""));
        inlines.push(bold(name));
        inlines.push(roman(format!(
            "({section}{}",
            if i + 1 < pages.len() { ", " } else { "" }
        )));
    }
    roff.text(inlines);
    paragraph(
        roff,
        "/usr/share/doc/pfprof/usage.md: every option, the summary's fields, where the \
         faults were; fleet.md: the exporters and their metrics.",
    );
}

/// The options `command` (and its subcommands) take a process id for: `-p`, `--pid`.
fn pid_options(command: &clap::Command) -> Vec<String> {
    let mut names = Vec::new();
    for arg in command.get_arguments() {
        let pid = (arg.get_value_names()).is_some_and(|v| v.iter().any(|v| v == "PID"));
        if pid {
            names.extend(arg.get_short().map(|s| format!("-{s}")));
            names.extend(arg.get_long().map(|l| format!("--{l}")));
        }
    }
    for sub in command.get_subcommands() {
        for name in pid_options(sub) {
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names
}

/// The subcommands whose last arguments are a command and its own (`run`).
fn command_runners(command: &clap::Command) -> Vec<&clap::Command> {
    command
        .get_subcommands()
        .filter(|sub| {
            sub.get_positionals()
                .any(|p| p.get_value_hint() == ValueHint::CommandWithArguments)
        })
        .collect()
}

/// The options of `command` that take a value: the value is the word after them.
fn value_options(command: &clap::Command) -> Vec<String> {
    let takes_value =
        |arg: &&Arg| !arg.is_positional() && arg.get_num_args().is_some_and(|n| n.takes_values());
    let mut names = Vec::new();
    for arg in command.get_arguments().filter(takes_value) {
        names.extend(arg.get_short().map(|s| format!("-{s}")));
        names.extend(arg.get_long().map(|l| format!("--{l}")));
    }
    names
}

/// `command` as the completions offer it: without the options it hides, `run`'s
/// refused ones (still parsed, so that the refusal can say why; clap_complete would
/// offer them, hidden or not).
fn offered(command: &clap::Command) -> clap::Command {
    let name: &'static str = Box::leak(command.get_name().to_owned().into_boxed_str());
    let mut offered = clap::Command::new(name)
        .args_conflicts_with_subcommands(command.is_args_conflicts_with_subcommands_set());
    if let Some(about) = command.get_about() {
        offered = offered.about(about.clone());
    }
    if let Some(version) = command.get_version() {
        offered = offered.version(Box::leak(version.to_owned().into_boxed_str()) as &str);
    }
    let generated = ["help", "version"];
    for arg in command.get_arguments() {
        if !arg.is_hide_set() && !generated.contains(&arg.get_id().as_str()) {
            offered = offered.arg(arg.clone());
        }
    }
    for sub in command.get_subcommands() {
        if sub.get_name() != "help" {
            offered = offered.subcommand(self::offered(sub));
        }
    }
    offered
}

/// Each completion file of `shell`: its name and its text.
pub fn completions_for(shell: Shell) -> Vec<(String, String)> {
    let (monitor, work) = commands();
    [offered(&monitor), offered(&work)]
        .into_iter()
        .map(|mut command| {
            let name = command.get_name().to_owned();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut command, &name, &mut script);
            let script = String::from_utf8(script).expect("clap_complete writes UTF-8");
            let file = match shell {
                Shell::Bash => format!("{name}.bash"),
                Shell::Zsh => format!("_{name}"),
                Shell::Fish => format!("{name}.fish"),
                _ => unreachable!("only bash, zsh and fish"),
            };
            (file, completed(shell, &command, script))
        })
        .collect()
}

/// `script` with what clap_complete cannot say: process ids after `-p`, a command and
/// its arguments after `run`'s options.
fn completed(shell: Shell, command: &clap::Command, script: String) -> String {
    let pids = pid_options(command);
    let runners = command_runners(command);
    if pids.is_empty() && runners.is_empty() {
        return script;
    }
    match shell {
        Shell::Bash => bash(command, script, &pids, &runners),
        Shell::Zsh => zsh(script),
        Shell::Fish => fish(command, script, &runners),
        _ => script,
    }
}

/// bash: a function run before clap's: process ids after a pid option (from /proc: no
/// `ps` needed), and after `run`'s options (its first word not an option, or after `--`)
/// the command as bash-completion completes one after `sudo` or `time` (`_command_offset`;
/// without bash-completion, command names, then file names).
fn bash(
    command: &clap::Command,
    mut script: String,
    pids: &[String],
    runners: &[&clap::Command],
) -> String {
    let name = command.get_name();
    let clap_fn = format!("_{}", name.replace('-', "__"));
    let ours = format!("{clap_fn}_pfprof");
    let mut runner_cases = String::new();
    for runner in runners {
        let values = value_options(runner).join("|");
        write!(
            runner_cases,
            r#"
    if [[ ${{COMP_WORDS[1]}} == {sub} ]]; then
        local i start=0
        for ((i = 2; i < COMP_CWORD; i++)); do
            case ${{COMP_WORDS[i]}} in
                --) start=$((i + 1)); break ;;
                {values})
                    if [[ ${{COMP_WORDS[i + 1]}} == = ]]; then ((i += 2)); else ((i++)); fi ;;
                -*) ;;
                =) ((i++)) ;;
                *) start=$i; break ;;
            esac
        done
        if ((start == 0 && i == COMP_CWORD)) && [[ $cur != -* ]]; then
            start=$COMP_CWORD
        fi
        if ((start > 0)); then
            if declare -F _command_offset >/dev/null; then
                _command_offset "$start"
            elif ((start == COMP_CWORD)); then
                COMPREPLY=($(compgen -c -- "$cur"))
            fi
            return 0
        fi
    fi"#,
            sub = runner.get_name(),
        )
        .unwrap();
    }
    let pid_case = if pids.is_empty() {
        String::new()
    } else {
        format!(
            r#"
    case $prev in
        {})
            COMPREPLY=($(compgen -W "$(cd /proc && printf '%s ' [0-9]*)" -- "$cur"))
            return 0 ;;
    esac"#,
            pids.join("|")
        )
    };
    write!(
        script,
        r#"
# pfprof's own: the process ids of -p, and the command `run` starts.
{ours}() {{
    local cur=$2 prev=$3{pid_case}{runner_cases}
    {clap_fn} "$@"
}}

if [[ "${{BASH_VERSINFO[0]}}" -eq 4 && "${{BASH_VERSINFO[1]}}" -ge 4 || "${{BASH_VERSINFO[0]}}" -gt 4 ]]; then
    complete -F {ours} -o nosort -o bashdefault -o default {name}
else
    complete -F {ours} -o bashdefault -o default {name}
fi
"#
    )
    .unwrap();
    script
}

/// zsh: `_pids` for the value of a pid option (clap_complete leaves it empty: no hint
/// names process ids); the command after `run` is clap_complete's `_cmdambivalent`.
fn zsh(script: String) -> String {
    script.replace(":PID:", ":PID:_pids")
}

/// fish: `__fish_complete_pids` for a pid option, and after `run`'s options the command
/// and its arguments, as fish's own completions of `time` and `sudo` give them.
fn fish(command: &clap::Command, script: String, runners: &[&clap::Command]) -> String {
    let name = command.get_name();
    let mut out = String::new();
    for line in script.lines() {
        out.push_str(line);
        if line.starts_with("complete ") && (line.contains(" -l pid ") || line.contains(" -s p ")) {
            out.push_str(" -a \"(__fish_complete_pids)\"");
        }
        out.push('\n');
    }
    for runner in runners {
        writeln!(
            out,
            "complete -c {name} -n \"__fish_seen_subcommand_from {sub}\" -f -a \
             \"(__fish_complete_subcommand --fcs-skip=2 -- {values})\"",
            sub = runner.get_name(),
            values = value_options(runner).join(" "),
        )
        .unwrap();
    }
    out
}
