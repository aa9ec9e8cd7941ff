#!/usr/bin/env python3
"""The import graph of the library's top-level modules, from the `crate::`
paths of src/ (comments, strings' contents, and test code left out: files
named tests.rs or under a tests/ folder, and `#[cfg(test)]` items). Fails,
printing the circle, when two modules reach each other.

    python3 ci/layers.py            # check; prints the layers bottom-up
    python3 ci/layers.py --edges    # also every edge with one place it comes from
"""

import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


BACKENDS = os.path.join(ROOT, "..", "backends")


def modules():
    """Top-level module name -> its files (the vendor backends, which
    lib.rs includes from backends/, among them: `common` with the shared
    body, `cuda`, `rocm`)."""
    out = {
        "common": [os.path.join(BACKENDS, f) for f in ("common.rs", "shared.rs", "locations.rs")],
    }
    for vendor in ("cuda", "rocm"):
        d = os.path.join(BACKENDS, vendor)
        out[vendor] = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".rs")]
    for entry in sorted(os.listdir(ROOT)):
        path = os.path.join(ROOT, entry)
        if entry in ("lib.rs",):
            continue
        if os.path.isdir(path):
            name = entry
        elif entry.endswith(".rs"):
            name = entry[:-3]
        else:
            continue
        files = out.setdefault(name, [])
        if os.path.isdir(path):
            for d, _, fs in os.walk(path):
                files += [os.path.join(d, f) for f in fs if f.endswith(".rs")]
        else:
            files.append(path)
    return out


def reexports():
    """Names that lib.rs re-exports or defines at the crate root, and the
    module each leads to (`Active`, the backend in use, counts as `cuda`)."""
    with open(os.path.join(ROOT, "lib.rs")) as fh:
        code = strip(fh.read())
    names = {"Active": "cuda"}
    for m in re.finditer(r"pub use ([a-z_][a-z0-9_]*)::(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*)", code):
        module, what = m.group(1), m.group(2)
        for name in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", what):
            names.setdefault(name, module)
    return names


def is_test_file(path):
    rel = os.path.relpath(path, ROOT)
    parts = rel.split(os.sep)
    base = parts[-1]
    return "tests" in parts[:-1] or base in ("tests.rs",) or base.endswith("_tests.rs") or base == "models.rs"


def strip(text):
    """Removes comments and string contents, then `#[cfg(test)]` items (and
    `#[cfg(doc)]` ones: imports for documentation links only)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""')
            i = j + 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            hashes = re.match(r"r(#*)\"", text[i:]).group(1)
            end = '"' + hashes
            j = text.find(end, i + 2 + len(hashes))
            out.append('""')
            i = n if j < 0 else j + len(end)
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    code = "".join(out)
    # Drop each item that follows #[cfg(test)] or #[cfg(all(loom, test))]...
    result, i = [], 0
    pat = re.compile(r"#\[cfg\((test|doc|all\([^)]*test[^)]*\)|any\([^)]*test[^)]*\))\)\]")
    while True:
        m = pat.search(code, i)
        if not m:
            result.append(code[i:])
            break
        result.append(code[i:m.start()])
        j = m.end()
        # The item: up to its matching closing brace, or its semicolon.
        depth, k = 0, j
        while k < len(code):
            ch = code[k]
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            elif ch == ";" and depth == 0:
                k += 1
                break
            k += 1
        i = k
    return "".join(result)


def graph():
    mods = modules()
    roots = reexports()
    edges = {m: {} for m in mods}
    for m, files in mods.items():
        for f in files:
            if is_test_file(f):
                continue
            with open(f) as fh:
                code = strip(fh.read())
            for mm in re.finditer(r"\bcrate::(\{)?\s*([A-Za-z_][A-Za-z0-9_]*)", code):
                names = [mm.group(2)]
                if mm.group(1):
                    # crate::{a::x, b, c::{..}}: the first segment of each part.
                    depth, k, start = 1, mm.end(1), mm.end(1)
                    body = []
                    while k < len(code) and depth:
                        if code[k] == "{":
                            depth += 1
                        elif code[k] == "}":
                            depth -= 1
                        k += 1
                    body = code[start:k - 1]
                    names, d, cur = [], 0, ""
                    for ch in body:
                        if ch == "{":
                            d += 1
                        elif ch == "}":
                            d -= 1
                        if ch == "," and d == 0:
                            names.append(cur)
                            cur = ""
                        else:
                            cur += ch
                    names.append(cur)
                    names = [re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", x).group(1) for x in names if re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", x)]
                for target in names:
                    target = roots.get(target, target)
                    if target in mods and target != m:
                        line = code.count("\n", 0, mm.start()) + 1
                        edges[m].setdefault(target, "%s:%d" % (os.path.relpath(f, os.path.dirname(ROOT)), line))
    return edges


def sccs(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    edges = graph()
    comps = sccs(edges)
    bad = [c for c in comps if len(c) > 1]
    if "--edges" in sys.argv:
        for m in sorted(edges):
            for t, where in sorted(edges[m].items()):
                print("%s -> %s  (%s)" % (m, t, where))
    if bad:
        for c in bad:
            print("import circle among: %s" % ", ".join(c))
            for m in c:
                for t, where in sorted(edges[m].items()):
                    if t in c:
                        print("  %s -> %s  (%s)" % (m, t, where))
        return 1
    # Layers: a module's layer is one above the highest it imports.
    layer = {}

    def depth(m):
        if m not in layer:
            layer[m] = 1 + max((depth(t) for t in edges[m]), default=-1)
        return layer[m]

    for m in edges:
        depth(m)
    for lv in range(max(layer.values()) + 1):
        print("layer %d: %s" % (lv, ", ".join(sorted(m for m in layer if layer[m] == lv))))
    print("no import circle among %d top-level modules" % len(edges))
    return 0


if __name__ == "__main__":
    sys.exit(main())
