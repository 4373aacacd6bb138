#!/usr/bin/env python3
"""Runs the litmus tests of shared-layout/litmus, and their mutants: each test
with one barrier weakened. TEST_DIR/lkmm holds tests of the kernel's side
against the user-space side, under the Linux kernel memory model (the Rust
side's atomics written as the model's closest primitives); TEST_DIR/rc11,
tests of the user-space side alone, in C11 atomics under RC11, the model of
Rust's (C++'s) atomics.

    check.py --root SID_ROOT --lkmm MODEL_DIR --tests TEST_DIR [--show]

Every test must say Never, with no data race flagged. A line of a test that stands for a barrier ends
with "// barrier: ID..." (the code sites it stands for, file:function). For
each ID, a mutant of every test that has it weakens those lines (a release
or an acquire to a plain access, a fully ordered or acquire read-modify-write
to a relaxed one, smp_mb() to nothing), and TEST_DIR/barriers says, per ID,
which tests' mutants must then say Sometimes: those the barrier is needed
by. The others must still say Never, and "-" marks a barrier no test needs.
herd7 runs in SID_ROOT (tests/vm/debian-root.sh sid herdtools7), with the
tests and the model bind-mounted into a private mount namespace. --show
prints herd7's output of each failing test. Ends with "N passed, M failed".
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

BARRIER = re.compile(r'//\s*barrier:\s*(.*)$')
# Each barrier weakened to what the code would be without it.
WEAKER = [
    (re.compile(r'smp_store_release\((\w+), '), r'WRITE_ONCE(*\1, '),
    (re.compile(r'smp_load_acquire\((\w+)\)'), r'READ_ONCE(*\1)'),
    (re.compile(r'\bcmpxchg_acquire\('), 'cmpxchg_relaxed('),
    (re.compile(r'\b(atomic_)?(cmpxchg|xchg)\('), r'\1\2_relaxed('),
    (re.compile(r'\b(atomic_inc_return|atomic_fetch_add)\('), r'\1_relaxed('),
    (re.compile(r'\bsmp_mb\(\);'), ''),
    (re.compile(r'\bsmp_(r|w)mb\(\);'), ''),
    (re.compile(r'memory_order_(seq_cst|acq_rel|acquire|release)\b'), 'memory_order_relaxed'),
    (re.compile(r'\batomic_thread_fence\(memory_order_\w+\);'), ''),
]
# How herd7 runs each directory's tests, in the model's directory (lkmm) or
# with a model of its own library (rc11).
MODELS = {
    'lkmm': ['-conf', 'linux-kernel.cfg'],
    'rc11': ['-model', 'rc11.cat'],
}


def barrier_ids(line):
    m = BARRIER.search(line)
    return m.group(1).split() if m else []


def weaken(line):
    code, tag = line.split('//', 1)
    weaker = code
    for pattern, repl in WEAKER:
        weaker = pattern.sub(repl, weaker)
    if weaker == code:
        sys.exit(f'check.py: no barrier to weaken in: {line.strip()}')
    return weaker + '//' + tag


def mutant(lines, idents, name):
    out = [f'C {name}\n']
    for line in lines[1:]:
        out.append(weaken(line) if set(idents) & set(barrier_ids(line)) else line)
    return out


def read_needs(path):
    needs = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        ident, sep, tests = line.partition(' needed by: ')
        if not sep:
            sys.exit(f'{path}:{n}: expected "ID needed by: TEST... | -"')
        needs[ident.strip()] = set() if tests.strip() == '-' else set(tests.split())
    return needs


def herd7(root, lkmm, work, model, files):
    mount = ('mount -t tmpfs tmpfs "$0/mnt" && mkdir "$0/mnt/lkmm" "$0/mnt/tests" && '
             'mount --bind -o ro "$1" "$0/mnt/lkmm" && mount --bind -o ro "$2" "$0/mnt/tests" && '
             'exec chroot "$0" sh -c \'cd /mnt/lkmm && exec herd7 "$@"\' herd7 "$@"')
    cmd = (['unshare', '--mount', '--propagation', 'private', '--', 'sh', '-c', mount,
            str(root), str(lkmm), str(work)] + MODELS[model]
           + [f'/mnt/tests/{f}' for f in files])
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f'check.py: herd7 failed ({run.returncode}):\n{run.stderr}{run.stdout}')
    return run.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', type=Path, required=True)
    ap.add_argument('--lkmm', type=Path, required=True)
    ap.add_argument('--tests', type=Path, required=True)
    ap.add_argument('--show', action='store_true')
    args = ap.parse_args()

    tests, model_of = {}, {}
    for model in MODELS:
        for p in sorted((args.tests / model).glob('*.litmus')):
            if p.stem in tests:
                sys.exit(f'check.py: two tests named {p.stem}')
            tests[p.stem] = p.read_text().splitlines(keepends=True)
            model_of[p.stem] = model
    if not tests:
        sys.exit(f'check.py: no .litmus file in {args.tests}/{{{",".join(MODELS)}}}')
    for name, lines in tests.items():
        if lines[0].split() != ['C', name]:
            sys.exit(f'check.py: {name}.litmus must start with "C {name}"')
    needs = read_needs(args.tests / 'barriers')
    sites = {}
    for name, lines in tests.items():
        for line in lines:
            for ident in barrier_ids(line):
                sites.setdefault(ident, set()).add(name)
    for ident in sorted(sites.keys() - needs.keys()):
        sys.exit(f'check.py: barrier {ident} is in {" ".join(sorted(sites[ident]))} '
                 f'but not in {args.tests}/barriers')
    # A pair (ID+ID) is mutated in the tests that have both.
    for pair in [p for p in needs if '+' in p]:
        parts = pair.split('+')
        if not all(part in sites for part in parts):
            sys.exit(f'check.py: {args.tests}/barriers names {pair}, which no test has')
        sites[pair] = set.intersection(*(sites[part] for part in parts))
    for ident in sorted(needs.keys() - sites.keys()):
        sys.exit(f'check.py: {args.tests}/barriers names {ident}, which no test has')
    for ident, names in sorted(needs.items()):
        if not names <= sites[ident]:
            sys.exit(f'check.py: {ident} is said to be needed by '
                     f'{" ".join(sorted(names - sites[ident]))}, which do not have it')

    # (file name, test, barrier or None, expected observation)
    cases = [(f'{name}.litmus', name, None, 'Never') for name in tests]
    for ident, names in sorted(sites.items()):
        for name in sorted(names):
            mutant_name = f'{name}+{re.sub(r"[^A-Za-z0-9-]", "_", ident)}'
            if any(c[1] == mutant_name for c in cases):
                sys.exit(f'check.py: two mutants named {mutant_name}')
            expected = 'Sometimes' if name in needs[ident] else 'Never'
            cases.append((f'{mutant_name}.litmus', mutant_name, ident, expected))

    with tempfile.TemporaryDirectory(prefix='pfprof-litmus.') as work:
        work = Path(work)
        for name, lines in tests.items():
            (work / f'{name}.litmus').write_text(''.join(lines))
        for file, name, ident, _ in cases:
            if ident is not None:
                test = name.split('+', 1)[0]
                (work / file).write_text(''.join(mutant(tests[test], ident.split('+'), name)))
        test_of = {c[0]: c[1].split('+', 1)[0] for c in cases}
        files = {model: [c[0] for c in cases if model_of[test_of[c[0]]] == model]
                 for model in MODELS}
        output = ''.join(herd7(args.root, args.lkmm, work, model, files[model])
                         for model in MODELS if files[model])
        seen = dict(re.findall(r'^Observation (\S+) (\w+)', output, re.M))
        # A test of plain accesses must also be free of data races (LKMM
        # flags them in the test's block, which ends at its Observation).
        raced = {m.group(2) for m in re.finditer(
            r'^Test (\S+).*?^(?:Flag data-race\n.*?)?^Observation (\S+)', output, re.M | re.S)
            if 'Flag data-race' in m.group(0)}
        passed = failed = 0
        for file, name, ident, expected in cases:
            got = seen.get(name, 'missing')
            if ident is None and name in raced:
                got += ', with a data race'
            ok = got == expected
            passed, failed = passed + ok, failed + (not ok)
            what = (f'{name}' if ident is None
                    else f'{name.split("+", 1)[0]} without {ident}')
            print(f'{"ok  " if ok else "FAIL"} {what}: {got}'
                  + ('' if ok else f' (expected {expected})'))
            if not ok and args.show:
                print(herd7(args.root, args.lkmm, work, model_of[test_of[file]], [file]))
    print(f'{passed} passed, {failed} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
