#!/usr/bin/env bash
# Installs the C library as users do (capi/install.sh), both backends into
# one prefix, and checks what was installed, on a machine without a GPU:
#
#   - each library's SONAME (libsomalloc-cuda.so.0, libsomalloc-rocm.so.0)
#     and its two symlinks; the installed header is the committed one;
#   - the second backend's install leaves every file of the first as it was
#     (side by side, nothing collides), and adds only files of its own name
#     besides the shared ones, which are the same for both;
#   - the examples (examples/c: hello.c, raii.cpp) built against the
#     installed tree through pkg-config (their Makefile) and through CMake
#     (find_package(somalloc), somalloc::somalloc), for each backend, and
#     run: the library and header versions and the backend they print, and
#     their no-GPU line (or, on a GPU, the free that leaves nothing live)
#     with exit status 0;
#   - which backend find_package(somalloc) and `somalloc.pc` give: the one
#     installed; with both, the first installed, COMPONENTS, SOMALLOC_BACKEND,
#     or --default's; two components or a later version refused.
#
# One release build per backend (in the usual target directory, so a second
# run rebuilds nothing). Installs cmake, pkg-config, g++, make and binutils
# with apt where missing.
#
#   bash ci/capi-install-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
t0=$SECONDS

# The tools, from apt where missing (taking turns with ci/setup.sh's apt
# installs, which hold the same lock).
missing=()
for tool in cmake:cmake pkg-config:pkg-config g++:g++ make:make readelf:binutils; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  tools=${SOMALLOC_TOOLS:-$HOME/.cache/somalloc}
  mkdir -p "$tools"
  (
    flock 9
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    echo "capi-install: installing ${missing[*]} with apt" >&2
    $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}"
  ) 9>>"$tools/setup-rocm.lock"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
version=$(cargo pkgid -p somalloc-capi)
version=${version##*[@#]}
major=${version%%.*}
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
unset PKG_CONFIG_LIBDIR SOMALLOC_CONF
checks=0

fail() {
  echo "capi-install: FAILED: $*" >&2
  exit 1
}
ok() {
  checks=$((checks + 1))
  echo "ok   $*"
}

# Every file and link under the prefix: its content's hash or its target.
snapshot() {
  (cd "$prefix" && find . \( -type f -o -type l \) | LC_ALL=C sort | while read -r f; do
    if [ -L "$f" ]; then echo "$f -> $(readlink "$f")"; else echo "$f $(sha256sum <"$f" | cut -d' ' -f1)"; fi
  done)
}

# The installed library of backend $1.
check_library() {
  local b=$1 lib="$prefix/lib/libsomalloc-$1.so.$version"
  [ -f "$lib" ] || fail "no $lib"
  readelf -d "$lib" | grep -q "(SONAME) *Library soname: \[libsomalloc-$b.so.$major\]" \
    || fail "$lib: SONAME is not libsomalloc-$b.so.$major: $(readelf -d "$lib" | grep SONAME)"
  [ "$(readlink "$prefix/lib/libsomalloc-$b.so.$major")" = "libsomalloc-$b.so.$version" ] \
    || fail "libsomalloc-$b.so.$major does not point at the library"
  [ "$(readlink "$prefix/lib/libsomalloc-$b.so")" = "libsomalloc-$b.so.$major" ] \
    || fail "libsomalloc-$b.so does not point at libsomalloc-$b.so.$major"
  for sym in somalloc_malloc somalloc_free somalloc_stats somalloc_status_string somalloc_version; do
    nm -D --defined-only "$lib" | grep -qw "$sym" || fail "$lib does not export $sym"
  done
  cmp -s "$prefix/include/somalloc.h" capi/include/somalloc.h || fail "the installed header is not capi/include/somalloc.h"
  [ "$(pkg-config --modversion "somalloc-$b")" = "$version" ] || fail "somalloc-$b.pc: not version $version"
  pkg-config --libs "somalloc-$b" | grep -qw -- "-lsomalloc-$b" || fail "somalloc-$b.pc does not link -lsomalloc-$b"
  ok "$b: libsomalloc-$b.so.$version, SONAME libsomalloc-$b.so.$major, links, symbols, header, somalloc-$b.pc"
}

# Runs the examples built into $2 for backend $1 ($3 says how they were built).
run_examples() {
  local b=$1 dir=$2 how=$3 name out
  for name in hello raii; do
    out=$("$dir/$name" 2>&1) || fail "$how: $name exited with $?: $out"
    echo "$out" | sed "s/^/     [$how] /"
    head -n1 <<<"$out" | grep -qx "$name: somalloc $version ($b), header $version" \
      || fail "$how: $name: not the $b library of version $version, or not its header"
    tail -n1 <<<"$out" | grep -qE "^$name: (no GPU: SOMALLOC_STATUS_[A-Z_]+: |after the (free|scope): live 0,)" \
      || fail "$how: $name: neither the no-GPU line nor a clean free at the end"
  done
  ok "$b: hello and raii built through $how, ran, exit 0"
}

build_pkgconfig() {
  local b=$1 pkg=$2 out="$work/make-$1-$2"
  mkdir -p "$out"
  make -B -s -C examples/c PKG="$pkg" OUT="$out" >"$work/make.log" 2>&1 || { cat "$work/make.log"; fail "make PKG=$pkg"; }
  run_examples "$b" "$out" "pkg-config $pkg"
}

build_cmake() {
  local b=$1 out="$work/cmake-$1-$2"
  shift 2
  cmake -S examples/c -B "$out" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release "$@" >"$work/cmake.log" 2>&1 \
    || { cat "$work/cmake.log"; fail "cmake $*"; }
  grep -q "somalloc $version, backend $b" "$work/cmake.log" || { cat "$work/cmake.log"; fail "cmake $*: not backend $b"; }
  cmake --build "$out" -j 2 >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; fail "cmake --build ($*)"; }
  run_examples "$b" "$out" "CMake${*:+ $*}"
}

