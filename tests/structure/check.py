#!/usr/bin/env python3
"""The imports go one way (docs/design.md, "What calls what"): no cycle among the
monitor's modules (its crate:: and super:: paths, comments and unit tests left out),
and none among the module's files (their calls of one another's pfprof_ functions) but
through the three callbacks design.md names. Prints each cycle found; exits 1 if any.

    tests/structure/check.py [REPO]
"""
import re
import sys
from pathlib import Path

# The module's calls back up the layers, each said where it is called.
CALLBACKS = {('exec', 'session'), ('lineage', 'session'), ('exec', 'faults'), ('faults', 'sampler')}


def cycles(edges):
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def monitor_edges(src):
    files = {}
    for p in src.rglob('*.rs'):
        parts = list(p.relative_to(src).with_suffix('').parts)
        if parts[0] == 'bin':
            continue
        if parts[-1] in ('mod', 'lib', 'main'):
            parts = parts[:-1]
        files[tuple(parts)] = p

    def resolve(path):
        for n in range(len(path), 0, -1):
            if tuple(path[:n]) in files:
                return tuple(path[:n])
        return None

    edges = {m: set() for m in files}
    for mod, p in files.items():
        text = re.sub(r'#\[cfg\(test\)\]\s*mod tests\s*\{.*', '', p.read_text(), flags=re.S)
        text = re.sub(r'//[^\n]*', '', text)
        paths = [m.group(1).split('::') for m in re.finditer(r'\bcrate::((?:\w+::)*\w+)', text)]
        for m in re.finditer(r'use crate::\{([^;]*)\};', text, re.S):
            paths += [i.strip().split('::{')[0].split('::')
                      for i in re.split(r',\s*', m.group(1)) if i.strip()]
        paths += [list(mod[:-1]) + m.group(1).split('::')
                  for m in re.finditer(r'\bsuper::((?:\w+::)*\w+)', text)]
        for path in paths:
            target = resolve(path)
            if target and target != mod:
                edges[mod].add(target)
    return {'/'.join(k) or 'lib': {'/'.join(t) or 'lib' for t in v} for k, v in edges.items()}


def module_edges(kmod):
    defined = {}
    for f in kmod.glob('*.c'):
        for m in re.finditer(r'^(?!static)[a-z][\w \*]*?\b(pfprof_\w+)\(', f.read_text(), re.M):
            defined[m.group(1)] = f.stem
    edges = {}
    for f in kmod.glob('*.c'):
        text = re.sub(r'/\*.*?\*/', '', f.read_text(), flags=re.S)
        for m in re.finditer(r'\b(pfprof_\w+)\s*\(', text):
            target = defined.get(m.group(1))
            if target and target != f.stem and (f.stem, target) not in CALLBACKS:
                edges.setdefault(f.stem, set()).add(target)
    return edges


def main():
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[2])
    bad = 0
    for what, edges in (('monitor/src', monitor_edges(repo / 'monitor/src')),
                        ('kmod, but for its three callbacks', module_edges(repo / 'kmod'))):
        for component in cycles(edges):
            bad += 1
            print(f'a cycle in {what}: ' + ' '.join(component))
            for a in component:
                for b in sorted(edges.get(a, ())):
                    if b in component:
                        print(f'    {a} -> {b}')
    print('imports go one way' if not bad else f'{bad} cycles')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
