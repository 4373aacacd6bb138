"""Draws the case-study figures from the runs reproduce.sh brought back.

    plot.py OUT

OUT/data/<run>/ holds each run's samples.csv (the monitor's per-sample deltas),
experiment.log (the commands, work's own counts and the monitor's summary),
machine.txt, vmstat.txt and cpu-stat.txt (from the guest); OUT/data/host.txt describes the
host. Writes OUT/thrashing.svg, OUT/multiprogramming.svg and
OUT/multiprogramming.csv (one row per N).
"""

import csv
import re
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


def samples(run):
    with open(run / "samples.csv", newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


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
    pct = lambda ticks: round(100 * cpus * ticks / total, 2)  # noqa: E731
    return {
        "guest_user_pct": pct(user + nice),
        "guest_system_pct": pct(system + irq + softirq),
        "guest_iowait_pct": pct(iowait),
        "guest_idle_pct": pct(idle),
    }


def commands(run):
    """The workload line of the run's `monitor run` command, as the guest ran it."""
    text = (run / "experiment.log").read_text()
    return re.search(r"sh -c '(.*) wait'", text).group(1).rstrip(" &;")


def workload(run):
    """Iterations and accesses per iteration of one `work` of the run."""
    m = re.search(r"^work: (\d+) iterations of (\d+) accesses", (run / "experiment.log").read_text(), re.M)
    return int(m.group(1)), int(m.group(2))


def accumulated(rows, key):
    total, out = 0, []
    for r in rows:
        total += r[key]
        out.append(total)
    return out


def thrashing(out):
    runs = [
        ("thrash-rr", "random vs random"),
        ("thrash-rl", "random vs locality"),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.6), sharey=True)
    for ax, (name, title) in zip(axes, runs):
        run = out / "data" / name
        rows = samples(run)
        t = [r["time_ms"] / 1e3 for r in rows]
        ax.plot(t, accumulated(rows, "minor"), color="tab:blue", lw=2, label="minor faults")
        ax.plot(t, accumulated(rows, "major"), color="tab:red", lw=2, label="major faults")
        ax.set_title(f"{title}\n{commands(run)}", fontsize=11)
        ax.set_xlabel("time (s)")
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left")
    axes[0].set_ylabel("accumulated faults, both processes")
    axes[0].ticklabel_format(axis="y", style="plain")
    fig.suptitle(
        "Thrashing and locality: two work processes in too little memory\n"
        + machine(out, out / "data" / runs[0][0]),
        fontsize=9.5,
    )
    fig.tight_layout()
    fig.savefig(out / "thrashing.svg", metadata=METADATA)


def multiprogramming(out):
    runs = sorted(
        (p for p in (out / "data").glob("multi-*") if (p / "samples.csv").exists()),
        key=lambda p: int(p.name.split("-")[1]),
    )
    table = []
    for run in runs:
        s = summary(run)
        vm = key_values(run / "vmstat.txt")
        n = int(run.name.split("-")[1])
        iterations, accesses = workload(run)
        table.append(
            {
                "n": n,
                "duration_s": s["duration_s"],
                "cpu_s": s["cpu_s"],
                "cpu_util_pct": round(100 * s["cpu_s"] / s["duration_s"], 2),
                "accesses_per_s": round(n * iterations * accesses / s["duration_s"]),
                "minor": s["minor"],
                "major": s["major"],
                "pswpin": int(vm["pswpin"]),
                "pswpout": int(vm["pswpout"]),
                "samples_lost": s["lost"],
                **cpu_breakdown(run),
            }
        )
    with open(out / "multiprogramming.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(table[0]))
        w.writeheader()
        w.writerows(table)

    n = [r["n"] for r in table]
    fig, (util, split, rate) = plt.subplots(3, 1, figsize=(10, 12), sharex=True)
    util.plot(n, [r["cpu_util_pct"] for r in table], "o-", color="tab:green", lw=2)
    for x, r in zip(n, table):
        util.annotate(f"{r['cpu_util_pct']:.1f}%", (x, r["cpu_util_pct"]),
                      textcoords="offset points", xytext=(0, 8), ha="center", fontsize=9)
    util.set_ylabel("CPU utilization of the N processes\n(pfprof samples; % of one CPU)")
    util.set_ylim(0, 200)
    util.axhline(200, color="gray", ls=":")
    util.grid(alpha=0.3)
    util.set_title(f"N concurrent: {commands(runs[-1]).split('; do ')[1].rstrip(' &; done')}",
                   fontsize=11)

    bottom = [0.0] * len(table)
    width = 1.2
    for key, label, color in [
        ("guest_user_pct", "user", "tab:green"),
        ("guest_system_pct", "system (incl. irq)", "tab:orange"),
        ("guest_iowait_pct", "iowait", "tab:red"),
        ("guest_idle_pct", "idle", "lightgray"),
    ]:
        values = [r[key] for r in table]
        split.bar(n, values, width, bottom=bottom, color=color, label=label)
        bottom = [b + v for b, v in zip(bottom, values)]
    split.set_ylabel("whole guest's CPU time\n(/proc/stat; % of one CPU)")
    split.set_ylim(0, 200)
    split.legend(loc="upper left", ncols=4, fontsize=9)

    rate.plot(n, [r["accesses_per_s"] for r in table], "s-", color="tab:purple", lw=2,
              label="work done: accesses per second, all N (left)")
    rate.set_ylabel("accesses per second")
    rate.set_xlabel("N (concurrent work processes)")
    rate.set_ylim(bottom=0)
    rate.grid(alpha=0.3)
    faults = rate.twinx()
    faults.plot(n, [r["major"] for r in table], "o--", color="tab:red", lw=2,
                label="major faults, all N (right)")
    faults.set_ylabel("major faults")
    faults.set_ylim(bottom=0)
    lines = rate.get_legend_handles_labels()[0] + faults.get_legend_handles_labels()[0]
    rate.legend(lines, [h.get_label() for h in lines], loc="upper left")
    rate.set_xticks(n)
    fig.suptitle(
        "Multiprogramming: CPU utilization against N\n" + machine(out, runs[0]),
        fontsize=9.5,
    )
    fig.tight_layout()
    fig.savefig(out / "multiprogramming.svg", metadata=METADATA)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out = Path(sys.argv[1])
    if (out / "data" / "thrash-rr").exists() and (out / "data" / "thrash-rl").exists():
        thrashing(out)
    if any((out / "data").glob("multi-*")):
        multiprogramming(out)


if __name__ == "__main__":
    main()
