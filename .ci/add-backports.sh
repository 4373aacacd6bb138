#!/usr/bin/env bash
# Adds the backports suite of this Debian release (bookworm-backports on
# Debian 12) by copying the machine's own Debian apt source entry with only
# the suite changed (tests/vm/debian-sources.py): no mirror host is written
# anywhere. Does nothing when the suite is already there. Run as root;
# `apt-get update` afterwards.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
suite="$codename-backports"
if grep -rqs "$suite" /etc/apt/sources.list /etc/apt/sources.list.d/; then exit 0; fi
entry=$(python3 "$repo/tests/vm/debian-sources.py" entry "$suite")
if [[ $entry == Types:* ]]; then ext=sources; else ext=list; fi
printf '%s\n' "$entry" >"/etc/apt/sources.list.d/pfprof-backports.$ext"
