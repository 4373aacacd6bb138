//! The summary as one JSON object (`--summary run.json`), with what was profiled.

use serde_json::{json, Value};

use super::{Summary, Thrashing};
use crate::attribution::{Attribution, Faults, Function, Mapping};
use crate::output::attribution::{hottest_regions, AttributionSummary, TOP};
use crate::output::metadata::Metadata;
use crate::output::totals::Totals;

/// The summary as one JSON object, with what was profiled.
pub(super) fn of(summary: &Summary, metadata: &Metadata) -> Value {
    let t = summary.totals;
    let seconds = |ns: u64| ns as f64 / 1e9;
    let (judged, bands) = match summary.thrashing {
        Thrashing::NotJudged => (false, &[][..]),
        Thrashing::Judged(bands, _) => (true, bands),
    };
    json!({
        "profile": metadata,
        "samples": t.samples,
        "duration_s": seconds(t.covered_ns),
        "minor_faults": t.minor,
        "major_faults": t.major,
        "minor_fault_rate": { "mean": t.mean_minor_rate(), "peak": t.peak_minor_rate },
        "major_fault_rate": { "mean": t.mean_major_rate(), "peak": t.peak_major_rate },
        "cpu_s": seconds(t.cpu_ns),
        "cpu_util": t.cpu_util(),
        "samples_lost": t.lost,
        "producer_blocked_s": summary.blocked.as_secs_f64(),
        "samples_deferred": summary.deferred,
        "memory_peak": { "resident_bytes": t.peak_resident, "swap_bytes": t.peak_swap },
        "memory_stall_s": {
            "some": t.stall_some_us.map(|us| us as f64 / 1e6),
            "full": t.stall_full_us.map(|us| us as f64 / 1e6),
        },
        "thrashing": { "judged": judged, "bands": bands },
        "command": summary.child.map(|c| json!({
            "minor_faults": c.minor,
            "major_faults": c.major,
            "cpu_s": seconds(c.cpu_ns),
            "user_s": seconds(c.usage.user_ns),
            "system_s": seconds(c.usage.system_ns),
            "max_rss_bytes": c.usage.max_rss_bytes,
            "exit": c.status.to_string(),
            "exit_code": c.status.code(),
        })),
        "attached": summary.peaks.iter().map(|p| json!({
            "pid": p.pid,
            "max_rss_bytes": p.bytes,
            "exited_within_s": p.exited_within.map(|d| d.as_secs_f64()),
        })).collect::<Vec<_>>(),
        "where": summary.attributed.map(|w| where_json(w, t)),
        "notes": summary.notes,
    })
}

/// Where the faults were: the top mappings by major and by minor faults, the processes.
fn where_json(w: &AttributionSummary, totals: &Totals) -> Value {
    let (period, kernel_faults, off) = match &w.attribution {
        Attribution::On {
            minor_sampling,
            kernel_faults,
        } => (Some(*minor_sampling), Some(*kernel_faults), None),
        Attribution::Off(why) => (None, None, Some(why.as_str())),
    };
    let recorded = w.run.recorded();
    let lost = w.run.lost();
    let estimate = |samples: u64| samples.saturating_mul(period.unwrap_or(0));
    let mapping = |m: &Mapping, by_major: bool, of: u64, f: Faults| {
        let count = if by_major { f.major } else { f.minor_samples };
        json!({
            "name": m.name,
            "kind": m.kind,
            "pid": m.pid(),
            "display": m.to_string(),
            "major": f.major,
            "minor_est": estimate(f.minor_samples),
            "minor_samples": f.minor_samples,
            "share": count as f64 / of.max(1) as f64,
            "regions": hottest_regions(&w.run, m, by_major, period),
        })
    };
    let function = |function: &Function, by_major: bool, of: u64, f: Faults| {
        let count = if by_major { f.major } else { f.minor_samples };
        json!({
            "name": &*function.name,
            "binary": function.binary,
            "major": f.major,
            "minor_est": estimate(f.minor_samples),
            "minor_samples": f.minor_samples,
            "share": count as f64 / of.max(1) as f64,
        })
    };
    let processes = w.run.top_processes(TOP);
    let (minor, major) = (processes.iter()).fold((0u64, 0u64), |(mi, ma), (_, p)| {
        (mi.saturating_add(p.minor), ma.saturating_add(p.major))
    });
    json!({
        "attributed": period.is_some(),
        "not_attributed": off,
        "minor_sampling": period,
        "kernel_faults": kernel_faults,
        "major": {
            "recorded": recorded.major,
            "of": totals.major,
            "lost": lost.major,
            "top": (w.run.top_major(TOP).into_iter())
                .map(|(m, f)| mapping(m, true, recorded.major, f))
                .collect::<Vec<_>>(),
            "functions": (w.run.top_functions_major(TOP).into_iter())
                .map(|(fun, f)| function(fun, true, recorded.major, f))
                .collect::<Vec<_>>(),
        },
        "minor": {
            "estimated": estimate(recorded.minor_samples),
            "recorded": recorded.minor_samples,
            "of": totals.minor,
            "lost_est": estimate(lost.minor_samples),
            "lost": lost.minor_samples,
            "top": (w.run.top_minor(TOP).into_iter())
                .map(|(m, f)| mapping(m, false, recorded.minor_samples, f))
                .collect::<Vec<_>>(),
            "functions": (w.run.top_functions_minor(TOP).into_iter())
                .map(|(fun, f)| function(fun, false, recorded.minor_samples, f))
                .collect::<Vec<_>>(),
        },
        "processes": (processes.iter())
            .map(|(pid, p)| json!({ "pid": pid, "comm": &*p.comm, "minor": p.minor, "major": p.major }))
            .collect::<Vec<_>>(),
        "programs": (w.run.top_programs(TOP).iter())
            .map(|p| json!({
                "comm": &*p.comm, "processes": p.processes, "minor": p.minor, "major": p.major,
            }))
            .collect::<Vec<_>>(),
        "other_processes": {
            "minor": totals.minor.saturating_sub(minor),
            "major": totals.major.saturating_sub(major),
        },
    })
}