# probe EXPECTED FIND-ARGUMENTS [-- CMAKE-OPTIONS]: a project (no compiler)
# calling find_package(FIND-ARGUMENTS); EXPECTED is the backend that
# somalloc::somalloc links, or "refused: TEXT" for a failure that says TEXT.
probe() {
  local expected=$1 args=$2 dir="$work/probe"
  shift 2
  rm -rf "$dir" && mkdir -p "$dir"
  cat >"$dir/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(probe LANGUAGES NONE)
find_package($args)
get_target_property(links somalloc::somalloc INTERFACE_LINK_LIBRARIES)
message(STATUS "probe: \${links}")
EOF
  local log="$work/probe.log"
  if cmake -S "$dir" -B "$dir/build" -DCMAKE_PREFIX_PATH="$prefix" "$@" >"$log" 2>&1; then
    grep -q "probe: somalloc::$expected\$" "$log" || { cat "$log"; fail "find_package($args)${*:+ $*}: not somalloc::$expected"; }
    ok "find_package($args)${*:+ $*}: somalloc::somalloc -> somalloc::$expected"
  else
    [[ "$expected" == refused:* ]] || { cat "$log"; fail "find_package($args)${*:+ $*}: failed"; }
    tr -s ' \n' ' ' <"$log" | grep -qF "${expected#refused: }" || { cat "$log"; fail "find_package($args)${*:+ $*}: not refused with '${expected#refused: }'"; }
    ok "find_package($args)${*:+ $*}: refused (${expected#refused: })"
  fi
}

# 1. The CUDA build alone.
bash capi/install.sh --backend cuda --prefix "$prefix"
check_library cuda
[ "$(pkg-config --variable=backend somalloc)" = cuda ] || fail "somalloc.pc is not the CUDA build's"
build_pkgconfig cuda somalloc
build_cmake cuda plain
probe cuda "somalloc REQUIRED"
probe "refused: the rocm build of somalloc $version is not installed" "somalloc REQUIRED COMPONENTS rocm"
snapshot >"$work/cuda.files"

# 2. The ROCm build beside it.
bash capi/install.sh --backend rocm --prefix "$prefix"
check_library rocm
check_library cuda
snapshot >"$work/both.files"
changed=$(LC_ALL=C comm -23 "$work/cuda.files" "$work/both.files")
[ -z "$changed" ] || fail "the ROCm install changed the CUDA install's files: $changed"
added=$(LC_ALL=C comm -13 "$work/cuda.files" "$work/both.files" | cut -d' ' -f1)
grep -v -- "-rocm" <<<"$added" && fail "the ROCm install added files not named for it (above)"
ok "side by side: the ROCm install added $(wc -l <<<"$added") files of its own and changed none of the $(wc -l <"$work/cuda.files") there"
[ "$(pkg-config --variable=backend somalloc)" = cuda ] || fail "somalloc.pc is no longer the first backend's"
build_pkgconfig rocm somalloc-rocm
build_pkgconfig cuda somalloc-cuda
build_cmake rocm backend -DSOMALLOC_BACKEND=rocm
probe cuda "somalloc REQUIRED"
probe cuda "somalloc $version EXACT REQUIRED"
probe rocm "somalloc ${version%.*} REQUIRED COMPONENTS rocm"
probe rocm "somalloc REQUIRED" -DSOMALLOC_BACKEND=rocm
probe rocm "somalloc-rocm $version REQUIRED"
probe "refused: one backend per program" "somalloc REQUIRED COMPONENTS cuda rocm"
probe "refused: version: $version" "somalloc $((major + 1)).0 REQUIRED"

# 3. The ROCm build as the prefix's default (no rebuild: the build is fresh).
bash capi/install.sh --backend rocm --prefix "$prefix" --default
[ "$(pkg-config --variable=backend somalloc)" = rocm ] || fail "--default did not make somalloc.pc the ROCm build's"
probe rocm "somalloc REQUIRED"
probe cuda "somalloc REQUIRED COMPONENTS cuda"
build_pkgconfig rocm somalloc

echo "capi-install: $checks checks passed in $((SECONDS - t0)) s"
