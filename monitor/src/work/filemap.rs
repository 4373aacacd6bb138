//! `work --file`: a file `work` creates and maps shared, swept once an iteration, each of
//! its pages touched once after the mapping was emptied (`MADV_DONTNEED`). The faults a
//! sweep took are its thread's own counts around it (`getrusage(RUSAGE_THREAD)`, kept as
//! the kernel accounts each fault), not a forecast: how many pages one fault maps depends
//! on the kernel and file system (a read's fault-around maps cached neighbours read-only,
//! each faulting again on a write; a large folio may be mapped whole at once). A sweep of
//! cached pages (`mincore()` says which) stores to each without reading; one of pages not
//! cached reads each, read ahead of nothing (`MADV_RANDOM`): major faults (a write would
//! also call the file system's `page_mkwrite`, which on ext4 makes the write fault again,
//! minor, once the page is read). With `evict`, every sweep after the first begins with
//! the file's pages written back and dropped from the page cache. A sweep touches the
//! whole file, or only the ranges of it asked for, one after the other, each range's
//! faults counted apart: what each region of the file took.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::ops::Range;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use memmap2::{Advice, MmapMut, UncheckedAdvice};
use nix::fcntl::{posix_fadvise, PosixFadviseAdvice};

/// What the sweeps of a file mapping took, by their thread's counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    pub minor: u64,
    pub major: u64,
}

/// How many times a sweep tries to evict the file's pages, and the longest wait between
/// two tries: a page the kernel holds at that moment (reclaim isolating it, a writeback,
/// a read of another process) cannot be dropped, and a loaded machine holds some for a
/// while. The waits double from 1 ms: about 0.8 s in all.
const EVICTION_TRIES: u32 = 20;
const EVICTION_WAIT_MAX: Duration = Duration::from_millis(50);

/// A range of the file a sweep touches, in bytes, and what its pages took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SweptRange {
    pub bytes: Range<usize>,
    pub expected: Expected,
}

/// The file and its shared mapping.
pub struct FileMap {
    path: PathBuf,
    file: File,
    map: MmapMut,
    page_size: usize,
    evict: bool,
    sweeps: u32,
    /// What the sweeps touch, in order: the whole file unless told otherwise.
    ranges: Vec<SweptRange>,
    stayed_cached: u64,
    /// Each range read by its own code ([`FileMap::by_function`]).
    by_function: bool,
}

