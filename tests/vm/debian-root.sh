#!/usr/bin/env bash
# A root file system of another Debian release, made with debootstrap from
# the machine's own mirror (tests/vm/debian-sources.py) and cached outside
# the clone, for what this machine's release cannot build or run: Debian
# 13's kbuild tools (they need glibc 2.38) for the 7.x kernels, its
# victoria-metrics; sid's herdtools7 for the litmus tests. Prints the root's
# path.
#
#   tests/vm/debian-root.sh RELEASE [-t SUITE] [PACKAGE...]
#
# Installs the packages that are not installed yet, from SUITE when given
# (e.g. trixie-backports, which is in the root's sources; sid has no
# backports); a root that has them all is used as it is, without the network.
# Environment: PFPROF_ROOT_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pfprof/roots).
# Needs: root, debootstrap, python3.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"

(($# >= 1)) || vm_die "usage: debian-root.sh RELEASE [-t SUITE] [PACKAGE...]"
release=$1
shift
target=()
if [[ ${1-} == -t ]]; then
	(($# >= 2)) || vm_die "-t needs a suite"
	target=(-t "$2")
	shift 2
fi
[[ $release =~ ^[a-z]+$ ]] || vm_die "not a Debian release name: $release"
(($(id -u) == 0)) || vm_die "making a root needs root"
command -v debootstrap >/dev/null || vm_die "debootstrap not found: apt-get install debootstrap"

cache=${PFPROF_ROOT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pfprof/roots}
root=$cache/$release
mkdir -p "$cache"
# One maker at a time: a second caller waits and then finds the root made.
exec 9>"$cache/$release.lock"
flock 9

# The stamp is written last: a root without it was cut short.
if [[ ! -e $cache/$release.complete ]]; then
	rm -rf "$root"
	mirror=$(python3 "$here/debian-sources.py" mirror)
	echo "debian-root.sh: debootstrap $release into $root" >&2
	debootstrap --variant=minbase "$release" "$root" "$mirror" >"$cache/$release.log" 2>&1 ||
		{ tail -n 20 "$cache/$release.log" >&2; vm_die "debootstrap $release failed (log: $cache/$release.log)"; }
	# The release's backports, from the same mirror: unstable has none. Its
	# Release file is valid for a week only, and a mirror may serve a
	# snapshot older than that: apt still checks its signature.
	if [[ $release == sid ]]; then
		echo 'Acquire::Check-Valid-Until "false";' >"$root/etc/apt/apt.conf.d/99pfprof-snapshot"
	else
		cat >"$root/etc/apt/sources.list.d/backports.sources" <<-SOURCES
		Types: deb
		URIs: $mirror
		Suites: $release-backports
		Components: main
		Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
		SOURCES
	fi
	touch "$cache/$release.complete"
fi

missing=()
for p in "$@"; do
	vm_in_root "$root" dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "debian-root.sh: installing ${missing[*]} in $root" >&2
	{
		vm_in_root "$root" apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive vm_in_root "$root" apt-get install -y -qq \
				--no-install-recommends "${target[@]}" "${missing[@]}"
	} >>"$cache/$release.log" 2>&1 ||
		{ tail -n 20 "$cache/$release.log" >&2; vm_die "installing ${missing[*]} in $root failed (log: $cache/$release.log)"; }
fi
echo "$root"
