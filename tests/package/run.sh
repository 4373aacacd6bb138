#!/usr/bin/env bash
# The Debian packages as a user gets them: builds pfprof and pfprof-dkms from this
# checkout (make deb), checks them with the lintian of Debian 12 and of Debian 13 (no
# error allowed; what each still says is printed), then, for Debian 12 and Debian 13,
# installs both with
# `apt install ./pfprof_*.deb ./pfprof-dkms_*.deb` into a clean root and checks what
# a user would see there: `pfprof --version`, `man pfprof`, the completions, a profile
# run, `dkms status` with the module DKMS built for the root's kernel, and, in the
# Debian 13 root, a kernel's headers installed afterwards getting their build too;
# then `apt remove pfprof-dkms` takes the modules away. One line per check and
# "N passed, M failed" at the end; exits 1 if any check failed.
#
#   tests/package/run.sh OUT
#   tests/package/run.sh --prepare   # only make the two clean roots' cached bases
#                                    # and the lintian roots
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
# Each release's lintian runs where that release is: this machine's when it is that
# release (Debian 12's, where CI builds the packages), else a Debian root with lintian
# (tests/vm/debian-root.sh's tool roots in ~/.cache/pfprof/roots, the one the fleet test
# and the 7.x kernels' builds use for Debian 13), never the clean roots: what lintian
# pulls in would hide a dependency the packages miss.
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
# The tool roots' cache, as the other tests name it (before the bases' takes the name).
tool_roots=${PFPROF_ROOT_CACHE:-$cache/roots}
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
# The releases whose lintian checks the packages.
lintian_releases=(bookworm trixie)
host_release=$(. /etc/os-release && echo "${VERSION_CODENAME-}")
# lintian_root RELEASE: the Debian root whose lintian is RELEASE's, made once and
# cached; nothing when this machine is RELEASE (its own lintian is).
lintian_root() {
	[[ $1 != "$host_release" ]] || return 0
	PFPROF_ROOT_CACHE=$tool_roots bash "$repo/tests/vm/debian-root.sh" "$1" lintian
}
if [[ $1 == --prepare ]]; then
	for release in "${releases[@]}"; do
		# shellcheck disable=SC2086 # a release and its suite option
		package_base $release >/dev/null
	done
	for release in "${lintian_releases[@]}"; do
		lintian_root "$release" >/dev/null
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

# lintian of each release: errors fail; warnings and notes are printed for the reader
# (docs/testing.md says why each one stays).
# lintian_of RELEASE ARGS...: RELEASE's lintian with ARGS; with --check, ARGS are
# lintian's options and the packages follow them.
lintian_of() {
	local release=$1 root debs=()
	shift
	root=$(lintian_root "$release") || return 1
	if [[ $1 == --check ]]; then
		shift
		debs=("$out"/debs/*.deb)
	fi
	if [[ -z $root ]]; then
		lintian "$@" "${debs[@]}"
		return
	fi
	# The packages inside the root, for the time of the run.
	local inside=/tmp/pfprof-lintian.$$ status=0
	mkdir -p "$root$inside"
	if ((${#debs[@]})); then
		cp "${debs[@]}" "$root$inside/"
		set -- "$@" "${debs[@]/#"$out/debs"/$inside}"
	fi
	vm_in_root "$root" lintian "$@" || status=$?
	rm -rf "${root:?}$inside"
	return "$status"
}
for release in "${lintian_releases[@]}"; do
	lintian_no_errors() {
		local said=$out/lintian-$release.txt
		lintian_of "$release" --version >"$said" 2>&1 || { cat "$said"; return 1; }
		lintian_of "$release" --check --fail-on error --display-info >>"$said" 2>&1 ||
			{ cat "$said"; return 1; }
	}
	check "$release's lintian: no errors" lintian_no_errors
	grep -v '^running with root' "$out/lintian-$release.txt" | sed "s/^/    $release's lintian says: /" || true
done

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
		local section
		contains "man pfprof" "pfprof - Per-process page-fault profiler" man_page pfprof &&
			contains "man pfprof" "pfprof run -- sort -o sorted.txt big.txt" man_page pfprof &&
			for section in OUTPUT "EXIT STATUS" ENVIRONMENT EXAMPLES "SEE ALSO"; do
				contains "man pfprof" "$section" man_page pfprof || return 1
			done &&
			contains "man pfprof-run" "pfprof-run - Run a command" man_page pfprof-run &&
			contains "man pfprof-work" "pfprof-work - Workload generator" man_page pfprof-work
	}
	check "$release: man pfprof (OUTPUT, EXIT STATUS, ENVIRONMENT...), man pfprof-run and man pfprof-work" manual_pages
	# complete WORDS...: what the installed bash completion offers for the command line
	# WORDS (the last the word being completed), one a line.
	complete_words() {
		# shellcheck disable=SC2016 # expanded by the root's bash
		in_root "$root" bash -c '
			. /usr/share/bash-completion/completions/pfprof || exit 1
			COMP_WORDS=("$@") COMP_CWORD=$(($# - 1)) COMP_LINE="$*" COMP_POINT=${#COMP_LINE}
			function=$(complete -p pfprof | sed -n "s/.*-F \([^ ]*\) .*/\1/p")
			"$function" pfprof "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}" 2>/dev/null
			printf "%s\n" "${COMPREPLY[@]}"' bash "$@"
	}
	# -p <TAB>: process ids, and nothing else.
	pids_offered() {
		local got
		got=$(complete_words pfprof -p '') || return 1
		[[ -n $got ]] && ! grep -qv '^[0-9][0-9]*$' <<<"$got" ||
			{ printf 'pfprof -p <TAB>: not process ids:\n%s\n' "$got"; return 1; }
	}
	completions() {
		expect "pfprof --mode <TAB>" $'strict\nrelaxed' complete_words pfprof --mode '' &&
			pids_offered &&
			contains "pfprof run -- so<TAB>" "sort" complete_words pfprof run -- so &&
			test -s "$root/usr/share/zsh/vendor-completions/_pfprof" &&
			test -s "$root/usr/share/fish/vendor_completions.d/pfprof.fish"
	}
	check "$release: bash completes pfprof's modes, pids and the command after run --; zsh's and fish's are in place" completions
	check "$release: pfprof run profiles pfprof-work (procfs backend)" \
		contains "pfprof run" '"minor_faults"' in_root "$root" sh -c \
		'pfprof run -q --backend procfs --summary /tmp/summary.json -- pfprof-work 4 R 2000 2 --sleep-ms 20 && cat /tmp/summary.json'
	# The units the package installs, where dpkg says it put them.
	units_installed() { in_root "$root" dpkg -L pfprof | grep '/systemd/system/.' | sort; }
	not_enabled() {
		expect "units" $'/usr/lib/systemd/system/pfprof-fleet.service\n/usr/lib/systemd/system/pfprof-monitor@.service' \
			units_installed &&
			test -s "$root/usr/lib/systemd/system/pfprof-monitor@.service" &&
			test -s "$root/usr/lib/systemd/system/pfprof-fleet.service" &&
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
