//! What the kernel says about a test: its log since a mark, the slab objects
//! the module still holds (slub_debug=U records who allocated each, KFENCE
//! its own), and what kmemleak finds once the suite is over.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::Mutex;

use anyhow::{bail, ensure, Context, Result};

/// What the kernel's checkers print (run.sh looks for the same over the whole log).
const COMPLAINTS: &[&str] = &[
    "BUG:",
    "BUG ",
    "WARNING:",
    "Oops",
    "general protection",
    "Kernel panic",
    "blocked for more than",
    "detected stall",
    "soft lockup",
    "Redzone",
    "Poison overwritten",
    "Object padding",
    "slab error",
    "refcount_t",
    "corruption",
    "UBSAN:",
    "KASAN",
    "KFENCE",
    "INFO: trying to register non-static key",
];

/// A position in the kernel log (/dev/kmsg sequence number).
pub struct Mark {
    seq: u64,
}

/// One read per record; records lost to a wrap (EPIPE) are skipped.
fn records_after(seq: u64) -> Result<Vec<(u64, String)>> {
    let mut kmsg: File = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/kmsg")
        .context("opening /dev/kmsg")?;
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8192];
    loop {
        match kmsg.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                // "prio,seq,usec,flags;message\n continuation..."
                let (head, msg) = text.split_once(';').context("kmsg record without ';'")?;
                let rec_seq: u64 = head
                    .split(',')
                    .nth(1)
                    .context("kmsg record without a sequence number")?
                    .parse()?;
                if rec_seq > seq {
                    out.push((rec_seq, msg.trim_end().to_string()));
                }
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) => return Err(e).context("reading /dev/kmsg"),
        }
    }
    Ok(out)
}

impl Mark {
    pub fn now() -> Result<Mark> {
        let seq = records_after(0)?.last().map_or(0, |(s, _)| *s);
        Ok(Mark { seq })
    }

    /// The kernel's messages since the mark.
    pub fn messages(&self) -> Result<Vec<String>> {
        Ok(records_after(self.seq)?
            .into_iter()
            .map(|(_, m)| m)
            .collect())
    }

    /// Fails with the first checker report logged since the mark.
    pub fn ensure_clean(&self) -> Result<()> {
        let bad: Vec<String> = self
            .messages()?
            .into_iter()
            .filter(|m| COMPLAINTS.iter().any(|c| m.contains(c)))
            .collect();
        if !bad.is_empty() {
            bail!(
                "the kernel complained: {}",
                bad.iter().take(5).cloned().collect::<Vec<_>>().join(" | ")
            );
        }
        Ok(())
    }
}

/// Hands back to the slab allocator what KASAN holds in quarantine for the
/// cache `name` (its sysfs `shrink`, which calls kasan_cache_shrink()): with
/// KASAN a freed object stays allocated, as slub sees it, until it leaves
/// the quarantine. Nothing to do on a kernel without KASAN.
pub fn settle_frees(name: &str) -> Result<()> {
    let path = format!("/sys/kernel/slab/{name}/shrink");
    match fs::write(&path, "1") {
        Ok(()) => Ok(()),
        // A cache merged into another has no directory of its own.
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).context(path),
    }
}

/// The active objects of the slab cache `name`, once settled ([`settle_frees`]), if the
/// kernel keeps it apart (a cache merged with another of its size has no line of its
/// own in /proc/slabinfo).
pub fn slab_active_objects(name: &str) -> Result<Option<u64>> {
    settle_frees(name)?;
    let slabs = fs::read_to_string("/proc/slabinfo").context("/proc/slabinfo")?;
    Ok(slabs
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|active| active.parse().ok()))
}

/// Live kmalloc objects KFENCE allocated at a call site in pfprof.ko
/// (debugfs: kfence/objects, one block per object: a header naming its cache,
/// its allocation stack, allocator frames skipped, and "freed by" once
/// freed). As with slub's traces, the allocation site counts, not every
/// frame: the module's /proc entry, made by procfs under pfprof_init, is
/// not one of its registrations. slub's traces do not see these objects;
/// none on a kernel without KFENCE.
fn module_kfence_objects(found: &mut Vec<String>) -> Result<u64> {
    let text = match fs::read_to_string("/sys/kernel/debug/kfence/objects") {
        Ok(text) => text,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).context("/sys/kernel/debug/kfence/objects"),
    };
    let mut live = 0;
    for object in text.split("kfence-#").skip(1) {
        let mut lines = object.lines();
        let header = lines.next().unwrap_or("");
        let site = lines
            .skip_while(|l| !l.starts_with("allocated by"))
            .nth(1)
            .unwrap_or("");
        if header.contains("cache=kmalloc-")
            && site.contains("[pfprof]")
            && !object.contains("freed by")
        {
            live += 1;
            found.push(format!("kfence-#{}", object.lines().next().unwrap_or("")));
        }
    }
    Ok(live)
}

