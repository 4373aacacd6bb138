//! What every stage reads of the host or shares: a process's counters ([`procstat`]) and
//! peak resident set ([`peak`]), a cgroup ([`cgroup`]), exit codes ([`exit`]), a failed
//! system call ([`error`]), durations on the command line ([`duration`]), the page size
//! ([`page_size`]).

pub mod cgroup;
pub mod duration;
pub mod error;
pub mod exit;
pub mod peak;
pub mod procstat;
pub mod terminal;

/// This process's threads named `name` (their `comm`): their /proc/self/task directories.
#[cfg(test)]
pub(crate) fn threads_named(name: &str) -> Vec<std::path::PathBuf> {
    let tasks = std::fs::read_dir("/proc/self/task").unwrap();
    (tasks.flatten())
        .map(|task| task.path())
        .filter(|task| {
            let comm = std::fs::read_to_string(task.join("comm")).unwrap_or_default();
            comm.trim() == name
        })
        .collect()
}

/// The size of a page, bytes (4 KiB where the system will not say).
pub fn page_size() -> usize {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|size| usize::try_from(size).ok())
        .unwrap_or(4096)
}
