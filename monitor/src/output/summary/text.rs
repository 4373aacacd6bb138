//! The summary as text: what a person reads on standard error once the profile ends.

use std::fmt;
use std::time::Duration;

use shared_layout::Mode;

use crate::attribution::offsets::human_span;
use crate::attribution::{Attribution, Function, Mapping};
use crate::output::attribution::{hottest_regions, AttributionSummary, TOP};
use crate::output::metadata::printable;
use crate::output::totals::Totals;
use crate::pressure::verdict::{Band, Rule};
use crate::system::exit::ExitStatus;
use crate::system::peak::PeakReport;
use crate::system::procstat::Usage;

/// Everything the summary reports.
pub struct Summary<'a> {
    pub backend: &'a str,
    pub mode: Mode,
    /// Who was counted: the target, with its descendants or alone
    /// ([`crate::output::metadata::Metadata::counted`]).
    pub counted: &'a str,
    pub totals: &'a Totals,
    /// Strict mode only: the producer never waits in relaxed mode.
    pub blocked: Duration,
    pub deferred: u64,
    /// The profiled command's own accounting (`monitor run`): wait4() rusage and status.
    pub child: Option<ChildReport>,
    /// The `--pid` processes' own peak resident sets (VmHWM).
    pub peaks: &'a [PeakReport],
    /// The thrashing verdict.
    pub thrashing: Thrashing<'a>,
    /// Where the faults were, when the backend says.
    pub attributed: Option<&'a AttributionSummary>,
    /// What the profile misses or how it was measured, one line each.
    pub notes: &'a [String],
}

/// What the verdict found.
#[derive(Clone, Copy, Debug)]
pub enum Thrashing<'a> {
    /// No row had memory stall to judge by (no PSI).
    NotJudged,
    /// Every band the rule found (none: no thrashing), and the rule.
    Judged(&'a [Band], Rule),
}

const MIB: f64 = (1u64 << 20) as f64;

impl fmt::Display for Band {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "from t={:.2} s to t={:.2} s{}: memory full stall {:.0}% of the time (some \
             {:.0}%), {:.0} major faults/s",
            self.start_ms as f64 / 1e3,
            self.end_ms as f64 / 1e3,
            if self.ongoing {
                " (still at the end)"
            } else {
                ""
            },
            self.stall_full_pct,
            self.stall_some_pct,
            self.major_rate
        )?;
        if let Some(share) = self.target_share {
            write!(f, " ({:.0}% of the system's)", share * 100.0)?;
        }
        if let Some(m) = &self.major_mapping {
            write!(f, ", {:.0}% of them in {}", m.share * 100.0, m.name)?;
        }
        for (what, rate) in [
            ("refaults", self.refault_rate),
            ("swap-ins", self.pswpin_rate),
            ("swap-outs", self.pswpout_rate),
        ] {
            if let Some(rate) = rate {
                write!(f, ", {rate:.0} {what}/s")?;
            }
        }
        write!(
            f,
            "; at the onset {:.1} MiB resident ({:.1} anon, {:.1} file, {:.1} shmem), \
             {:.1} MiB swapped",
            (self.onset_rss_anon + self.onset_rss_file + self.onset_rss_shmem) as f64 / MIB,
            self.onset_rss_anon as f64 / MIB,
            self.onset_rss_file as f64 / MIB,
            self.onset_rss_shmem as f64 / MIB,
            self.onset_swap as f64 / MIB
        )
    }
}

/// What wait4() said about the command `monitor run` started.
#[derive(Clone, Copy, Debug)]
pub struct ChildReport {
    pub minor: u64,
    pub major: u64,
    pub cpu_ns: u64,
    pub usage: Usage,
    pub status: ExitStatus,
}

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "pfprof summary ({} backend, {} mode)",
            self.backend, self.mode
        )?;
        writeln!(f, "  counted            {}", self.counted)?;
        self.faults(f)?;
        self.ring(f)?;
        self.memory(f)?;
        self.attributed(f)?;
        self.command_and_notes(f)
    }
}

