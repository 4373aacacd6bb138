# Shared steps of the scripts that boot pfprof in a VM (tests/vm/run.sh,
# docs/case-studies/reproduce.sh): find the host's cloud kernel and tools,
# build the module and the static binaries, pack an initramfs, boot it under
# qemu TCG.  Source it from bash with `set -euo pipefail`; errors exit 2 with
# the calling script's name.

vm_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

vm_die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# Sets vm_kver (the newest cloud-amd64 kernel that has headers, found by glob)
# and vm_busybox; checks that qemu and cpio are there.
vm_check_host() {
	vm_kver=$(for img in /boot/vmlinuz-*-cloud-amd64; do
		local v=${img#/boot/vmlinuz-}
		if [[ -e $img && -d /usr/src/linux-headers-$v ]]; then echo "$v"; fi
	done | sort -V | tail -n 1)
	[[ -n $vm_kver ]] || vm_die "no /boot/vmlinuz-*-cloud-amd64 with matching /usr/src/linux-headers-*: apt-get install linux-image-cloud-amd64 linux-headers-cloud-amd64"
	[[ -r /boot/vmlinuz-$vm_kver ]] || vm_die "/boot/vmlinuz-$vm_kver is not readable"
	vm_busybox=$(command -v busybox) || vm_die "busybox not found: apt-get install busybox-static"
	# ldd fails on a static binary; the initramfs has no libc for a dynamic one.
	if ldd "$vm_busybox" >/dev/null 2>&1; then vm_die "$vm_busybox is not static: apt-get install busybox-static"; fi
	command -v qemu-system-x86_64 >/dev/null || vm_die "qemu-system-x86_64 not found: apt-get install qemu-system-x86"
	command -v cpio >/dev/null || vm_die "cpio not found: apt-get install cpio"
}

# vm_build_module WORK: WORK/kmod/pfprof.ko, built from the same
# self-contained tree DKMS gets, so the source tree stays clean and the DKMS
# layout is tested too.  W=1, and any warning fails.
vm_build_module() {
	local work=$1
	make -s -C "$vm_repo/kmod" dkms-src DKMS_SRC="$work/kmod"
	make -s -C "$work/kmod" KDIR="/usr/src/linux-headers-$vm_kver" W=1 >"$work/kmod-build.log" 2>&1 ||
		{ cat "$work/kmod-build.log"; vm_die "module build failed"; }
	if grep -E 'warning:|error:' "$work/kmod-build.log"; then
		vm_die "module build is not warning-free"
	fi
}

# vm_build_static -p PKG...: release binaries, static so the initramfs needs
# no libc; sets vm_bins to their directory.
vm_build_static() {
	export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$vm_repo/target}
	RUSTFLAGS="-C target-feature=+crt-static" cargo build -q --release \
		--manifest-path "$vm_repo/Cargo.toml" "$@" \
		--target x86_64-unknown-linux-gnu
	vm_bins=$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/release
}

# vm_stage_root ROOT INIT WORK: an initramfs tree with busybox, INIT as /init,
# WORK/kmod/pfprof.ko as /pfprof.ko and monitor and work in /bin.
vm_stage_root() {
	local root=$1 init=$2 work=$3
	mkdir -p "$root"/{bin,dev,proc,sys,tmp}
	cp "$vm_busybox" "$root/bin/busybox"
	cp "$init" "$root/init"
	cp "$work/kmod/pfprof.ko" "$root/pfprof.ko"
	cp "$vm_bins/monitor" "$vm_bins/work" "$root/bin/"
}

# vm_pack ROOT OUT: ROOT as a gzipped newc cpio archive.
vm_pack() {
	(cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) >"$2"
}

# vm_boot INITRD LOG TIMEOUT MEM APPEND [QEMU_ARG...]: boot the kernel with
# INITRD on 2 vCPUs and MEM of memory, console on stdout (without CRs, line by
# line as it comes) and in LOG; returns qemu's status (124 when it ran longer
# than TIMEOUT seconds).
# TCG: nested KVM is not available (or hangs) on CI machines.
vm_boot() {
	local initrd=$1 log=$2 timeout=$3 mem=$4 append=$5
	shift 5
	timeout --foreground "$timeout" qemu-system-x86_64 -accel tcg -m "$mem" -smp 2 \
		-nographic -no-reboot -kernel "/boot/vmlinuz-$vm_kver" \
		-initrd "$initrd" -append "console=ttyS0 panic=-1 rdinit=/init $append" "$@" \
		</dev/null 2>&1 | stdbuf -oL tr -d '\r' | tee "$log"
	return "${PIPESTATUS[0]}"
}
