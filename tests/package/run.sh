#!/usr/bin/env bash
# The Debian packages as a user gets them: builds pfprof and pfprof-dkms from this
# checkout (make deb), checks them with lintian (no error allowed; what it still says
# is printed), then, for Debian 12 and Debian 13, installs both with
# `apt install ./pfprof_*.deb ./pfprof-dkms_*.deb` into a clean root and checks what
# a user would see there: `pfprof --version`, `man pfprof`, the completions, a profile
# run, `dkms status` with the module DKMS built for the root's kernel, and, in the
# Debian 13 root, a kernel's headers installed afterwards getting their build too;
# then `apt remove pfprof-dkms` takes the modules away. One line per check and
# "N passed, M failed" at the end; exits 1 if any check failed.
#
#   tests/package/run.sh OUT
#   tests/package/run.sh --prepare   # only make the two clean roots' cached bases
#
# Each root is a fresh copy (OUT/RELEASE/root) of a base made once and cached in
# ~/.cache/pfprof/roots/package (tests/vm/debian-root.sh: debootstrap from the
# machine's own mirror, the release's cloud kernel with its headers, man-db, and
# openssl, with which DKMS makes the key it signs modules with): nothing
# of pfprof's is in it before the packages. Downloaded packages are kept in
# ~/.cache/pfprof/apt/RELEASE. It leaves, for the VM lanes of .ci/run:
#   OUT/debs/                 the two packages
#   OUT/RELEASE/root          the root, pfprof installed (pfprof-dkms removed again)
#   OUT/RELEASE/kernel        the root's kernel version
#   OUT/RELEASE/pfprof.ko*    the module the package's DKMS built for it, as DKMS
#                             installed it (kept before the removal)
# Environment: PFPROF_ROOT_CACHE (the bases' cache, default
# ${XDG_CACHE_HOME:-~/.cache}/pfprof/roots/package), CARGO_TARGET_DIR.
# Needs: root, debhelper, dh-dkms, dpkg-dev, lintian, debootstrap, python3, a Rust
# toolchain of 1.80 or newer.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"

