#!/usr/bin/env bash
# Builds the debug kernel the VM test boots to run the kernel's own checkers
# (KASAN, lockdep, kmemleak, KFENCE, UBSAN, ...) over pfprof.ko: Debian's
# linux-source-6.12, `make tinyconfig`, tests/vm/debug-kernel.config merged
# over it. Prints the kernel's build tree, which holds arch/x86/boot/bzImage
# and is the KDIR the module builds against.
#
#   tests/vm/debug-kernel.sh
#
# The tree is cached outside the clone, keyed by the source package's version
# and the hash of the configuration, so a repeated run on the
# same machine reuses it (about 6 minutes on 2 cores to build otherwise).
# Environment: PFPROF_KERNEL_CACHE (default: ${XDG_CACHE_HOME:-~/.cache}/pfprof/kernels).
# Needs: linux-source-6.12 build-essential flex bison bc libelf-dev libssl-dev.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
die() { echo "$(basename "$0"): $*" >&2; exit 2; }

package=linux-source-6.12
tarball=/usr/src/$package.tar.xz
version=$(dpkg-query -W -f='${Version}' "$package" 2>/dev/null) ||
	die "$package is not installed: apt-get install $package"
[[ -r $tarball ]] || die "$tarball is missing: apt-get install --reinstall $package"
fragment=$here/debug-kernel.config
key=$version-$(sha256sum <"$fragment" | cut -c1-16)
cache=${PFPROF_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pfprof/kernels}
tree=$cache/$key/$package

# The stamp is written last: a tree without it is a build that was cut short.
if [[ -e $cache/$key/complete ]]; then
	echo "$tree"
	exit 0
fi

rm -rf "$cache/$key"
mkdir -p "$cache/$key"
echo "debug-kernel.sh: building $package $version ($key) in $cache/$key" >&2
tar -xJf "$tarball" -C "$cache/$key"
log=$cache/$key/build.log
kmake() { make -C "$tree" ARCH=x86_64 "$@" >>"$log" 2>&1 || { tail -n 40 "$log" >&2; die "make $* failed (log: $log)"; }; }
kmake tinyconfig
"$tree/scripts/kconfig/merge_config.sh" -m -O "$tree" "$tree/.config" "$fragment" >>"$log" 2>&1 ||
	die "merging $fragment failed (log: $log)"
kmake olddefconfig

# Every line of the fragment must be in the result: a dependency that
# olddefconfig silently dropped would leave a checker off.
missing=0
while IFS= read -r line; do
	[[ $line =~ ^CONFIG_|^#\ CONFIG_.*\ is\ not\ set$ ]] || continue
	if ! grep -qxF "$line" "$tree/.config"; then
		echo "debug-kernel.sh: not in the final .config: $line" >&2
		missing=1
	fi
done <"$fragment"
((missing == 0)) || die "the configuration lost options (log: $log)"

kmake -j"$(nproc)" bzImage modules
touch "$cache/$key/complete"
echo "$tree"
