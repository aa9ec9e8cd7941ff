#!/usr/bin/env bash
# Builds somalloc's C library (release) with one backend and installs it
# under a prefix, with its header, a pkg-config file and a CMake package:
#
#   bash capi/install.sh --backend cuda --prefix /opt/somalloc [--default]
#
#   PREFIX/lib/libsomalloc-cuda.so.0.1.0           the library (SONAME libsomalloc-cuda.so.0)
#   PREFIX/lib/libsomalloc-cuda.so.0 -> ...0.1.0   what programs load
#   PREFIX/lib/libsomalloc-cuda.so   -> ....so.0   what the linker finds (-lsomalloc-cuda)
#   PREFIX/include/somalloc.h                      the header (one for both backends)
#   PREFIX/lib/pkgconfig/somalloc-cuda.pc          pkg-config: somalloc-cuda
#   PREFIX/lib/pkgconfig/somalloc.pc               pkg-config: somalloc, the prefix's default backend
#   PREFIX/lib/cmake/somalloc-cuda/                CMake: find_package(somalloc-cuda) -> somalloc::cuda
#   PREFIX/lib/cmake/somalloc/                     CMake: find_package(somalloc) -> somalloc::somalloc
#
# The ROCm build (--backend rocm) installs libsomalloc-rocm.so.*,
# somalloc-rocm.pc and lib/cmake/somalloc-rocm/ beside it without touching
# the CUDA build's files; the files both install (the header and the
# backend-neutral `somalloc` CMake package) are the same for both, so both
# backends of one prefix must be of the same version (the script checks).
# `somalloc.pc` and the neutral CMake package's default are the backend
# installed first; --default makes this one the default instead.
#
# Needs cargo (https://rustup.rs) and a C compiler for the link; nothing
# else (no CUDA or ROCm: the library loads the vendor runtime when it
# runs). DESTDIR stages the files (packaging: the files say PREFIX), and
# CARGO_TARGET_DIR is honoured. As root, a prefix of /usr or /usr/local
# gets `ldconfig` run; for another prefix, link with an rpath (CMake adds
# one in the build tree; pkg-config: -Wl,-rpath,$(pkg-config --variable=libdir
# somalloc-cuda)) or set LD_LIBRARY_PATH.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)

usage() {
  echo "usage: bash capi/install.sh --backend cuda|rocm --prefix DIR [--default]" >&2
  exit 2
}

backend="" prefix="" make_default=0
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) [ $# -ge 2 ] || usage; backend=$2; shift 2 ;;
    --backend=*) backend=${1#*=}; shift ;;
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#*=}; shift ;;
    --default) make_default=1; shift ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "install: unknown argument '$1'" >&2; usage ;;
  esac
done
case "$backend" in
  cuda) backend_name=CUDA other=rocm ;;
  rocm) backend_name=ROCm other=cuda ;;
  *) echo "install: --backend cuda or --backend rocm" >&2; usage ;;
esac
[ -n "$prefix" ] || { echo "install: --prefix DIR is needed" >&2; usage; }
case "$prefix" in
  /*) ;;
  *) prefix=$(mkdir -p "$prefix" && cd "$prefix" && pwd) ;;
esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
destdir=${DESTDIR:-}
root="$destdir$prefix"
cargo=${CARGO:-cargo}
if ! command -v "$cargo" >/dev/null 2>&1; then
  echo "install: cargo is needed to build the library: install Rust (https://rustup.rs), then run this again" >&2
  exit 1
fi

# The version, from the crate (somalloc-capi@X.Y.Z).
id=$(cd "$repo" && "$cargo" pkgid -p somalloc-capi)
version=${id##*[@#]}
if ! [[ "$version" =~ ^([0-9]+)\.([0-9]+)\.([0-9]+)$ ]]; then
  echo "install: cannot read the version from '$id'" >&2
  exit 1
fi
major=${BASH_REMATCH[1]} minor=${BASH_REMATCH[2]}

# Both backends of a prefix share the header and the neutral CMake
# package: the other backend, if installed here, must be of this version.
other_pc="$root/lib/pkgconfig/somalloc-$other.pc"
if [ -f "$other_pc" ]; then
  other_version=$(sed -n 's/^Version: *//p' "$other_pc")
  if [ "$other_version" != "$version" ]; then
    echo "install: somalloc $other_version ($other) is installed in $prefix; install $backend $version in another prefix, or $other $version here first" >&2
    exit 1
  fi
fi

# The release build, linked with its SONAME (capi/build.rs).
echo "install: building the $backend_name library (cargo build --release -p somalloc-capi --features $backend)" >&2
lib=$(cd "$repo" && SOMALLOC_CAPI_SONAME=1 "$cargo" build --release -p somalloc-capi --features "$backend" \
  --message-format=json-render-diagnostics | grep -o '"[^"]*/libsomalloc\.so"' | tail -n1 | tr -d '"')
