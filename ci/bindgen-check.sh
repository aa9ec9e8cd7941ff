#!/usr/bin/env bash
# Checks the hand-written vendor bindings against the real headers: every
# struct layout, constant and type of backends/{cuda,rocm}/sys.rs and every
# function each backend loads (the shared_runtime_api! table of
# backends/shared.rs, expanded with the vendor's prefix and types, and the
# backend's own entries in backends/{cuda,rocm}/mod.rs), against
# bindings that bindgen generates from the HIP header and from the CUDA
# headers of several versions. See ci/bindgen/README.md.
#
#   bash ci/bindgen-check.sh                  # failures and a summary
#   bash ci/bindgen-check.sh -v               # every check
#   bash ci/bindgen-check.sh --backends DIR   # check another copy of backends/
#
# Installs what it needs on a fresh Debian/Ubuntu machine: libclang (apt,
# `libclang-dev`, unless a libclang with its headers is there), the HIP
# headers (apt, `libamdhip64-dev`), and the CUDA runtime headers of each
# version in $SOMALLOC_BINDGEN_CUDA from PyPI wheels, unpacked once under
# $SOMALLOC_TOOLS/cuda-headers (the CUDA 13.0 headers are those of the venv
# that `ci/setup.sh cuda` installs). The checker builds once into
# ${CARGO_TARGET_DIR:-target}/bindgen-check.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tools=${SOMALLOC_TOOLS:-$HOME/.cache/somalloc}
cuda_versions=${SOMALLOC_BINDGEN_CUDA:-12.1 12.2 12.6 12.8 13.0 13.1}

args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --backends)
      SOMALLOC_BINDGEN_BACKENDS=$(cd "$2" && pwd)
      export SOMALLOC_BINDGEN_BACKENDS
      shift 2
      ;;
    *)
      args+=("$1")
      shift
      ;;
  esac
done

apt_updated=""
apt_install() {
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  if [ -z "$apt_updated" ]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# bindgen loads libclang at run time and needs clang's own headers (stddef.h).
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  compgen -G '/usr/lib/llvm-*/lib/libclang*.so*' >/dev/null &&
    compgen -G '/usr/lib/llvm-*/lib/clang/*/include/stddef.h' >/dev/null
}
if ! have_libclang; then
  echo "bindgen-check: installing libclang-dev with apt" >&2
  apt_install libclang-dev
fi
if [ ! -e /usr/include/hip/hip_runtime_api.h ]; then
  echo "bindgen-check: installing the HIP headers (libamdhip64-dev) with apt" >&2
  apt_install libamdhip64-dev
fi

# The CUDA 13.0 headers, and pip, come from the nvcc venv of ci/setup.sh.
# shellcheck source=ci/setup.sh
source ci/setup.sh cuda >&2
venv="$tools/venv-cuda13"
venv_include=$(ls -d "$venv"/lib/python3*/site-packages/nvidia/cu13/include | head -n1)

# cuda_include VERSION: prints the include directory of CUDA VERSION's
# runtime headers, downloading them the first time.
cuda_include() {
  local ver=$1 venv_ver
  venv_ver=$(awk '$1 == "#define" && $2 == "CUDART_VERSION" {print int($3 / 1000) "." int($3 % 1000 / 10)}' \
    "$venv_include/cuda_runtime_api.h")
  if [ "$ver" = "$venv_ver" ]; then
    echo "$venv_include"
    return
  fi
  local dir="$tools/cuda-headers/$ver"
  if [ ! -e "$dir/include/cuda_runtime_api.h" ]; then
    # cuda_runtime_api.h includes crt/host_defines.h, which CUDA 12 ships in
    # the nvcc wheel and CUDA 13 in the crt wheel.
    local pkgs
    case "$ver" in
      12.*) pkgs=("nvidia-cuda-runtime-cu12==$ver.*" "nvidia-cuda-nvcc-cu12==$ver.*") ;;
      *) pkgs=("nvidia-cuda-runtime==$ver.*" "nvidia-cuda-crt==$ver.*") ;;
    esac
    echo "bindgen-check: downloading the CUDA $ver headers (${pkgs[*]})" >&2
    local tmp
    tmp=$(mktemp -d)
    for p in "${pkgs[@]}"; do
      "$venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: -d "$tmp" "$p" >&2
    done
    rm -rf "$dir.part"
    # Every wheel keeps its headers under nvidia/<package>/include/.
    "$venv/bin/python" - "$tmp" "$dir.part/include" <<'EOF'
import pathlib, sys, zipfile
wheels, dest = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            parts = name.split("/")
            if len(parts) > 3 and parts[0] == "nvidia" and parts[2] == "include" and not name.endswith("/"):
                out = dest.joinpath(*parts[3:])
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(z.read(name))
EOF
    rm -rf "$tmp" "$dir"
    mv "$dir.part" "$dir"
  fi
  echo "$dir/include"
}

sets="hip:/usr/include"
for v in $cuda_versions; do
  sets+=";cuda:$(cuda_include "$v")"
done
export SOMALLOC_BINDGEN_SETS=$sets

target="${CARGO_TARGET_DIR:-$root/target}/bindgen-check"
echo "bindgen-check: building the checker in $target" >&2
CARGO_TARGET_DIR=$target cargo build --locked --quiet --manifest-path ci/bindgen/Cargo.toml
exec "$target/debug/somalloc-bindgen-check" "${args[@]}"
