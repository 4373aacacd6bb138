#!/usr/bin/env bash
# Adds the backports suite of this Debian release (bookworm-backports on
# Debian 12) by copying the machine's own Debian apt source entry with only
# the suite changed: no mirror host is written anywhere. Does nothing when the
# suite is already there. Run as root; `apt-get update` afterwards.
set -euo pipefail
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
suite="$codename-backports"
dest=/etc/apt/sources.list.d/pfprof-backports.sources
if grep -rqs "$suite" /etc/apt/sources.list /etc/apt/sources.list.d/; then exit 0; fi
python3 - "$codename" "$suite" "$dest" <<'PY'
import glob, sys
codename, suite, dest = sys.argv[1:]
out = None
for path in sorted(glob.glob('/etc/apt/sources.list.d/*.sources')):
    for stanza in open(path).read().split('\n\n'):
        fields = {}
        for line in stanza.splitlines():
            if line.startswith('#') or ':' not in line or line[0].isspace():
                continue
            k, v = line.split(':', 1)
            fields[k.strip()] = v.strip()
        if codename in fields.get('Suites', '').split() and 'deb' in fields.get('Types', '').split():
            lines = [l for l in stanza.splitlines() if not l.startswith('#')]
            out = '\n'.join(f'Suites: {suite}' if l.startswith('Suites:') else l for l in lines) + '\n'
            break
    if out: break
if out is None:
    for path in ['/etc/apt/sources.list'] + sorted(glob.glob('/etc/apt/sources.list.d/*.list')):
        try: lines = open(path).read().splitlines()
        except FileNotFoundError: continue
        for l in lines:
            w = l.split()
            if len(w) >= 3 and w[0] == 'deb':
                i = next((i for i in range(1, len(w)) if w[i] == codename), None)
                if i is not None:
                    w[i] = suite
                    out = ' '.join(w) + '\n'; dest = dest.replace('.sources', '.list'); break
        if out: break
if out is None:
    sys.exit(f'no Debian apt source entry for {codename} to copy')
open(dest, 'w').write(out)
PY