impl FileMap {
    /// Creates `path` (replacing a file of that name) with `mib` MiB of data, written
    /// through the page cache, and maps it shared; `evict`: each sweep after the first
    /// finds the file's pages evicted.
    pub fn create(path: &Path, mib: usize, evict: bool) -> io::Result<FileMap> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let chunk = vec![0x5au8; 1 << 20];
        for _ in 0..mib.max(1) {
            file.write_all(&chunk)?;
        }
        // SAFETY: the file was just created by this process, which alone writes it, and
        // only through this mapping from now on.
        let map = unsafe { MmapMut::map_mut(&file)? };
        map.advise(Advice::Random)?;
        let whole = SweptRange {
            bytes: 0..map.len(),
            expected: Expected::default(),
        };
        Ok(FileMap {
            path: path.to_path_buf(),
            file,
            map,
            page_size: crate::system::page_size(),
            evict,
            sweeps: 0,
            ranges: vec![whole],
            stayed_cached: 0,
            by_function: false,
        })
    }

    /// Sweeps only `ranges` of the file (bytes, in the file's pages), one after the other;
    /// a range beyond the file's end is refused.
    pub fn only(mut self, ranges: &[Range<usize>]) -> io::Result<FileMap> {
        let len = self.map.len();
        if let Some(bad) = ranges.iter().find(|r| r.start >= r.end || r.end > len) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("range {bad:?} is not within the file's {len} bytes"),
            ));
        }
        self.ranges = (ranges.iter())
            .map(|r| SweptRange {
                bytes: r.clone(),
                expected: Expected::default(),
            })
            .collect();
        Ok(self)
    }

    /// Reads each range with code of its own ([`Reader::ALL`], in order), for a
    /// profiler's known answer: which function took which range's faults.
    pub fn by_function(mut self) -> FileMap {
        self.by_function = true;
        self
    }

    /// The code that reads the `i`th range in each sweep.
    pub fn reader(&self, i: usize) -> Reader {
        Reader::of_range(self.by_function, i)
    }

    /// The ranges swept, and what each took.
    pub fn ranges(&self) -> &[SweptRange] {
        &self.ranges
    }

    /// The mapping's address range.
    pub fn range(&self) -> (usize, usize) {
        let start = self.map.as_ptr() as usize;
        (start, start + self.map.len())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pages a sweep touches.
    pub fn pages(&self) -> usize {
        (self.ranges.iter())
            .map(|r| r.bytes.len().div_ceil(self.page_size))
            .sum()
    }

    /// The faults every sweep so far took, in all its ranges.
    pub fn expected(&self) -> Expected {
        let mut all = Expected::default();
        for range in &self.ranges {
            all.minor += range.expected.minor;
            all.major += range.expected.major;
        }
        all
    }

    /// Pages that stayed in the page cache through a sweep's evictions, all sweeps
    /// together: each was read as a minor fault where an evicted one takes a major.
    pub fn stayed_cached(&self) -> u64 {
        self.stayed_cached
    }

    /// Touches each page once, after emptying the mapping (and, with `evict`, the page
    /// cache) when it was swept before: writes to each if all are cached, else reads each;
    /// returns a checksum. Pages the kernel would not drop are read all the same (what
    /// the sweep took is its thread's counts, whatever they were): `stayed_cached` says
    /// how many.
    pub fn sweep(&mut self) -> io::Result<u8> {
        let pages = (self.map.len() / self.page_size) as u64;
        let mut cached = pages;
        if self.sweeps > 0 {
            let mut wait = Duration::from_millis(1);
            for _ in 0..EVICTION_TRIES {
                self.empty()?;
                cached = self.cached_pages()?;
                if !self.evict || cached == 0 {
                    break;
                }
                std::thread::sleep(wait);
                wait = (2 * wait).min(EVICTION_WAIT_MAX);
            }
            if self.evict {
                self.stayed_cached += cached;
            }
        } else {
            cached = self.cached_pages()?;
        }
        let mut sum = 0u8;
        // Stored, never read first, when all are cached: a read would fault first and
        // map its cached neighbours read-only (fault-around), each then faulting again
        // on its write (write-protect): one page in 16 taking two faults, where
        // `expected` says one.
        let stamp = (cached == pages).then_some((self.sweeps as u8).wrapping_add(1));
        for (i, range) in self.ranges.iter_mut().enumerate() {
            let before = thread_faults()?;
            let reader = Reader::of_range(self.by_function, i);
            let bytes = &mut self.map[range.bytes.clone()];
            sum = sum.wrapping_add(reader.touch(bytes, self.page_size, stamp));
            let after = thread_faults()?;
            range.expected.minor += after.minor - before.minor;
            range.expected.major += after.major - before.major;
        }
        self.sweeps += 1;
        Ok(std::hint::black_box(sum))
    }

    /// Unmaps every page from the mapping (their next access faults again) and, with
    /// `evict`, drops them from the page cache once written back.
    fn empty(&mut self) -> io::Result<()> {
        if self.evict {
            // Written back: the page cache drops clean pages only.
            self.map.flush()?;
        }
        // SAFETY: the mapping is shared: its pages' contents stay in the file, and the
        // next access reads them back. Nothing borrows the mapping meanwhile.
        unsafe { self.map.unchecked_advise(UncheckedAdvice::DontNeed)? };
        if self.evict {
            // Dropped once neither dirty nor mapped, as they now are.
            posix_fadvise(
                self.file.as_fd(),
                0,
                0,
                PosixFadviseAdvice::POSIX_FADV_DONTNEED,
            )?;
        }
        Ok(())
    }

    /// How many of the file's pages are in the page cache now (`mincore()` says so of a
    /// file mapping's pages, mapped or not).
    fn cached_pages(&self) -> io::Result<u64> {
        resident_pages(self.map.as_ptr(), self.map.len())
    }
}

