#!/usr/bin/env bash
# Installs what a backend's build needs on a fresh Debian/Ubuntu machine and
# exports the variables build.rs reads. Source it:  source ci/setup.sh cuda
#
#   cuda: nvcc 13.0 from PyPI wheels in a venv (no GPU, no CUDA install)
#         -> SOMALLOC_NVCC
#   rocm: hipcc and the HIP runtime/headers from Debian (apt)
#         -> SOMALLOC_HIPCC
# Tools are cached under $SOMALLOC_TOOLS (default ~/.cache/somalloc).
_somalloc_setup() {
  local backend=${1:-cuda}
  local tools=${SOMALLOC_TOOLS:-$HOME/.cache/somalloc}
  mkdir -p "$tools"
  case "$backend" in
    cuda)
      local venv="$tools/venv-cuda13"
      local nvcc
      nvcc=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc 2>/dev/null | head -n1 || true)
      if [ -z "$nvcc" ]; then
        echo "setup: installing nvcc 13.0 from PyPI into $venv" >&2
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q --disable-pip-version-check \
          "nvidia-cuda-nvcc==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-crt==13.0.*" \
          "nvidia-cuda-runtime==13.0.*" "nvidia-cuda-cccl==13.0.*" >&2 || return 1
        nvcc=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu13/bin/nvcc | head -n1)
      fi
      export SOMALLOC_NVCC="$nvcc"
      ;;
    rocm)
      if ! command -v hipcc >/dev/null 2>&1 || [ ! -e /usr/include/hip/hip_runtime_api.h ]; then
        echo "setup: installing hipcc and libamdhip64-dev with apt" >&2
        local sudo=""
        [ "$(id -u)" -ne 0 ] && sudo=sudo
        $sudo apt-get update -qq >&2 || return 1
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq hipcc libamdhip64-dev >&2 || return 1
      fi
      SOMALLOC_HIPCC=$(command -v hipcc)
      export SOMALLOC_HIPCC
      ;;
    *)
      echo "setup: unknown backend '$backend' (cuda or rocm)" >&2
      return 1
      ;;
  esac
}
_somalloc_setup "$@"
