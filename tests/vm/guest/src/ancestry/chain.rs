//! The chains of processes the ancestry tests hang below a reaper (a child subreaper,
//! or the init of a pid namespace nobody made), forked by nobody's helper: each level
//! reports its pid up a pipe, and a level killed leaves what hung below it to the
//! reaper.

use std::fs::{self, File};
use std::io::{ErrorKind, Read};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// Who the chain's orphans are reparented to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Reaper {
    /// A process that made itself a child subreaper (prctl(PR_SET_CHILD_SUBREAPER)).
    Subreaper,
    /// Pid 1 of a pid namespace nobody made in a user namespace of its own.
    PidNamespaceInit,
}

impl Reaper {
    pub(super) fn arg(self) -> &'static str {
        match self {
            Reaper::Subreaper => "subreaper",
            Reaper::PidNamespaceInit => "pid-ns-init",
        }
    }

    pub(super) fn parse(arg: &str) -> Result<Reaper> {
        match arg {
            "subreaper" => Ok(Reaper::Subreaper),
            "pid-ns-init" => Ok(Reaper::PidNamespaceInit),
            _ => bail!("unknown reaper {arg:?}"),
        }
    }
}

/// Leaves a forked child without the helper's destructors and buffers.
fn exit_child(code: i32) -> ! {
    // SAFETY: _exit(2) ends the process at once; nothing of the helper's runs in it.
    unsafe { libc::_exit(code) }
}

/// This process's pid as the guest's /proc names it, in the root pid namespace:
/// inside a pid namespace of its own getpid() says another number.
fn pid_in_proc() -> Option<i32> {
    let mut buf = [0u8; 16];
    // SAFETY: readlink(2) of a NUL-terminated path into a live buffer of that length.
    let n = unsafe { libc::readlink(c"/proc/self".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.parse().ok()
}

/// Writes `value` to the pipe the helper reads the chain's pids from.
fn report(pipe: RawFd, value: i32) -> bool {
    let bytes = value.to_ne_bytes();
    // SAFETY: writes 4 bytes of a live array; a pipe write under PIPE_BUF is atomic.
    let written = unsafe { libc::write(pipe, bytes.as_ptr().cast(), bytes.len()) };
    written == bytes.len() as isize
}

/// The first process forked: its stdin and stdout (pipes to the test, which must see
/// the helper's end, not the chain's) become /dev/null, and it closes what it
/// inherited of the helper's besides the pipe it reports on (the device: the session
/// must not outlive the helper in its chain).
fn detach_from_helper(inherited: &[RawFd]) {
    // SAFETY: open(2) of a NUL-terminated path.
    let null = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
    if null < 0 {
        exit_child(1);
    }
    for fd in [0, 1] {
        // SAFETY: dup2(2) of a descriptor we just opened onto a standard one.
        if unsafe { libc::dup2(null, fd) } < 0 {
            exit_child(1);
        }
    }
    for &fd in inherited.iter().chain([&null]).filter(|&&fd| fd > 1) {
        // SAFETY: closing this process's copy of a descriptor it does not use.
        unsafe { libc::close(fd) };
    }
}

/// Lets the kernel reap this process's children, and its descendants' (a disposition
/// forks inherit), as soon as they die.
fn reap_children_at_once() {
    // SAFETY: setting SIGCHLD's disposition to SIG_IGN, no handler involved.
    if unsafe { libc::signal(libc::SIGCHLD, libc::SIG_IGN) } == libc::SIG_ERR {
        exit_child(1);
    }
}

/// Sleeps until a signal ends it.
fn sleep_forever() -> ! {
    loop {
        // SAFETY: pause(2) only sleeps; SIGKILL ends the process.
        unsafe { libc::pause() };
    }
}

/// In the reaper, which has reported itself: forks the chain's `levels` processes,
/// each from the one above, each reporting itself before forking the next, then
/// sleeps. Every process closes its end of the pipe once its child holds one, so
/// the helper sees the pipe end when the chain is complete or broken.
fn hang_chain(pipe: RawFd, levels: usize) -> ! {
    for _ in 0..levels {
        // SAFETY: fork(2) in a process with one thread (a copy of the helper's one);
        // the child only reports itself, forks on and sleeps.
        match unsafe { libc::fork() } {
            0 => {
                if !pid_in_proc().is_some_and(|pid| report(pipe, pid)) {
                    exit_child(1);
                }
            }
            -1 => exit_child(1),
            _ => break,
        }
    }
    // SAFETY: closing this process's copy of the pipe's write end.
    unsafe { libc::close(pipe) };
    sleep_forever()
}

/// The forked reaper: a child subreaper with the chain below it.
fn subreaper(pipe: RawFd, depth: usize, reap_at_once: bool) -> ! {
    // SAFETY: prctl(2) with integer arguments, on this process alone.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        exit_child(1);
    }
    if !pid_in_proc().is_some_and(|pid| report(pipe, pid)) {
        exit_child(1);
    }
    if reap_at_once {
        reap_children_at_once();
    }
    hang_chain(pipe, depth)
}

/// The forked maker of a pid namespace: as nobody it needs a user namespace of its
/// own first (CAP_SYS_ADMIN there), then the next child it forks is pid 1 of the new
/// pid namespace, the reaper of its orphans, with the chain below it. Reports a
/// refused unshare(2) as its negated errno.
fn pid_namespace_maker(pipe: RawFd, depth: usize, reap_at_once: bool) -> ! {
    // SAFETY: unshare(2) in a process with one thread (CLONE_NEWUSER wants that); the
    // new pid namespace is only its children's.
    if unsafe { libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID) } != 0 {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        report(pipe, -errno.max(1));
        exit_child(0);
    }
    // SAFETY: fork(2) in a process with one thread; the child is the namespace's init.
    match unsafe { libc::fork() } {
        0 => {
            if !pid_in_proc().is_some_and(|pid| report(pipe, pid)) {
                exit_child(1);
            }
            if reap_at_once {
                reap_children_at_once();
            }
            hang_chain(pipe, depth)
        }
        -1 => exit_child(1),
        _ => {
            // SAFETY: closing this process's copy of the pipe's write end.
            unsafe { libc::close(pipe) };
            sleep_forever()
        }
    }
}