/// Live slab objects that pfprof.ko allocated, from the allocation traces
/// slub_debug=U keeps (debugfs: /sys/kernel/debug/slab/*/alloc_traces, one
/// line per call site, led by its object count) and from KFENCE's list,
/// after KASAN's quarantine has let go of what was freed. The module's only
/// slab allocation is one object per registered process.
fn module_slab_objects(found: &mut Vec<String>) -> Result<u64> {
    let mut total = module_kfence_objects(found)?;
    let mut traced = 0;
    let dir = "/sys/kernel/debug/slab";
    for entry in fs::read_dir(dir).with_context(|| format!("no {dir}: mount debugfs"))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // kzalloc() lands in kmalloc-*.
        if !name.starts_with("kmalloc-") {
            continue;
        }
        settle_frees(name)?;
        // Caches without user tracking (made before slub_debug applies) have none.
        let traces = match fs::read_to_string(path.join("alloc_traces")) {
            Ok(traces) => traces,
            Err(e) if e.kind() == ErrorKind::NotFound => continue,
            Err(e) => return Err(e).context(format!("{}/alloc_traces", path.display())),
        };
        traced += 1;
        for line in traces.lines().filter(|l| l.contains("[pfprof]")) {
            // Stack lines under a call site have no count: skip them.
            if let Some(Ok(count)) = line.split_whitespace().next().map(str::parse::<u64>) {
                total += count;
                found.push(format!("{name}: {}", line.trim()));
            }
        }
    }
    ensure!(
        traced > 0,
        "no kmalloc cache traces its allocations: boot with slub_debug=U"
    );
    Ok(total)
}

/// Waits until the module holds exactly `expected` slab objects: a process
/// that exited registered (unnamed, so no longer listed) keeps its object
/// until the registry's pruning (within a second) drops it, a session's
/// member until its sampler's next collection. Fails with the last count
/// after a few seconds.
pub fn ensure_module_slab_objects(expected: u64, what: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let mut found = Vec::new();
        let objects = module_slab_objects(&mut found)?;
        if objects == expected {
            return Ok(());
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "the module holds {objects} slab objects for {expected} {what}: {}",
            found.join(" | ")
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Where pfprof.ko's code was each time it was loaded: [start, end) from
/// /proc/modules, for attributing kmemleak's backtraces after it is gone.
static MODULE_RANGES: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// Records where the module just loaded sits (kmod::try_insmod calls it).
pub fn record_module_range() -> Result<()> {
    let modules = fs::read_to_string("/proc/modules").context("reading /proc/modules")?;
    // "pfprof 40960 0 - Live 0xffffffffc0200000"
    let line = modules
        .lines()
        .find(|l| l.starts_with("pfprof "))
        .context("pfprof is not in /proc/modules")?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let size: u64 = fields.get(1).context("no size")?.parse()?;
    let base = fields
        .get(5)
        .and_then(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
        .context("no load address in /proc/modules")?;
    ensure!(base != 0, "/proc/modules hides the load address");
    MODULE_RANGES
        .lock()
        .map_err(|_| anyhow::anyhow!("module ranges poisoned"))?
        .push((base, base + size));
    Ok(())
}

/// kmemleak's verdict on the module after the suite: scans twice (as its
/// documentation advises, so that references in flight settle), then returns the reports whose
/// allocation backtrace points into any place the module was loaded, and
/// how many reports there were in all. None when the kernel has no kmemleak.
pub fn kmemleak_module_reports() -> Result<Option<(Vec<String>, usize)>> {
    let path = "/sys/kernel/debug/kmemleak";
    if !std::path::Path::new(path).exists() {
        return Ok(None);
    }
    for _ in 0..2 {
        fs::write(path, "scan").context("kmemleak scan")?;
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
    let report = fs::read_to_string(path).context("reading kmemleak")?;
    let ranges = MODULE_RANGES
        .lock()
        .map_err(|_| anyhow::anyhow!("module ranges poisoned"))?
        .clone();
    let in_module = |line: &str| {
        line.contains("[pfprof]")
            || line
                .split(['<', '>'])
                .nth(1)
                .and_then(|a| u64::from_str_radix(a, 16).ok())
                .is_some_and(|a| ranges.iter().any(|&(s, e)| (s..e).contains(&a)))
    };
    let objects: Vec<&str> = report.split("unreferenced object").skip(1).collect();
    let ours = objects
        .iter()
        .filter(|o| o.lines().any(in_module))
        .map(|o| format!("unreferenced object{}", o.trim_end()))
        .collect();
    Ok(Some((ours, objects.len())))
}

/// Objects of the task_struct cache in use (slub_debug keeps the count exact;
/// KASAN's quarantine is emptied first).
pub(crate) fn task_structs() -> Result<u64> {
    settle_frees("task_struct")?;
    let text = std::fs::read_to_string("/sys/kernel/slab/task_struct/objects")?;
    Ok(text
        .split_whitespace()
        .next()
        .context("empty objects")?
        .parse()?)
}
