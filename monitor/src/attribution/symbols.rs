//! Code locations named: the file offset of a faulting instruction in a binary or a
//! library, turned into the function there from the file's ELF symbols.
//!
//! Read with the `object` crate rather than blazesym or addr2line (docs/benchmarks.md,
//! "Naming the code that faulted"): a fault needs a function's name, not its lines, so
//! the symbol tables are all there is to read (`.symtab`, else the separate debug file
//! found by build id or debug link, else `.dynsym`, which a stripped binary keeps).
//! Loading a table and naming 100,000 offsets took 3-20 ms where blazesym took 23-125
//! ms from ELF symbols alone (where it reads no debug file: 31% of stripped libc's
//! offsets named, to these tables' 98% from libc6-dbg's) and 0.2-1.1 s through DWARF
//! (which finds the debug file: the same 98%); addr2line reads DWARF only, for lines.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt::{self, Write as _};
use std::fs::File;
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use nix::errno::Errno;
use nix::fcntl::{self, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;
use object::read::{ReadCache, ReadCacheOps, ReadRef};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use super::mapping::FileId;
use super::table::Code;

/// The most bytes the cache holds, over all its files: each function's name and
/// [`ENTRY_BYTES`]. A typical file has thousands of functions (python3's `.dynsym`
/// 1,500, libc's debug file 3,700, this monitor's `.symtab` 7,600: 0.5 MiB); past it
/// the cache starts again empty.
pub const MAX_CACHED_BYTES: usize = 128 << 20;

/// What a function costs the cache beside its name: its range and the name's pointer.
const ENTRY_BYTES: usize = 40;

/// The most files the cache knows, those it could not read included: past it, it starts
/// again empty.
pub const MAX_CACHED_FILES: usize = 4096;

/// The most bytes of one file (and of its debug file) read into memory: its headers,
/// symbol tables and names. This monitor's own `.symtab` and names are 1.4 MiB, libc's
/// debug file's 0.4 MiB; a file past it is `[unknown]`. Any user's process may map a
/// file it made, and a symbol table of gigabytes would be read whole.
const MAX_READ_BYTES: u64 = 64 << 20;

/// The longest symbol name `object` reads (its own bound: a longer name is no name).
const MAX_NAME_BYTES: u64 = 4096;

/// The longest name demangled: a Rust v0 symbol of 74 bytes demangles to a megabyte
/// through its back-references. A longer one is cut, ending in `…`.
const MAX_DEMANGLED_BYTES: usize = 1024;

/// How many bytes of files the cache reads a second at most, once it has read
/// [`READ_BURST_BYTES`]: a process may map thousands of files it made, each with
/// [`MAX_READ_BYTES`] of symbols, and more of them than the cache holds would be read
/// again and again. The code of a file not read for it is named [`DEFERRED`] until the
/// budget allows, then named as usual; typical files take 0.1-2 MiB.
const READ_BYTES_PER_SECOND: u64 = 16 << 20;

/// How many bytes the cache may read at once, at the start of a profile (the binaries
/// and libraries of what it profiles) or after a quiet while.
const READ_BURST_BYTES: u64 = 256 << 20;

/// Where a distribution installs debug files by build id: `xx/yyyy.debug`.
const BUILD_ID_DIR: &str = "/usr/lib/debug/.build-id";

/// What a function is named when its code's file has no symbol for it.
pub const UNKNOWN: &str = "[unknown]";

/// What a function is named when its file was not read: the cache had read as much as
/// it may for now (`READ_BYTES_PER_SECOND`).
pub const DEFERRED: &str = "[symbols deferred]";

/// A function, in the binary or library (or other memory) its code is in.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Function {
    /// The file's path, or the memory's name without its process (`[anon:NAME]`,
    /// `[heap]`; `[anonymous]` for plain anonymous memory: JIT code; `[kernel]` for a
    /// fault the kernel took in a system call on the process's behalf): one JIT's code
    /// in fifteen processes is one function, as a program's heap is one mapping to the
    /// exporters.
    pub binary: String,
    /// The symbol's name, demangled (Rust's; C++'s are left as they are), or
    /// [`UNKNOWN`].
    pub name: Arc<str>,
}

