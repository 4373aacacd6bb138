#!/usr/bin/env bash
# Fetches a Debian arm64 kernel for the VM test's arm64 lane (run.sh --arch
# arm64): the kernel a linux-image meta-package names, its headers, the
# kbuild tools that build against them on this (amd64) machine and the arm64
# busybox-static, all unpacked from their .debs into one tree cached outside
# the clone. Nothing is installed: installing the arm64 headers would pull in
# Debian's arm64 gcc, which conflicts with this machine's. Prints the kernel's
# version, what run.sh --arch arm64 --kernel takes.
#
#   tests/vm/arm64-kernel.sh [PACKAGE]     # default: linux-image-cloud-arm64
#
# apt reads this machine's own sources (no mirror is written anywhere) into
# an index of its own beside the trees, so the machine's apt is left as it
# was; a kernel already unpacked is used as it is.
# Environment: PFPROF_ARM64_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pfprof/arm64).
# Needs: root (apt's downloads), depmod (kmod).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"

(($# <= 1)) || vm_die "usage: arm64-kernel.sh [PACKAGE]"
package=${1:-linux-image-cloud-arm64}
[[ $package =~ ^linux-image-[a-z0-9.+-]+$ ]] || vm_die "not a linux-image package: $package"
command -v depmod >/dev/null || vm_die "depmod not found: apt-get install kmod"

cache=$vm_arm64_cache
state=$cache/apt
mkdir -p "$state/lists/partial" "$state/archives/partial"
exec 9>"$cache/lock"
flock 9
: >>"$state/status"
# arm64 is apt's own architecture here, amd64 a foreign one (the kbuild tools).
apt_args=(
	-o "Dir::State=$state" -o "Dir::State::Lists=$state/lists"
	-o "Dir::State::status=$state/status" -o "Dir::Cache=$state"
	-o "Dir::Cache::archives=$state/archives"
	-o APT::Architecture=arm64 -o APT::Architectures::=arm64 -o APT::Architectures::=amd64
)
log=$cache/apt.log
apt-get "${apt_args[@]}" update >"$log" 2>&1 ||
	{ tail -n 20 "$log" >&2; vm_die "apt-get update of the arm64 index failed (log: $log)"; }

# depends PACKAGE REGEX: the first of PACKAGE's dependencies matching REGEX.
depends() {
	local all match
	all=$(apt-cache "${apt_args[@]}" depends "$1" 2>>"$log") ||
		vm_die "$1 is not in the arm64 index (log: $log)"
	match=$(sed -n 's/^ *Depends: \([^ :]*\).*/\1/p' <<<"$all" | grep -xE "$2" | sed -n 1p)
	[[ -n $match ]] || vm_die "$1 depends on no $2 in the arm64 index"
	echo "$match"
}
image=$(depends "$package" 'linux-image-[0-9].*')
version=${image#linux-image-}
tree=$cache/$version

# The stamp is written last: a tree without it was cut short.
if [[ ! -e $tree.complete ]]; then
	headers=linux-headers-$version
	common=$(depends "$headers" 'linux-headers-.*-common')
	kbuild=$(depends "$headers" 'linux-kbuild-.*')
	echo "arm64-kernel.sh: fetching $image, $headers, $common, $kbuild (amd64), busybox-static into $tree" >&2
	debs=$(mktemp -d "$cache/debs.XXXXXX")
	trap 'rm -rf "$debs"' EXIT
	(cd "$debs" && apt-get "${apt_args[@]}" download "$image" "$headers" "$common" \
		"$kbuild:amd64" busybox-static) >>"$log" 2>&1 ||
		{ tail -n 20 "$log" >&2; vm_die "downloading the arm64 kernel's packages failed (log: $log)"; }
	rm -rf "$tree"
	mkdir -p "$tree"
	for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$tree"; done
	# The headers' Makefile includes the common headers' by their installed,
	# absolute path; the rest of the tree links relatively.
	sed -i "s|^include /usr/src/|include $tree/usr/src/|" "$tree/usr/src/$headers/Makefile"
	# The image's package leaves modules.dep to its postinst.
	depmod -b "$tree" "$version"
	touch "$tree.complete"
fi
echo "$version"
