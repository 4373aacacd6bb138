#!/usr/bin/env bash
# The VM test: build pfprof.ko against Debian's cloud kernel headers, build the
# guest tests and the monitor and work binaries statically, boot that kernel
# under qemu (TCG) with an initramfs holding them, run the tests inside and
# report one line per test and "N passed, M failed"; exit 0 only if all passed
# and the kernel log has no BUG, WARNING, Oops or slub report.
#
#   tests/vm/run.sh [--keep] [FILTER...]
#
# FILTER: run only tests whose name contains one of these substrings.
# --keep: keep the work directory (initramfs, console log) and print its path.
# Environment: CARGO_TARGET_DIR (default: target/), PFPROF_VM_TIMEOUT (s, 300),
# PFPROF_SEED (replay the randomized tests with the seed a failure printed).
# Needs: linux-image-cloud-amd64 linux-headers-cloud-amd64 qemu-system-x86
#        busybox-static cpio, and a Rust toolchain with x86_64-unknown-linux-gnu.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"
# A hung guest (a deadlock in the module) fails the run after this long.
vm_timeout=${PFPROF_VM_TIMEOUT:-300}
keep=0
filters=()
for arg in "$@"; do
	case $arg in
	--keep) keep=1 ;;
	-h | --help) sed -n '2,15p' "$0"; exit 0 ;;
	*) filters+=("$arg") ;;
	esac
done

vm_check_host

work=$(mktemp -d /tmp/pfprof-vm.XXXXXX)
cleanup() { if ((keep)); then echo "run.sh: kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT

echo "run.sh: kernel $vm_kver"

vm_build_module "$work"
vm_build_static -p pfprof-vm-guest -p monitor

# The initramfs: busybox, /init, the module, monitor, work and the guest tests.
root=$work/root
vm_stage_root "$root" "$repo/tests/vm/initramfs/init" "$work"
cp "$vm_bins/pfprof-guest" "$root/pfprof-guest"
printf '%s\n' "${filters[*]-}" >"$root/test-filter"
vm_pack "$root" "$work/initramfs.cpio.gz"

log=$work/console.log
set +e
# The kernel's checkers this cloud kernel has (no lockdep, kmemleak, KASAN
# or page poisoning in its config): full preemption (races show up; the
# race tests rely on it), slub_debug (redzones, poisoning, user tracking:
# the tests count the module's live objects by it), the hung-task
# detector at 20 s instead of 120, freed pages zeroed; DEBUG_LIST,
# BUG_ON_DATA_CORRUPTION, HARDENED_USERCOPY and the lockup detectors are on.
# PFPROF_SEED=<n> replays the randomized tests (it reaches the guest's
# environment as an unknown kernel parameter).
checkers="preempt=full slub_debug=FZPU sysctl.kernel.hung_task_timeout_secs=20 init_on_free=1"
vm_boot "$work/initramfs.cpio.gz" "$log" "$vm_timeout" 1G \
	"$checkers loglevel=4${PFPROF_SEED:+ PFPROF_SEED=$PFPROF_SEED}" |
	grep --line-buffered -E '^(ok   |FAIL |  \| )'
qemu_rc=${PIPESTATUS[0]}
set -e

if ((qemu_rc == 124)); then
	echo "run.sh: the VM did not finish within $vm_timeout s" >&2
fi

# The guest's verdict and its counts.
summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1 || true)
verdict=$(sed -n 's/^PFPROF-VERDICT \([0-9]*\)$/\1/p' "$log" | tail -1)
passed=0 failed=1
if [[ -n $summary ]]; then
	read -r passed _ failed _ <<<"$summary"
else
	echo "FAIL the guest did not finish its tests; the console's last lines:"
	tail -n 30 "$log" | sed 's/^/    /'
fi
[[ $verdict == 0 ]] || { [[ -z $summary ]] || ((failed > 0)) || failed=1; }

# The kernel must not have complained, whatever the tests saw.
if grep -E 'BUG[: ]|WARNING:|Oops|KASAN|general protection|Kernel panic|INFO: task .* blocked|detected stalls|=====+$|Redzone|Poison overwritten|Object padding|slab error' "$log" \
	| grep -v '^PFPROF-' >"$work/kernel-complaints.txt"; then
	echo "FAIL kernel log is free of BUG, WARNING, Oops and slub reports:"
	head -n 40 "$work/kernel-complaints.txt" | sed 's/^/    /'
	failed=$((failed + 1))
else
	echo "ok   kernel log is free of BUG, WARNING, Oops and slub reports"
	passed=$((passed + 1))
fi

echo "$passed passed, $failed failed"
((failed == 0)) && [[ $verdict == 0 ]]