/// Why a file's symbols could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SymbolError {
    #[error("opening {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} is not the file that was mapped (replaced since, or in another mount namespace)"
    )]
    Replaced { path: PathBuf },
    #[error("reading {path} as ELF: {source}")]
    Parse {
        path: PathBuf,
        source: object::read::Error,
    },
}

/// One file's functions by address (named as the file names them), and how its file
/// offsets become addresses.
#[derive(Debug, Default)]
pub struct SymbolTable {
    /// The loadable segments: (file offset, size in the file, address).
    segments: Vec<(u64, u64, u64)>,
    /// Functions by start address: (start, end, name), sorted, not overlapping.
    functions: Vec<(u64, u64, Arc<str>)>,
    /// What it costs the cache: its names and entries.
    bytes: usize,
}

impl SymbolTable {
    /// The functions of the ELF file at `path`, which must be `file` (device and inode)
    /// when given; what it read of the file and its debug file added to `spent`, bytes,
    /// whether it succeeds or not.
    pub fn read(
        path: &Path,
        file: Option<FileId>,
        spent: &Cell<u64>,
    ) -> Result<SymbolTable, SymbolError> {
        let open_error = |source| SymbolError::Open {
            path: path.into(),
            source,
        };
        // The kernel names a mapping by its path without symbolic links: a path through
        // one is another file than the one mapped (a process's chroot or mount
        // namespace names its files with paths that lead elsewhere here).
        let handle = open_regular(path, ResolveFlag::RESOLVE_NO_SYMLINKS).map_err(open_error)?;
        if let Some(file) = file {
            let meta = handle.metadata().map_err(open_error)?;
            let mapped = (file.major, file.minor);
            // The kernel names a mapping's device as its filesystem's; on btrfs stat
            // says its subvolume's, another.
            let same_device = (libc::major(meta.dev()), libc::minor(meta.dev())) == mapped
                || filesystem_device(&handle) == Some(mapped);
            if meta.ino() != file.inode || !same_device {
                return Err(SymbolError::Replaced { path: path.into() });
            }
        }
        let parse_error = |source| SymbolError::Parse {
            path: path.into(),
            source,
        };
        // Read as needed: the headers and symbol tables, not a whole binary.
        let data = BoundedRead::new(handle, spent);
        let elf = object::File::parse(&data).map_err(parse_error)?;
        let segments = (elf.segments())
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .filter(|&(_, size, _)| size > 0)
            .collect();
        let mut functions = functions(elf.symbols());
        if functions.is_empty() {
            // Stripped: its debug file, installed for its build id or named by its
            // .gnu_debuglink (beside it, or in .debug/ beside it, as gdb looks), and
            // taken only if it carries the binary's build id: the link is the file's
            // word, and any user may write a file naming another's.
            if let Some(id) = elf.build_id().ok().flatten() {
                let link = elf.gnu_debuglink().ok().flatten();
                functions = debug_functions(path, id, link, spent);
            }
        }
        if functions.is_empty() {
            functions = self::functions(elf.dynamic_symbols());
        }
        let bytes = (functions.iter()).map(|f| ENTRY_BYTES + f.2.len()).sum();
        Ok(SymbolTable {
            segments,
            functions,
            bytes,
        })
    }

    /// The function whose code is at file offset `offset`, if a symbol covers it, its
    /// name demangled.
    pub fn function_at(&self, offset: u64) -> Option<Arc<str>> {
        let &(start, _, address) = (self.segments.iter())
            .find(|&&(start, size, _)| offset >= start && offset - start < size)?;
        let address = address.checked_add(offset - start)?;
        let after = self.functions.partition_point(|f| f.0 <= address);
        let (_, end, name) = self.functions.get(after.checked_sub(1)?)?;
        (address < *end).then(|| demangled(name))
    }

