"""Draws the case-study figures from the runs reproduce.sh brought back.

    plot.py OUT

OUT/data/<run>-r<k>/ holds repetition k of each run: samples.csv (the
monitor's per-sample deltas), experiment.log (the commands, work's own counts
and the monitor's summary), machine.txt, vmstat.txt and cpu-stat.txt (from the
guest); OUT/data/host.txt describes the host. Writes OUT/thrashing.svg,
OUT/multiprogramming.svg and OUT/multiprogramming.csv (one row per run).
"""

import csv
import re
import statistics
import sys
from pathlib import Path

import matplotlib

matplotlib.use("svg")
import matplotlib.pyplot as plt  # noqa: E402

# Same output for the same data: no date or random ids in the SVG.
matplotlib.rcParams["svg.hashsalt"] = "pfprof"
METADATA = {"Date": None}


def key_values(path):
    """'key value...' lines, and /proc/meminfo's 'Key:   value kB'."""
    values = {}
    for line in path.read_text().splitlines():
        key, _, value = line.partition(" ")
        values[key.rstrip(":")] = value.strip()
    return values


def repetitions(out, name):
    """The directories of RUN's repetitions, in order."""
    runs = sorted((out / "data").glob(f"{name}-r*"), key=lambda p: int(p.name.rsplit("-r", 1)[1]))
    return [r for r in runs if (r / "samples.csv").exists()]


def samples(run):
    """The rows: every column a number, or None where the CSV field is empty (a
    pressure counter this kernel does not have; columns runs before ABI 4 lack are
    simply absent)."""
    with open(run / "samples.csv", newline="") as f:
        return [{k: float(v) if v != "" else None for k, v in row.items()}
                for row in csv.DictReader(line for line in f if not line.startswith("#"))]


def summary(run):
    """The monitor's summary: backend, mode, duration, faults and CPU time."""
    text = (run / "experiment.log").read_text()

    def number(label):
        m = re.search(rf"^  {label}\s+([0-9.]+)", text, re.M)
        if not m:
            sys.exit(f"plot.py: no '{label}' in {run}/experiment.log: did the run finish?")
        return float(m.group(1))

    head = re.search(r"pfprof summary \((\w+) backend, (\w+) mode\)", text)
    return {
        "backend": head.group(1),
        "mode": head.group(2),
        "duration_s": number("duration"),
        "minor": int(number("minor faults")),
        "major": int(number("major faults")),
        "cpu_s": number("CPU time"),
        "lost": int(number("samples lost")),
    }


def thrashing(run):
    """The verdict's bands in the run's summary, [(from_s, to_s)]; None when the
    monitor gave none (no PSI, or a monitor from before the verdict)."""
    text = (run / "experiment.log").read_text()
    if not re.search(r"^  thrashing ", text, re.M):
        return None
    return [(float(a), float(b)) for a, b in
            re.findall(r"^  thrashing +from t=([0-9.]+) s to t=([0-9.]+) s", text, re.M)]


def stall_full_s(run):
    """The summary's system-wide memory full stall, s; None without PSI."""
    m = re.search(r"^  memory stall +[0-9.]+ s some, ([0-9.]+) s full", 
                  (run / "experiment.log").read_text(), re.M)
    return float(m.group(1)) if m else None


def machine(out, run):
    """Two lines naming the backend, mode and machine that produced RUN."""
    host = key_values(out / "data" / "host.txt")
    guest = key_values(run / "machine.txt")
    s = summary(run)
    mem_mib = round(int(guest["MemTotal"].split()[0]) / 1024)
    swap_mib = round(int(guest["SwapTotal"].split()[0]) / 1024)
    qemu = re.search(r"version (\S+)", host["qemu"]).group(1)
    period = guest["pfprof"].split()[-1]
    return (
        f"pfprof {s['backend']} backend, {s['mode']} mode, {period} ms period; "
        f"Linux {guest['kernel']} on qemu {qemu} TCG, {guest['cpus']} vCPUs,\n"
        f"{host['guest_mem']} guest memory (MemTotal {mem_mib} MiB), "
        f"{swap_mib} MiB swap on virtio-blk; host: {host['host_cpu']}, {host['host_cpus']} CPUs"
    )


