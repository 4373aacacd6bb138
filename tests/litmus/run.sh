#!/usr/bin/env bash
# The litmus tests of both ring protocols (shared-layout/litmus), and their
# mutants, under the Linux kernel memory model (LKMM) with herd7:
# tests/litmus/check.py says what it checks.
#
#   tests/litmus/run.sh [--show]
#   tests/litmus/run.sh --prepare   # only make the sid root and the model's cache
#
# herd7 is Debian's herdtools7, from sid (no stable release has it), in a sid
# root that tests/vm/debian-root.sh makes and caches. The model is the
# kernel's tools/memory-model, taken from Debian's linux-source-6.12 (GPL-2.0)
# and cached beside the roots. Ends with "N passed, M failed"; fails if any
# test or mutant says other than it must.
# Environment: PFPROF_LKMM_CACHE (default ${XDG_CACHE_HOME:-~/.cache}/pfprof/lkmm).
# Needs: root, debootstrap, python3, linux-source-6.12, xz-utils.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"

source_package=linux-source-6.12
tarball=/usr/src/$source_package.tar.xz
[[ -e $tarball ]] || vm_die "$tarball not found: apt-get install $source_package"

root=$(bash "$repo/tests/vm/debian-root.sh" sid herdtools7)

# The model's files, extracted once per version of the source package.
version=$(dpkg-query -W -f='${Version}' "$source_package")
cache=${PFPROF_LKMM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pfprof/lkmm}
lkmm=$cache/$source_package-$version
if [[ ! -e $lkmm.complete ]]; then
	echo "run.sh: extracting tools/memory-model from $tarball" >&2
	rm -rf "$lkmm"
	mkdir -p "$lkmm"
	tar -xJf "$tarball" -C "$lkmm" --strip-components=3 --wildcards \
		"$source_package/tools/memory-model/*.cat" \
		"$source_package/tools/memory-model/*.bell" \
		"$source_package/tools/memory-model/*.def" \
		"$source_package/tools/memory-model/*.cfg"
	touch "$lkmm.complete"
fi

[[ ${1-} != --prepare ]] || exit 0
exec python3 "$here/check.py" --root "$root" --lkmm "$lkmm" --tests "$repo/shared-layout/litmus" "$@"
