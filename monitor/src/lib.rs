//! pfprof's monitor and workload generator: everything but argument parsing, which lives
//! in the binaries.

pub mod apportion;
pub mod backend;
pub mod cgroup;
pub mod child;
pub mod duration;
pub mod error;
pub mod exit;
pub mod export;
pub mod install;
pub mod output;
pub mod plot;
pub mod pressure;
pub mod procstat;
pub mod registration;
pub mod report;
pub mod row;
pub mod session;
pub mod signals;
pub mod source;
pub mod verdict;
pub mod workload;

/// Held by the unit tests that take and give back tens of MiB of this process's memory
/// ([`fresh_pages`]): tests run as threads of one process, and those that measure its
/// resident memory must not see another's come and go.
#[cfg(test)]
fn big_allocations() -> std::sync::MutexGuard<'static, ()> {
    static BIG_ALLOCATIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    BIG_ALLOCATIONS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// 64 MiB of fresh pages, resident once written: above glibc's largest mmap threshold
/// (32 MiB), so a mapping of their own, never a heap block another test already touched.
#[cfg(test)]
fn fresh_pages() -> Vec<u8> {
    vec![1u8; 64 << 20]
}
