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
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use object::read::{ReadCache, ReadCacheOps, ReadRef};
use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use super::mapping::FileId;
use super::table::Code;

/// The most symbols the cache holds, over all its files: about 100 bytes each with its
/// name, so at most about 50 MiB; a typical file has thousands (python3's `.dynsym`
/// 1,500, libc's debug file 3,700, this monitor's `.symtab` 7,600). Past it the cache
/// starts again empty; a single file of more keeps its first this many functions by
/// address, and names the rest `[unknown]`.
pub const MAX_CACHED_SYMBOLS: usize = 500_000;

/// The most files the cache knows, those it could not read included: past it, it starts
/// again empty.
pub const MAX_CACHED_FILES: usize = 4096;

/// The most bytes of one file (and of its debug file) read into memory: its headers,
/// symbol tables and names. This monitor's own `.symtab` and names are 1.4 MiB, libc's
/// debug file's 0.4 MiB; a file past it is `[unknown]`. Any user's process may map a
/// file it made, and a symbol table of gigabytes would be read whole.
const MAX_READ_BYTES: u64 = 64 << 20;

/// The longest symbol name read: a name runs to a NUL that a hostile file may hold back
/// for gigabytes.
const MAX_NAME_BYTES: u64 = 64 << 10;

/// Where a distribution installs debug files by build id: `xx/yyyy.debug`.
const BUILD_ID_DIR: &str = "/usr/lib/debug/.build-id";

/// What a function is named when its code's file has no symbol for it.
pub const UNKNOWN: &str = "[unknown]";

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

/// One file's functions by address, and how its file offsets become addresses.
#[derive(Debug, Default)]
pub struct SymbolTable {
    /// The loadable segments: (file offset, size in the file, address).
    segments: Vec<(u64, u64, u64)>,
    /// Functions by start address: (start, end, name), sorted, not overlapping.
    functions: Vec<(u64, u64, Arc<str>)>,
}

impl SymbolTable {
    /// The functions of the ELF file at `path`, which must be `file` (device and inode)
    /// when given.
    pub fn read(
        path: &Path,
        file: Option<FileId>,
        budget: usize,
    ) -> Result<SymbolTable, SymbolError> {
        let open = |path: &Path| {
            File::open(path).map_err(|source| SymbolError::Open {
                path: path.into(),
                source,
            })
        };
        let handle = open(path)?;
        if let Some(file) = file {
            let meta = handle.metadata().map_err(|source| SymbolError::Open {
                path: path.into(),
                source,
            })?;
            let (major, minor) = (libc::major(meta.dev()), libc::minor(meta.dev()));
            if (major, minor, meta.ino()) != (file.major, file.minor, file.inode) {
                return Err(SymbolError::Replaced { path: path.into() });
            }
        }
        let parse_error = |source| SymbolError::Parse {
            path: path.into(),
            source,
        };
        // Read as needed: the headers and symbol tables, not a whole binary.
        let data = BoundedRead::new(handle);
        let elf = object::File::parse(&data).map_err(parse_error)?;
        let segments = (elf.segments())
            .map(|s| {
                let (offset, size) = s.file_range();
                (offset, size, s.address())
            })
            .filter(|&(_, size, _)| size > 0)
            .collect();
        let mut functions = functions(elf.symbols(), budget);
        if functions.is_empty() {
            // Stripped: its debug file, installed for its build id or named by its
            // .gnu_debuglink (beside it, or in .debug/ beside it, as gdb looks).
            let by_id = elf.build_id().ok().flatten().and_then(debug_file);
            let linked = (elf.gnu_debuglink().ok().flatten())
                .and_then(|(name, _)| std::str::from_utf8(name).ok())
                .map(|name| {
                    let dir = path.parent().unwrap_or(Path::new("/"));
                    [dir.join(name), dir.join(".debug").join(name)]
                });
            for debug in by_id.into_iter().chain(linked.into_iter().flatten()) {
                let Ok(debug) = File::open(debug) else {
                    continue;
                };
                let debug = BoundedRead::new(debug);
                if let Ok(debug) = object::File::parse(&debug) {
                    functions = self::functions(debug.symbols(), budget);
                }
                if !functions.is_empty() {
                    break;
                }
            }
        }
        if functions.is_empty() {
            functions = self::functions(elf.dynamic_symbols(), budget);
        }
        Ok(SymbolTable {
            segments,
            functions,
        })
    }

    /// The function whose code is at file offset `offset`, if a symbol covers it.
    pub fn function_at(&self, offset: u64) -> Option<&Arc<str>> {
        let &(start, _, address) = (self.segments.iter())
            .find(|&&(start, size, _)| offset >= start && offset - start < size)?;
        let address = address.checked_add(offset - start)?;
        let after = self.functions.partition_point(|f| f.0 <= address);
        let (_, end, name) = self.functions.get(after.checked_sub(1)?)?;
        (address < *end).then_some(name)
    }

    /// How many functions it holds.
    pub fn len(&self) -> usize {
        self.functions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.functions.is_empty()
    }
}

/// A file read as needed, [`MAX_READ_BYTES`] of it at most: `object` reads a symbol
/// table whole, whatever size its section header says, and a name up to its NUL.
struct BoundedRead<R: ReadCacheOps> {
    cache: ReadCache<R>,
    left: Cell<u64>,
}

impl<R: ReadCacheOps> BoundedRead<R> {
    fn new(read: R) -> BoundedRead<R> {
        BoundedRead {
            cache: ReadCache::new(read),
            left: Cell::new(MAX_READ_BYTES),
        }
    }

    /// Takes `size` bytes of what is left, or refuses the read.
    fn take(&self, size: u64) -> Result<(), ()> {
        self.left.set(self.left.get().checked_sub(size).ok_or(())?);
        Ok(())
    }
}

