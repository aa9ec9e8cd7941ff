#!/usr/bin/env bash
# The README's three quick starts, checked as written, on a machine without a
# GPU:
#
#   - Rust: the README's program is the first program of
#     docs/getting_started.md, word for word; the doc tests compile that one
#     (guide::getting_started).
#   - C: the README's program, built against the C library that
#     `capi/install.sh --backend cuda` installs into a temporary prefix,
#     compiled and linked through pkg-config, and run: without the vendor
#     runtime it must print the status's text and exit 1.
#   - Python: the README's code must compile, and every `somalloc...` name it
#     uses must exist once the package's Python modules are imported (with a
#     stand-in for the compiled extension, which this check does not build).
#
#   bash ci/readme-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The README's fenced blocks of one language, each into DIR/N.EXT.
python3 - "$work" <<'PY'
import re, sys
work = sys.argv[1]
text = open("README.md", encoding="utf-8").read()
blocks = re.findall(r"(?ms)^```([a-z]+)[^\n]*\n(.*?)^```\s*$", text)
count = {}
for lang, body in blocks:
    count[lang] = count.get(lang, 0) + 1
    open("%s/%s%d.%s" % (work, lang, count[lang], lang), "w").write(body)
for lang in ("rust", "c", "python"):
    if count.get(lang) != 1:
        sys.exit("readme-check: expected one %s block in README.md, found %d" % (lang, count.get(lang, 0)))
PY

# Rust: the same program as the guide's first one (whose doc test compiles it).
python3 - "$work/rust1.rust" <<'PY'
import re, sys
readme = open(sys.argv[1], encoding="utf-8").read()
guide = open("docs/getting_started.md", encoding="utf-8").read()
first = re.search(r"(?ms)^```rust[^\n]*\n(.*?)^```\s*$", guide)
if not first:
    sys.exit("readme-check: docs/getting_started.md has no Rust block")
# Lines the guide hides from the reader (`# ...`) are not in the README.
shown = "".join(l for l in first.group(1).splitlines(True) if not re.match(r"^\s*# ", l) and l.strip() != "#")
if shown != readme:
    sys.exit("readme-check: the README's Rust program is not the first program of docs/getting_started.md")
print("ok   rust: the README's program is the guide's first, compiled by its doc test")
PY

# C: install the library as the README says, then build and run its program.
if ! command -v pkg-config >/dev/null 2>&1; then
  tools=${SOMALLOC_TOOLS:-$HOME/.cache/somalloc}
  mkdir -p "$tools"
  (
    flock 9
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    echo "readme-check: installing pkg-config with apt" >&2
    $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq pkg-config
  ) 9>>"$tools/setup-rocm.lock"
fi
prefix=$work/prefix
bash capi/install.sh --backend cuda --prefix "$prefix" >"$work/install.log" 2>&1 \
  || { cat "$work/install.log" >&2; echo "readme-check: capi/install.sh failed" >&2; exit 1; }
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
unset PKG_CONFIG_LIBDIR SOMALLOC_CONF
# shellcheck disable=SC2046 # pkg-config's flags are words
cc -std=c11 -Wall -Wextra -Werror "$work/c1.c" $(pkg-config --cflags --libs somalloc) \
  -Wl,-rpath,"$prefix/lib" -o "$work/readme-c"
set +e
out=$(SOMALLOC_CUDART=/nonexistent/libcudart.so.13 "$work/readme-c" 2>&1)
rc=$?
set -e
echo "$out"
if [ "$rc" -ne 1 ] || ! grep -q "SOMALLOC_STATUS_RUNTIME_NOT_FOUND" <<<"$out"; then
  echo "readme-check: the README's C program, run without the runtime, exited $rc without the status's text" >&2
  exit 1
fi
echo "ok   c: built through pkg-config against the installed library, and ran"

# Python: compiles, and names only what the package has.
python3 - "$work/python1.python" <<'PY'
import ast, sys, types
src = open(sys.argv[1], encoding="utf-8").read()
tree = ast.parse(src, "README.md (python)")
compile(tree, "README.md (python)", "exec")
# Names used, commented-out lines included (the README shows alternatives as comments).
import re
names = set()
for node in ast.walk(tree):
    if isinstance(node, ast.Attribute):
        parts = []
        n = node
        while isinstance(n, ast.Attribute):
            parts.append(n.attr)
            n = n.value
        if isinstance(n, ast.Name) and n.id == "somalloc":
            names.add(".".join(["somalloc"] + parts[::-1]))
for line in src.splitlines():
    if line.lstrip().startswith("#"):
        names.update(re.findall(r"\bsomalloc(?:\.[A-Za-z_]\w*)+", line))
# The package without its compiled extension: a stand-in module answers for it.
class Native(types.ModuleType):
    class SomallocError(Exception):
        pass
    def __getattr__(self, name):
        return lambda *a, **k: None
sys.modules["somalloc._native"] = Native("somalloc._native")
sys.path.insert(0, "python")
import importlib
missing = []
for name in sorted(names):
    parts = name.split(".")
    obj, i = None, len(parts)
    while i > 0:  # the longest importable module prefix
        try:
            obj = importlib.import_module(".".join(parts[:i]))
            break
        except ImportError:
            i -= 1
    for attr in parts[i:]:
        if not hasattr(obj, attr):
            missing.append(name)
            break
        obj = getattr(obj, attr)
if missing:
    sys.exit("readme-check: the README's Python uses names the package does not have: %s" % ", ".join(missing))
print("ok   python: compiles; %s exist" % ", ".join(sorted(names)))
PY
echo "readme-check: the three quick starts hold"