def commands(run):
    """The workload line of the run's `monitor run` command, as the guest ran it."""
    text = (run / "experiment.log").read_text()
    return re.search(r"sh -c '(.*) wait'", text).group(1).rstrip(" &;")


def workload(run):
    """Iterations and accesses per iteration of one `work` of the run."""
    text = (run / "experiment.log").read_text()
    # Not anchored: runs before work wrote its line in one piece have lines of
    # concurrent works interleaved ("work: 20work: 20 iterations of ...").
    m = re.search(r"work: (\d+) iterations of (\d+) accesses", text)
    return int(m.group(1)), int(m.group(2))


def cpu_breakdown(run):
    """The guest's CPU time during the run from /proc/stat, in % of one CPU."""
    before, after = (
        [int(v) for v in line.split()[1:]]
        for line in (run / "cpu-stat.txt").read_text().splitlines()
    )
    delta = [a - b for a, b in zip(after, before)]
    user, nice, system, idle, iowait, irq, softirq = delta[:7]
    total = user + nice + system + idle + iowait + irq + softirq
    cpus = int(key_values(run / "machine.txt")["cpus"])

    def pct(ticks):
        return round(100 * cpus * ticks / total, 2)

    return {
        "guest_user_pct": pct(user + nice),
        "guest_system_pct": pct(system + irq + softirq),
        "guest_iowait_pct": pct(iowait),
        "guest_idle_pct": pct(idle),
    }


def accumulated(rows, key):
    total, out = 0, []
    for r in rows:
        total += r[key]
        out.append(total)
    return out


def thrashing_figure(out):
    pairings = [
        ("thrash-rr", "random vs random"),
        ("thrash-rl", "random vs locality"),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.8), sharex=True, sharey=True)
    for ax, (name, title) in zip(axes, pairings):
        runs = repetitions(out, name)
        for i, run in enumerate(runs):
            rows = samples(run)
            t = [r["time_ms"] / 1e3 for r in rows]
            style = ["-", "--", ":"][i % 3]
            ax.plot(t, accumulated(rows, "minor"), style, color="tab:blue", lw=2,
                    label=f"minor faults, run {i + 1}")
            ax.plot(t, accumulated(rows, "major"), style, color="tab:red", lw=2,
                    label=f"major faults, run {i + 1}")
            # Where the monitor's verdict says thrashing began and ended.
            for start, end in thrashing(run) or []:
                ax.axvspan(start, end, color="tab:red", alpha=0.06)
                ax.axvline(start, ls=style, color="tab:red", lw=1)
        ax.set_title(f"{title}\n{commands(runs[0])}", fontsize=11)
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize=8, ncols=2)
    axes[0].set_ylabel("accumulated faults, both processes")
    axes[0].ticklabel_format(axis="y", style="plain")
    fig.suptitle(
        "Thrashing and locality: two work processes in too little memory\n"
        + machine(out, repetitions(out, pairings[0][0])[0]),
        fontsize=9.5,
    )
    fig.tight_layout()
    fig.savefig(out / "thrashing.svg", metadata=METADATA)