impl<'a, R: ReadCacheOps> ReadRef<'a> for &'a BoundedRead<R> {
    fn len(self) -> Result<u64, ()> {
        (&self.cache).len()
    }

    fn read_bytes_at(self, offset: u64, size: u64) -> Result<&'a [u8], ()> {
        self.take(size)?;
        (&self.cache).read_bytes_at(offset, size)
    }

    fn read_bytes_at_until(self, range: Range<u64>, delimiter: u8) -> Result<&'a [u8], ()> {
        let end = range.end.min(range.start.saturating_add(MAX_NAME_BYTES));
        let bytes = (&self.cache).read_bytes_at_until(range.start..end, delimiter)?;
        self.take(bytes.len() as u64)?;
        Ok(bytes)
    }
}

/// Where the debug file of build id `id` is installed, if it is.
fn debug_file(id: &[u8]) -> Option<PathBuf> {
    let (first, rest) = id.split_first()?;
    let rest: String = rest.iter().map(|b| format!("{b:02x}")).collect();
    Some(Path::new(BUILD_ID_DIR).join(format!("{first:02x}/{rest}.debug")))
}

/// The defined functions among `symbols`, by address, each ending where its size says
/// (or where the next begins, for a symbol of no size), at most `budget` of them.
fn functions<'data, S: ObjectSymbol<'data>>(
    symbols: impl Iterator<Item = S>,
    budget: usize,
) -> Vec<(u64, u64, Arc<str>)> {
    let mut found: Vec<(u64, u64, &str)> = symbols
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?)))
        .collect();
    // Aliases of one address (a weak and a global name): the first kept.
    found.sort_by_key(|&(address, size, _)| (address, std::cmp::Reverse(size)));
    found.dedup_by_key(|f| f.0);
    found.truncate(budget);
    let starts: Vec<u64> = found.iter().map(|f| f.0).collect();
    (found.iter().enumerate())
        .map(|(i, &(start, size, name))| {
            let next = starts.get(i + 1).copied().unwrap_or(u64::MAX);
            let end = if size == 0 {
                next
            } else {
                start.saturating_add(size).min(next)
            };
            (start, end, demangled(name))
        })
        .collect()
}

/// A Rust symbol's name as its source says it (without the hash); others as they are.
fn demangled(name: &str) -> Arc<str> {
    match rustc_demangle::try_demangle(name) {
        Ok(demangled) => format!("{demangled:#}").into(),
        Err(_) => name.into(),
    }
}

/// The symbol tables of the files code was found in, read once each (by device and
/// inode) and kept while they fit [`MAX_CACHED_SYMBOLS`] and [`MAX_CACHED_FILES`]; the
/// consumer's, off the sampler's drain.
#[derive(Debug, Default)]
pub struct Symbolizer {
    tables: HashMap<FileId, Option<Arc<SymbolTable>>>,
    symbols: usize,
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
            (Some(file), Some(offset)) => {
                let table = self.table(file, &mapping.name);
                table.and_then(|t| t.function_at(offset).cloned())
            }
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

    fn table(&mut self, file: FileId, path: &str) -> Option<Arc<SymbolTable>> {
        if let Some(table) = self.tables.get(&file) {
            return table.clone();
        }
        // A path the kernel marked deleted is no longer there: its stat differs.
        let path = Path::new(path);
        let table = SymbolTable::read(path, Some(file), MAX_CACHED_SYMBOLS)
            .ok()
            .map(Arc::new);
        let size = table.as_ref().map_or(0, |t| t.len());
        if self.symbols + size > MAX_CACHED_SYMBOLS || self.tables.len() >= MAX_CACHED_FILES {
            self.tables.clear();
            self.symbols = 0;
        }
        self.symbols += size;
        self.tables.insert(file, table.clone());
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_is_read_no_further_than_its_bound_whatever_its_headers_say() {
        let dir = std::env::temp_dir().join(format!("pfprof-bounded-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("sparse");
        // A name whose NUL comes past the bound, then a gigabyte of holes.
        let mut bytes = vec![b'x'; MAX_NAME_BYTES as usize + 1];
        bytes.push(0);
        std::fs::write(&path, &bytes).unwrap();
        let file = File::options().write(true).open(&path).unwrap();
        file.set_len(1 << 30).unwrap();
        let read = BoundedRead::new(File::open(&path).unwrap());
        let data = &read;
        assert_eq!(data.read_bytes_at_until(0..1 << 30, 0), Err(()));
        let short = MAX_NAME_BYTES - 1;
        assert_eq!(
            data.read_bytes_at_until(short..1 << 30, 0).map(<[u8]>::len),
            Ok(2)
        );
        assert_eq!(data.read_bytes_at(1 << 20, MAX_READ_BYTES), Err(()));
        assert!(data.read_bytes_at(1 << 20, MAX_READ_BYTES - 16).is_ok());
        assert_eq!(
            data.read_bytes_at(0, 64),
            Err(()),
            "the bound is for all reads"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// This test's own binary: `this_function_is_named` is found at its own code's
    /// file offset, as a fault's instruction would be.
    #[inline(never)]
    fn this_function_is_named() -> usize {
        this_function_is_named as *const () as usize
    }

    #[test]
    fn a_functions_code_is_named_from_its_file_offset_and_a_gap_is_unknown() {
        let address = this_function_is_named() as u64;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let (offset, path) = (maps.lines())
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
            .unwrap();
        let table = SymbolTable::read(Path::new(&path), None, MAX_CACHED_SYMBOLS).unwrap();
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
            SymbolTable::read(Path::new(&path), Some(other), MAX_CACHED_SYMBOLS),
            Err(SymbolError::Replaced { .. })
        ));
    }
}
