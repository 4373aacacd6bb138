//! What was profiled, where and when: the first record of the rows (JSON Lines), their
//! first line as a `#` comment (CSV), and the plot's title. Each row's wall-clock time is
//! its `mono_ns` plus [`Metadata::clock_offset_ns`].

use std::ffi::OsString;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::time::{clock_gettime, ClockId};
use serde::Serialize;

/// The profile's metadata, as written before the first row.
#[derive(Clone, Debug, Serialize)]
pub struct Metadata {
    /// `monitor run`'s command and arguments.
    pub command: Option<Vec<String>>,
    /// The `--pid` processes.
    pub pids: Vec<u32>,
    /// `--cgroup`, below the cgroup2 mount.
    pub cgroup: Option<String>,
    /// The processes count with their descendants (not with `--no-inherit`).
    pub inherit: bool,
    /// The machine's host name and kernel release (`uname -n`, `uname -r`).
    pub host: String,
    pub kernel: String,
    pub backend: String,
    pub mode: String,
    pub period_ms: u64,
    /// When the profile started: RFC 3339 in UTC, and ns since the Unix epoch.
    pub start: String,
    pub start_unix_ns: u64,
    /// `CLOCK_REALTIME` minus `CLOCK_MONOTONIC` at the start, ns: a row's `mono_ns` plus
    /// this is its wall-clock time in ns since the Unix epoch (for as long as nobody sets
    /// the clock).
    pub clock_offset_ns: i64,
}

/// The most characters of the target and of the host name in the plot's title: with
/// the rest of it (at most 113 characters), what its font fits across the plot.
const TITLE_TARGET_WIDTH: usize = 36;
const TITLE_HOST_WIDTH: usize = 8;

/// `name` in at most `chars` characters, its middle left out (a path's start and its
/// file's name both tell), and characters no SVG may hold (controls: a file may be
/// named with them) replaced.
pub fn shortened(name: &str, chars: usize) -> String {
    let clean: Vec<char> = (name.chars())
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if clean.len() <= chars {
        return clean.into_iter().collect();
    }
    let head = chars / 3;
    let tail = chars.saturating_sub(head + 1);
    let mut short: String = clean[..head].iter().collect();
    short.push('…');
    short.extend(&clean[clean.len() - tail..]);
    short
}

/// `text` with its control characters escaped (`\n`, `\u{1b}`): an argument or a path
/// shown on a terminal must not move its cursor or send it sequences.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            c if c.is_control() => c.escape_default().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// What [`Metadata::now`] records about the target and the backend.
pub struct Profiled<'a> {
    pub command: Option<&'a [OsString]>,
    pub pids: &'a [u32],
    pub cgroup: Option<&'a str>,
    pub inherit: bool,
    pub backend: &'a str,
    pub mode: String,
    pub period: Duration,
}

