//! A mapping as the attribution tables count it: what kind of memory it is and its name,
//! as `/proc/PID/maps` shows them, and what makes it one mapping (a file, or a process's
//! own memory).

use std::fmt;

use serde::Serialize;

/// What kind of memory a mapping is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MappingKind {
    /// A file mapped executable: a program's or a library's code.
    Text,
    /// A file mapped private and not executable: its data, copied on write.
    Data,
    /// A file mapped shared: what is written goes to the file.
    Shared,
    /// The process's heap (`[heap]`: brk).
    Heap,
    /// The main thread's stack (`[stack]`).
    Stack,
    /// Anonymous memory (no name, or `[anon:NAME]` given with `PR_SET_VMA_ANON_NAME`).
    Anonymous,
    /// Shared memory: memfd (`/memfd:NAME`), System V (`/SYSV...`), shared anonymous
    /// (`/dev/zero`), `[anon_shmem:NAME]`.
    Shmem,
    /// Whatever else the kernel names (`[vdso]`, `[vvar]`, `anon_inode:...`).
    Other,
    /// Nothing was mapped at the address when the monitor looked: unmapped since, or
    /// its process gone before its mappings were read.
    Unmapped,
    /// The process's mappings could not be read by the user running the monitor.
    Unreadable,
}

impl MappingKind {
    /// Memory of one process, named with its pid (a file is the same file in every
    /// process that maps it).
    pub fn is_private(self) -> bool {
        !matches!(
            self,
            MappingKind::Text | MappingKind::Data | MappingKind::Shared | MappingKind::Shmem
        )
    }

    /// How the summary names it.
    pub fn describe(self) -> &'static str {
        match self {
            MappingKind::Text => "text",
            MappingKind::Data => "data",
            MappingKind::Shared => "shared",
            MappingKind::Heap => "heap",
            MappingKind::Stack => "stack",
            MappingKind::Anonymous => "anonymous",
            MappingKind::Shmem => "shmem",
            MappingKind::Other => "other",
            MappingKind::Unmapped => "unmapped",
            MappingKind::Unreadable => "unreadable",
        }
    }
}

/// A file by device and inode: the same file mapped in two processes, or twice, is one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct FileId {
    pub major: u32,
    pub minor: u32,
    pub inode: u64,
}

/// One mapping: the unit faults are attributed to.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mapping {
    pub kind: MappingKind,
    /// As `/proc/PID/maps` shows it: a file's path (` (deleted)` when it is), `[heap]`,
    /// `[anon:NAME]`, `/memfd:NAME (deleted)`; empty for plain anonymous memory and for
    /// [`MappingKind::Unmapped`] and [`MappingKind::Unreadable`].
    pub name: String,
    /// The file it maps, if any: with the kind, what makes a file mapping one.
    pub file: Option<FileId>,
    /// For memory private to a process ([`MappingKind::is_private`]): its pid. A
    /// process's anonymous mappings of one name are one: the kernel merges and splits
    /// them as they grow and change, and which of them took a fault matters less than
    /// that its process's own memory did.
    pub owner: Option<u32>,
}

impl Mapping {
    /// Nothing mapped at the address in process `pid`, or the process was gone.
    pub fn unmapped(pid: u32) -> Mapping {
        Mapping {
            kind: MappingKind::Unmapped,
            name: String::new(),
            file: None,
            owner: Some(pid),
        }
    }

    /// The mappings of process `pid` could not be read.
    pub fn unreadable(pid: u32) -> Mapping {
        Mapping {
            kind: MappingKind::Unreadable,
            name: String::new(),
            file: None,
            owner: Some(pid),
        }
    }

    /// The process it belongs to, for memory private to one.
    pub fn pid(&self) -> Option<u32> {
        self.owner
    }
}

/// A file mapped shared, for tests: named, of no device and inode.
#[cfg(test)]
pub fn shared_file(name: &str) -> std::sync::Arc<Mapping> {
    std::sync::Arc::new(Mapping {
        kind: MappingKind::Shared,
        name: name.into(),
        file: None,
        owner: None,
    })
}

/// As the summary lists it: `/var/lib/db/index.dat (shared)`, `[heap] of pid 1234`,
/// `anonymous memory of pid 1234`.
impl fmt::Display for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = self.kind.describe();
        match (self.kind, self.owner) {
            (MappingKind::Anonymous, Some(pid)) if self.name.is_empty() => {
                write!(f, "anonymous memory of pid {pid}")
            }
            (MappingKind::Unmapped, Some(pid)) => write!(f, "unmapped by then, pid {pid}"),
            (MappingKind::Unreadable, Some(pid)) => write!(f, "mappings not readable, pid {pid}"),
            (_, Some(pid)) => write!(f, "{} of pid {pid}", self.name),
            (_, None) => write!(f, "{} ({kind})", self.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_is_named_by_its_file_or_by_its_process() {
        let file = Mapping {
            kind: MappingKind::Shared,
            name: "/var/lib/db/index.dat".into(),
            file: Some(FileId {
                major: 8,
                minor: 1,
                inode: 42,
            }),
            owner: None,
        };
        assert_eq!(file.to_string(), "/var/lib/db/index.dat (shared)");
        let anon = Mapping {
            kind: MappingKind::Anonymous,
            name: String::new(),
            file: None,
            owner: Some(1234),
        };
        assert_eq!(anon.to_string(), "anonymous memory of pid 1234");
        let heap = Mapping {
            kind: MappingKind::Heap,
            name: "[heap]".into(),
            file: None,
            owner: Some(1234),
        };
        assert_eq!(heap.to_string(), "[heap] of pid 1234");
        assert_eq!(Mapping::unmapped(7).to_string(), "unmapped by then, pid 7");
    }
}
