#!/usr/bin/env bash
# Reproduces docs/case-studies.md: boots Debian's cloud kernel under qemu TCG
# (tests/vm/lib.sh) with little memory and a swap disk, once per run, profiles
# `work` processes there with the pfprof module and `monitor run` (kernel
# backend, strict mode), brings each run's CSVs back on a second virtio disk
# (a raw tar archive), and draws the figures with plot.py.
#
#   docs/case-studies/reproduce.sh --kernel VERSION [RUN...]
#
# VERSION: the Debian cloud kernel to boot (its linux-image and linux-headers
# installed), as tests/vm/run.sh takes it; its virtio modules come along.
# RUN: thrash-rr thrash-rl multi-N (N in 1 5 11 16 20 22) timeline; default all
# of them but timeline. timeline: one work alone, then a second beside it for a
# while (both fit alone, not together): the figure README.md shows, the
# monitor's own timeline plot, copied to docs/figures/timeline.svg.
# Each run is repeated PFPROF_CASE_REPEAT times (default 3), in a fresh guest.
# Results: docs/figures/data/<run>-r<k>/ (samples.csv, machine.txt,
# experiment.log, vmstat.txt, cpu-stat.txt; monitor.svg for k = 1), the
# figures docs/figures/*.svg and the table docs/figures/multiprogramming.csv.
# Environment: CARGO_TARGET_DIR (default: target/), PFPROF_CASE_OUT (default
# docs/figures), PFPROF_CASE_VENV (a venv with matplotlib to reuse; default: a
# fresh one, from PyPI), PFPROF_CASE_BACKEND (the monitor's --backend: kernel,
# the default, or procfs). Needs what tests/vm/run.sh needs, binutils (strip)
# and python3 with venv. Took 16 to 25 minutes on 2 busy host CPUs.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"

out=${PFPROF_CASE_OUT:-$repo/docs/figures}

# The machine: 2 vCPUs (lib.sh), this much memory, a swap disk this large.
guest_mem=256M
swap_mib=1024
# A run that takes longer than this is cut short and fails.
run_timeout=900
# Every run is repeated: the host's other load makes TCG's speed vary.
repeat=${PFPROF_CASE_REPEAT:-3}

# Case study 1, scaled from the original's two `work 1024 ...` to two working
# sets that each fit in the guest's free memory but together do not.
thrash_mib=128
# Case study 2: `work 200 R 10000` scaled by 1/10 in memory and accesses (the
# same share of its pages touched per iteration); N = 11 of these need more
# than the guest's free memory.
multi_mib=20
multi_accesses=1000
multi_n=(1 5 11 16 20 22)
# The timeline: two works of this size, each fits alone, together they do not.
timeline_mib=120
backend=${PFPROF_CASE_BACKEND:-kernel}

declare -A runs=(
	[thrash-rr]="work $thrash_mib R 50000 & work $thrash_mib R 10000 &"
	[thrash-rl]="work $thrash_mib R 50000 & work $thrash_mib L 10000 &"
	[timeline]="work $timeline_mib R 20000 30 --sleep-ms 250 & sleep 3; work $timeline_mib R 20000 6 --sleep-ms 250 &"
)
order=(thrash-rr thrash-rl)
for n in "${multi_n[@]}"; do
	runs[multi-$n]="for i in \$(seq $n); do work $multi_mib R $multi_accesses & done;"
	order+=("multi-$n")
done