def multiprogramming_table(out):
    names = sorted({p.name.rsplit("-r", 1)[0] for p in (out / "data").glob("multi-*-r*")},
                   key=lambda name: int(name.split("-")[1]))
    table = []
    for name in names:
        for k, run in enumerate(repetitions(out, name), 1):
            s = summary(run)
            vm = key_values(run / "vmstat.txt")
            n = int(name.split("-")[1])
            iterations, accesses = workload(run)
            bands, stall = thrashing(run), stall_full_s(run)
            table.append(
                {
                    "n": n,
                    "run": k,
                    "duration_s": s["duration_s"],
                    "cpu_s": s["cpu_s"],
                    "cpu_util_pct": round(100 * s["cpu_s"] / s["duration_s"], 2),
                    "accesses_per_s": round(n * iterations * accesses / s["duration_s"]),
                    "minor": s["minor"],
                    "major": s["major"],
                    "pswpin": int(vm["pswpin"]),
                    "pswpout": int(vm["pswpout"]),
                    "samples_lost": s["lost"],
                    # The verdict: when thrashing began, and for how long in all.
                    "thrashing_from_s": bands[0][0] if bands else "",
                    "thrashing_s": round(sum(b - a for a, b in bands), 2)
                    if bands is not None else "",
                    "stall_full_s": stall if stall is not None else "",
                    **cpu_breakdown(run),
                }
            )
    with open(out / "multiprogramming.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)
    return [f"multi-{n}" for n in sorted({r["n"] for r in table})], table


def by_n(table, key):
    """N values, and the mean, min and max of KEY over each N's runs."""
    ns = sorted({r["n"] for r in table})
    values = [[r[key] for r in table if r["n"] == n] for n in ns]
    return ns, [statistics.mean(v) for v in values], [min(v) for v in values], \
        [max(v) for v in values]


def spread(ax, table, key, fmt, color, label=None):
    """The mean of KEY against N with its min-max range, and every run as a dot."""
    ns, mean, low, high = by_n(table, key)
    ax.errorbar(ns, mean, yerr=[[m - lo for m, lo in zip(mean, low)],
                                [hi - m for m, hi in zip(mean, high)]],
                fmt=fmt, color=color, lw=2, capsize=4, label=label)
    ax.plot([r["n"] for r in table], [r[key] for r in table], ".", color=color, alpha=0.5)
    return ns, mean


def multiprogramming(out):
    names, table = multiprogramming_table(out)
    first = repetitions(out, names[0])[0]
    fig, (util, split, rate) = plt.subplots(3, 1, figsize=(10, 12.5), sharex=True)

    ns, mean = spread(util, table, "cpu_util_pct", "o-", "tab:green")
    for x, m in zip(ns, mean):
        util.annotate(f"{m:.1f}%", (x, m), textcoords="offset points", xytext=(14, -12),
                      fontsize=9)
    util.set_ylabel("CPU utilization of the N processes\n(pfprof samples; % of one CPU)")
    util.set_ylim(0, 210)
    util.axhline(200, color="gray", ls=":")
    util.grid(alpha=0.3)
    last = repetitions(out, names[-1])[0]
    util.set_title(f"N concurrent: {commands(last).split('; do ')[1].rstrip(' &; done')} "
                   f"(mean of {len(table) // len(names)} runs per N, bars: min to max, dots: runs)",
                   fontsize=11)

    bottom = [0.0] * len(ns)
    for key, label, color in [
        ("guest_user_pct", "user", "tab:green"),
        ("guest_system_pct", "system (incl. irq)", "tab:orange"),
        ("guest_iowait_pct", "iowait", "tab:red"),
        ("guest_idle_pct", "idle", "lightgray"),
    ]:
        _, values, _, _ = by_n(table, key)
        split.bar(ns, values, 1.2, bottom=bottom, color=color, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    split.set_ylabel("whole guest's CPU time, mean\n(/proc/stat; % of one CPU)")
    split.set_ylim(0, 210)
    split.legend(loc="upper left", ncols=4, fontsize=9)

    spread(rate, table, "accesses_per_s", "s-", "tab:purple",
           "work done: accesses per second, all N (left)")
    rate.set_ylabel("accesses per second")
    rate.set_xlabel("N (concurrent work processes)")
    rate.set_ylim(bottom=0)
    rate.grid(alpha=0.3)
    faults = rate.twinx()
    spread(faults, table, "major", "o--", "tab:red", "major faults, all N (right)")
    faults.set_ylabel("major faults")
    faults.set_ylim(bottom=0)
    lines = rate.get_legend_handles_labels()[0] + faults.get_legend_handles_labels()[0]
    rate.legend(lines, [h.get_label() for h in lines], loc="upper left")
    rate.set_xticks(ns)
    fig.suptitle("Multiprogramming: CPU utilization against N\n" + machine(out, first),
                 fontsize=9.5)
    fig.tight_layout()
    fig.savefig(out / "multiprogramming.svg", metadata=METADATA)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    if repetitions(out, "thrash-rr") and repetitions(out, "thrash-rl"):
        thrashing_figure(out)
    if any((out / "data").glob("multi-*-r*")):
        multiprogramming(out)


if __name__ == "__main__":
    main()
