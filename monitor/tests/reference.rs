//! The reference a person reads at the terminal: `--help` (each command's own options,
//! grouped, at 80 columns), the man pages (their sections, every output column, every
//! variable read, examples set as typed) and the shell completions (values where they
//! are known), all made from the one command-line definition (`monitor::cli`) by
//! `examples/docs.rs`, included here as the package builds it.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use clap_complete::Shell;
use monitor::output::writer::csv_header;
use monitor::system::exit::{Blame, NOTHING_PUSHED};

#[allow(dead_code)] // Its main and what only the package build uses.
#[path = "../examples/docs.rs"]
mod docs;

const MONITOR: &str = env!("CARGO_BIN_EXE_monitor");
const WORK: &str = env!("CARGO_BIN_EXE_work");

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program).args(args).output().unwrap()
}

fn stdout(program: &str, args: &[&str]) -> String {
    let out = run(program, args);
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The options a help text lists (`--pid`, `-p`), in its option lines only.
fn listed(help: &str) -> Vec<String> {
    help.lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with('-'))
        .flat_map(|l| {
            l.split([' ', ','])
                .take_while(|w| w.is_empty() || w.starts_with('-'))
                .filter(|w| !w.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// What `run` refuses (`--pid` attaches, `--cgroup` and the fleet's options profile
/// cgroups) or has no use for (`--max-targets`).
const NOT_RUN_S: [&str; 6] = [
    "-p",
    "--pid",
    "--cgroup",
    "--cgroups-under",
    "--unit",
    "--max-targets",
];

#[test]
fn run_s_help_lists_only_the_options_run_takes() {
    for flag in ["-h", "--help"] {
        let top = listed(&stdout(MONITOR, &[flag]));
        let run = listed(&stdout(MONITOR, &["run", flag]));
        for option in NOT_RUN_S {
            assert!(
                top.contains(&option.to_owned()),
                "{flag}: {option} in {top:?}"
            );
            assert!(
                !run.contains(&option.to_owned()),
                "run {flag}: {option} in {run:?}"
            );
        }
        for option in [
            "--mode",
            "-o",
            "--output",
            "--plot",
            "--prometheus",
            "--otlp",
        ] {
            assert!(
                run.contains(&option.to_owned()),
                "run {flag}: {option} in {run:?}"
            );
        }
    }
    // Hidden, not gone: `run --pid` is refused with the reason, as before.
    let out = run(MONITOR, &["run", "-p", "1", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--pid attaches to running processes"), "{err}");
}

#[test]
fn p_is_pid_as_in_pidstat_and_perf() {
    let out = run(MONITOR, &["-p", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalid value '0' for '--pid <PID>'"), "{err}");
}

#[test]
fn help_groups_the_options_under_headings_in_order() {
    let help = stdout(MONITOR, &["--help"]);
    let at = |what: &str| {
        help.find(what)
            .unwrap_or_else(|| panic!("no {what:?} in\n{help}"))
    };
    let headings = [
        "\nTarget:\n",
        "\nFleet (many cgroups):\n",
        "\nProfile:\n",
        "\nOutput:\n",
        "\nExporters:\n",
        "\nExamples:\n",
    ];
    for pair in headings.windows(2) {
        assert!(at(pair[0]) < at(pair[1]), "{pair:?}");
    }
    // Each option under its own heading.
    for (option, after, before) in [
        ("--pid <PID>", "Target:", "Fleet"),
        ("--unit <PATTERN>", "Fleet", "Profile:"),
        ("--mode <strict|relaxed>", "Profile:", "Output:"),
        ("--format <", "Output:", "Exporters:"),
        ("--linger <DUR>", "Exporters:", "Examples:"),
    ] {
        let at_option = at(option);
        assert!(at(after) < at_option && at_option < at(before), "{option}");
    }
}

#[test]
fn help_fits_an_80_column_terminal() {
    for (program, args) in [
        (MONITOR, &["-h"][..]),
        (MONITOR, &["--help"]),
        (MONITOR, &["run", "-h"]),
        (MONITOR, &["run", "--help"]),
        (WORK, &["-h"]),
        (WORK, &["--help"]),
    ] {
        let help = stdout(program, args);
        for line in help.lines() {
            assert!(
                line.chars().count() < 80,
                "{args:?}: {} columns: {line}",
                line.chars().count()
            );
        }
    }
    // -h: one line an option.
    let short = stdout(MONITOR, &["-h"]);
    let mode = short.lines().find(|l| l.contains("--mode")).unwrap();
    assert!(mode.contains("[default: strict]"), "{mode}");
}

/// The pages as the package installs them.
fn pages() -> Vec<(String, String)> {
    docs::man_pages().unwrap()
}

fn page(name: &str) -> String {
    pages()
        .into_iter()
        .find(|(file, _)| file == name)
        .unwrap_or_else(|| panic!("no page {name}"))
        .1
}

/// The text of section `title` of a page (up to the next `.SH`).
fn section(page: &str, title: &str) -> String {
    let start = [format!(".SH \"{title}\"\n"), format!(".SH {title}\n")]
        .iter()
        .find_map(|head| page.find(head.as_str()).map(|at| at + head.len()))
        .unwrap_or_else(|| panic!("no section {title} in\n{page}"));
    let rest = &page[start..];
    rest[..rest.find("\n.SH ").map_or(rest.len(), |end| end + 1)].to_owned()
}

#[test]
fn the_man_pages_have_the_sections_a_reader_of_perf_stat_looks_for() {
    let names: Vec<String> = pages().into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["pfprof.1", "pfprof-run.1", "pfprof-work.1"]);
    for (name, page) in pages() {
        let mut sections = vec![
            "NAME",
            "SYNOPSIS",
            "DESCRIPTION",
            "OPTIONS",
            "EXIT STATUS",
            "EXAMPLES",
            "SEE ALSO",
        ];
        if name != "pfprof-work.1" {
            sections.extend(["OUTPUT", "ENVIRONMENT"]);
        }
        for title in sections {
            assert!(!section(&page, title).trim().is_empty(), "{name}: {title}");
        }
        let see_also = section(&page, "SEE ALSO");
        for other in ["perf\\-stat", "pidstat", "time"] {
            assert!(
                see_also.contains(&format!("\\fB{other}\\fR(1")),
                "{name}: {see_also}"
            );
        }
    }
    let see_also = section(&page("pfprof.1"), "SEE ALSO");
    assert!(see_also.contains("\\fBpfprof\\-run\\fR(1)"), "{see_also}");
    // The options under their headings, as subsections.
    let options = section(&page("pfprof.1"), "OPTIONS");
    for heading in [
        "Target",
        "Fleet (many cgroups)",
        "Profile",
        "Output",
        "Exporters",
    ] {
        assert!(
            options.contains(&format!(".SS \"{heading}\"")),
            "{heading}:\n{options}"
        );
    }
}

#[test]
fn pfprof_run_s_page_has_only_run_s_options() {
    let run = section(&page("pfprof-run.1"), "OPTIONS");
    let top = section(&page("pfprof.1"), "OPTIONS");
    for option in NOT_RUN_S {
        let roff = format!("\\fB{}\\fR", option.replace('-', "\\-"));
        assert!(top.contains(&roff), "pfprof.1: {roff}");
        assert!(!run.contains(&roff), "pfprof-run.1: {roff}\n{run}");
    }
    assert!(run.contains("\\fB\\-\\-mode\\fR"), "{run}");
}

#[test]
fn output_describes_every_column_the_rows_have() {
    let header = csv_header();
    for name in ["pfprof.1", "pfprof-run.1"] {
        let output = section(&page(name), "OUTPUT");
        let columns_at = output.find("The columns:").expect("the columns' paragraph");
        let described: Vec<&str> = output[columns_at..]
            .split(".TP\n\\fB")
            .skip(1)
            .map(|item| item.split("\\fR").next().unwrap())
            .collect();
        let columns: Vec<String> = header.split(',').map(|c| c.replace('-', "\\-")).collect();
        assert_eq!(described, columns, "{name}: the columns in their order");
    }
}

/// Every `OTEL_*` variable the monitor's source reads: the names written out, and the
/// exporter settings read as `OTEL_EXPORTER_OTLP_[METRICS_]{setting}`.
fn variables_read() -> Vec<String> {
    fn sources(dir: &Path, files: &mut Vec<PathBuf>) {
        for entry in fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                sources(&path, files);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    let mut names = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        // What the tests of the source set is not what it reads.
        let text = text.split("#[cfg(test)]").next().unwrap();
        for (i, _) in text.match_indices("\"OTEL_") {
            let name: String = text[i + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            if !name.ends_with('_') {
                names.push(name);
            }
        }
        for (i, _) in text.match_indices("setting(env, \"") {
            let setting: String = text[i + "setting(env, \"".len()..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            names.push(format!("OTEL_EXPORTER_OTLP_METRICS_{setting}"));
            names.push(format!("OTEL_EXPORTER_OTLP_{setting}"));
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn environment_names_every_variable_the_monitor_reads() {
    let read = variables_read();
    // The endpoint, protocol, headers, compression, timeout and TLS settings, each in
    // two variables, and the resource's two.
    assert!(read.len() >= 18, "{read:?}");
    for name in ["pfprof.1", "pfprof-run.1"] {
        let environment = section(&page(name), "ENVIRONMENT");
        for variable in &read {
            assert!(
                environment.contains(&format!("\\fB{variable}\\fR")),
                "{name}: {variable} is read but not in ENVIRONMENT"
            );
        }
    }
}

#[test]
fn exit_status_gives_every_code_the_monitor_ends_with() {
    let codes = [
        Blame::Usage,
        Blame::CommandNotFound,
        Blame::CommandNotExecutable,
        Blame::Internal,
    ]
    .map(Blame::exit_code);
    for name in ["pfprof.1", "pfprof-run.1"] {
        let exits = section(&page(name), "EXIT STATUS");
        for code in codes.iter().chain(&[NOTHING_PUSHED, 130, 141]) {
            assert!(
                exits.contains(&format!(".TP\n\\fB{code}\\fR\n")),
                "{name}: {code}\n{exits}"
            );
        }
    }
}

/// `page` rendered by groff for an 80-column terminal, and what groff warned of; None
/// where groff is not installed.
fn rendered(page: &str) -> Option<(String, String)> {
    let dir = std::env::temp_dir().join(format!("pfprof-reference-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("page.1");
    fs::write(&file, page).unwrap();
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-rLL=80n", "-P-cbou"])
        .arg(&file)
        .output();
    fs::remove_dir_all(&dir).unwrap();
    let out = out.ok()?;
    assert!(out.status.success(), "{out:?}");
    Some((
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    ))
}

#[test]
fn the_examples_render_as_typed_and_the_pages_without_a_warning() {
    for (name, page) in pages() {
        let Some((text, warnings)) = rendered(&page) else {
            eprintln!("groff is not installed: the pages' rendering is not checked");
            return;
        };
        assert_eq!(warnings, "", "{name}");
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{name}: {line}");
        }
        let examples = &text[text.find("EXAMPLES").unwrap()..text.find("SEE ALSO").unwrap()];
        let typed: Vec<&str> = examples
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("pfprof"))
            .collect();
        assert!(!typed.is_empty(), "{name}: {examples}");
        for line in typed {
            // Set as typed: single spaces, as in the examples `--help` shows.
            assert!(!line.contains("  "), "{name}: justified: {line}");
        }
    }
    let (text, _) = rendered(&page("pfprof.1")).unwrap_or_default();
    if !text.is_empty() {
        assert!(
            text.contains("pfprof run -o prof.csv --plot prof.svg -- make -j4"),
            "{text}"
        );
        assert!(text.contains("pfprof [OPTIONS] -p PID..."), "{text}");
    }
}

/// The completion script of `shell` for `pfprof`.
fn script(shell: Shell, file: &str) -> String {
    docs::completions_for(shell)
        .into_iter()
        .find(|(name, _)| name == file)
        .unwrap_or_else(|| panic!("no {file}"))
        .1
}

/// What bash completes for the command line `words` (the last one the word being
/// completed), with the function `complete -p pfprof` names after sourcing the script.
fn bash_completes(words: &[&str]) -> Vec<String> {
    let dir = std::env::temp_dir().join(format!(
        "pfprof-completion-{}-{}",
        std::process::id(),
        words.join("_").replace(['/', ' '], "")
    ));
    fs::create_dir_all(&dir).unwrap();
    let file = dir.join("pfprof.bash");
    fs::write(&file, script(Shell::Bash, "pfprof.bash")).unwrap();
    let program = r#"
        source "$1" || exit 1
        shift
        COMP_WORDS=("$@")
        COMP_CWORD=$(($# - 1))
        COMP_LINE="$*"
        COMP_POINT=${#COMP_LINE}
        function=$(complete -p pfprof | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
        [[ -n $function ]] || exit 1
        "$function" pfprof "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" 2>/dev/null
        printf '%s\n' "${COMPREPLY[@]}"
    "#;
    let out = Command::new("bash")
        .args(["-c", program, "bash"])
        .arg(&file)
        .args(words)
        .output()
        .unwrap();
    fs::remove_dir_all(&dir).unwrap();
    assert!(out.status.success(), "{words:?}: {out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn bash_completes_modes_formats_pids_and_the_command_after_run() {
    assert_eq!(
        bash_completes(&["pfprof", "--mode", ""]),
        ["strict", "relaxed"]
    );
    assert_eq!(
        bash_completes(&["pfprof", "run", "--mode", "r"]),
        ["relaxed"]
    );
    let formats: Vec<&str> = monitor::cli::FORMATS.iter().map(|(f, _)| *f).collect();
    assert!(formats.starts_with(&["csv", "jsonl"]), "{formats:?}");
    assert_eq!(bash_completes(&["pfprof", "--format", ""]), formats);
    assert_eq!(
        bash_completes(&["pfprof", "--backend", ""]),
        ["auto", "kernel", "procfs"]
    );
    // Process ids, this test's among them.
    let me = std::process::id().to_string();
    for option in ["-p", "--pid"] {
        let pids = bash_completes(&["pfprof", option, ""]);
        assert!(pids.contains(&me), "{option}: {pids:?}");
        assert!(pids.iter().all(|p| p.parse::<u32>().is_ok()), "{pids:?}");
    }
    // The command after run's options, with `--` or without.
    for words in [
        &["pfprof", "run", "--", "sor"][..],
        &["pfprof", "run", "sor"],
        &["pfprof", "run", "--mode", "relaxed", "-o", "p.csv", "sor"],
        &["pfprof", "run", "-q", "--", "sor"],
    ] {
        let commands = bash_completes(words);
        assert!(
            commands.contains(&"sort".to_owned()),
            "{words:?}: {commands:?}"
        );
    }
    // run's options, and not those it refuses.
    let options = bash_completes(&["pfprof", "run", "--"]);
    assert!(options.contains(&"--mode".to_owned()), "{options:?}");
    for refused in NOT_RUN_S {
        assert!(
            !options.contains(&refused.to_owned()),
            "{refused}: {options:?}"
        );
    }
    assert!(bash_completes(&["pfprof", "--p"]).contains(&"--pid".to_owned()));
}

#[test]
fn zsh_and_fish_complete_the_same_values() {
    let zsh = script(Shell::Zsh, "_pfprof");
    assert!(zsh.contains(":PID:_pids'"), "{zsh}");
    assert!(zsh.contains(":_cmdambivalent'"), "{zsh}");
    assert!(
        zsh.contains("strict\\:") && zsh.contains("relaxed\\:"),
        "{zsh}"
    );
    assert!(zsh.contains("csv\\:") && zsh.contains("jsonl\\:"), "{zsh}");
    let fish = script(Shell::Fish, "pfprof.fish");
    assert!(fish.contains("-l pid -d"), "{fish}");
    assert!(fish.contains("(__fish_complete_pids)"), "{fish}");
    assert!(
        fish.contains("(__fish_complete_subcommand --fcs-skip=2 -- "),
        "{fish}"
    );
    assert!(
        fish.contains("strict\\t") && fish.contains("relaxed\\t"),
        "{fish}"
    );
    // Each script as its shell parses it, where the shell is installed.
    for (shell, text) in [
        ("bash", script(Shell::Bash, "pfprof.bash")),
        ("zsh", zsh),
        ("fish", fish),
    ] {
        let dir =
            std::env::temp_dir().join(format!("pfprof-syntax-{}-{shell}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("script");
        fs::write(&file, text).unwrap();
        let checked = Command::new(shell).arg("-n").arg(&file).output();
        fs::remove_dir_all(&dir).unwrap();
        match checked {
            Ok(out) => assert!(out.status.success(), "{shell}: {out:?}"),
            Err(_) => eprintln!("{shell} is not installed: its script's syntax is not checked"),
        }
    }
}

#[test]
fn the_package_s_files_are_written_under_the_names_debian_rules_installs() {
    let dir = std::env::temp_dir().join(format!("pfprof-docs-{}", std::process::id()));
    docs::write_all(&dir).unwrap();
    for file in [
        "man/pfprof.1",
        "man/pfprof-run.1",
        "man/pfprof-work.1",
        "completions/pfprof.bash",
        "completions/pfprof-work.bash",
        "completions/_pfprof",
        "completions/_pfprof-work",
        "completions/pfprof.fish",
        "completions/pfprof-work.fish",
    ] {
        let path = dir.join(file);
        assert!(fs::metadata(&path).is_ok_and(|m| m.len() > 0), "{file}");
    }
    fs::remove_dir_all(&dir).unwrap();
}