    /// How many functions it holds.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

/// Opens the regular file at `path` to read, resolved as `resolve` allows: never a
/// FIFO's open that waits for a writer, nor a device's that does what opening it does.
fn open_regular(path: &Path, resolve: ResolveFlag) -> std::io::Result<File> {
    // Not blocking (a FIFO), no controlling terminal; O_NONBLOCK means nothing to a
    // regular file's reads.
    let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let how = OpenHow::new().flags(flags).resolve(resolve);
    let fd = match fcntl::openat2(fcntl::AT_FDCWD, path, how) {
        // Before 5.6: the last component alone kept from being a link.
        Err(Errno::ENOSYS) => fcntl::open(path, flags | OFlag::O_NOFOLLOW, Mode::empty()),
        opened => opened,
    }?;
    let file = File::from(fd);
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// The device of the filesystem `file` is on, as the kernel names a mapping's (its
/// superblock's): its mount's in `/proc/self/mountinfo`, the mount found by the file's
/// `mnt_id`.
fn filesystem_device(file: &File) -> Option<(u32, u32)> {
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd()));
    let fdinfo = fdinfo.ok()?;
    let mount = (fdinfo.lines())
        .find_map(|l| l.strip_prefix("mnt_id:"))?
        .trim();
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo_device(&mountinfo, mount)
}

/// The device of mount `id` in a `mountinfo`: its line's third field, `major:minor`.
fn mountinfo_device(mountinfo: &str, id: &str) -> Option<(u32, u32)> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split(' ');
        if fields.next()? != id {
            return None;
        }
        let (major, minor) = fields.nth(1)?.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

/// The functions of the stripped binary at `path` (build id `id`, `.gnu_debuglink`
/// `link`) from its debug file: by build id, where the distribution installs them
/// (its links followed: the directory is root's), or the link's plain file name beside
/// it or in `.debug/` beside it (no link followed, no other directory); either only if
/// it carries the same build id. None where there is none.
fn debug_functions(
    path: &Path,
    id: &[u8],
    link: Option<(&[u8], u32)>,
    spent: &Cell<u64>,
) -> Vec<(u64, u64, Arc<str>)> {
    let by_id = debug_file(id).map(|p| (p, ResolveFlag::empty()));
    let name = link
        .and_then(|(name, _)| std::str::from_utf8(name).ok())
        .filter(|name| !name.contains('/') && *name != "." && *name != "..");
    let dir = path.parent().unwrap_or(Path::new("/"));
    let linked = name.into_iter().flat_map(|name| {
        [dir.join(name), dir.join(".debug").join(name)]
            .map(|p| (p, ResolveFlag::RESOLVE_NO_SYMLINKS))
    });
    for (debug, resolve) in by_id.into_iter().chain(linked) {
        let Ok(debug) = open_regular(&debug, resolve) else {
            continue;
        };
        let debug = BoundedRead::new(debug, spent);
        let Ok(debug) = object::File::parse(&debug) else {
            continue;
        };
        if debug.build_id().ok().flatten() != Some(id) {
            continue;
        }
        let functions = self::functions(debug.symbols());
        if !functions.is_empty() {
            return functions;
        }
    }
    Vec::new()
}

/// A file read as needed, [`MAX_READ_BYTES`] of it at most: `object` reads a symbol
/// table whole, whatever size its section header says, and a name up to its NUL. What
/// it reads is added to `spent`.
struct BoundedRead<'s, R: ReadCacheOps> {
    cache: ReadCache<R>,
    left: Cell<u64>,
    spent: &'s Cell<u64>,
}

