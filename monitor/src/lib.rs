//! pfprof's monitor and workload generator: everything but the binaries' `main`s, their
//! command lines included (`cli`, which the man pages and shell completions are made from).

// In the order a sample travels: produced by a backend, read as rows, given its share of
// the memory pressure, written and exported; the profile drives them all, around the
// command it may start. `system` is what every stage reads of the host; `work` is the
// workload generator.
pub mod attribution;
pub mod backend;
pub mod cli;
pub mod command;
pub mod export;
pub mod fleet;
pub mod output;
pub mod pressure;
pub mod profile;
pub mod rows;
pub mod system;
pub mod work;

/// The name this process was started by (its argv[0]'s file name: `monitor` from a
/// checkout, `pfprof` from the package), for its messages and its help.
pub fn program_name() -> &'static str {
    static NAME: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        std::env::args_os()
            .next()
            .as_deref()
            .and_then(|arg0| std::path::Path::new(arg0).file_name())
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_else(|| "monitor".to_owned())
    });
    &NAME
}

/// Held by the unit tests that take and give back tens of MiB of this process's memory
/// ([`fresh_pages`], or this test binary read for its symbols): tests run as threads of
/// one process, and those that measure its resident memory must not see another's come
/// and go. What an earlier holder freed, glibc may keep resident in an arena that a new
/// thread takes over and trims later: given back first, it cannot leave mid-measurement.
#[cfg(test)]
fn big_allocations() -> std::sync::MutexGuard<'static, ()> {
    static BIG_ALLOCATIONS: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = BIG_ALLOCATIONS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // SAFETY: malloc_trim only returns free memory of glibc's arenas to the kernel.
    unsafe { libc::malloc_trim(0) };
    guard
}

/// 64 MiB of fresh pages, resident once written, unmapped when dropped. A mapping of
/// their own, not the allocator's: glibc serves even a 64 MiB request from a free heap
/// block when it has one, pages another test left resident, which would not grow.
#[cfg(test)]
fn fresh_pages() -> memmap2::MmapMut {
    let mut pages = memmap2::MmapMut::map_anon(64 << 20).expect("64 MiB of anonymous memory");
    pages.fill(1);
    pages
}
