#!/usr/bin/env python3
"""The machine's own Debian apt source entry, so that no mirror host is ever
written into the repository.

    debian-sources.py mirror              # the URI of the release's main archive
    debian-sources.py entry SUITE         # the release's entry with its suite
                                          # replaced by SUITE (deb822 or one-line)

Reads /etc/apt/sources.list.d/*.sources (deb822) first, then the one-line
/etc/apt/sources.list and sources.list.d/*.list. Exits 1 with a message when
the release has no entry.
"""
import glob
import sys


def release():
    with open('/etc/os-release') as f:
        for line in f:
            if line.startswith('VERSION_CODENAME='):
                return line.split('=', 1)[1].strip().strip('"')
    sys.exit('debian-sources.py: no VERSION_CODENAME in /etc/os-release')


def deb822_stanzas():
    for path in sorted(glob.glob('/etc/apt/sources.list.d/*.sources')):
        for stanza in open(path).read().split('\n\n'):
            fields = {}
            for line in stanza.splitlines():
                if line.startswith('#') or ':' not in line or line[0].isspace():
                    continue
                key, value = line.split(':', 1)
                fields[key.strip()] = value.strip()
            yield stanza, fields


def one_line_entries():
    paths = ['/etc/apt/sources.list'] + sorted(glob.glob('/etc/apt/sources.list.d/*.list'))
    for path in paths:
        try:
            lines = open(path).read().splitlines()
        except FileNotFoundError:
            continue
        for line in lines:
            words = line.split()
            if len(words) >= 3 and words[0] == 'deb':
                yield words


def find(codename):
    """(kind, entry): the deb822 stanza or the one-line entry's words of the
    release's main suite."""
    for stanza, fields in deb822_stanzas():
        if codename in fields.get('Suites', '').split() and 'deb' in fields.get('Types', '').split():
            return 'deb822', (stanza, fields)
    for words in one_line_entries():
        if codename in words[2:]:
            return 'line', words
    sys.exit(f'debian-sources.py: no Debian apt source entry for {codename}')


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ('mirror', 'entry') or \
            (sys.argv[1] == 'entry') != (len(sys.argv) == 3):
        sys.exit(__doc__.strip())
    kind, entry = find(release())
    if sys.argv[1] == 'mirror':
        if kind == 'deb822':
            print(entry[1]['URIs'].split()[0])
        else:
            # deb [options] URI suite component...
            print(next(w for w in entry[1:] if '://' in w))
        return
    suite = sys.argv[2]
    if kind == 'deb822':
        lines = [l for l in entry[0].splitlines() if not l.startswith('#')]
        print('\n'.join(f'Suites: {suite}' if l.startswith('Suites:') else l for l in lines))
    else:
        codename = release()
        print(' '.join(suite if w == codename else w for w in entry))


if __name__ == '__main__':
    main()
