# Shared steps of the scripts that boot pfprof in a VM (tests/vm/run.sh,
# docs/case-studies/reproduce.sh): select the kernel, check the host's tools,
# build the module and the static binaries, pack an initramfs, boot it under
# qemu TCG.  Source it from bash with `set -euo pipefail`; errors exit 2 with
# the calling script's name.

vm_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

vm_die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# The Debian cloud kernels installed with their headers, one version a line.
vm_installed_kernels() {
	local img v
	for img in /boot/vmlinuz-*-cloud-amd64; do
		v=${img#/boot/vmlinuz-}
		if [[ -e $img && -d /usr/src/linux-headers-$v ]]; then echo "$v"; fi
	done | sort -V
}

# vm_select_kernel KERNEL: the kernel to boot and build against, named
# explicitly: a Debian version (6.1.0-28-cloud-amd64: /boot/vmlinuz-* and its
# linux-headers-*), or "debug" (the checkers' kernel tests/vm/debug-kernel.sh
# builds and caches). Sets vm_kver (its name), vm_kernel (the image), vm_kdir
# (where the module builds) and vm_debug (1 for the debug kernel); checks the
# host's busybox, qemu and cpio.
vm_select_kernel() {
	local kernel=$1
	vm_debug=0
	if [[ $kernel == debug ]]; then
		vm_kdir=$("$vm_repo/tests/vm/debug-kernel.sh") || vm_die "building the debug kernel failed"
		vm_kernel=$vm_kdir/arch/x86/boot/bzImage
		vm_kver="debug ($(make -s -C "$vm_kdir" kernelrelease))"
		vm_debug=1
	else
		[[ -n $kernel ]] || vm_die "which kernel? give --kernel VERSION (installed: $(vm_installed_kernels | tr '\n' ' ')) or --kernel debug"
		vm_kernel=/boot/vmlinuz-$kernel
		vm_kdir=/usr/src/linux-headers-$kernel
		vm_kver=$kernel
		[[ -e $vm_kernel && -d $vm_kdir ]] ||
			vm_die "no $vm_kernel with $vm_kdir: apt-get install linux-image-$kernel linux-headers-$kernel (installed: $(vm_installed_kernels | tr '\n' ' '))"
	fi
	[[ -r $vm_kernel ]] || vm_die "$vm_kernel is not readable"
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
	make -s -C "$work/kmod" KDIR="$vm_kdir" W=1 >"$work/kmod-build.log" 2>&1 ||
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
		-nographic -no-reboot -kernel "$vm_kernel" \
		-initrd "$initrd" -append "console=ttyS0 panic=-1 rdinit=/init $append" "$@" \
		</dev/null 2>&1 | stdbuf -oL tr -d '\r' | tee "$log"
	return "${PIPESTATUS[0]}"
}
