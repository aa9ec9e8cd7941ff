#!/usr/bin/env python3
"""Source files stay small: fails on a source file of LIMIT lines or more
(Rust, C, C++, CUDA, Python), printing each with its length.

    python3 ci/file-sizes.py           # check
    python3 ci/file-sizes.py --all     # also list every file of 600 lines or more

Exempt, and listed as such when they are long:
  * tests: a file whose name contains `tests` (tests.rs, replay_tests.rs,
    tests.py) or that lies under a folder named `tests` (tests/, src/cache/tests/,
    capi/tests/, python/tests/);
  * generated bindings: a file marked `@generated` in its first lines (the
    bindings that ci/bindgen generates from the vendor headers are written
    under target/, which is not read);
  * the files of EXEMPT below, each with its reason.

PENDING names files over the limit that wait for their split (printed on
every run, not failed); it should be empty. A file there that is under the
limit fails the check until it is taken off.
"""

import os
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
LIMIT = 800
EXTENSIONS = (".rs", ".c", ".cc", ".cpp", ".cu", ".h", ".hpp", ".py")
SKIP_DIRS = {"target", "dist", "node_modules", "__pycache__"}

EXEMPT = {
    "backends/shared.rs": "the documented macro: the one body of both vendors' backends",
    "ci/hip-on-cuda/hip_on_cuda.cpp": "the HIP-ABI test library's single C++ file",
}

PENDING = {}


def sources():
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
        for f in sorted(files):
            if f.endswith(EXTENSIONS):
                yield os.path.relpath(os.path.join(d, f), ROOT).replace(os.sep, "/")


def why_exempt(rel, head):
    if rel in EXEMPT:
        return EXEMPT[rel]
    parts = rel.split("/")
    if "tests" in parts[:-1] or "tests" in parts[-1]:
        return "tests"
    if "@generated" in head:
        return "generated"
    return None


def main(argv):
    show_all = "--all" in argv
    long_files, exempt, near = [], [], []
    for rel in sources():
        with open(os.path.join(ROOT, rel), encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
        n = len(lines)
        if n >= LIMIT:
            why = why_exempt(rel, "\n".join(lines[:5]))
            (exempt if why else long_files).append((n, rel, why))
        elif n >= 600:
            near.append((n, rel, None))
    for n, rel, why in sorted(exempt, reverse=True):
        print("exempt  %5d  %s  (%s)" % (n, rel, why))
    if show_all:
        for n, rel, _ in sorted(near, reverse=True):
            print("        %5d  %s" % (n, rel))
    pending = [(n, rel) for n, rel, _ in long_files if rel in PENDING]
    long_files = [x for x in long_files if x[1] not in PENDING]
    for n, rel in pending:
        print("PENDING %5d  %s  (%s): to split by subject" % (n, rel, PENDING[rel]))
    for n, rel, _ in sorted(long_files, reverse=True):
        print("TOO LONG %4d  %s: split it by subject (at most %d lines)" % (n, rel, LIMIT - 1))
    stale = ["EXEMPT names %s, which is not there" % rel for rel in EXEMPT if not os.path.isfile(os.path.join(ROOT, rel))]
    stale += [
        "PENDING names %s, which is not there or under the limit" % rel
        for rel in PENDING
        if rel not in {r for _, r in pending}
    ]
    for line in stale:
        print(line + ": take it off the list")
    print("%d source files of %d lines or more outside the exemptions" % (len(long_files), LIMIT))
    return 1 if long_files or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
