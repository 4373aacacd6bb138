#!/usr/bin/env bash
# pfprof's exporters and cgroup targets against real servers on this machine
# (tests/fleet/fleet.py says what each test checks): Debian's Prometheus,
# Debian 13's VictoriaMetrics in a Debian root (tests/vm/debian-root.sh makes
# and caches it), three network namespaces, a cgroup v2 subtree.
#
#   tests/fleet/run.sh [FILTER...]    # only the tests whose names contain a FILTER
#   tests/fleet/run.sh --prepare      # only make the Debian 13 root (VictoriaMetrics)
#
# Needs root (namespaces, cgroups, chroot), prometheus and promtool (apt:
# prometheus), ip (iproute2), unshare, systemd-analyze, debootstrap, python3,
# openssl (the HTTPS collector's certificates).
# Nothing is skipped: a missing tool fails the run.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"

die() { echo "fleet: $*" >&2; exit 1; }
(($(id -u) == 0)) || die "needs root: network namespaces, cgroups and the Debian root's chroot"
for tool in prometheus promtool ip unshare systemd-analyze debootstrap python3 mount openssl; do
	command -v "$tool" >/dev/null || die "$tool not found (apt-get install prometheus iproute2 util-linux systemd debootstrap python3 openssl)"
done

vm_root=$(bash tests/vm/debian-root.sh trixie victoria-metrics)
[[ ${1-} != --prepare ]] || exit 0
cargo build --release --locked -p monitor --bin monitor --bin work

exec python3 tests/fleet/fleet.py --monitor "$repo/target/release/monitor" \
	--work "$repo/target/release/work" --vm-root "$vm_root" "$@"
