#!/usr/bin/env bash
# Installs pfprof.ko with DKMS for one Debian kernel exactly as docs/module.md
# says (make -C kmod dkms-src, then dkms install), in the Debian root ROOT
# when the kernel lives there (tests/vm/debian-root.sh), replacing what an
# earlier run installed for that kernel, and prints the path of the module
# DKMS installed: what tests/vm/run.sh --module boots.
#
#   tests/vm/dkms-install.sh KERNEL [ROOT]
#
# Needs: root, dkms (in ROOT when given), the kernel's headers.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/vm/lib.sh
. "$here/lib.sh"

(($# == 1 || $# == 2)) || vm_die "usage: dkms-install.sh KERNEL [ROOT]"
kernel=$1
root=${2-}
in_root() { if [[ -n $root ]]; then vm_in_root "$root" "$@"; else "$@"; fi; }
in_root sh -c 'command -v dkms' >/dev/null || vm_die "dkms not found${root:+ in $root}: apt-get install dkms"

version=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$vm_repo/kmod/dkms.conf")
log=$(mktemp /tmp/pfprof-dkms.XXXXXX)
trap 'rm -f "$log"' EXIT
# An earlier build for this kernel goes (other kernels' stay), and the
# source is copied afresh: docs/module.md's installation then builds from this tree.
in_root dkms remove "pfprof/$version" -k "$kernel" >/dev/null 2>&1 || true
rm -rf "$root/usr/src/pfprof-$version"
make -s -C "$vm_repo/kmod" dkms-src DKMS_SRC="$root/usr/src/pfprof-$version"
in_root dkms install "pfprof/$version" -k "$kernel" >"$log" 2>&1 ||
	{ cat "$log" >&2; find "$root/var/lib/dkms/pfprof" -name make.log -exec cat {} + >&2 2>/dev/null; vm_die "dkms install pfprof/$version -k $kernel failed"; }
modules=("$root/lib/modules/$kernel/updates/dkms"/pfprof.ko*)
[[ -e ${modules[0]} ]] || { cat "$log" >&2; vm_die "dkms installed no pfprof.ko for $kernel"; }
echo "${modules[0]}"