impl Metadata {
    /// The metadata of a profile starting now.
    pub fn now(profiled: Profiled<'_>) -> Metadata {
        let (start_unix_ns, clock_offset_ns) = clocks();
        let uname = nix::sys::utsname::uname().ok();
        let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
            uname
                .as_ref()
                .map_or_else(String::new, |u| f(u).to_string_lossy().into_owned())
        };
        Metadata {
            command: (profiled.command).map(|argv| {
                argv.iter()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect()
            }),
            pids: profiled.pids.to_vec(),
            cgroup: profiled.cgroup.map(str::to_owned),
            inherit: profiled.inherit,
            host: field(nix::sys::utsname::UtsName::nodename),
            kernel: field(nix::sys::utsname::UtsName::release),
            backend: profiled.backend.to_owned(),
            mode: profiled.mode,
            period_ms: u64::try_from(profiled.period.as_millis()).unwrap_or(u64::MAX),
            start: humantime::format_rfc3339_millis(
                UNIX_EPOCH + Duration::from_nanos(start_unix_ns),
            )
            .to_string(),
            start_unix_ns,
            clock_offset_ns,
        }
    }

    /// [`Metadata::start`] to the second, for a title: its milliseconds would not fit.
    pub fn start_to_the_second(&self) -> String {
        match self.start.split_once('.') {
            Some((seconds, _)) => format!("{seconds}Z"),
            None => self.start.clone(),
        }
    }

    /// When the profile started on the samples' clock (`CLOCK_MONOTONIC`, ns).
    pub fn start_mono_ns(&self) -> u64 {
        let mono = i128::from(self.start_unix_ns) - i128::from(self.clock_offset_ns);
        u64::try_from(mono).unwrap_or(0)
    }

    /// What was profiled, in a few words: the command line, the pids or the cgroup.
    pub fn target(&self) -> String {
        match (&self.command, &self.cgroup) {
            (Some(argv), _) => printable(&argv.join(" ")),
            (None, Some(cgroup)) => format!("cgroup {}", printable(cgroup)),
            (None, None) if self.pids.is_empty() => "registered processes".to_owned(),
            (None, None) => {
                let pids: Vec<String> = self.pids.iter().map(u32::to_string).collect();
                format!("pid {}", pids.join(", "))
            }
        }
    }

    /// Who is counted, in a few words: the target, and whether its processes' descendants
    /// count with them (a cgroup counts every process inside).
    pub fn counted(&self) -> String {
        let target = self.target();
        match (&self.cgroup, self.inherit) {
            (Some(_), _) => target,
            (None, true) if self.pids.len() != 1 => format!("{target} and their descendants"),
            (None, true) => format!("{target} and its descendants"),
            (None, false) => format!("{target} alone (--no-inherit)"),
        }
    }

    /// [`Metadata::target`] with a command's program by its file name, not its path.
    fn short_target(&self) -> String {
        match self.command.as_deref() {
            Some([program, args @ ..]) => {
                let name = program.rsplit('/').next().unwrap_or(program);
                std::iter::once(name)
                    .chain(args.iter().map(String::as_str))
                    .collect::<Vec<_>>()
                    .join(" ")
            }
            _ => self.target(),
        }
    }

    /// The plot's title: what, on which host, when, and how it was sampled; a long
    /// command cut so that the title fits the plot's width (it was cut at both edges).
    pub fn title(&self) -> String {
        format!(
            "{} on {}, {}: {} backend, {} mode, {} ms period",
            shortened(&self.short_target(), TITLE_TARGET_WIDTH),
            shortened(&self.host, TITLE_HOST_WIDTH),
            self.start_to_the_second(),
            self.backend,
            self.mode,
            self.period_ms
        )
    }
}

/// The wall clock now (ns since the epoch), and its offset from `CLOCK_MONOTONIC`. The
/// monotonic clock is read on both sides of the wall clock, and their midpoint taken.
fn clocks() -> (u64, i64) {
    let monotonic = || {
        clock_gettime(ClockId::CLOCK_MONOTONIC)
            .map(|t| Duration::from(t).as_nanos() as i128)
            .unwrap_or(0)
    };
    let before = monotonic();
    let wall = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    let after = monotonic();
    let offset = wall - (before + after) / 2;
    (
        u64::try_from(wall).unwrap_or(0),
        i64::try_from(offset).unwrap_or(0),
    )
}

#[cfg(test)]
pub(crate) fn test_metadata() -> Metadata {
    Metadata::now(Profiled {
        command: None,
        pids: &[42],
        cgroup: None,
        inherit: true,
        backend: "procfs",
        mode: "strict".into(),
        period: Duration::from_millis(50),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_shown_without_its_control_characters() {
        let mut metadata = test_metadata();
        metadata.command = Some(vec!["sh".into(), "-c".into(), "true\n\u{1b}[2Jtrue".into()]);
        assert_eq!(metadata.target(), "sh -c true\\n\\u{1b}[2Jtrue");
        metadata.command = None;
        metadata.pids = Vec::new();
        assert_eq!(
            metadata.counted(),
            "registered processes and their descendants"
        );
    }

    #[test]
    fn a_long_command_is_cut_in_the_plots_title_and_the_rest_kept() {
        let mut metadata = test_metadata();
        metadata.command = Some(vec!["/usr/bin/python3".into(), "x".repeat(200)]);
        let title = metadata.title();
        assert!(title.starts_with("python3 xxx"), "{title}");
        assert!(title.contains('…') && title.contains("x on "), "{title}");
        assert!(
            title.ends_with(": procfs backend, strict mode, 50 ms period"),
            "{title}"
        );
        metadata.host = "h".repeat(64);
        assert!(
            metadata.title().chars().count() <= 113,
            "{}",
            metadata.title()
        );
    }

    #[test]
    fn a_monotonic_time_plus_the_offset_is_the_wall_clock_time() {
        let metadata = test_metadata();
        let mono = Duration::from(clock_gettime(ClockId::CLOCK_MONOTONIC).unwrap()).as_nanos();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let derived = mono as i128 + i128::from(metadata.clock_offset_ns);
        assert!(
            (derived - wall as i128).abs() < 5_000_000,
            "{derived} vs {wall}"
        );
        assert!(metadata.start.ends_with('Z'), "{}", metadata.start);
        assert_eq!(metadata.target(), "pid 42");
    }
}
