#!/usr/bin/env bash
# Installs what a backend's build needs on a fresh Debian/Ubuntu machine and
# exports the variables build.rs reads. Source it:  source ci/setup.sh cuda
#
#   cuda: nvcc 13.0 from PyPI wheels in a venv (no GPU, no CUDA install)
#         -> SOMALLOC_NVCC
#   rocm: hipcc and the HIP runtime/headers from Debian (apt)
#         -> SOMALLOC_HIPCC
# Tools are cached under $SOMALLOC_TOOLS (default ~/.cache/somalloc).
#
# Set-ups that run at the same time (ci/demo.sh and ci/test.sh started
# together on a fresh machine) take turns: an install holds a lock file in
# the tools directory (flock), and a set-up that waited for it looks again
# before installing, so it finds the other's install instead of making the
# venv anew under the other's pip. The lock is held by a subshell: when the
# function returns, no descriptor of it is left in the shell that sourced
# this, and a failure returns non-zero without ending that shell.
_somalloc_setup() {
  local backend=${1:-cuda}
  local tools=${SOMALLOC_TOOLS:-$HOME/.cache/somalloc}
  mkdir -p "$tools" || return 1
  case "$backend" in
    cuda)
      local venv="$tools/venv-cuda13"
      local nvcc
      nvcc=$(_somalloc_find_nvcc "$venv")
      if [ -z "$nvcc" ]; then
        (
          _somalloc_lock "$tools/setup-cuda.lock" || exit 1
          # Another set-up may have installed it while this one waited.
          [ -n "$(_somalloc_find_nvcc "$venv")" ] && exit 0
          echo "setup: installing nvcc 13.0 from PyPI into $venv" >&2
          python3 -m venv "$venv" >&2 || exit 1
          "$venv/bin/pip" install -q --disable-pip-version-check \
            "nvidia-cuda-nvcc==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-crt==13.0.*" \
            "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" >&2 || exit 1
        ) 9>>"$tools/setup-cuda.lock" || return 1
        nvcc=$(_somalloc_find_nvcc "$venv")
        if [ -z "$nvcc" ]; then
          echo "setup: no nvcc in $venv after the install" >&2
          return 1
        fi
      fi
      export SOMALLOC_NVCC="$nvcc"
      ;;
    rocm)
      if ! _somalloc_have_hip; then
        # apt-get takes its own locks, but a second install at the same time
        # fails on them instead of waiting: set-ups take turns here too.
        (
          _somalloc_lock "$tools/setup-rocm.lock" || exit 1
          _somalloc_have_hip && exit 0
          echo "setup: installing hipcc and libamdhip64-dev with apt" >&2
          sudo=""
          [ "$(id -u)" -ne 0 ] && sudo=sudo
          # (The timeout waits for an apt run outside these set-ups.)
          $sudo apt-get -o DPkg::Lock::Timeout=600 update -qq >&2 || exit 1
          DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=600 \
            install -y -qq hipcc libamdhip64-dev >&2 || exit 1
        ) 9>>"$tools/setup-rocm.lock" || return 1
      fi
      SOMALLOC_HIPCC=$(command -v hipcc) || {
        echo "setup: no hipcc on PATH after the install" >&2
        return 1
      }
      export SOMALLOC_HIPCC
      ;;
    *)
      echo "setup: unknown backend '$backend' (cuda or rocm)" >&2
      return 1
      ;;
  esac
}

# The venv's nvcc, or nothing.
_somalloc_find_nvcc() {
  ls "$1"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1 || true
}

_somalloc_have_hip() {
  command -v hipcc >/dev/null 2>&1 && [ -e /usr/include/hip/hip_runtime_api.h ]
}

# Takes the lock on descriptor 9 (opened on $1 by the caller's subshell),
# waiting for another set-up that holds it.
_somalloc_lock() {
  if ! command -v flock >/dev/null 2>&1; then
    echo "setup: flock (util-linux) is needed to take turns with other set-ups" >&2
    return 1
  fi
  if ! flock -n 9; then
    echo "setup: waiting for another set-up ($1)" >&2
    flock 9 || return 1
  fi
}

_somalloc_setup "$@"