/// The code that touches a range's pages in a sweep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reader {
    /// The sweep's own loop.
    Loop,
    /// [`read_first_range`].
    First,
    /// [`read_second_range`].
    Second,
    /// The C library's `memchr`, reading every byte: code in a shared library.
    Memchr,
}

impl Reader {
    /// The readers of the first ranges with `--by-function`, in order.
    pub const ALL: [Reader; 3] = [Reader::First, Reader::Second, Reader::Memchr];

    /// The reader of the `i`th range: its own with `by_function`, else the loop's.
    fn of_range(by_function: bool, i: usize) -> Reader {
        match by_function {
            true => Reader::ALL.get(i).copied().unwrap_or(Reader::Loop),
            false => Reader::Loop,
        }
    }

    /// The function a profiler should name for it (`work`'s demangled, libc's symbol).
    pub fn function(self) -> &'static str {
        match self {
            Reader::Loop => "monitor::work::filemap::Reader::touch",
            Reader::First => "monitor::work::filemap::read_first_range",
            Reader::Second => "monitor::work::filemap::read_second_range",
            Reader::Memchr => "memchr",
        }
    }

    /// Touches each page of `bytes`: stores `stamp` in each, else reads each; returns
    /// their sum. Never inlined: the loop's faults are this function's.
    #[inline(never)]
    fn touch(self, bytes: &mut [u8], page_size: usize, stamp: Option<u8>) -> u8 {
        match self {
            Reader::Loop => touch_pages(bytes, page_size, stamp),
            Reader::First => read_first_range(bytes, page_size, stamp),
            Reader::Second => read_second_range(bytes, page_size, stamp),
            Reader::Memchr => {
                // memchr reads every byte for one it never finds (255: no sweep's stamp
                // is, and a new file's bytes are 0); the stores stay ours.
                if stamp.is_some() {
                    return touch_pages(bytes, page_size, stamp);
                }
                // SAFETY: `bytes` is a live slice of the mapping: memchr reads its
                // `len()` bytes and nothing else.
                let found = unsafe { libc::memchr(bytes.as_ptr().cast(), 255, bytes.len()) };
                u8::from(!found.is_null())
            }
        }
    }
}

/// The known answer's first function: its instructions take the first range's faults.
#[inline(never)]
pub fn read_first_range(bytes: &mut [u8], page_size: usize, stamp: Option<u8>) -> u8 {
    touch_pages(bytes, page_size, stamp)
}

/// The known answer's second function. Its result differs from the first's: rustc
/// merges functions of identical code into one (LLVM's MergeFunctions, in release
/// builds), and the two names would then be one address.
#[inline(never)]
pub fn read_second_range(bytes: &mut [u8], page_size: usize, stamp: Option<u8>) -> u8 {
    touch_pages(bytes, page_size, stamp).rotate_left(1)
}

/// Stores `stamp` in a byte of each page of `bytes`, or reads one; their sum. Inlined:
/// the faulting instructions are its caller's.
#[inline(always)]
fn touch_pages(bytes: &mut [u8], page_size: usize, stamp: Option<u8>) -> u8 {
    let mut sum = 0u8;
    for at in (0..bytes.len()).step_by(page_size) {
        match stamp {
            Some(stamp) => bytes[at] = stamp,
            None => sum = sum.wrapping_add(std::hint::black_box(bytes[at])),
        }
        sum = sum.wrapping_add(stamp.unwrap_or(0));
    }
    sum
}

impl Drop for FileMap {
    fn drop(&mut self) {
        // The file was ours to make; a failure leaves it for its owner to remove.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The calling thread's faults so far: a system call, nothing allocated or touched.
fn thread_faults() -> io::Result<Expected> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_THREAD).map_err(io::Error::from)?;
    Ok(Expected {
        minor: usage.minor_page_faults() as u64,
        major: usage.major_page_faults() as u64,
    })
}

