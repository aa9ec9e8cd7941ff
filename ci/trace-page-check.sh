#!/usr/bin/env bash
# The trace viewer's page in a real browser, no GPU needed: makes a synthetic
# trace of 1,000,000 events, renders its page with somalloc-trace, opens it
# in headless Chromium (Debian's `chromium`, installed when missing), and
# fails on any script error or when the first picture takes 2 s or more.
# Keeps the page's DOM and a screenshot under target/ci-logs/trace-page/.
#
#   bash ci/trace-page-check.sh
#
# The page writes its state into the DOM: `data-state="drawn"` and
# `data-first-picture-ms` (performance.now() once both charts are drawn) on
# #status, and every script error into #errors; opened with #selftest it
# also hovers over two blocks and writes whether the tip showed their size,
# stream and backtrace (`data-hover`). A broken copy of the page
# (a script that throws) must be caught the same way, so the check is known
# to see errors.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/ci-logs/trace-page
limit_ms=${TRACE_PAGE_LIMIT_MS:-2000}
mkdir -p "$out"

if ! command -v chromium >/dev/null 2>&1; then
  echo "trace-page: installing chromium with apt"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >/dev/null
fi
chromium --version

cargo build --quiet --release -p somalloc-trace
tool=${CARGO_TARGET_DIR:-target}/release/somalloc-trace
"$tool" synth --events 1000000 -o "$out/synthetic-1m.trace"
"$tool" summary "$out/synthetic-1m.trace" --top 5 >"$out/summary.txt"
"$tool" html "$out/synthetic-1m.trace" -o "$out/synthetic-1m.html"

browser() {
  timeout 120 chromium --headless --disable-gpu --no-sandbox --hide-scrollbars \
    --window-size=1400,1000 "$@" 2>>"$out/chromium.log"
}

# state FILE: the page's state after load, from its DOM.
state() {
  grep -o 'id="status" data-state="[a-z]*"' "$1" | sed -E 's/.*data-state="([a-z]*)"/\1/' || true
}

page="file://$PWD/$out/synthetic-1m.html"
# #selftest: the page also hovers over two blocks and checks its tip.
browser --dump-dom "$page#selftest" >"$out/dom.html"
st=$(state "$out/dom.html")
hover=$(grep -o 'data-hover="[^"]*"' "$out/dom.html" | sed -E 's/data-hover="(.*)"/\1/' || true)
errors=$(sed -n 's/.*<div id="errors">\([^<]*\)<\/div>.*/\1/p' "$out/dom.html")
ms=$(grep -o 'data-first-picture-ms="[0-9]*"' "$out/dom.html" | grep -o '[0-9]*' || true)
echo "trace-page: state '$st', first picture after ${ms:-?} ms, hover '$hover', errors '${errors}'"
failed=0
if [ "$st" != drawn ] || [ -n "$errors" ] || [ -z "$ms" ]; then
  echo "trace-page: the page did not draw cleanly (see $out/dom.html)"
  failed=1
elif [ "$hover" != ok ]; then
  echo "trace-page: hovering over a block did not show its size, stream and backtrace: $hover"
  failed=1
elif [ "$ms" -ge "$limit_ms" ]; then
  echo "trace-page: first picture after $ms ms, the limit is $limit_ms ms"
  failed=1
fi
browser --screenshot="$PWD/$out/page.png" "$page" >/dev/null
if [ ! -s "$out/page.png" ]; then
  echo "trace-page: no screenshot"
  failed=1
fi

# The control: a copy whose script throws after drawing must read as an error.
sed 's|  drawBlocks();$|  drawBlocks(); null.broken = 1;|' "$out/synthetic-1m.html" >"$out/broken.html"
grep -q 'null.broken' "$out/broken.html" || { echo "trace-page: could not make the broken copy"; exit 1; }
browser --dump-dom "file://$PWD/$out/broken.html" >"$out/broken-dom.html"
if [ "$(state "$out/broken-dom.html")" != error ] || ! grep -q 'script error: ' "$out/broken-dom.html"; then
  echo "trace-page: a script error in the page went unseen"
  failed=1
fi

if [ "$failed" -ne 0 ]; then
  echo "trace-page: 0 passed, 1 failed"
  exit 1
fi
echo "trace-page: page of 1000000 events drawn in $ms ms (limit $limit_ms), screenshot $out/page.png"
echo "trace-page: 1 passed, 0 failed"
