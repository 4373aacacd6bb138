#!/usr/bin/env python3
"""Every relative link of README.md and docs/*.md leads somewhere: to a file or folder
of the repository and, with a #fragment, to a heading of that file (GitHub's anchors).
Prints each broken link; exits 1 if any.

    tests/structure/links.py [REPO]
"""
import re
import sys
from pathlib import Path

LINK = re.compile(r'\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)\)')


def prose(text):
    """The text outside fenced code blocks and inline code."""
    text = re.sub(r'^```.*?^```', '', text, flags=re.S | re.M)
    return re.sub(r'`[^`\n]*`', '', text)


def anchors(path):
    """The anchors GitHub gives the file's headings."""
    found, seen = set(), {}
    for line in re.sub(r'^```.*?^```', '', path.read_text(), flags=re.S | re.M).splitlines():
        m = re.match(r'#{1,6}\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        title = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', m.group(1)).replace('`', '')
        slug = re.sub(r'[^\w\- ]', '', title.lower()).replace(' ', '-')
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f'{slug}-{n}')
    return found


def main():
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    bad = 0
    for doc in [repo / 'README.md', *sorted((repo / 'docs').glob('*.md'))]:
        for target in LINK.findall(prose(doc.read_text())):
            if re.match(r'[a-z][a-z0-9+.-]*:', target):
                continue  # http:, https:, mailto:
            path, _, fragment = target.partition('#')
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.exists():
                why = 'no such file'
            elif fragment and dest.suffix == '.md' and fragment not in anchors(dest):
                why = 'no such heading'
            else:
                continue
            bad += 1
            print(f'{doc.relative_to(repo)}: ({target}): {why}')
    print('every relative link leads somewhere' if not bad else f'{bad} broken links')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
