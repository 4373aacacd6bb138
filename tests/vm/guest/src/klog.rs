//! What the kernel says about a test: its log since a mark, and the slab
//! objects the module still holds (slub_debug=U records who allocated each).

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;

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

/// Live slab objects that pfprof.ko allocated, from the allocation traces
/// slub_debug=U keeps (debugfs: /sys/kernel/debug/slab/*/alloc_traces, one
/// line per call site, led by its object count). The module's only slab
/// allocation is one object per registered process.
pub fn module_slab_objects() -> Result<u64> {
    let mut total = 0;
    let mut traced = 0;
    let dir = "/sys/kernel/debug/slab";
    for entry in fs::read_dir(dir).with_context(|| format!("no {dir}: mount debugfs"))? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        // kzalloc() lands in kmalloc-*.
        if !name.starts_with("kmalloc-") {
            continue;
        }
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
            }
        }
    }
    ensure!(
        traced > 0,
        "no kmalloc cache traces its allocations: boot with slub_debug=U"
    );
    Ok(total)
}
