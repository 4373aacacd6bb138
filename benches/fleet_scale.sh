#!/bin/bash
# What a fleet monitor costs with N targets (docs/benchmarks.md, "A thousand targets"):
# N cgroup v2 directories under a fresh one below the cgroup2 mount, a sleeping process
# in each, one `monitor --cgroups-under DIR --max-targets N --period 1s --prometheus`
# over them. After every target is profiled and WARMUP seconds more, the monitor's
# utime + stime over MEASURE seconds (a share of one CPU), its resident memory and
# threads, the share of that CPU (from the threads' schedstat, which counts the short
# runs that ticks miss) of the targets' consumers, of the sampler thread, of the fleet's
# fault events' drain thread (none with --no-attribution, or where events do not open)
# and of the rest,
# and the time of a scrape of /metrics (the median of 5) and its size. Then the
# floor: what the least work a target needs a period takes over the same cgroups
# (benches/fleet_floor.c, built with cc: five rounds a second apart), at one round a
# second, "-" without a C compiler.
#
#   benches/fleet_scale.sh [N...]        (default: 100 1000; root: it makes cgroups)
#
# Prints one Markdown table row per N. Uses $MONITOR, else target/release/monitor (built
# if missing), given $MONITOR_FLAGS too (e.g. MONITOR_FLAGS=--no-attribution).
set -euo pipefail

WARMUP=${WARMUP:-10}
MEASURE=${MEASURE:-30}
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(100 1000)

cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "fleet_scale.sh: needs root, to make cgroups" >&2; exit 2; }
mount=$(awk '$3 == "cgroup2" { print $2; exit }' /proc/mounts)
[ -n "$mount" ] || { echo "fleet_scale.sh: no cgroup2 mount" >&2; exit 2; }
monitor=${MONITOR:-target/release/monitor}
[ -x "$monitor" ] || cargo build --release -q -p monitor --bin monitor
ticks=$(getconf CLK_TCK)
floor_bin=target/fleet_floor
mkdir -p target
if ! { command -v cc > /dev/null && cc -O2 -o "$floor_bin" benches/fleet_floor.c; }; then
    echo "fleet_scale.sh: no C compiler: the floor is not measured" >&2
    floor_bin=
fi

top=
monitor_pid=
cleanup() {
    [ -z "$monitor_pid" ] || kill "$monitor_pid" 2>/dev/null || true
    [ -z "$monitor_pid" ] || wait "$monitor_pid" 2>/dev/null || true
    monitor_pid=
    if [ -n "$top" ] && [ -d "$top" ]; then
        for dir in "$top"/t*; do
            [ -d "$dir" ] || continue
            xargs -r kill -9 < "$dir/cgroup.procs" 2>/dev/null || true
        done
        sleep 0.5
        for dir in "$top"/t*; do rmdir "$dir" 2>/dev/null || true; done
        rmdir "$top" 2>/dev/null || true
    fi
    top=
}
trap cleanup EXIT

# utime + stime of process $1, in clock ticks (fields 14 and 15, after the comm).
cpu_ticks() { sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
# The ns process $1's threads ran (schedstat), summed by role: "consumers sampler
# faults rest".
by_role() {
    for task in /proc/"$1"/task/*; do
        printf '%s %s\n' "$(cat "$task/comm")" "$(cut -d' ' -f1 "$task/schedstat")"
    done 2> /dev/null | awk '$1 == "pfprof-target" { c += $2; next }
        $1 == "pfprof-samplers" { s += $2; next }
        $1 == "pfprof-fleet-fa" { f += $2; next } { r += $2 }
        END { printf "%d %d %d %d\n", c, s, f, r }'
}
read -r -a monitor_flags <<<"${MONITOR_FLAGS:-}"

echo "| N | CPU, share of one | per target | resident | per target | threads | consumers / sampler / faults / rest | scrape | /metrics | floor |"
echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in "${counts[@]}"; do
    top="$mount/pfprof-scale-$$"
    mkdir "$top"
    for i in $(seq "$n"); do
        mkdir "$top/t$i"
        sleep 3600 < /dev/null > /dev/null 2>&1 &
        echo $! > "$top/t$i/cgroup.procs"
        disown
    done
    log=$(mktemp)
    "$monitor" --cgroups-under "$top" --max-targets "$n" --period 1s \
        --prometheus 127.0.0.1:0 --quiet "${monitor_flags[@]}" 2> "$log" &
    monitor_pid=$!
    address=
    for _ in $(seq 600); do
        address=$(sed -n 's|.*serving metrics at \(http://[^ ]*\)$|\1|p' "$log" | head -1)
        profiled=$(grep -c '^[^:]*: profiling ' "$log" || true)
        [ -n "$address" ] && [ "$profiled" -ge "$n" ] && break
        sleep 0.1
    done
    [ "$profiled" -ge "$n" ] || { echo "fleet_scale.sh: $profiled of $n targets profiled" >&2; cat "$log" >&2; exit 1; }
    sleep "$WARMUP"
    before=$(cpu_ticks "$monitor_pid")
    roles_before=$(by_role "$monitor_pid")
    sleep "$MEASURE"
    after=$(cpu_ticks "$monitor_pid")
    roles_after=$(by_role "$monitor_pid")
    rss_kib=$(awk '/^VmRSS:/ { print $2 }' "/proc/$monitor_pid/status")
    threads=$(awk '/^Threads:/ { print $2 }' "/proc/$monitor_pid/status")
    read -r scrapes size < <(python3 - "$address" <<'PY'
import sys, time, urllib.request
times = []
for _ in range(5):
    start = time.monotonic()
    body = urllib.request.urlopen(sys.argv[1]).read()
    times.append(time.monotonic() - start)
print(sorted(times)[2], len(body))
PY
)
    floor=-
    if [ -n "$floor_bin" ]; then
        # A floor that failed is said and left out; the monitor's figures still stand.
        if measured=$("$floor_bin" "$top" "$n" 5 1000); then
            floor=$(awk '{ printf "%.2f%%", $2 }' <<<"$measured")
        fi
    fi
    awk -v n="$n" -v d="$((after - before))" -v t="$ticks" -v m="$MEASURE" \
        -v rss="$rss_kib" -v th="$threads" -v s="$scrapes" -v b="$size" -v f="$floor" \
        -v rb="$roles_before" -v ra="$roles_after" 'BEGIN {
        cpu = d / t / m * 100
        split(rb, x, " "); split(ra, y, " ")
        for (i = 1; i <= 4; i++) share[i] = (y[i] - x[i]) / 1e9 / m * 100
        printf "| %d | %.2f%% | %.4f%% | %.1f MiB | %.0f KiB | %d | %.2f / %.2f / %.2f / %.2f%% | %.0f ms | %.0f KiB | %s |\n",
            n, cpu, cpu / n, rss / 1024, rss / n, th, share[1], share[2], share[3], share[4], s * 1000, b / 1024, f
    }'
    rm -f "$log"
    cleanup
done
