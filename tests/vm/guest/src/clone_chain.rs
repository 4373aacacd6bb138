//! Chains of clone(CLONE_VM) processes, thousands deep at little cost: each level the
//! child of the one above, and optionally members below the last level, the first
//! `execers` of which exec a program when told. The chain's processes share our memory
//! and our thread's TLS (errno): they make raw system calls only.

use std::ffi::CString;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};

/// A process's own stack: it only reports itself, clones or sleeps.
const STACK: usize = 16 << 10;

/// What the chain's processes share with us.
struct Shared {
    stacks: *mut u8,
    levels: Vec<AtomicI32>,
    made: AtomicUsize,
    members: Vec<AtomicI32>,
    members_made: AtomicUsize,
    /// Member i < execers execs `exec_argv` once `exec_go` is above i.
    execers: usize,
    exec_go: AtomicUsize,
    exec_argv: Vec<*const libc::c_char>,
    exec_envp: [*const libc::c_char; 1],
}

/// A chain hung below the caller; dropped, every process of it is killed, reaped (with
/// any other child of the caller's: it should be a child subreaper) and its stacks
/// unmapped.
pub struct CloneChain {
    shared: Box<Shared>,
    stacks: *mut libc::c_void,
    bytes: usize,
    /// What `shared.exec_argv` points into.
    _exec: Vec<CString>,
}

/// Sleeps `ms` milliseconds, or until killed with no timeout, by a raw ppoll(2)
/// (pause(2) is not a system call on arm64).
fn raw_sleep(ms: Option<i64>) {
    let timeout = ms.map(|ms| libc::timespec {
        tv_sec: 0,
        tv_nsec: ms * 1_000_000,
    });
    let timeout = timeout
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: ppoll(2) of no descriptors; the timeout, if any, lives on this stack.
    unsafe {
        libc::syscall(
            libc::SYS_ppoll,
            std::ptr::null_mut::<libc::pollfd>(),
            0,
            timeout,
            std::ptr::null::<libc::sigset_t>(),
            0,
        )
    };
}

/// A level: reports its pid, clones the next level, or, the last, the members below it.
extern "C" fn level(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the chain's Shared, alive until every process is killed.
    let chain = unsafe { &*(arg as *const Shared) };
    let index = chain.made.fetch_add(1, Ordering::AcqRel);
    // SAFETY: getpid(2), no memory involved.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    chain.levels[index].store(pid, Ordering::Relaxed);
    let (next, slots): (extern "C" fn(*mut libc::c_void) -> libc::c_int, _) =
        if index + 1 < chain.levels.len() {
            (level, index + 1..index + 2)
        } else {
            let first = chain.levels.len();
            (member, first..first + chain.members.len())
        };
    for slot in slots {
        // SAFETY: the child's stack is its slot of `stacks` alone; it runs `next` only.
        unsafe {
            libc::clone(
                next,
                chain.stacks.add((slot + 1) * STACK).cast(),
                libc::CLONE_VM | libc::SIGCHLD,
                arg,
            )
        };
    }
    loop {
        raw_sleep(None);
    }
}

/// A member below the last level: sleeps until killed, but for the first `execers`,
/// each of which execs `exec_argv` once told.
extern "C" fn member(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: as in `level`.
    let chain = unsafe { &*(arg as *const Shared) };
    let index = chain.members_made.fetch_add(1, Ordering::AcqRel);
    // SAFETY: getpid(2), no memory involved.
    let pid = unsafe { libc::syscall(libc::SYS_getpid) } as i32;
    chain.members[index].store(pid, Ordering::Relaxed);
    if index < chain.execers {
        while chain.exec_go.load(Ordering::Acquire) <= index {
            raw_sleep(Some(10));
        }
        // SAFETY: execve(2) of NUL-terminated strings in arrays ending with NULL, all the
        // chain's, alive; on success this process's memory is its own again.
        unsafe {
            libc::syscall(
                libc::SYS_execve,
                chain.exec_argv[0],
                chain.exec_argv.as_ptr(),
                chain.exec_envp.as_ptr(),
            );
            libc::syscall(libc::SYS_exit, 1);
        }
    }
    loop {
        raw_sleep(None);
    }
}