if [ -z "$lib" ] || [ ! -f "$lib" ]; then
  echo "install: the build gave no libsomalloc.so" >&2
  exit 1
fi
soname=libsomalloc-$backend.so.$major
real=libsomalloc-$backend.so.$version
if command -v readelf >/dev/null 2>&1 && ! readelf -d "$lib" | grep -q "Library soname: \[$soname\]"; then
  echo "install: $lib has not the SONAME $soname" >&2
  exit 1
fi

# The prefix as a sed replacement (its &, | and \ escaped).
prefix_sed=$(printf '%s' "$prefix" | sed -e 's/[&|\\]/\\&/g')
subst() {
  sed -e "s|@PREFIX@|$prefix_sed|g" -e "s|@BACKEND@|$backend|g" -e "s|@BACKEND_NAME@|$backend_name|g" \
    -e "s|@VERSION@|$version|g" -e "s|@MAJOR@|$major|g" -e "s|@MINOR@|$minor|g" -e "s|@PACKAGE@|${2:-}|g" "$1"
}
# put MODE TARGET: installs stdin as TARGET (through a temporary file
# beside it, renamed: a program running with the old file keeps it). A
# TARGET with these contents already is left as it is (the header's time
# too, so that what includes it is not rebuilt).
put() {
  local tmp
  tmp=$(mktemp "$2.XXXXXX")
  cat >"$tmp"
  chmod "$1" "$tmp"
  if [ -f "$2" ] && [ ! -L "$2" ] && cmp -s "$tmp" "$2" \
    && [ "$(stat -c %a "$2")" = "$1" ]; then
    rm -f "$tmp"
  else
    mv -f "$tmp" "$2"
  fi
}

libdir="$root/lib"
mkdir -p "$libdir/pkgconfig" "$libdir/cmake/somalloc-$backend" "$libdir/cmake/somalloc" "$root/include"
put 755 "$libdir/$real" <"$lib"
ln -sfn "$real" "$libdir/$soname"
ln -sfn "$soname" "$libdir/libsomalloc-$backend.so"
put 644 "$root/include/somalloc.h" <"$here/include/somalloc.h"
subst "$here/pkgconfig/somalloc-backend.pc.in" | put 644 "$libdir/pkgconfig/somalloc-$backend.pc"
subst "$here/cmake/somalloc-backendConfig.cmake.in" \
  | put 644 "$libdir/cmake/somalloc-$backend/somalloc-${backend}Config.cmake"
subst "$here/cmake/ConfigVersion.cmake.in" "somalloc-$backend" \
  | put 644 "$libdir/cmake/somalloc-$backend/somalloc-${backend}ConfigVersion.cmake"
put 644 "$libdir/cmake/somalloc/somallocConfig.cmake" <"$here/cmake/somallocConfig.cmake"
subst "$here/cmake/ConfigVersion.cmake.in" somalloc | put 644 "$libdir/cmake/somalloc/somallocConfigVersion.cmake"

# The prefix's default backend: the first installed, unless --default.
default_note="the default stays $(sed -n 's/^backend=//p' "$libdir/pkgconfig/somalloc.pc" 2>/dev/null || true)"
if [ "$make_default" = 1 ] || [ ! -f "$libdir/pkgconfig/somalloc.pc" ] \
  || [ ! -f "$libdir/cmake/somalloc/somalloc-default.cmake" ] \
  || grep -qx "backend=$backend" "$libdir/pkgconfig/somalloc.pc"; then
  subst "$here/pkgconfig/somalloc.pc.in" | put 644 "$libdir/pkgconfig/somalloc.pc"
  printf '# The default backend of find_package(somalloc) in this prefix (capi/install.sh).\nset(_somalloc_default_backend %s)\n' \
    "$backend" | put 644 "$libdir/cmake/somalloc/somalloc-default.cmake"
  default_note="the default backend"
fi

if [ -z "$destdir" ] && [ "$(id -u)" = 0 ] && { [ "$prefix" = /usr ] || [ "$prefix" = /usr/local ]; } \
  && command -v ldconfig >/dev/null 2>&1; then
  ldconfig
fi

echo "install: somalloc $version ($backend_name, $default_note) in $root:"
for f in "lib/$real" "lib/$soname" "lib/libsomalloc-$backend.so" include/somalloc.h \
  "lib/pkgconfig/somalloc-$backend.pc" lib/pkgconfig/somalloc.pc \
  "lib/cmake/somalloc-$backend/somalloc-${backend}Config.cmake" \
  "lib/cmake/somalloc-$backend/somalloc-${backend}ConfigVersion.cmake" \
  lib/cmake/somalloc/somallocConfig.cmake lib/cmake/somalloc/somallocConfigVersion.cmake \
  lib/cmake/somalloc/somalloc-default.cmake; do
  echo "  $f"
done
echo "install: link with \`pkg-config --cflags --libs somalloc-$backend\` or CMake's find_package(somalloc) and somalloc::somalloc"
