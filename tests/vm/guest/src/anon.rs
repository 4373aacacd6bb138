//! Fresh anonymous memory for the processes the tests profile to touch.

use std::ptr::NonNull;

use anyhow::{ensure, Context, Result};

/// The page size the tests count faults in.
pub const PAGE: usize = 4096;

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

/// Fresh anonymous memory, never touched: every page costs one minor fault.
pub struct Fresh {
    pub ptr: NonNull<u8>,
    pub len: usize,
}

impl Fresh {
    pub fn new(pages: usize) -> Result<Fresh> {
        let len = pages.max(1) * PAGE;
        let ptr = map_anonymous(len)?;
        // One fault per page, not one per huge page.
        // SAFETY: the range was just mapped.
        unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_NOHUGEPAGE) };
        Ok(Fresh { ptr, len })
    }

    pub fn touch(&self, pages: std::ops::Range<usize>) {
        for i in pages {
            // SAFETY: i < pages of the mapping; nobody else uses it.
            unsafe { self.ptr.as_ptr().add(i * PAGE).write_volatile(1) };
        }
    }
}

// SAFETY: the mapping is plain memory; threads touch disjoint pages.
unsafe impl Sync for Fresh {}

impl Drop for Fresh {
    fn drop(&mut self) {
        // SAFETY: we mapped exactly this range.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
