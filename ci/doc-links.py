#!/usr/bin/env python3
"""Dead relative links in the repository's Markdown pages.

    python3 ci/doc-links.py            # check; prints each dead link, exits 1 if any
    python3 ci/doc-links.py FILE.md..  # check only these pages

Pages: README.md, CHANGELOG.md, docs/*.md, benches/*.md and every README.md
of a folder. Every link that is not a URL (`[text](path)`, `[text](path#anchor)`,
`![alt](path)`, and reference links `[text][label]` with their `[label]: path`
definitions) must name an existing file or folder, relative to the page; an
`#anchor` into a Markdown page (or `#anchor` alone, into the page itself) must
be one of its headings' GitHub anchors. A destination such as
`crate::guide::graphs` is a rustdoc path: it is not a file, so it is dead on
GitHub and reported.

The pages of docs/ that src/guide.rs includes into the crate docs are also
read by rustdoc, where a relative link to `graphs.md` is dead. There, every
relative link must be a reference link whose label src/guide.rs maps to a
rustdoc path or a URL (its `page!` macro puts those definitions before the
page, and the first definition of a label wins), for example
`[Graphs][graphs.md]` with `[graphs.md]: graphs.md` at the page's end.
"""

import os
import re
import sys
import unicodedata
from urllib.parse import unquote

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SKIP_DIRS = {"target", "dist", "node_modules", "__pycache__"}
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:(?!:)")  # http:, https:, mailto: (not crate::)


def pages():
    out = [os.path.join(ROOT, "README.md"), os.path.join(ROOT, "CHANGELOG.md")]
    for folder in ("docs", "benches"):
        d = os.path.join(ROOT, folder)
        out += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".md"))
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and not x.startswith("."))
        if "README.md" in files:
            out.append(os.path.join(d, "README.md"))
    seen, unique = set(), []
    for p in out:
        if os.path.isfile(p) and p not in seen:
            seen.add(p)
            unique.append(p)
    return unique


def blank(match):
    """The match with every character but newlines made a space (so offsets
    and line numbers stay)."""
    return re.sub(r"[^\n]", " ", match.group(0))


def prose(text):
    """The page with fenced code blocks, code spans and HTML comments blanked."""
    lines, out, fence = text.split("\n"), [], None
    for line in lines:
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if fence is None and m:
            fence = m.group(1)
            out.append(" " * len(line))
        elif fence is not None:
            if re.match(r"^ {0,3}" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence), line):
                fence = None
            out.append(" " * len(line))
        else:
            out.append(line)
    text = "\n".join(out)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", blank, text, flags=re.S)
    return text