impl Summary<'_> {
    /// The samples' length, their faults and CPU time.
    fn faults(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.totals;
        writeln!(f, "  samples            {:>14}", t.samples)?;
        writeln!(
            f,
            "  duration           {:>14.3} s",
            t.covered_ns as f64 / 1e9
        )?;
        writeln!(f, "  minor faults       {:>14}", t.minor)?;
        writeln!(f, "  major faults       {:>14}", t.major)?;
        writeln!(
            f,
            "  minor fault rate   {:>14.1} /s mean {:>14.1} /s peak",
            t.mean_minor_rate(),
            t.peak_minor_rate
        )?;
        writeln!(
            f,
            "  major fault rate   {:>14.1} /s mean {:>14.1} /s peak",
            t.mean_major_rate(),
            t.peak_major_rate
        )?;
        writeln!(
            f,
            "  CPU time           {:>14.3} s ({:.1}% of one CPU)",
            t.cpu_ns as f64 / 1e9,
            t.cpu_util() * 100.0
        )
    }

    /// What the ring cost: samples lost (always: none is strict mode's promise, and
    /// relaxed mode's count is exact), the producer's waits and deferred samples only
    /// when there were some: a user has no use for the ring's internals at zero.
    fn ring(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "  samples lost       {:>14}", self.totals.lost)?;
        if self.mode == Mode::Strict && !self.blocked.is_zero() {
            write!(
                f,
                "\n  producer blocked   {:>14.3} s",
                self.blocked.as_secs_f64()
            )?;
        }
        if self.deferred > 0 {
            write!(f, "\n  samples deferred   {:>14}", self.deferred)?;
        }
        Ok(())
    }

    /// The memory's peak, the stall, and the thrashing verdict.
    fn memory(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.totals;
        write!(
            f,
            "\n  memory peak        {:>14.1} MiB resident, {:.1} MiB swapped",
            t.peak_resident as f64 / MIB,
            t.peak_swap as f64 / MIB
        )?;
        if let (Some(some), Some(full)) = (t.stall_some_us, t.stall_full_us) {
            write!(
                f,
                "\n  memory stall       {:>14.3} s some, {:.3} s full (system-wide)",
                some as f64 / 1e6,
                full as f64 / 1e6
            )?;
        }
        match self.thrashing {
            Thrashing::NotJudged => Ok(()),
            // The rule is in usage.md: restated on every run it took 200 columns.
            Thrashing::Judged([], _) => write!(f, "\n  thrashing          none"),
            Thrashing::Judged(bands, _) => bands
                .iter()
                .try_for_each(|band| write!(f, "\n  thrashing          {band}")),
        }
    }

    /// Where the faults were: the mappings with the most major and minor faults, and the
    /// processes.
    fn attributed(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(w) = self.attributed else {
            return Ok(());
        };
        let t = self.totals;
        let recorded = w.run.recorded();
        let lost = w.run.lost();
        match &w.attribution {
            Attribution::Off(why) => write!(
                f,
                "\n  where the faults were: not attributed to mappings: {why}"
            )?,
            Attribution::On {
                minor_sampling,
                kernel_faults,
            } => {
                write!(
                    f,
                    "\n  where the faults were (perf events: every major fault, one minor fault in \
                     {minor_sampling}; minor counts are estimates)"
                )?;
                if !kernel_faults {
                    write!(
                        f,
                        "\n    not recorded: faults taken in system calls on a process's behalf \
                         (kernel.perf_event_paranoid 2 allows user-space events only; 1, or \
                         CAP_PERFMON, would record them)"
                    )?;
                }
                write!(
                    f,
                    "\n    major faults     {:>14} recorded of {}, {} lost",
                    recorded.major, t.major, lost.major
                )?;
                for (mapping, faults) in w.run.top_major(TOP) {
                    share_line(f, faults.major, recorded.major, "", mapping)?;
                    regions_line(f, w, mapping, true)?;
                }
                let by_function = w.run.top_functions_major(TOP);
                if !by_function.is_empty() {
                    write!(f, "\n    major faults by function")?;
                }
                for (function, faults) in by_function {
                    share_line(f, faults.major, recorded.major, "", &in_binary(function))?;
                }
                // Never above the exact count it estimates: a sampled count overshoots
                // by up to a period per thread (each thread's events count from its
                // start).
                let estimate = |samples: u64| samples.saturating_mul(*minor_sampling).min(t.minor);
                write!(
                    f,
                    "\n    minor faults     {:>14} estimated of {} ({} recorded), ~{} lost",
                    format!("~{}", estimate(recorded.minor_samples)),
                    t.minor,
                    recorded.minor_samples,
                    estimate(lost.minor_samples)
                )?;
                for (mapping, faults) in w.run.top_minor(TOP) {
                    let count = estimate(faults.minor_samples);
                    share_line(f, count, estimate(recorded.minor_samples), "~", mapping)?;
                    regions_line(f, w, mapping, false)?;
                }
                let by_function = w.run.top_functions_minor(TOP);
                if !by_function.is_empty() {
                    write!(f, "\n    minor faults by function")?;
                }
                for (function, faults) in by_function {
                    let count = estimate(faults.minor_samples);
                    let name = in_binary(function);
                    share_line(f, count, estimate(recorded.minor_samples), "~", &name)?;
                }
            }
        }
        // By program, as process-exporter groups by name: fifteen runs of one job are one
        // line, not fifteen of 7% each and the rest in "other".
        let top = w.run.top_programs(TOP);
        write!(f, "\n    by program (exact, their processes' own faults)")?;
        let (mut minor, mut major) = (0u64, 0u64);
        for p in &top {
            let who = match p.processes {
                1 => format!("pid {}", p.pid),
                n => format!("{n} processes"),
            };
            write!(
                f,
                "\n      {:>12} minor {:>10} major  {} ({who})",
                p.minor,
                p.major,
                printable(&p.comm)
            )?;
            minor = minor.saturating_add(p.minor);
            major = major.saturating_add(p.major);
        }
        let (minor, major) = (t.minor.saturating_sub(minor), t.major.saturating_sub(major));
        if minor == 0 && major == 0 {
            return Ok(());
        }
        write!(
            f,
            "\n      {minor:>12} minor {major:>10} major  other programs, and not read apart"
        )
    }

    /// The command's own accounting, the attached processes' peaks, then the notes.
    fn command_and_notes(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(c) = &self.child {
            write!(
                f,
                "\n  command rusage     {:>14} minor, {} major, {:.3} s CPU ({:.3} s user, \
                 {:.3} s system); {}",
                c.minor,
                c.major,
                c.cpu_ns as f64 / 1e9,
                c.usage.user_ns as f64 / 1e9,
                c.usage.system_ns as f64 / 1e9,
                c.status
            )?;
            write!(
                f,
                "\n  command peak RSS   {:>14.1} MiB (maximum resident set size, as time -v)",
                c.usage.max_rss_bytes as f64 / MIB
            )?;
        }
        for peak in self.peaks {
            write!(
                f,
                "\n  {:<19}{:>14.1} MiB (VmHWM: its largest resident set since it started{})",
                format!("pid {} peak RSS", peak.pid),
                peak.bytes as f64 / MIB,
                match peak.exited_within {
                    None => String::new(),
                    Some(within) => format!(
                        ", as last read, {:.2} s or less before it exited",
                        within.as_secs_f64()
                    ),
                }
            )?;
        }
        for note in self.notes {
            write!(f, "\n  note: {note}")?;
        }
        Ok(())
    }
}

