#!/usr/bin/env bash
# The VM test: build pfprof.ko against the chosen kernel, build the guest tests
# and the monitor and work binaries statically, boot that kernel under qemu
# (TCG) with an initramfs holding them, run the tests inside and report one
# line per test and "N passed, M failed"; exit 0 only if all passed and the
# kernel log has no report from any of the kernel's checkers.
#
#   tests/vm/run.sh --kernel KERNEL [--arch ARCH] [--root DIR [--packaged]] [--module FILE] [--boots N] [--load[=beside]] [--keep] [FILTER...]
#
# KERNEL: a Debian kernel version with its headers installed (for example
# 6.1.0-28-cloud-amd64; run.sh lists those it finds when it is missing), or
# "debug": the kernel tests/vm/debug-kernel.sh builds with KASAN, lockdep,
# kmemleak, KFENCE and UBSAN, where the suite ends with two kmemleak scans.
# --arch arm64: KERNEL is a Debian arm64 kernel tests/vm/arm64-kernel.sh
# fetched (it prints the version); the module and the guest's binaries are
# cross-built for it and qemu-system-aarch64 boots it. amd64 by default.
# --root DIR: the kernel and its headers are installed in the Debian root DIR
# (tests/vm/debian-root.sh), and the module is built inside it.
# --packaged: the guest's monitor and work are the pfprof package's, as
# installed in the --root DIR (/usr/bin/pfprof and pfprof-work, run there as
# /bin/monitor and /bin/work, with their shared libraries; tests/package/run.sh
# installs it), instead of the ones run.sh builds.
# --module FILE: boot FILE (the module DKMS built and installed for KERNEL)
# instead of the one run.sh builds; run.sh still builds one, to check that
# the build is warning-free.
# --boots N: boot the suite N times (each judged as one run), and count how
# the boots ended: clean, crashed before the module was ever loaded, crashed
# with it loaded, failed otherwise; what docs/reliability.md's emulator
# figures come from.
# --load: run the suite on a loaded machine, as users' machines are: two busy
# loops on the host beside qemu, a process rewriting 2 GiB of memory over and
# over, a writer of a 1 GiB file to disk every 5 s or so and the page cache
# dropped every 5 s; in the guest two busy loops, a process keeping a quarter
# of its memory dirty (pfprof-guest hog), a writer of a 32 MiB file every
# 2 s or so and the page cache dropped every 2 s; all at the tests' own
# priority.
# --load=beside: the same, but for the host's busy loops: whatever runs beside
# run.sh keeps the host's CPUs busy (.ci/run's other lanes and builds, then
# busy loops of its own until this lane ends).
# FILTER: run only tests whose name contains one of these substrings; -WORD:
# leave out the tests whose name contains WORD.
# --keep: keep the work directory (initramfs, console log) and print its path.
# Environment: CARGO_TARGET_DIR (default: target/), PFPROF_VM_TIMEOUT (s; 600,
# 2400 for the debug kernel), PFPROF_SEED (replay the randomized tests with the
# seed a failure printed).
# Needs: qemu-system-x86 busybox-static cpio, a Rust toolchain with
# x86_64-unknown-linux-gnu, and the kernel: linux-image-VERSION and
# linux-headers-VERSION, or what tests/vm/debug-kernel.sh needs; for arm64,
# qemu-system-arm gcc-aarch64-linux-gnu cpio and Rust's
# aarch64-unknown-linux-gnu instead.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"
keep=0
kernel=
arch=amd64
kernel_root=
module=
packaged=0
boots=1
load=
filters=()
while (($#)); do
	case $1 in
	--keep) keep=1 ;;
	--kernel) kernel=${2-}; (($# > 1)) && shift ;;
	--kernel=*) kernel=${1#--kernel=} ;;
	--arch) arch=${2-}; (($# > 1)) && shift ;;
	--root) kernel_root=${2-}; (($# > 1)) && shift ;;
	--module) module=${2-}; (($# > 1)) && shift ;;
	--packaged) packaged=1 ;;
	--boots) boots=${2-}; (($# > 1)) && shift ;;
	--load) load=host ;;
	--load=beside) load=beside ;;
	-h | --help) sed -n '2,47p' "$0"; exit 0 ;;
	*) filters+=("$1") ;;
	esac
	shift
done

[[ $boots =~ ^[1-9][0-9]*$ ]] || vm_die "--boots takes a positive number"
((!packaged)) || [[ -n $kernel_root ]] || vm_die "--packaged takes the package's monitor from the --root DIR: give one"
# Absolute: the module's tree is copied into the root and built there by path.
[[ -z $kernel_root ]] || kernel_root=$(cd "$kernel_root" && pwd) || vm_die "no root $kernel_root"
vm_select_kernel "$kernel" "$kernel_root" "$arch"
# A hung guest (a deadlock in the module) fails the run after this long.
# A loaded machine runs the suite at a fraction of the speed.
if ((vm_debug)); then vm_timeout=${PFPROF_VM_TIMEOUT:-2400}; elif [[ -n $load ]]; then vm_timeout=${PFPROF_VM_TIMEOUT:-1800}; else vm_timeout=${PFPROF_VM_TIMEOUT:-600}; fi

work=$(mktemp -d /tmp/pfprof-vm.XXXXXX)
hogs=()
cleanup() {
	((${#hogs[@]} == 0)) || kill "${hogs[@]}" 2>/dev/null || true
	if ((keep)); then echo "run.sh: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

echo "run.sh: kernel $vm_kver${vm_root:+ (from $vm_root)}, $("${vm_qemu[0]}" --version | head -n 1)"

vm_build_module "$work"
[[ -z $module ]] || vm_use_module "$module" "$work"
if ((packaged)); then
	vm_use_packaged "$kernel_root"
	vm_build_static -p pfprof-vm-guest
	echo "run.sh: the guest's monitor and work: $kernel_root/usr/bin/pfprof and pfprof-work ($(vm_in_root "$kernel_root" pfprof --version))"
else
	vm_build_static -p pfprof-vm-guest -p monitor
fi

# The initramfs: busybox, /init, the module, monitor, work and the guest tests.
root=$work/root
vm_stage_root "$root" "$repo/tests/vm/initramfs/init"
cp "$vm_bins/pfprof-guest" "$root/pfprof-guest"
# Swap on zram for the thrashing tests, where zram is a module (the debug
# kernel has it built in): in /modules, /modules/order says in which order to
# load them. 6.1's zram compresses with lzo-rle through the crypto API, a
# module of its own there.
if [[ -n $vm_modules ]]; then
	mkdir -p "$root/modules"
	if compgen -G "$vm_modules/kernel/crypto/lzo-rle.ko*" >/dev/null; then
		vm_kernel_module_deps crypto/lzo-rle "$root/modules"
	fi
	vm_kernel_module_deps drivers/block/zram/zram "$root/modules"
fi
printf '%s\n' "${filters[*]-}" >"$root/test-filter"
vm_pack "$root" "$work/initramfs.cpio.gz"

# The checkers every kernel gets: full preemption (races show up; the race
# tests rely on it) where the kernel can switch to it at boot (Debian's amd64
# kernels; the debug kernel is built preemptible, Debian's arm64 kernels stay
# with voluntary preemption, without PREEMPT_DYNAMIC), slub_debug
# (redzones, poisoning, user tracking: the tests count the module's live
# objects by it), the hung-task detector at 20 s instead of 120, freed pages
# zeroed. Debian's cloud kernels also have DEBUG_LIST, BUG_ON_DATA_CORRUPTION,
# HARDENED_USERCOPY and the lockup detectors; the debug kernel adds KASAN,
# lockdep, kmemleak, KFENCE (sampling every 10 ms instead of 100) and UBSAN,
# and more memory for their shadow and metadata. Without ACPI it has no HPET
# or PM timer, only the PIT, to calibrate the TSC against and to fall back on:
# under a loaded host the calibration failed once ("could not calculate TSC
# khz") and the watchdog demoted the TSC once, each time leaving the guest on
# the jiffies clocksource, hrtimers at tick resolution. TCG's guest TSC is the
# host's (qemu reads the host's), so the guest is told its frequency
# (tsc_early_khz, from the host's cpu MHz) and that it is reliable.
# PFPROF_SEED=<n> replays the randomized tests (it reaches the guest's
# environment as an unknown kernel parameter). psi=1: the thrashing tests read
# memory pressure, which a kernel built with PSI_DEFAULT_DISABLED keeps off
# without it.
checkers="slub_debug=FZPU sysctl.kernel.hung_task_timeout_secs=20 init_on_free=1 psi=1"
if grep -qx CONFIG_PREEMPT_DYNAMIC=y "$vm_root$vm_kdir/.config"; then
	checkers="preempt=full $checkers"
elif ! grep -qx CONFIG_PREEMPT=y "$vm_root$vm_kdir/.config"; then
	echo "run.sh: $vm_kver cannot be made fully preemptible; the races are tried under voluntary preemption"
fi
# The load (--load): the guest's /init starts its own when the kernel's command
# line says pfprof_load=1; the host's run beside qemu until run.sh exits (its
# busy loops only with --load, not --load=beside).
if [[ -n $load ]]; then
	checkers+=" pfprof_load=1"
	if [[ $load == host ]]; then
		for _ in 1 2; do
			bash -c 'while :; do :; done' &
			hogs+=($!)
		done
	fi
	python3 -c '
import time
block = bytearray(2 << 30)
while True:
    for i in range(0, len(block), 4096):
        block[i] = (block[i] + 1) & 0xff
    time.sleep(0.1)
' &
	hogs+=($!)
	# A build writing to disk, and the page cache dropped now and then, as a
	# user's machine has them.
	bash -c 'while :; do dd if=/dev/zero of="$1" bs=1M count=1024 conv=fsync status=none; rm -f "$1"; sleep 5; done' \
		writer "$work/load-writer" &
	hogs+=($!)
	if [[ -w /proc/sys/vm/drop_caches ]]; then
		bash -c 'while sleep 5; do echo 1 >/proc/sys/vm/drop_caches; done' &
		hogs+=($!)
	fi
	if [[ $load == host ]]; then
		echo "run.sh: loaded: two busy loops, 2 GiB rewritten, a 1 GiB writer and the page cache dropped every 5 s on the host, the same in the guest"
	else
		echo "run.sh: loaded: 2 GiB rewritten, a 1 GiB writer and the page cache dropped every 5 s on the host and what runs beside run.sh; busy loops, dirty memory, a writer and page-cache drops in the guest"
	fi
fi
mem=1G
if ((vm_debug)); then
	checkers+=" kfence.sample_interval=10 tsc=reliable"
	host_tsc_khz=$(awk -F': *' '/^cpu MHz/ { printf "%d", $2 * 1000; exit }' /proc/cpuinfo)
	[[ -z $host_tsc_khz || $host_tsc_khz == 0 ]] || checkers+=" tsc_early_khz=$host_tsc_khz"
	mem=2G
fi

# boot_and_judge LOG: one boot of the suite; prints each test's line and the
# run's own checks, sets passed, failed and crash (how the kernel's first
# report came, if it made one), and returns 0 when everything passed.
boot_and_judge() {
	local log=$1 summary verdict qemu_rc
	crash=
	set +e
	vm_boot "$work/initramfs.cpio.gz" "$log" "$vm_timeout" "$mem" \
		"$checkers loglevel=4${PFPROF_SEED:+ PFPROF_SEED=$PFPROF_SEED}" |
		grep --line-buffered -E '^(ok   |FAIL |skip |  \| )'
	qemu_rc=${PIPESTATUS[0]}
	set -e

	if ((qemu_rc == 124)); then
		echo "run.sh: the VM did not finish within $vm_timeout s" >&2
	fi

	# The guest's verdict and its counts.
	summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -1 || true)
	verdict=$(sed -n 's/^PFPROF-VERDICT \([0-9]*\)$/\1/p' "$log" | tail -1)
	passed=0 failed=1 skipped=0
	if [[ -n $summary ]]; then
		read -r passed _ failed _ skipped _ <<<"$summary"
	else
		echo "FAIL the guest did not finish its tests; the console's last lines:"
		tail -n 30 "$log" | sed 's/^/    /'
	fi
	[[ $verdict == 0 ]] || { [[ -z $summary ]] || ((failed > 0)) || failed=1; }

	# The debug kernel's suite must have ended with its kmemleak scans.
	if ((vm_debug)) && ! grep -q '^ok   kmemleak_' "$log"; then
		echo "FAIL the debug kernel's suite did not run its kmemleak scans"
		failed=$((failed + 1))
	fi

	# The kernel must not have complained, whatever the tests saw: BUG (KASAN,
	# KFENCE, sleeping in atomic context), WARNING (lockdep), UBSAN, hung tasks,
	# RCU stalls, slub_debug.
	if grep -E 'BUG[: ]|WARNING:|Oops|KASAN|KFENCE|UBSAN|general protection|Kernel panic|INFO: task .* blocked|INFO: trying to register non-static key|detected stalls|soft lockup|=====+$|Redzone|Poison overwritten|Object padding|slab error' "$log" \
		| grep -v '^PFPROF-' >"$work/kernel-complaints.txt"; then
		echo "FAIL kernel log is free of reports from the kernel's checkers:"
		head -n 40 "$work/kernel-complaints.txt" | sed 's/^/    /'
		failed=$((failed + 1))
	elif ! grep -q '^PFPROF-DMESG-END$' "$log"; then
		# Without the whole kernel log a report may have gone unseen.
		echo "FAIL kernel log is free of reports from the kernel's checkers: the guest never dumped it whole"
		failed=$((failed + 1))
	else
		echo "ok   kernel log is free of reports from the kernel's checkers"
		passed=$((passed + 1))
	fi

	# A crash is reported for what it is, and fails the run either way.
	if [[ -z $summary || -s $work/kernel-complaints.txt ]] && crash=$(vm_crash_origin "$log"); then
		echo "run.sh: the kernel's first report came $crash" >&2
	fi

	echo "$passed passed, $failed failed, $skipped skipped"
	((failed == 0)) && [[ $verdict == 0 ]]
}

if ((boots == 1)); then
	boot_and_judge "$work/console.log"
	exit
fi
# The emulator's reliability (docs/reliability.md, "The emulator"): the same
# initramfs booted again and again, each boot judged as above and counted
# by how it ended.
clean=0 before=0 with=0 other=0
for ((i = 1; i <= boots; i++)); do
	echo "run.sh: boot $i of $boots"
	if boot_and_judge "$work/console-$i.log"; then
		clean=$((clean + 1))
	elif [[ $crash == before* ]]; then
		before=$((before + 1))
	elif [[ -n $crash ]]; then
		with=$((with + 1))
	else
		other=$((other + 1))
	fi
done
echo "run.sh: $boots boots of $vm_kver: $clean clean, $before crashed before pfprof.ko was loaded, $with crashed with it loaded, $other failed otherwise"
((clean == boots))