(($# == 1)) || vm_die "usage: run.sh OUT | --prepare"
(($(id -u) == 0)) || vm_die "installing into Debian roots needs root"
cache=${XDG_CACHE_HOME:-$HOME/.cache}/pfprof
export PFPROF_ROOT_CACHE=${PFPROF_ROOT_CACHE:-$cache/roots/package}
# The releases the packages are installed into, each with debian-root.sh's
# suite option where its kernel comes from backports.
releases=(bookworm "trixie -t trixie-backports")
# package_base RELEASE [-t SUITE]: the clean root of RELEASE, made once and
# cached; its path.
package_base() {
	bash "$repo/tests/vm/debian-root.sh" "$@" \
		linux-image-cloud-amd64 linux-headers-cloud-amd64 man-db openssl
}
if [[ $1 == --prepare ]]; then
	for release in "${releases[@]}"; do
		# shellcheck disable=SC2086 # a release and its suite option
		package_base $release >/dev/null
	done
	exit 0
fi
out=$(mkdir -p "$1" && cd "$1" && pwd)
version=$(cd "$repo" && dpkg-parsechangelog -SVersion)
abi=$(sed -n 's/^#define PFPROF_ABI_VERSION\t*\([0-9]*\)u$/\1/p' "$repo/shared-layout/include/pfprof.h")
[[ -n $abi ]] || vm_die "no PFPROF_ABI_VERSION in shared-layout/include/pfprof.h"

passed=0 failed=0
# check NAME CMD...: one line for the check, and its output when it failed.
check() {
	local name=$1 said
	shift
	if said=$("$@" 2>&1); then
		echo "ok   $name"
		passed=$((passed + 1))
	else
		echo "FAIL $name"
		sed 's/^/    /' <<<"$said" | tail -n 30
		failed=$((failed + 1))
	fi
}

# in_root ROOT CMD...: CMD inside ROOT, with a /proc of its own (the 7.x kernels'
# objtool needs it) and apt's downloads kept outside it, in a mount namespace that
# ends with the command.
in_root() {
	local root=$1 archives
	shift
	# OUT/RELEASE/root: the release's downloads.
	archives=$cache/apt/$(basename "$(dirname "$root")")
	mkdir -p "$archives/partial"
	unshare --mount --propagation private -- sh -c \
		'mount -t proc proc "$0/proc" && mount --bind "$1" "$0/var/cache/apt/archives" && shift && exec chroot "$0" "$@"' \
		"$root" "$archives" "$@"
}

# expect WHAT WANTED CMD...: CMD's output is WANTED exactly.
expect() {
	local what=$1 wanted=$2 got
	shift 2
	got=$("$@") || { echo "$what: $* failed: $got"; return 1; }
	[[ $got == "$wanted" ]] || { printf '%s: wanted\n%s\ngot\n%s\n' "$what" "$wanted" "$got"; return 1; }
}

# contains WHAT WORDS CMD...: CMD's output contains WORDS.
contains() {
	local what=$1 words=$2 got
	shift 2
	got=$("$@") || { echo "$what: $* failed: $got"; return 1; }
	grep -qF -- "$words" <<<"$got" || { printf '%s: no "%s" in\n%s\n' "$what" "$words" "$got"; return 1; }
}

echo "package: make deb ($version)  [$SECONDS s in]"
rm -rf "$out/debs"
make -s -C "$repo" deb >"$out/make-deb.log" 2>&1 || { tail -n 30 "$out/make-deb.log"; vm_die "make deb failed (log: $out/make-deb.log)"; }
echo "package: lintian  [$SECONDS s in]"
mkdir -p "$out/debs"
target=${CARGO_TARGET_DIR:-$repo/target}
cp "$target/debian/pfprof_${version}_amd64.deb" "$target/debian/pfprof-dkms_${version}_all.deb" "$out/debs/"

# lintian: errors fail; warnings and notes are printed for the reader (docs/testing.md
# says why each one stays).
lintian_no_errors() {
	lintian --fail-on error --display-info "$out"/debs/*.deb >"$out/lintian.txt" 2>&1 ||
		{ cat "$out/lintian.txt"; return 1; }
}
check "lintian: no errors" lintian_no_errors
grep -v '^running with root' "$out/lintian.txt" | sed 's/^/    lintian says: /' || true

# install_and_check RELEASE [-t SUITE]: a fresh root of RELEASE, the packages
# installed, and what a user would see there.
install_and_check() {
	local release=$1 base root kernel
	shift
	echo "package: $release  [$SECONDS s in]"
	base=$(package_base "$release" "$@")
	root=$out/$release/root
	rm -rf "$out/$release"
	mkdir -p "$out/$release"
	cp -a "$base" "$root"
	kernel=$(vm_kernel_version linux-image-cloud-amd64 "$root")
	echo "$kernel" >"$out/$release/kernel"
	cp "$out"/debs/*.deb "$root/tmp/"

	install_packages() {
		in_root "$root" apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive in_root "$root" apt-get install -y \
				"./tmp/pfprof_${version}_amd64.deb" "./tmp/pfprof-dkms_${version}_all.deb"
	}
	check "$release: apt install ./pfprof_${version}_amd64.deb ./pfprof-dkms_${version}_all.deb" install_packages
	check "$release: pfprof --version says $version and ABI $abi" \
		expect "pfprof --version" "pfprof $version (pfprof.ko ABI $abi)" in_root "$root" pfprof --version
	# man's page, its justification's extra spaces squeezed.
	man_page() { in_root "$root" sh -c "man -P cat $1 | tr -s ' '"; }
	manual_pages() {
		contains "man pfprof" "pfprof - Per-process page-fault profiler" man_page pfprof &&
			contains "man pfprof" "pfprof run -- sort" man_page pfprof &&
			contains "man pfprof-run" "pfprof-run - Start CMD" man_page pfprof-run &&
			contains "man pfprof-work" "pfprof-work - Workload generator" man_page pfprof-work
	}
	check "$release: man pfprof, man pfprof-run and man pfprof-work" manual_pages
	completions() {
		contains "bash completion" "-F _pfprof pfprof" in_root "$root" \
			bash -c '. /usr/share/bash-completion/completions/pfprof && complete -p pfprof' &&
			test -s "$root/usr/share/zsh/vendor-completions/_pfprof" &&
			test -s "$root/usr/share/fish/vendor_completions.d/pfprof.fish"
	}
	check "$release: the bash completion completes pfprof; zsh's and fish's are in place" completions
	check "$release: pfprof run profiles pfprof-work (procfs backend)" \
		contains "pfprof run" '"minor_faults"' in_root "$root" sh -c \
		'pfprof run -q --backend procfs --summary /tmp/summary.json -- pfprof-work 4 R 2000 2 --sleep-ms 20 && cat /tmp/summary.json'
	not_enabled() {
		test -s "$root/lib/systemd/system/pfprof-monitor@.service" &&
			test -s "$root/lib/systemd/system/pfprof-fleet.service" &&
			expect "units enabled" "" find "$root/etc/systemd" -name 'pfprof*' &&
			test -s "$root/usr/share/pfprof/udev/99-pfprof.rules" &&
			expect "udev rules" "" find "$root/etc/udev" "$root/usr/lib/udev" -name '*pfprof*'
	}
	check "$release: the units are installed, not enabled; the udev rule is an example, not a rule" not_enabled
	check "$release: dkms status: pfprof/$version installed for $kernel" \
		contains "dkms status" "pfprof/$version, $kernel, x86_64: installed" in_root "$root" dkms status
	local modules=("$root/lib/modules/$kernel/updates/dkms"/pfprof.ko*)
	module_versions() {
		expect "modinfo version" "$version" in_root "$root" modinfo -F version "${modules[0]#"$root"}" &&
			expect "vermagic" "$kernel" sh -c "modinfo -F vermagic '${modules[0]}' | cut -d' ' -f1"
	}
	check "$release: modinfo says version $version, for $kernel" module_versions
	# What Secure Boot needs (docs/install.md): DKMS made its key and signed with it.
	check "$release: DKMS signed the module with its own key (/var/lib/dkms/mok.pub)" sh -c "
		test -s '$root/var/lib/dkms/mok.pub' &&
		modinfo -F signer '${modules[0]}' | grep -qx 'DKMS module signing key'"
	if [[ -e ${modules[0]} ]]; then cp "${modules[0]}" "$out/$release/"; fi

	if [[ $release == trixie ]]; then
		# Headers installed after the package (the release's own 6.12, beside the
		# backported 7.x) get their module from DKMS's kernel hook.
		later_kernel() {
			local later
			later=$(in_root "$root" apt-cache search --names-only '^linux-headers-6\.12\..*-cloud-amd64$' |
				cut -d' ' -f1 | sort -V | tail -n 1)
			[[ -n $later ]] || { echo "no linux-headers-6.12.*-cloud-amd64 in $release"; return 1; }
			DEBIAN_FRONTEND=noninteractive in_root "$root" apt-get install -y "$later" >/dev/null &&
				contains "dkms status" "pfprof/$version, ${later#linux-headers-}, x86_64: installed" \
					in_root "$root" dkms status
		}
		check "$release: a kernel's headers installed later (the release's 6.12) get their module" later_kernel
	fi

	remove_module_package() {
		DEBIAN_FRONTEND=noninteractive in_root "$root" apt-get remove -y pfprof-dkms >/dev/null &&
			expect "dkms status" "" in_root "$root" dkms status &&
			expect "modules left" "" find "$root/lib/modules" -name 'pfprof.ko*' &&
			expect "source left" "" find "$root/usr/src" -maxdepth 1 -name 'pfprof-*'
	}
	check "$release: apt remove pfprof-dkms removes every module it built, and its source" remove_module_package
	rm -f "$root"/tmp/*.deb
}

for release in "${releases[@]}"; do
	# shellcheck disable=SC2086 # a release and its suite option
	install_and_check $release
done

echo "package: done  [$SECONDS s in]"
echo "$passed passed, $failed failed"
((failed == 0))
