//! Fresh anonymous memory for the processes the tests profile to touch.

use std::ptr::NonNull;

use anyhow::{ensure, Context, Result};

/// `len` bytes of fresh anonymous private memory, readable and writable,
/// not touched yet; the caller unmaps it (or leaves it to the exit).
pub fn map_anonymous(len: usize) -> Result<NonNull<u8>> {
    // SAFETY: anonymous private mapping, no address hint.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    ensure!(
        ptr != libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    NonNull::new(ptr.cast()).context("mmap returned null")
}