impl CloneChain {
    /// Hangs `levels` levels below the caller and `members` below the last, the first
    /// `execers` of which exec `exec` (a program and its arguments) when told; returns
    /// once every process has reported itself (within 300 s).
    pub fn hang(
        levels: usize,
        members: usize,
        execers: usize,
        exec: &[&str],
    ) -> Result<CloneChain> {
        ensure!(
            levels > 0 && execers <= members,
            "a chain of {levels} levels, {members} members"
        );
        let exec: Vec<CString> = exec
            .iter()
            .map(|a| CString::new(*a))
            .collect::<Result<_, _>>()?;
        ensure!(
            execers == 0 || !exec.is_empty(),
            "execers with nothing to exec"
        );
        let mut exec_argv: Vec<*const libc::c_char> = exec.iter().map(|a| a.as_ptr()).collect();
        exec_argv.push(std::ptr::null());
        let bytes = (levels + members + 1) * STACK;
        // SAFETY: an anonymous private mapping of our own, unmapped on drop, once every
        // process of the chain is killed and reaped.
        let stacks = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        ensure!(
            stacks != libc::MAP_FAILED,
            "mmap of the chain's stacks: {}",
            std::io::Error::last_os_error()
        );
        let chain = CloneChain {
            shared: Box::new(Shared {
                stacks: stacks.cast(),
                levels: (0..levels).map(|_| AtomicI32::new(0)).collect(),
                made: AtomicUsize::new(0),
                members: (0..members).map(|_| AtomicI32::new(0)).collect(),
                members_made: AtomicUsize::new(0),
                execers,
                exec_go: AtomicUsize::new(0),
                exec_argv,
                exec_envp: [std::ptr::null()],
            }),
            stacks,
            bytes,
            _exec: exec,
        };
        // SAFETY: the first level's stack is its alone; it runs `level` only.
        let top = unsafe {
            libc::clone(
                level,
                chain.shared.stacks.add(STACK).cast(),
                libc::CLONE_VM | libc::SIGCHLD,
                &*chain.shared as *const Shared as *mut libc::c_void,
            )
        };
        ensure!(top > 0, "clone: {}", std::io::Error::last_os_error());
        let started = Instant::now();
        let all = |pids: &[AtomicI32]| pids.iter().all(|p| p.load(Ordering::Relaxed) != 0);
        while !all(&chain.shared.levels) || !all(&chain.shared.members) {
            ensure!(
                started.elapsed() < Duration::from_secs(300),
                "the chain made {} of {levels} levels and {} of {members} members in 300 s",
                chain.shared.made.load(Ordering::Relaxed),
                chain.shared.members_made.load(Ordering::Relaxed)
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(chain)
    }

    /// The levels' pids, from the top.
    pub fn levels(&self) -> Vec<i32> {
        self.shared
            .levels
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect()
    }

    /// The members' pids; the execers first.
    pub fn members(&self) -> Vec<i32> {
        self.shared
            .members
            .iter()
            .map(|p| p.load(Ordering::Relaxed))
            .collect()
    }

    /// Lets the first `n` execers exec.
    pub fn release_execers(&self, n: usize) {
        self.shared.exec_go.store(n, Ordering::Release);
    }
}

impl Drop for CloneChain {
    fn drop(&mut self) {
        let pids = self
            .shared
            .members
            .iter()
            .chain(self.shared.levels.iter().rev());
        for pid in pids.map(|p| p.load(Ordering::Relaxed)).filter(|&p| p > 0) {
            // SAFETY: kill(2) of a process of the chain (the caller's to reap).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        // Every process of the chain, orphaned or not, is the caller's to reap.
        // SAFETY: waitpid(2) of any child of ours, into no status.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), 0) } > 0 {}
        // SAFETY: the mapping made in `hang`; no process is left to use it.
        unsafe { libc::munmap(self.stacks, self.bytes) };
    }
}

/// Makes the calling process a child subreaper: orphans below it are its to reap.
pub fn become_subreaper() -> Result<()> {
    // SAFETY: prctl(2) with integer arguments, on this process alone.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    ensure!(
        ret == 0,
        "PR_SET_CHILD_SUBREAPER: {}",
        std::io::Error::last_os_error()
    );
    Ok(())
}