/// A function as the summary lists it: `read_index in libdb.so.5` (the binary's file
/// name: its path is the mapping's, listed above). A memory's name (`[anon:a/b]`) is
/// shown whole: a `/` in it divides no path.
fn in_binary(function: &Function) -> String {
    let binary = if function.binary.starts_with('[') {
        &function.binary
    } else {
        (function.binary.rsplit('/').next()).unwrap_or(&function.binary)
    };
    format!("{} in {binary}", function.name)
}

/// One mapping's (or function's) line: its share of `total`, its count (`~`: an
/// estimate), its name, escaped: a file's or a symbol's name may hold a newline (a
/// forged line) or an escape sequence for the terminal.
fn share_line(
    f: &mut fmt::Formatter<'_>,
    count: u64,
    total: u64,
    approximate: &str,
    name: &dyn fmt::Display,
) -> fmt::Result {
    write!(
        f,
        "\n      {:>5.1}% {:>14}  {}",
        count as f64 * 100.0 / total.max(1) as f64,
        format!("{approximate}{count}"),
        printable(&name.to_string())
    )
}

/// A file's hottest regions, under its line: `in the file: 0-4 MiB 61%, 12-14 MiB 30%`,
/// each one's share of the file's major faults (`by_major`) or of its minor ones.
fn regions_line(
    f: &mut fmt::Formatter<'_>,
    w: &AttributionSummary,
    mapping: &Mapping,
    by_major: bool,
) -> fmt::Result {
    let Some(regions) = hottest_regions(&w.run, mapping, by_major, None) else {
        return Ok(());
    };
    let listed: Vec<String> = (regions.iter())
        .map(|r| format!("{} {:.0}%", human_span(r.start, r.end), r.share * 100.0))
        .collect();
    write!(
        f,
        "\n                             in the file: {}",
        listed.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pressure::verdict::test_band as band;

    #[test]
    fn the_summary_dates_thrashing_with_its_rates_and_the_memory_at_the_onset() {
        let bands = [band()];
        let text = Summary {
            thrashing: Thrashing::Judged(&bands, crate::pressure::verdict::RULE),
            ..summary_of(Mode::Strict)
        }
        .to_string();
        let line = text.lines().find(|l| l.starts_with("  thrashing")).unwrap();
        assert_eq!(
            line,
            "  thrashing          from t=2.15 s to t=6.20 s: memory full stall 52% of the \
             time (some 53%), 3000 major faults/s (100% of the system's), 2990 refaults/s, \
             2995 swap-ins/s; at the onset 65.0 MiB resident (64.0 anon, 1.0 file, 0.0 \
             shmem), 0.0 MiB swapped"
        );
    }

    #[test]
    fn a_band_with_attribution_names_the_mapping_with_most_of_its_major_faults() {
        let named = Band {
            major_mapping: Some(crate::pressure::verdict::BandMapping {
                name: "/var/lib/db/index.dat (shared)".into(),
                kind: crate::attribution::MappingKind::Shared,
                major_faults: 9963,
                share: 0.82,
            }),
            ..band()
        };
        assert!(
            named.to_string().contains(
                "3000 major faults/s (100% of the system's), 82% of them in \
                 /var/lib/db/index.dat (shared), 2990 refaults/s"
            ),
            "{named}"
        );
    }

    #[test]
    fn a_summary_without_thrashing_says_so_in_a_word_and_one_without_psi_says_nothing() {
        let judged = Summary {
            thrashing: Thrashing::Judged(&[], crate::pressure::verdict::RULE),
            ..summary_of(Mode::Strict)
        }
        .to_string();
        assert!(
            judged.lines().any(|l| l == "  thrashing          none"),
            "{judged}"
        );
        assert!(!summary(Mode::Strict).contains("thrashing"));
    }

    fn summary_of(mode: Mode) -> Summary<'static> {
        Summary {
            backend: "procfs",
            mode,
            counted: "pid 42 and its descendants",
            totals: Box::leak(Box::default()),
            blocked: Duration::ZERO,
            deferred: 0,
            child: None,
            peaks: &[],
            thrashing: Thrashing::NotJudged,
            attributed: None,
            notes: &[],
        }
    }

    /// [`summary_of`] with a note, as text.
    fn summary(mode: Mode) -> String {
        Summary {
            notes: &["one thing".into()],
            ..summary_of(mode)
        }
        .to_string()
    }

    #[test]
    fn only_a_strict_summary_whose_producer_waited_says_how_long() {
        let waited = |mode| {
            Summary {
                blocked: Duration::from_millis(5),
                deferred: 2,
                ..summary_of(mode)
            }
            .to_string()
        };
        assert!(waited(Mode::Strict).contains("\n  producer blocked            0.005 s\n"));
        assert!(!waited(Mode::Relaxed).contains("producer blocked"));
        assert!(waited(Mode::Relaxed).contains("\n  samples deferred                2"));
        // At zero, neither: the ring's internals are not the user's business then.
        let quiet = summary(Mode::Strict);
        assert!(
            quiet.contains("\n  samples lost                    0\n"),
            "{quiet}"
        );
        assert!(!quiet.contains("producer blocked") && !quiet.contains("deferred"));
        assert!(summary(Mode::Relaxed).ends_with("\n  note: one thing"));
    }

    /// A function's line in the summary, as [`share_line`] writes it.
    struct Line(Function);

    impl fmt::Display for Line {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            share_line(f, 1, 2, "", &in_binary(&self.0))
        }
    }

    fn function(binary: &str, name: &str) -> Function {
        Function {
            binary: binary.into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_symbol_or_binary_with_a_newline_or_an_escape_prints_escaped() {
        let line = Line(function(
            "/opt/x\u{1b}[2J/lib\u{1b}]0;t",
            "f\nforged\u{1b}[31m",
        ))
        .to_string();
        assert_eq!(
            line,
            "\n       50.0%              1  f\\nforged\\u{1b}[31m in lib\\u{1b}]0;t"
        );
    }

    #[test]
    fn a_memory_name_with_a_slash_prints_whole() {
        let path = Line(function("/usr/lib/libdb.so.5", "read_index")).to_string();
        assert!(path.ends_with("  read_index in libdb.so.5"), "{path}");
        let memory = Line(function("[anon:a/b]", "jitted")).to_string();
        assert!(memory.ends_with("  jitted in [anon:a/b]"), "{memory}");
    }
}