kernel=
selected=()
while (($#)); do
	case $1 in
	--kernel) kernel=${2-}; (($# > 1)) && shift ;;
	--kernel=*) kernel=${1#--kernel=} ;;
	*) selected+=("$1") ;;
	esac
	shift
done
[[ $kernel != debug ]] || vm_die "the case studies boot a Debian kernel (their swap disk needs its virtio modules)"
((${#selected[@]})) || selected=("${order[@]}")
for r in "${selected[@]}"; do
	[[ -n ${runs[$r]-} ]] || vm_die "unknown run $r (one of: ${order[*]})"
done

vm_select_kernel "$kernel"
command -v strip >/dev/null || vm_die "strip not found: apt-get install binutils"
work=$(mktemp -d /tmp/pfprof-case.XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "reproduce.sh: kernel $vm_kver, qemu TCG, 2 vCPUs, $guest_mem memory, $swap_mib MiB swap"
vm_build_module "$work"
vm_build_static -p monitor

# The initramfs: the case-study init, the module, monitor and work (stripped:
# the initramfs lives in the guest's memory) and the virtio block driver.
root=$work/root
vm_stage_root "$root" "$here/guest-init.sh"
strip "$root/bin/monitor" "$root/bin/work"
mkdir -p "$root/modules"
for m in virtio/virtio_ring virtio/virtio virtio/virtio_pci_modern_dev \
	virtio/virtio_pci_legacy_dev virtio/virtio_pci block/virtio_blk; do
	vm_kernel_module "drivers/$m" "$root/modules"
done

# The host, for the figures' captions.
mkdir -p "$out/data"
{
	echo "host_cpu $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"
	echo "host_cpus $(nproc)"
	echo "qemu $(qemu-system-x86_64 --version | head -n 1)"
	echo "guest_mem $guest_mem"
	echo "swap_mib $swap_mib"
	# The code that produced the figures (+dirty: uncommitted changes).
	echo "commit $(git -C "$repo" describe --always --dirty=+dirty 2>/dev/null || echo unknown)"
	echo "date $(date -u '+%F %T UTC')"
} >"$out/data/host.txt"

# case_run RUN K: boot a fresh guest whose /experiment profiles RUN's commands,
# and unpack what it brings back into $out/data/RUN-rK.
case_run() {
	local name=$1 log=$work/$1-r$2.console plot=
	# The monitor's own plot of the first run of each: enough to look at.
	(($2 == 1)) && plot="--plot monitor.svg "
	cat >"$root/experiment" <<-EOF
		set -x
		monitor run --backend $backend --mode strict --output samples.csv $plot\\
			-- sh -c '${runs[$name]} wait'
	EOF
	vm_pack "$root" "$work/initramfs.cpio.gz"
	rm -f "$work/swap.img" "$work/results.img"
	truncate -s "${swap_mib}M" "$work/swap.img"
	truncate -s 64M "$work/results.img"
	local start=$SECONDS rc=0
	# softlockup_panic: a guest stuck in its kernel fails the run at once,
	# with the stack on the console.
	vm_boot "$work/initramfs.cpio.gz" "$log" "$run_timeout" "$guest_mem" \
		"loglevel=5 softlockup_panic=1" \
		-drive "file=$work/swap.img,if=none,id=swap,format=raw" \
		-device virtio-blk-pci,drive=swap,serial=swap \
		-drive "file=$work/results.img,if=none,id=results,format=raw" \
		-device virtio-blk-pci,drive=results,serial=results >/dev/null || rc=$?
	local dir=$out/data/$name-r$2
	rm -rf "$dir" && mkdir -p "$dir"
	if ! grep -q '^PFPROF-RESULTS-WRITTEN$' "$log" || ! tar xf "$work/results.img" -C "$dir"; then
		cp "$log" "$dir/console.log"
		echo "reproduce.sh: $name brought no results back (qemu status $rc); console in $dir/console.log, its last lines:" >&2
		tail -n 40 "$log" | sed 's/^/    /' >&2
		exit 1
	fi
	echo "reproduce.sh: $name (run $2 of $repeat) done in $((SECONDS - start)) s"
	grep -E '^(  (duration|minor faults|major faults|CPU time) |work: )' "$dir/experiment.log" | sed 's/^ */    /'
}

for r in "${selected[@]}"; do
	rm -rf "$out/data/$r"-r*
	for ((k = 1; k <= repeat; k++)); do
		case_run "$r" "$k"
	done
done
# The timeline figure is the monitor's own plot of that run.
if [[ -e $out/data/timeline-r1/monitor.svg ]]; then
	cp "$out/data/timeline-r1/monitor.svg" "$out/timeline.svg"
fi

# The figures, from every run's samples.
venv=${PFPROF_CASE_VENV:-$work/venv}
if [[ ! -x $venv/bin/python3 ]]; then
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q 'matplotlib>=3.7,<4'
fi
"$venv/bin/python3" "$here/plot.py" "$out"