impl<'s, R: ReadCacheOps> BoundedRead<'s, R> {
    fn new(read: R, spent: &'s Cell<u64>) -> BoundedRead<'s, R> {
        BoundedRead {
            cache: ReadCache::new(read),
            left: Cell::new(MAX_READ_BYTES),
            spent,
        }
    }

    /// Takes `size` bytes of what is left, or refuses the read.
    fn take(&self, size: u64) -> Result<(), ()> {
        self.left.set(self.left.get().checked_sub(size).ok_or(())?);
        self.spent.set(self.spent.get().saturating_add(size));
        Ok(())
    }

    /// Gives back `size` bytes taken but not read.
    fn give_back(&self, size: u64) {
        self.left.set(self.left.get() + size);
        self.spent.set(self.spent.get().saturating_sub(size));
    }
}

impl<'a, 's, R: ReadCacheOps> ReadRef<'a> for &'a BoundedRead<'s, R> {
    fn len(self) -> Result<u64, ()> {
        (&self.cache).len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        self.take(size)?;
        (&self.cache).read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        // The most the cache may keep of it, taken before it reads; what the name did
        // not use given back.
        let most = range.end.saturating_sub(range.start).min(MAX_NAME_BYTES);
        self.take(most)?;
        let bytes = (&self.cache).read_bytes_at_until(range, delimiter);
        let used = bytes.map_or(0, |b| b.len() as u64);
        self.give_back(most - used.min(most));
        bytes
    }
}

/// Where the debug file of build id `id` is installed, if it is.
fn debug_file(id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    Some(Path::new(BUILD_ID_DIR).join(format!("{first:02x}/{rest}.debug")))
}

/// The defined functions among `symbols`, by address, each ending where its size says
/// (or where the next begins, for a symbol of no size), named as the file names them:
/// as many as [`MAX_READ_BYTES`] let the file's tables hold.
fn functions<'data, S: ObjectSymbol<'data>>(
    symbols: impl Iterator<Item = S>,
) -> Vec<(u64, u64, Arc<str>)> {
    let mut found: Vec<(u64, u64, &str)> = symbols
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?)))
        .collect();
    // Aliases of one address (a weak and a global name): the first kept.
    found.sort_by_key(|&(address, size, _)| (address, std::cmp::Reverse(size)));
    found.dedup_by_key(|f| f.0);
    let starts: Vec<u64> = found.iter().map(|f| f.0).collect();
    (found.iter().enumerate())
        .map(|(i, &(start, size, name))| {
            let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
            let end = if size == 0 {
                next
            } else {
                start.saturating_add(size).min(next)
            };
            (start, end, name.into())
        })
        .collect()
}

/// A Rust symbol's name as its source says it (without the hash), at most
/// [`MAX_DEMANGLED_BYTES`]; others as they are.
fn demangled(name: &Arc<str>) -> Arc<str> {
    let Ok(demangled) = rustc_demangle::try_demangle(name) else {
        return Arc::clone(name);
    };
    let mut out = Capped(String::new());
    if write!(out, "{demangled:#}").is_err() {
        out.0.push('…');
    }
    out.0.into()
}

/// A string that refuses to grow past [`MAX_DEMANGLED_BYTES`]: the demangler stops at
/// the refusal.
struct Capped(String);

impl fmt::Write for Capped {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = MAX_DEMANGLED_BYTES.saturating_sub(self.0.len());
        if s.len() <= room {
            self.0.push_str(s);
            return Ok(());
        }
        let mut cut = room;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        self.0.push_str(&s[..cut]);
        Err(fmt::Error)
    }
}

/// The symbol tables of the files code was found in, read once each (by device and
/// inode) and kept while they fit [`MAX_CACHED_BYTES`] and [`MAX_CACHED_FILES`], read at
/// [`READ_BYTES_PER_SECOND`] at most; the consumer's, off the sampler's drain.
#[derive(Debug, Default)]
pub struct Symbolizer {
    tables: HashMap<FileId, Cached>,
    bytes: usize,
    budget: ReadBudget,
}