/// The reaper and the chain below it, asleep; killed and reaped when dropped. The
/// helper is a child subreaper itself, so everything of it ends up its child.
pub(super) struct Chain {
    /// The process the helper forked: the subreaper, or the pid namespace's maker
    /// (the init's parent).
    forked: i32,
    /// The reaper, then the chain's levels: `pids[level]`, level 0 the reaper.
    pub(super) pids: Vec<i32>,
}

/// Why a chain could not be made here: the kernel refuses what it needs.
pub(super) struct Refused(pub(super) String);

impl Chain {
    /// Forks the reaper, which forks the chain; `inherited` are the helper's
    /// descriptors the chain must not keep.
    pub(super) fn hang(
        reaper: Reaper,
        depth: usize,
        reap_at_once: bool,
        inherited: &[RawFd],
    ) -> Result<std::result::Result<Chain, Refused>> {
        let mut fds = [0; 2];
        // SAFETY: a two-int array for pipe(2) to fill.
        let piped = unsafe { libc::pipe(fds.as_mut_ptr()) };
        ensure!(piped == 0, "pipe: {}", std::io::Error::last_os_error());
        // SAFETY: pipe(2) just gave us both descriptors; each is owned once, here.
        let (mut rx, tx) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
        // SAFETY: fork(2) in the helper, which has one thread; the child runs
        // `subreaper` or `pid_namespace_maker`, which never return.
        let forked = unsafe { libc::fork() };
        ensure!(forked >= 0, "fork: {}", std::io::Error::last_os_error());
        if forked == 0 {
            let mut close = inherited.to_vec();
            close.push(rx.as_raw_fd());
            detach_from_helper(&close);
            match reaper {
                Reaper::Subreaper => subreaper(tx.as_raw_fd(), depth, reap_at_once),
                Reaper::PidNamespaceInit => {
                    pid_namespace_maker(tx.as_raw_fd(), depth, reap_at_once)
                }
            }
        }
        drop(tx);
        let mut chain = Chain {
            forked,
            pids: Vec::with_capacity(depth + 1),
        };
        while chain.pids.len() <= depth {
            let mut bytes = [0u8; 4];
            match rx.read_exact(&mut bytes) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::UnexpectedEof => bail!(
                    "the chain stopped after {} of its {depth} levels",
                    chain.pids.len().saturating_sub(1)
                ),
                Err(e) => return Err(e).context("reading the chain's pids"),
            }
            let pid = i32::from_ne_bytes(bytes);
            if pid < 0 {
                return Ok(Err(Refused(format!(
                    "unshare(CLONE_NEWUSER | CLONE_NEWPID) as nobody: {}",
                    std::io::Error::from_raw_os_error(-pid)
                ))));
            }
            chain.pids.push(pid);
        }
        ensure!(
            reaper == Reaper::PidNamespaceInit || chain.reaper() == forked,
            "the subreaper {forked} reported itself as {}",
            chain.reaper()
        );
        Ok(Ok(chain))
    }

    pub(super) fn reaper(&self) -> i32 {
        self.pids[0]
    }

    /// SIGKILLs level `level`; what hung below it goes to the reaper, which it
    /// waits for.
    pub(super) fn kill_level(&self, level: usize) -> Result<()> {
        let (victim, orphan) = (self.pids[level], self.pids[level + 1]);
        // SAFETY: kill(2) of a process of ours.
        let ret = unsafe { libc::kill(victim, libc::SIGKILL) };
        ensure!(
            ret == 0,
            "kill level {level} ({victim}): {}",
            std::io::Error::last_os_error()
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let parent = parent_of(orphan)?;
            if parent == self.reaper() {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "level {} ({orphan}) has parent {parent}, not the reaper {}, after its \
                 parent was killed",
                level + 1,
                self.reaper()
            );
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Kills every process of the chain, the deepest first and each one's exit done
    /// before the next is killed, then reaps them all: they are this subreaper's
    /// children by then, or the reaped children of a namespace's init. One at a
    /// time because each fork links the child's memory to every ancestor's anon_vma:
    /// hundreds of levels exiting together queue on the root's lock, under KASAN for
    /// longer than the hung-task detector allows; one by one, none waits on another.
    pub(super) fn tear_down(&mut self) -> Result<()> {
        if self.forked == 0 {
            return Ok(());
        }
        let all: Vec<i32> = self
            .pids
            .iter()
            .rev()
            .chain([&self.forked])
            .copied()
            .collect();
        self.forked = 0;
        self.pids.clear();
        let kill = |pid: i32| {
            // SAFETY: kill(2) of a process of ours (ESRCH once gone: fine).
            unsafe { libc::kill(pid, libc::SIGKILL) };
        };
        for (i, &pid) in all.iter().enumerate() {
            kill(pid);
            let deadline = Instant::now() + EXIT_LIMIT;
            while !has_exited(pid) {
                if Instant::now() >= deadline {
                    // None may outlive the test: the rest at once, come what may.
                    all[i + 1..].iter().copied().for_each(kill);
                    bail!("chain process {pid} still running {EXIT_LIMIT:?} after SIGKILL");
                }
                thread::sleep(Duration::from_millis(1));
            }
        }
        let deadline = Instant::now() + EXIT_LIMIT;
        loop {
            loop {
                // SAFETY: waitpid(2) for any child, without blocking, status unwanted.
                let reaped = unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) };
                if reaped <= 0 {
                    break;
                }
            }
            // SAFETY: kill(2) with signal 0 only asks whether the process exists.
            let left = all
                .iter()
                .filter(|&&pid| unsafe { libc::kill(pid, 0) } == 0);
            let left = left.count();
            if left == 0 {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{left} processes of the chain are still there after SIGKILL"
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

/// How long one killed process of the chain may take to exit, or all of them to be
/// reaped: one exit of a deep level under KASAN takes a fraction of a second.
const EXIT_LIMIT: Duration = Duration::from_secs(20);

/// `pid` has exited: it is a zombie or gone (its memory is released either way).
fn has_exited(pid: i32) -> bool {
    u32::try_from(pid)
        .ok()
        .and_then(|pid| crate::kmod::stat(pid).ok())
        .is_none_or(|(state, _)| matches!(state, 'Z' | 'X'))
}

impl Drop for Chain {
    fn drop(&mut self) {
        let _ = self.tear_down();
    }
}

/// The parent of `pid`, as /proc/<pid>/stat says (in the root pid namespace).
fn parent_of(pid: i32) -> Result<i32> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    let rest = &text[text.rfind(')').context("no ) in stat")? + 2..];
    rest.split(' ')
        .nth(1)
        .context("no ppid in stat")?
        .parse()
        .with_context(|| format!("ppid in {text:?}"))
}
