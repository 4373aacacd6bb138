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
# Environment: CARGO_TARGET_DIR (default: target/), PFPROF_VM_TIMEOUT (s, 300).
# Needs: linux-image-cloud-amd64 linux-headers-cloud-amd64 qemu-system-x86
#        busybox-static cpio, and a Rust toolchain with x86_64-unknown-linux-gnu.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# A hung guest (a deadlock in the module) fails the run after this long.
vm_timeout=${PFPROF_VM_TIMEOUT:-300}
keep=0
filters=()
for arg in "$@"; do
	case $arg in
	--keep) keep=1 ;;
	-h | --help) sed -n '2,14p' "$0"; exit 0 ;;
	*) filters+=("$arg") ;;
	esac
done

die() { echo "run.sh: $*" >&2; exit 2; }

# The kernel: the newest cloud-amd64 image that has headers, found by glob.
kver=$(for img in /boot/vmlinuz-*-cloud-amd64; do
	v=${img#/boot/vmlinuz-}
	if [[ -e $img && -d /usr/src/linux-headers-$v ]]; then echo "$v"; fi
done | sort -V | tail -n 1)
[[ -n $kver ]] || die "no /boot/vmlinuz-*-cloud-amd64 with matching /usr/src/linux-headers-*: apt-get install linux-image-cloud-amd64 linux-headers-cloud-amd64"
[[ -r /boot/vmlinuz-$kver ]] || die "/boot/vmlinuz-$kver is not readable"
busybox=$(command -v busybox) || die "busybox not found: apt-get install busybox-static"
# ldd fails on a static binary; the initramfs has no libc for a dynamic one.
if ldd "$busybox" >/dev/null 2>&1; then die "$busybox is not static: apt-get install busybox-static"; fi
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: apt-get install qemu-system-x86"
command -v cpio >/dev/null || die "cpio not found: apt-get install cpio"

work=$(mktemp -d /tmp/pfprof-vm.XXXXXX)
cleanup() { if ((keep)); then echo "run.sh: kept $work"; else rm -rf "$work"; fi; }
trap cleanup EXIT

echo "run.sh: kernel $kver"

# The module, built from the same self-contained tree DKMS gets, so the
# source tree stays clean and the DKMS layout is tested too.
make -s -C "$repo/kmod" dkms-src DKMS_SRC="$work/kmod"
make -s -C "$work/kmod" KDIR="/usr/src/linux-headers-$kver" W=1 >"$work/kmod-build.log" 2>&1 ||
	{ cat "$work/kmod-build.log"; die "module build failed"; }
if grep -E 'warning:|error:' "$work/kmod-build.log"; then
	die "module build is not warning-free"
fi

# The guest tests and the user's binaries (monitor, work), static so the
# initramfs needs no libc.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$repo/target}
RUSTFLAGS="-C target-feature=+crt-static" cargo build -q --release \
	--manifest-path "$repo/Cargo.toml" -p pfprof-vm-guest -p monitor \
	--target x86_64-unknown-linux-gnu
bins=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release

# The initramfs: busybox, /init, the module and the test binary.
root=$work/root
mkdir -p "$root"/{bin,dev,proc,sys,tmp}
cp "$busybox" "$root/bin/busybox"
cp "$repo/tests/vm/initramfs/init" "$root/init"
cp "$work/kmod/pfprof.ko" "$root/pfprof.ko"
cp "$bins/pfprof-guest" "$root/pfprof-guest"
cp "$bins/monitor" "$bins/work" "$root/bin/"
printf '%s\n' "${filters[*]-}" >"$root/test-filter"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initramfs.cpio.gz"

# Boot.  TCG: nested KVM is not available (or hangs) on CI machines.
log=$work/console.log
set +e
timeout --foreground "$vm_timeout" qemu-system-x86_64 -accel tcg -m 1G -smp 2 \
	-nographic -no-reboot -kernel "/boot/vmlinuz-$kver" \
	-initrd "$work/initramfs.cpio.gz" \
	-append "console=ttyS0 panic=-1 slub_debug=FZPU loglevel=4 rdinit=/init" \
	</dev/null 2>&1 | tr -d '\r' | tee "$log" | grep --line-buffered -E '^(ok   |FAIL )'
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
if grep -E 'BUG[: ]|WARNING:|Oops|KASAN|general protection|Kernel panic|INFO: task .* blocked|=====+$|Redzone|Poison overwritten|Object padding|slab error' "$log" \
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