/// How many bytes the cache may read now: a bucket of [`READ_BURST_BYTES`] filled at
/// [`READ_BYTES_PER_SECOND`]. A file is read while any is left, and what it read is
/// taken whole: the bucket goes into debt, paid back before the next read, so no file
/// read past the budget goes unpaid.
#[derive(Debug)]
struct ReadBudget {
    left: i64,
    filled_at: Instant,
}

impl Default for ReadBudget {
    fn default() -> ReadBudget {
        ReadBudget {
            left: READ_BURST_BYTES as i64,
            filled_at: Instant::now(),
        }
    }
}

impl ReadBudget {
    /// Whether a file may be read at `now`.
    fn allows(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.filled_at);
        let earned = elapsed.as_nanos() * u128::from(READ_BYTES_PER_SECOND) / 1_000_000_000;
        let earned = i64::try_from(earned).unwrap_or(i64::MAX);
        self.left = self
            .left
            .saturating_add(earned)
            .min(READ_BURST_BYTES as i64);
        self.filled_at = now;
        self.left > 0
    }

    fn spend(&mut self, bytes: u64) {
        self.left = (self.left).saturating_sub(i64::try_from(bytes).unwrap_or(i64::MAX));
    }
}

/// A file's table, or why there is none.
#[derive(Debug)]
enum Cached {
    Read(Arc<SymbolTable>),
    /// The file itself is no ELF file it can read: by any path.
    Unreadable,
    /// Not found by this path: tried again by another, since the first one tried may
    /// be a process's that leads elsewhere here, where another's to the file does not.
    Unread(Box<str>),
}

impl Symbolizer {
    /// The function of the instruction at `code`: named `[unknown]` in its binary (or
    /// memory) where no symbol covers it, in `[kernel]` for the kernel's.
    pub fn function(&mut self, code: &Code) -> Function {
        let (mapping, offset) = match code {
            Code::User { mapping, offset } => (mapping, *offset),
            Code::Kernel | Code::Unknown => {
                let binary = if *code == Code::Kernel {
                    "[kernel]"
                } else {
                    UNKNOWN
                };
                return Function {
                    binary: binary.into(),
                    name: UNKNOWN.into(),
                };
            }
        };
        let name = match (mapping.file, offset) {
            (Some(file), Some(offset)) => match self.table(file, &mapping.name, Instant::now()) {
                Lookup::Read(table) => table.function_at(offset),
                Lookup::Unreadable => None,
                Lookup::Deferred => Some(DEFERRED.into()),
            },
            _ => None,
        };
        let binary = match (mapping.file, mapping.name.is_empty()) {
            (Some(_), _) | (None, false) => mapping.name.clone(),
            (None, true) => format!("[{}]", mapping.kind.describe()),
        };
        Function {
            binary,
            name: name.unwrap_or_else(|| UNKNOWN.into()),
        }
    }

    /// The table of `file` at `path`, from the cache or read now if the budget allows.
    fn table(&mut self, file: FileId, path: &str, now: Instant) -> Lookup {
        match self.tables.get(&file) {
            Some(Cached::Read(table)) => return Lookup::Read(Arc::clone(table)),
            Some(Cached::Unreadable) => return Lookup::Unreadable,
            Some(Cached::Unread(tried)) if **tried == *path => return Lookup::Unreadable,
            _ => {}
        }
        if !self.budget.allows(now) {
            return Lookup::Deferred;
        }
        // A path the kernel marked deleted is no longer there: its stat differs.
        let spent = Cell::new(0);
        let read = SymbolTable::read(Path::new(path), Some(file), &spent);
        self.budget.spend(spent.get());
        let (cached, size) = match read {
            Ok(table) => {
                let bytes = table.bytes;
                (Cached::Read(Arc::new(table)), bytes)
            }
            Err(SymbolError::Parse { .. }) => (Cached::Unreadable, ENTRY_BYTES),
            Err(_) => (Cached::Unread(path.into()), ENTRY_BYTES + path.len()),
        };
        if self.bytes + size > MAX_CACHED_BYTES || self.tables.len() >= MAX_CACHED_FILES {
            self.tables.clear();
            self.bytes = 0;
        }
        // A second path's failure replaces the first's: its bytes stay counted.
        self.bytes += size;
        let table = match &cached {
            Cached::Read(table) => Lookup::Read(Arc::clone(table)),
            Cached::Unreadable | Cached::Unread(_) => Lookup::Unreadable,
        };
        self.tables.insert(file, cached);
        table
    }
}

