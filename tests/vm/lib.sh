# Shared steps of the scripts that boot pfprof in a VM (tests/vm/run.sh,
# docs/case-studies/reproduce.sh): select the kernel, check the host's tools,
# build the module and the static binaries, pack an initramfs, boot it under
# qemu TCG.  Source it from bash with `set -euo pipefail`; errors exit 2 with
# the calling script's name.

vm_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

vm_die() { echo "$(basename "$0"): $*" >&2; exit 2; }

# Where tests/vm/arm64-kernel.sh unpacks the arm64 kernels, one tree each.
vm_arm64_cache=${PFPROF_ARM64_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pfprof/arm64}

# vm_installed_kernels [ARCH]: the Debian cloud kernels installed with their
# headers (amd64), or unpacked by tests/vm/arm64-kernel.sh (arm64), one
# version a line.
vm_installed_kernels() {
	local img v
	if [[ ${1-amd64} == arm64 ]]; then
		for img in "$vm_arm64_cache"/*.complete; do
			[[ -e $img ]] && basename "$img" .complete
		done
	else
		for img in /boot/vmlinuz-*-cloud-amd64; do
			v=${img#/boot/vmlinuz-}
			if [[ -e $img && -d /usr/src/linux-headers-$v ]]; then echo "$v"; fi
		done
	fi | sort -V
}

# vm_in_root ROOT CMD...: CMD run inside the Debian root ROOT
# (tests/vm/debian-root.sh), with a /proc of its own, in a private mount
# namespace that ends with it (nothing stays mounted in the cached root).
vm_in_root() {
	local root=$1
	shift
	unshare --mount --propagation private -- \
		sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" "$@"
}

# vm_kernel_version PACKAGE [ROOT]: the kernel version an installed
# linux-image meta-package names (linux-image-cloud-amd64 ->
# 6.1.0-28-cloud-amd64), on this machine or in the Debian root ROOT: a
# kernel is always named from its package, never "the newest by glob".
vm_kernel_version() {
	local package=$1 root=${2-} depends
	depends=$(dpkg-query --admindir="$root/var/lib/dpkg" -W -f='${Depends}' "$package") ||
		vm_die "$package is not installed${root:+ in $root}"
	grep -o 'linux-image-[0-9][^ ,]*' <<<"$depends" | head -n 1 | sed 's/^linux-image-//'
}

# vm_select_kernel KERNEL [ROOT [ARCH]]: the kernel to boot and build against,
# named explicitly: a Debian version (6.1.0-28-cloud-amd64: /boot/vmlinuz-* and
# its linux-headers-*), in the Debian root ROOT when given
# (tests/vm/debian-root.sh: a kernel whose kbuild tools this machine cannot
# run, built for inside it), or "debug" (the checkers' kernel
# tests/vm/debug-kernel.sh builds and caches). ARCH: amd64 (the default) or
# arm64, a Debian arm64 kernel tests/vm/arm64-kernel.sh unpacked (no ROOT),
# the module cross-built for it, booted under qemu-system-aarch64.
# Sets vm_kver (its name), vm_kernel (the image), vm_kdir (where the module
# builds, as seen from ROOT), vm_root, vm_modules (the kernel's module tree,
# empty for the debug kernel), vm_debug (1 for the debug kernel) and the
# architecture's: vm_arch, vm_kbuild_args (make's, for a cross build),
# vm_rust_target, vm_qemu (the emulator and its machine) and vm_console;
# checks the host's busybox, qemu and cpio.
vm_select_kernel() {
	local kernel=$1
	vm_root=${2-}
	vm_arch=${3:-amd64}
	vm_debug=0
	vm_modules=
	vm_busybox=
	local qemu_package=qemu-system-x86
	case $vm_arch in
	amd64)
		vm_kbuild_args=()
		vm_rust_target=x86_64-unknown-linux-gnu
		vm_qemu=(qemu-system-x86_64)
		vm_console=ttyS0
		;;
	arm64)
		vm_kbuild_args=(ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-)
		vm_rust_target=aarch64-unknown-linux-gnu
		# Neoverse N1: the core of Graviton2 and Ampere Altra, with their LSE
		# atomics and RCpc loads; TCG's "max" (SVE, pointer authentication)
		# takes twice as long to boot.
		vm_qemu=(qemu-system-aarch64 -M virt -cpu neoverse-n1)
		vm_console=ttyAMA0
		qemu_package=qemu-system-arm
		command -v aarch64-linux-gnu-gcc >/dev/null ||
			vm_die "aarch64-linux-gnu-gcc not found: apt-get install gcc-aarch64-linux-gnu"
		;;
	*) vm_die "no architecture $vm_arch: amd64 or arm64" ;;
	esac
	if [[ $vm_arch == arm64 ]]; then
		[[ -z $vm_root && $kernel != debug ]] ||
			vm_die "arm64 kernels come from tests/vm/arm64-kernel.sh: no --root, no debug kernel"
		[[ -n $kernel && -e $vm_arm64_cache/$kernel.complete ]] ||
			vm_die "no arm64 kernel ${kernel:-named}: give --kernel VERSION, the version tests/vm/arm64-kernel.sh prints (unpacked: $(vm_installed_kernels arm64 | tr '\n' ' '))"
		vm_kernel=$vm_arm64_cache/$kernel/boot/vmlinuz-$kernel
		vm_kdir=$vm_arm64_cache/$kernel/usr/src/linux-headers-$kernel
		vm_modules=$vm_arm64_cache/$kernel/lib/modules/$kernel
		vm_busybox=$vm_arm64_cache/$kernel/bin/busybox
		vm_kver=$kernel
	elif [[ $kernel == debug ]]; then
		[[ -z $vm_root ]] || vm_die "the debug kernel is built on this machine: no --root"
		vm_kdir=$("$vm_repo/tests/vm/debug-kernel.sh") || vm_die "building the debug kernel failed"
		vm_kernel=$vm_kdir/arch/x86/boot/bzImage
		vm_kver="debug ($(make -s -C "$vm_kdir" kernelrelease))"
		vm_debug=1
	else
		[[ -n $kernel ]] || vm_die "which kernel? give --kernel VERSION (installed: $(vm_installed_kernels | tr '\n' ' ')) or --kernel debug"
		vm_kernel=$vm_root/boot/vmlinuz-$kernel
		vm_kdir=/usr/src/linux-headers-$kernel
		vm_modules=$vm_root/lib/modules/$kernel
		vm_kver=$kernel
		[[ -e $vm_kernel && -d $vm_root$vm_kdir ]] ||
			vm_die "no $vm_kernel with $vm_root$vm_kdir: apt-get install linux-image-$kernel linux-headers-$kernel${vm_root:+ in $vm_root}$([[ -n $vm_root ]] || echo " (installed: $(vm_installed_kernels | tr '\n' ' '))")"
	fi
	[[ -r $vm_kernel ]] || vm_die "$vm_kernel is not readable"
	if [[ -z $vm_busybox ]]; then
		vm_busybox=$(command -v busybox) || vm_die "busybox not found: apt-get install busybox-static"
		# ldd fails on a static binary; the initramfs has no libc for a dynamic one.
		if ldd "$vm_busybox" >/dev/null 2>&1; then vm_die "$vm_busybox is not static: apt-get install busybox-static"; fi
	fi
	command -v "${vm_qemu[0]}" >/dev/null ||
		vm_die "${vm_qemu[0]} not found: apt-get install $qemu_package"
	command -v cpio >/dev/null || vm_die "cpio not found: apt-get install cpio"
}

# vm_build_module WORK [EDIT...]: WORK/kmod/pfprof.ko, built from the same
# self-contained tree DKMS gets (so the source tree stays clean and the DKMS
# layout is tested too), inside vm_root when the kernel lives there.  W=1,
# and any warning fails.  EDIT (a command and its arguments), when given, runs
# in that tree before the build, and warnings are then allowed: how
# tests/vm/mutants.sh breaks a copy of the module on purpose.  Sets vm_module
# to the module the VM boots.
vm_build_module() {
	local work=$1 build=$1/kmod
	shift
	# In a root, the tree is built where the root's tools can see it.
	[[ -z $vm_root ]] || build=$(mktemp -d "$vm_root/tmp/pfprof-kmod.XXXXXX")
	make -s -C "$vm_repo/kmod" dkms-src DKMS_SRC="$build"
	if (($#)); then
		(cd "$build" && "$@") || vm_die "editing the module's tree ($*) failed"
	fi
	if [[ -n $vm_root ]]; then
		vm_in_root "$vm_root" make -s -C "${build#"$vm_root"}" KDIR="$vm_kdir" W=1
	else
		make -s -C "$build" KDIR="$vm_kdir" "${vm_kbuild_args[@]}" W=1
	fi >"$work/kmod-build.log" 2>&1 ||
		{ cat "$work/kmod-build.log"; vm_die "module build failed"; }
	if (($# == 0)) && grep -E 'warning:|error:' "$work/kmod-build.log"; then
		vm_die "module build is not warning-free"
	fi
	if [[ -n $vm_root ]]; then
		mkdir -p "$work/kmod"
		cp "$build/pfprof.ko" "$build/conftest.h" "$work/kmod/"
		rm -rf "$build"
	fi
	vm_module=$work/kmod/pfprof.ko
}

# vm_use_module FILE WORK: boot FILE (a module DKMS built and installed,
# compressed or not) instead of the one vm_build_module built, once its
# vermagic says it is for this kernel.
vm_use_module() {
	local file=$1 work=$2 vermagic
	case $file in
	*.ko.xz) xz -dc "$file" >"$work/pfprof-given.ko" ;;
	*.ko.zst) zstd -qdc "$file" >"$work/pfprof-given.ko" ;;
	*.ko.gz) gzip -dc "$file" >"$work/pfprof-given.ko" ;;
	*.ko) cp "$file" "$work/pfprof-given.ko" ;;
	*) vm_die "$file is not a kernel module" ;;
	esac || vm_die "cannot read $file"
	vermagic=$(modinfo -F vermagic "$work/pfprof-given.ko") || vm_die "modinfo $file failed"
	[[ ${vermagic%% *} == "${vm_kver%% *}" ]] ||
		vm_die "$file is built for ${vermagic%% *}, not $vm_kver"
	vm_module=$work/pfprof-given.ko
}

# vm_build_static -p PKG...: release binaries for vm_arch, static so the
# initramfs needs no libc; sets vm_bins to their directory.
vm_build_static() {
	export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$vm_repo/target}
	[[ -d $(rustc --print target-libdir --target "$vm_rust_target") ]] ||
		vm_die "Rust's standard library for $vm_rust_target is not installed: rustup target add $vm_rust_target"
	# The cross linker, with the arm64 glibc's static libraries beside it.
	RUSTFLAGS="-C target-feature=+crt-static" \
		CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc \
		cargo build -q --release --manifest-path "$vm_repo/Cargo.toml" "$@" \
		--target "$vm_rust_target"
	vm_bins=$CARGO_TARGET_DIR/$vm_rust_target/release
}

# vm_use_packaged ROOT: the guest's monitor and work are the ones the pfprof
# package installed in the Debian root ROOT (/usr/bin/pfprof and pfprof-work,
# tests/package/run.sh), with the shared libraries they load from there (the
# initramfs has no libc of its own). Sets vm_packaged_root and vm_libs (their
# paths in ROOT).
vm_use_packaged() {
	vm_packaged_root=$1
	[[ -x $vm_packaged_root/usr/bin/pfprof && -x $vm_packaged_root/usr/bin/pfprof-work ]] ||
		vm_die "no /usr/bin/pfprof and pfprof-work in $vm_packaged_root: apt install ./pfprof_*.deb there (tests/package/run.sh)"
	# ldd's "name => /path (address)" and the loader's "/path (address)".
	mapfile -t vm_libs < <(vm_in_root "$vm_packaged_root" ldd /usr/bin/pfprof /usr/bin/pfprof-work |
		awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// && $2 ~ /^\(/ { print $1 }' | sort -u)
	((${#vm_libs[@]})) || vm_die "ldd found no libraries for $vm_packaged_root/usr/bin/pfprof"
}

# vm_stage_root ROOT INIT: an initramfs tree with busybox, INIT as /init,
# the module vm_build_module or vm_use_module chose as /pfprof.ko and monitor
# and work in /bin: those vm_build_static built, or the package's that
# vm_use_packaged chose, with their libraries.
vm_stage_root() {
	local root=$1 init=$2 lib
	mkdir -p "$root"/{bin,dev,proc,sys,tmp}
	cp "$vm_busybox" "$root/bin/busybox"
	cp "$init" "$root/init"
	cp "$vm_module" "$root/pfprof.ko"
	if [[ -n ${vm_packaged_root-} ]]; then
		cp "$vm_packaged_root/usr/bin/pfprof" "$root/bin/monitor"
		cp "$vm_packaged_root/usr/bin/pfprof-work" "$root/bin/work"
		for lib in "${vm_libs[@]}"; do
			mkdir -p "$root$(dirname "$lib")"
			cp -L "$vm_packaged_root$lib" "$root$lib"
		done
	else
		cp "$vm_bins/monitor" "$vm_bins/work" "$root/bin/"
	fi
}

# vm_kernel_module PATH DIR: the selected Debian kernel's module PATH
# (relative to its kernel/ tree, without .ko: drivers/block/virtio_blk),
# uncompressed into DIR, for an initramfs that loads it with insmod.
vm_kernel_module() {
	local path=$1 dir=$2 file
	[[ -n $vm_modules ]] || vm_die "the debug kernel has no module tree: build $path in"
	for file in "$vm_modules/kernel/$path".ko{,.xz,.zst}; do
		[[ -e $file ]] || continue
		case $file in
		*.xz) xz -dc "$file" ;;
		*.zst) zstd -qdc "$file" ;;
		*) cat "$file" ;;
		esac >"$dir/$(basename "$path").ko" || vm_die "cannot read $file"
		return 0
	done
	vm_die "$vm_kver has no module $path in $vm_modules"
}

# vm_kernel_module_deps PATH DIR: vm_kernel_module for PATH and every module
# modules.dep says it needs, their names appended to DIR/order in the order
# insmod must load them.
vm_kernel_module_deps() {
	local path=$1 dir=$2 line deps i dep
	line=$(grep -E "^kernel/$path\.ko(\.xz|\.zst)?:" "$vm_modules/modules.dep") ||
		vm_die "$vm_kver has no module $path in $vm_modules/modules.dep"
	read -ra deps <<<"${line#*:}"
	# modules.dep lists a module's dependencies, the one to load first last.
	for ((i = ${#deps[@]} - 1; i >= 0; i--)); do
		dep=${deps[i]#kernel/}
		dep=${dep%.ko*}
		vm_kernel_module "$dep" "$dir"
		basename "$dep" >>"$dir/order"
	done
	vm_kernel_module "$path" "$dir"
	basename "$path" >>"$dir/order"
}

# vm_pack ROOT OUT: ROOT as a gzipped newc cpio archive.
vm_pack() {
	(cd "$1" && find . | cpio -o -H newc --quiet | gzip -1) >"$2"
}

# vm_crash_origin LOG: whether the kernel's first report in LOG (an oops,
# a warning, a panic: each names the kernel's taint) came before pfprof.ko
# was ever loaded or with it loaded. The module is the only out-of-tree one
# the guests load, and its taint (O) stays after it is unloaded: a report
# without it is the kernel's or the emulator's, not the module's. Fails when
# LOG has no report.
vm_crash_origin() {
	local taint
	taint=$(grep -m1 -oE 'Not tainted|Tainted: [A-Z ]*[A-Z]' "$1") || return 1
	if [[ $taint == Tainted:*O* ]]; then
		echo "with pfprof.ko loaded (${taint//  / })"
	else
		echo "before pfprof.ko was ever loaded (${taint//  / }): the emulator's or the kernel's, not the module's"
	fi
}

# vm_boot INITRD LOG TIMEOUT MEM APPEND [QEMU_ARG...]: boot the kernel with
# INITRD on 2 vCPUs and MEM of memory, console on stdout (without CRs, line by
# line as it comes) and in LOG; returns qemu's status (124 when it ran longer
# than TIMEOUT seconds).
# TCG: nested KVM is not available (or hangs) on CI machines, and arm64 is
# emulated anyway.
vm_boot() {
	local initrd=$1 log=$2 timeout=$3 mem=$4 append=$5
	shift 5
	timeout --foreground "$timeout" "${vm_qemu[@]}" -accel tcg -m "$mem" -smp 2 \
		-nographic -no-reboot -kernel "$vm_kernel" \
		-initrd "$initrd" -append "console=$vm_console panic=-1 rdinit=/init $append" "$@" \
		</dev/null 2>&1 | stdbuf -oL tr -d '\r' | tee "$log"
	return "${PIPESTATUS[0]}"
}