def slug(heading):
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links: their text
    text = re.sub(r"!?\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_" or cat[0] in "LN" or cat == "Mn":
            out.append(ch)
        elif ch == " ":
            out.append("-")
    return "".join(out)


_anchors = {}


def anchors(path):
    """Every anchor GitHub makes in a Markdown page (repeated headings get
    -1, -2, ...), and the ids of its HTML anchors."""
    if path in _anchors:
        return _anchors[path]
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    lines = prose(text).split("\n")
    raw = text.split("\n")
    found, count = set(), {}

    def add(heading):
        s = slug(heading)
        n = count.get(s, 0)
        count[s] = n + 1
        found.add(s if n == 0 else "%s-%d" % (s, n))

    for i, line in enumerate(lines):
        m = re.match(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$", line)
        if m:
            # The heading's own text, code spans included.
            r = re.match(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$", raw[i])
            add((r.group(1) if r else m.group(2)) or "")
            continue
        if (
            i > 0
            and re.match(r"^ {0,3}(=+|-+)[ \t]*$", line)
            and lines[i - 1].strip()
            and not re.match(r"^ {0,3}([-*+]|\d+[.)]|>|#|\|)", lines[i - 1])
        ):
            add(raw[i - 1].strip())
    for m in re.finditer(r"<a\s[^>]*(?:name|id)=\"([^\"]+)\"", text):
        found.add(m.group(1))
    _anchors[path] = found
    return found


def norm_label(label):
    return re.sub(r"\s+", " ", label.strip()).lower()


def guide_pages():
    """The pages of docs/ that src/guide.rs includes, and the labels its
    `page!` macro defines for rustdoc."""
    path = os.path.join(ROOT, "src", "guide.rs")
    with open(path, encoding="utf-8") as fh:
        code = fh.read()
    included = {
        os.path.normpath(os.path.join(ROOT, "docs", m.group(1)))
        for m in re.finditer(r"page!\(\s*\"([^\"]+\.md)\"\s*\)", code)
    }
    for m in re.finditer(r"include_str!\(\s*\"([^\"]+\.md)\"\s*\)", code):
        if "docs/" in m.group(1):
            included.add(os.path.normpath(os.path.join(os.path.dirname(path), m.group(1))))
    labels = {norm_label(m.group(1)) for m in re.finditer(r"\"\[([^\]]+)\]: [^\s\"\\]+", code)}
    return included, labels


def check(path, included, rustdoc_labels):
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    body = prose(text)
    rel = os.path.relpath(path, ROOT)
    in_guide = path in included
    dead = []

    def line_of(offset):
        return body.count("\n", 0, offset) + 1

    def resolve(dest, offset, how):
        dest = dest.strip()
        if dest.startswith("<") and dest.endswith(">"):
            dest = dest[1:-1]
        if not dest or URL.match(dest):
            return
        target, _, anchor = dest.partition("#")
        target = unquote(target)
        if target:
            full = os.path.normpath(os.path.join(os.path.dirname(path), target))
            if not os.path.exists(full):
                hint = " (a rustdoc path: not a file on GitHub)" if "::" in target else ""
                dead.append((line_of(offset), dest, "no such file%s" % hint))
                return
        else:
            full = path
        if anchor and full.endswith(".md") and os.path.isfile(full):
            if unquote(anchor).lower() not in anchors(full):
                dead.append((line_of(offset), dest, "no heading with this anchor in %s" % os.path.relpath(full, ROOT)))
                return
        if in_guide and how != "rustdoc-ok" and not (target == "" and anchor):
            dead.append(
                (
                    line_of(offset),
                    dest,
                    "dead in the crate docs (src/guide.rs includes this page): "
                    "use a reference link whose label src/guide.rs maps",
                )
            )

    # Reference definitions: `[label]: dest` at the start of a line.
    defs = {}
    for m in re.finditer(r"(?m)^ {0,3}\[([^\]]+)\]:[ \t]*(<[^>]*>|\S+)", body):
        defs.setdefault(norm_label(m.group(1)), (m.group(2), m.start(2)))
    used = set()
    # Inline links and images.
    for m in re.finditer(r"\]\(\s*(<[^>\n]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)", body):
        resolve(m.group(1), m.start(1), "inline")
    # Full and collapsed reference links: [text][label], [label][].
    for m in re.finditer(r"\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\[([^\[\]]*)\]", body):
        label = norm_label(m.group(2) or m.group(1))
        if label not in defs:
            dead.append((line_of(m.start()), "[%s]" % label, "no definition of this label on the page"))
            continue
        used.add(label)
        dest, off = defs[label]
        resolve(dest, off, "rustdoc-ok" if label in rustdoc_labels else "reference")
    # Shortcut reference links [label] with a definition on the page.
    for m in re.finditer(r"(?<![\]\\])\[([^\[\]]+)\](?![\[(:])", body):
        label = norm_label(m.group(1))
        if label in defs and label not in used:
            used.add(label)
            dest, off = defs[label]
            resolve(dest, off, "rustdoc-ok" if label in rustdoc_labels else "reference")
    # Definitions no link uses are still checked (GitHub shows nothing, but a
    # stale one hides a typo).
    for label, (dest, off) in defs.items():
        if label not in used:
            resolve(dest, off, "rustdoc-ok" if label in rustdoc_labels else "reference")
    return [(rel, line, dest, why) for line, dest, why in sorted(set(dead))]


def main(argv):
    included, labels = guide_pages()
    files = [os.path.abspath(a) for a in argv] or pages()
    dead = []
    for path in files:
        dead += check(os.path.normpath(path), included, labels)
    for rel, line, dest, why in dead:
        print("%s:%d: dead link %s: %s" % (rel, line, dest, why))
    print("%d pages, %d dead links" % (len(files), len(dead)))
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