/// What the cache has for a file.
enum Lookup {
    Read(Arc<SymbolTable>),
    /// Not an ELF file it can read, or not by this path.
    Unreadable,
    /// Not read yet: over the budget.
    Deferred,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_no_further_than_its_bound_whatever_its_headers_say() {
        // Reads nearly its bound, 64 MiB, into memory.
        let _big = crate::big_allocations();
        let dir = std::env::temp_dir().join(format!("pfprof-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sparse");
        // Two short names, then a gigabyte of holes.
        std::fs::write(&path, b"ab\0cd\0").unwrap();
        let file = File::options().write(true).open(&path).unwrap();
        file.set_len(1 << 30).unwrap();
        let spent = Cell::new(0);
        let read = BoundedRead::new(File::open(&path).unwrap(), &spent);
        let data = &read;
        // A name is charged what it used, once read.
        assert_eq!(data.read_bytes_at_until(0..1 << 30, 0), Ok(&b"ab"[..]));
        assert_eq!(read.left.get(), MAX_READ_BYTES - 2);
        assert_eq!(spent.get(), 2);
        assert_eq!(data.read_bytes_at(1 << 20, MAX_READ_BYTES), Err(()));
        assert!(data
            .read_bytes_at(1 << 20, MAX_READ_BYTES - 2 - 100)
            .is_ok());
        // Less left than a name may take: refused before it is read and kept.
        assert_eq!(data.read_bytes_at_until(3..1 << 30, 0), Err(()));
        assert_eq!(
            data.read_bytes_at(0, 101),
            Err(()),
            "the bound is for all reads"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_name_demangles_to_at_most_its_bound() {
        // 119 bytes that demangle to a megabyte through their back-references.
        let bomb: Arc<str> = "_RIC3fooTTTTTTTTTTTTTTTTTTTTTThBr_EBq_EBp_EBo_EBn_EBm_EBl_EBk_\
                              EBj_EBi_EBh_EBg_EBf_EBe_EBd_EBc_EBb_EBa_EB9_EB8_EB7_EB6_EE"
            .into();
        let name = demangled(&bomb);
        assert!(
            name.len() <= MAX_DEMANGLED_BYTES + '…'.len_utf8(),
            "{}",
            name.len()
        );
        assert!(name.starts_with("foo::<") && name.ends_with('…'), "{name}");
        let plain: Arc<str> = "memchr".into();
        assert_eq!(demangled(&plain), plain);
        let rust: Arc<str> = "_ZN4core3fmt5write17h0123456789abcdefE".into();
        assert_eq!(&*demangled(&rust), "core::fmt::write");
    }

    #[test]
    fn a_debug_link_names_no_other_file_than_a_plain_name_beside_the_binary() {
        // Reads this test's binary, tens of MiB, into memory.
        let _big = crate::big_allocations();
        let dir = std::env::temp_dir().join(format!("pfprof-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("bin")).unwrap();
        // This test's binary has symbols and a build id: as a debug file, it would name
        // them, were it found by any of these links.
        let exe = std::env::current_exe().unwrap();
        let elf_bytes = std::fs::read(&exe).unwrap();
        let elf = object::File::parse(&*elf_bytes).unwrap();
        let Some(id) = elf.build_id().unwrap() else {
            return; // a linker without build ids: nothing to link by
        };
        let beside = dir.join("bin/beside.debug");
        std::os::unix::fs::symlink(&exe, &beside).unwrap();
        let binary = dir.join("bin/stripped");
        let absolute = exe.to_str().unwrap().as_bytes();
        for link in [
            absolute,
            b"../../../../../../../proc/self/exe",
            b"beside.debug",
        ] {
            let found = debug_functions(&binary, id, Some((link, 0)), &Cell::new(0));
            assert!(
                found.is_empty(),
                "{}: {} functions",
                String::from_utf8_lossy(link),
                found.len()
            );
        }
        // A plain name beside it, a regular file of the same build id: taken.
        std::fs::remove_file(&beside).unwrap();
        std::fs::copy(&exe, &beside).unwrap();
        assert!(
            !debug_functions(&binary, id, Some((b"beside.debug", 0)), &Cell::new(0)).is_empty()
        );
        // Of another build id: not.
        assert!(debug_functions(
            &binary,
            b"\x01\x02",
            Some((b"beside.debug", 0)),
            &Cell::new(0)
        )
        .is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_or_a_link_is_not_opened_for_symbols() {
        let dir = std::env::temp_dir().join(format!("pfprof-fifo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("fifo");
        nix::unistd::mkfifo(&fifo, Mode::S_IRWXU).unwrap();
        // Returns at once: an open that waited for a writer would hang here.
        assert!(SymbolTable::read(&fifo, None, &Cell::new(0)).is_err());
        let link = dir.join("link");
        std::os::unix::fs::symlink(std::env::current_exe().unwrap(), &link).unwrap();
        assert!(matches!(
            SymbolTable::read(&link, None, &Cell::new(0)),
            Err(SymbolError::Open { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_not_found_by_one_path_is_named_by_another() {
        use super::super::mapping::MappingKind;
        let _big = crate::big_allocations();
        let exe = std::fs::read_link("/proc/self/exe").unwrap();
        let meta = std::fs::metadata(&exe).unwrap();
        let file = FileId {
            major: libc::major(meta.dev()),
            minor: libc::minor(meta.dev()),
            inode: meta.ino(),
        };
        let offset = this_functions_offset().0;
        let code = |name: &str| Code::User {
            mapping: Arc::new(super::super::Mapping {
                kind: MappingKind::Text,
                name: name.into(),
                file: Some(file),
                owner: None,
            }),
            offset: Some(offset),
        };
        let mut symbolizer = Symbolizer::default();
        // Another process's path to the file, which leads nowhere here, seen first.
        let elsewhere = symbolizer.function(&code("/elsewhere/in/a/container/exe"));
        assert_eq!(&*elsewhere.name, UNKNOWN);
        let here = symbolizer.function(&code(exe.to_str().unwrap()));
        assert!(
            here.name.ends_with("tests::this_function_is_named"),
            "{here:?}"
        );
    }

    #[test]
    fn a_mounts_device_is_read_from_its_mountinfo_line() {
        let mountinfo = "22 1 0:21 / /proc rw,nosuid - proc proc rw\n\
                         44 27 0:39 / /mnt/bt rw,relatime - btrfs /dev/loop0 rw,subvol=/\n";
        assert_eq!(mountinfo_device(mountinfo, "44"), Some((0, 39)));
        assert_eq!(mountinfo_device(mountinfo, "4"), None);
        assert_eq!(mountinfo_device("44 27 x / /", "44"), None);
        // This test's binary: on a filesystem whose device stat says too (not btrfs),
        // or on btrfs, whose mountinfo says the filesystem's.
        let exe = File::open("/proc/self/exe").unwrap();
        assert!(filesystem_device(&exe).is_some());
    }

    #[test]
    fn the_read_budget_fills_at_its_rate_up_to_its_burst_and_a_read_past_it_is_owed() {
        let start = Instant::now();
        let mut budget = ReadBudget {
            left: 1,
            filled_at: start,
        };
        assert!(budget.allows(start));
        // A read that spends more than was left is owed, whole.
        budget.spend(10 << 20);
        assert!(!budget.allows(start));
        let second = std::time::Duration::from_secs(1);
        assert!(!budget.allows(start + second / 2), "{budget:?}");
        assert!(budget.allows(start + second));
        assert_eq!(budget.left, (16 << 20) - (10 << 20) + 1);
        // Never more than the burst, however long it was not used.
        assert!(budget.allows(start + 3600 * second));
        assert_eq!(budget.left, READ_BURST_BYTES as i64);
    }

    #[test]
    fn a_file_past_the_read_budget_is_deferred_not_forgotten_and_read_once_it_allows() {
        let _big = crate::big_allocations();
        let (offset, path) = this_functions_offset();
        let meta = std::fs::metadata(&path).unwrap();
        let file = FileId {
            major: libc::major(meta.dev()),
            minor: libc::minor(meta.dev()),
            inode: meta.ino(),
        };
        let now = Instant::now();
        let mut symbolizer = Symbolizer {
            budget: ReadBudget {
                left: 0,
                filled_at: now,
            },
            ..Symbolizer::default()
        };
        assert!(matches!(
            symbolizer.table(file, &path, now),
            Lookup::Deferred
        ));
        assert!(symbolizer.tables.is_empty());
        let later = now + std::time::Duration::from_secs(4);
        let Lookup::Read(table) = symbolizer.table(file, &path, later) else {
            panic!("{path} not read once the budget allowed");
        };
        assert!(table
            .function_at(offset)
            .is_some_and(|name| name.ends_with("tests::this_function_is_named")));
        // What it read was charged.
        assert!(symbolizer.budget.left < 64 << 20, "{:?}", symbolizer.budget);
    }

    /// Where `this_function_is_named`'s code is in this test's binary: its file offset
    /// and the binary's path, as `/proc/self/maps` says.
    fn this_functions_offset() -> (u64, String) {
        let address = this_function_is_named() as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        (maps.lines())
            .find_map(|line| {
                let f: Vec<&str> = line.split_whitespace().collect();
                let (start, end) = f[0].split_once('-')?;
                let (start, end) = (
                    u64::from_str_radix(start, 16).ok()?,
                    u64::from_str_radix(end, 16).ok()?,
                );
                let pgoff = u64::from_str_radix(f[2], 16).ok()?;
                (start <= address && address < end)
                    .then(|| (address - start + pgoff, f[5].to_string()))
            })
            .unwrap()
    }

    /// This test's own binary: `this_function_is_named` is found at its own code's
    /// file offset, as a fault's instruction would be.
    #[inline(never)]
    fn this_function_is_named() -> usize {
        this_function_is_named as *const () as usize
    }

    #[test]
    fn a_functions_code_is_named_from_its_file_offset_and_a_gap_is_unknown() {
        let _big = crate::big_allocations();
        let (offset, path) = this_functions_offset();
        let spent = Cell::new(0);
        let table = SymbolTable::read(Path::new(&path), None, &spent).unwrap();
        let name = table.function_at(offset).unwrap();
        assert!(
            name.ends_with("tests::this_function_is_named"),
            "{name} at {offset:#x} of {path}"
        );
        // An offset past every segment is no function's.
        assert_eq!(table.function_at(u64::MAX), None);
        // Not the file that was mapped (replaced since: another inode): not read.
        let other = FileId {
            major: 0,
            minor: 0,
            inode: 1,
        };
        assert!(matches!(
            SymbolTable::read(Path::new(&path), Some(other), &spent),
            Err(SymbolError::Replaced { .. })
        ));
    }
}