/// How many pages of `len` bytes at `start` are resident: of `work`'s anonymous buffer,
/// the pages its accesses touched (none is swapped out on a machine without swap).
pub fn resident_pages(start: *const u8, len: usize) -> io::Result<u64> {
    let page = crate::system::page_size();
    let mut resident = vec![0u8; len.div_ceil(page)];
    // SAFETY: mincore writes one byte for each page of the range into `resident`, which
    // holds that many, and touches no other memory of ours; a range not mapped, or not
    // page aligned, it refuses (ENOMEM, EINVAL).
    let ret = unsafe { libc::mincore(start as *mut libc::c_void, len, resident.as_mut_ptr()) };
    if ret != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(resident.iter().filter(|&&r| r & 1 == 1).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swept_file_counts_its_own_faults_and_majors_once_evicted() {
        // Beside the test binary, on the build directory's file system: /tmp may be
        // tmpfs, whose pages are never evicted to a file.
        let exe = std::env::current_exe().unwrap();
        let path = exe.with_file_name(format!("swept-{}", std::process::id()));
        let mut map = FileMap::create(&path, 4, true).unwrap();
        let pages = map.pages() as u64;
        assert_eq!(pages, 4 << 20 >> 12);
        let before = crate::system::procstat::read_self().unwrap();
        map.sweep().unwrap();
        map.sweep().unwrap();
        let after = crate::system::procstat::read_self().unwrap();
        let expected = map.expected();
        // Written just before: the first sweep's pages are cached (minor faults, as few as
        // one a large folio), the second's evicted (major faults, at most one a page).
        assert!(expected.minor > 0, "{expected:?}");
        assert!((1..=pages).contains(&expected.major), "{expected:?}");
        // Within this process's own faults (other tests' threads fault beside it).
        assert!(after.major - before.major >= expected.major, "{expected:?}");
        assert!(after.minor - before.minor >= expected.minor, "{expected:?}");
        drop(map);
        assert!(!path.exists());
    }

    #[test]
    fn a_sweep_of_ranges_touches_only_their_pages_and_counts_each_apart() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.with_file_name(format!("ranges-{}", std::process::id()));
        let mib = 1 << 20;
        let map = FileMap::create(&path, 4, true).unwrap();
        assert!(map.only(&[0..mib, 3 * mib..5 * mib]).is_err());
        let map = FileMap::create(&path, 4, true).unwrap();
        let mut map = map.only(&[0..mib, 3 * mib..4 * mib - 4096]).unwrap();
        assert_eq!(map.pages(), 256 + 255);
        map.sweep().unwrap();
        map.sweep().unwrap();
        let ranges = map.ranges();
        // The second sweep's pages evicted: a major fault each at most, each range's own.
        assert!((1..=256).contains(&ranges[0].expected.major), "{ranges:?}");
        assert!((1..=255).contains(&ranges[1].expected.major), "{ranges:?}");
        assert_eq!(
            map.expected().major,
            ranges[0].expected.major + ranges[1].expected.major
        );
        drop(map);
        assert!(!path.exists());
    }

    #[test]
    fn a_sweep_whose_pages_another_mapping_keeps_cached_reads_them_and_says_so() {
        let exe = std::env::current_exe().unwrap();
        let path = exe.with_file_name(format!("kept-{}", std::process::id()));
        let mut map = FileMap::create(&path, 1, true).unwrap();
        let pages = map.pages() as u64;
        map.sweep().unwrap();
        // Another mapping of the file, every page of it mapped: the page cache drops no
        // page mapped anywhere, as a loaded machine's other reader, or reclaim holding a
        // page, keeps it. A sweep that gave up on eviction failed `work` (a loaded CI
        // lane lost a `work`'s announcements so).
        let other = File::open(&path).unwrap();
        // SAFETY: a read-only shared mapping of a file nobody truncates while it lives.
        let reader = unsafe { memmap2::Mmap::map(&other).unwrap() };
        let mapped: u64 = reader.iter().step_by(4096).map(|&b| u64::from(b)).sum();
        assert!(mapped > 0);
        map.sweep().unwrap();
        assert_eq!(map.stayed_cached(), pages);
        // Read cached: minor faults, by the sweep's own thread counts.
        let expected = map.expected();
        assert_eq!(expected.major, 0, "{expected:?}");
        drop(reader);
        drop(map);
    }
}
