#!/usr/bin/env bash
# The GPU check in one command, for a GPU machine lent for a few minutes with nothing
# reachable: builds llama.cpp (CUDA, the H200's sm_90 only) and llama-bench from the
# bundle scripts/gpu-pack.sh made, puts llama-cpp-python's Python package over that build
# and installs the wheels localspec needs, then runs scripts/gpu_check.py: doctor and plan,
# localspec's cost calibration on random-weight Qwen2.5-Coder-7B and -0.5B shapes, plain
# decoding against llama-bench on the same file, and the speedups speculation would give
# on the recorded outputs with the measured costs.
#
#   scripts/gpu-check.sh [--out DIR]     # on the GPU machine, the bundle beside it (~6-9 min;
#                                        # run it again if a call runs out of time: the build resumes)
#   scripts/gpu-check.sh --cpu           # here: 0.5B and 135M shapes, this venv, the anchor's llama-bench
#   scripts/gpu-check.sh --quick         # tiny shapes (CI runs this)
#   scripts/gpu-check.sh --cpu --build   # the GPU path's build and install, for the CPU (tests the bundle)
#
# Everything printed also goes to OUT (default gpu-check-out/): setup.log, report.txt,
# figures.json, costs.md.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=gpu OUT=gpu-check-out BUILD=
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu) MODE=cpu ;;
    --quick) MODE=quick ;;
    --build) BUILD=1 ;;
    --out) OUT=${2:?--out needs a folder}; shift ;;
    -h|--help) sed -n 2,17p "$0"; exit 0 ;;
    *) echo "gpu-check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$MODE" = gpu ] && BUILD=1
mkdir -p "$OUT"
exec > >(tee "$OUT/setup.log") 2>&1
BUNDLE=.gpu-bundle
WORK=${GPU_CHECK_WORK:-/tmp/localspec-gpu-check}
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
BENCH=${LLAMA_BENCH:-$HOME/.cache/localspec-anchor/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench}
t0=$(date +%s)

if [ -n "$BUILD" ]; then
  [ -d "$BUNDLE" ] || { echo "error: $BUNDLE/ is missing: run scripts/gpu-pack.sh first (and carry it)"; exit 1; }
  mkdir -p "$WORK"
  echo "== wheels"
  "$PY" -m pip install -q --no-index --find-links "$BUNDLE/wheels" pydantic gguf platformdirs llguidance diskcache
  echo "== llama.cpp ($MODE)"
  # unpacked once: a second run (after a call that ran out of time) resumes the build
  ls -d "$WORK"/llama_cpp_python-*/ >/dev/null 2>&1 || tar xzf "$BUNDLE"/llama_cpp_python-*-trimmed.tar.gz -C "$WORK"
  SRC=$(ls -d "$WORK"/llama_cpp_python-*/ | head -1)
  flags="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
  cpu=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
  for f in avx:AVX avx2:AVX2 fma:FMA f16c:F16C avx512f:AVX512; do
    [[ " $cpu " == *" ${f%%:*} "* ]] && flags="$flags -DGGML_${f#*:}=ON"
  done
  [ "$MODE" = gpu ] && flags="$flags -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90"
  generator=$(command -v ninja >/dev/null && echo "-G Ninja" || true)
  # shellcheck disable=SC2086
  cmake -S "$SRC/vendor/llama.cpp" -B "$WORK/build" $generator $flags -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=OFF > "$WORK/cmake.log" || { tail -30 "$WORK/cmake.log"; exit 1; }
  cmake --build "$WORK/build" -j"$(nproc)" --target llama llama-bench > "$WORK/build.log" \
    || { tail -40 "$WORK/build.log"; exit 1; }
  echo "built in $(( $(date +%s) - t0 )) s"
  # llama-cpp-python's Python package is pure Python over that library: used from its source
  export PYTHONPATH="$SRC${PYTHONPATH:+:$PYTHONPATH}"
  export LLAMA_CPP_LIB_PATH="$WORK/build/bin" LD_LIBRARY_PATH="$WORK/build/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$PY" -c "import llama_cpp, sys; print('llama_cpp', llama_cpp.__version__, 'from', llama_cpp.__file__)"
  BENCH="$WORK/build/bin/llama-bench"
fi

tokenizer=()
[ -f "$BUNDLE/qwen-tokenizer.json.gz" ] && tokenizer=(--tokenizer "$BUNDLE/qwen-tokenizer.json.gz")
echo "== check ($MODE), after $(( $(date +%s) - t0 )) s of setup"
"$PY" scripts/gpu_check.py --mode "$MODE" --out "$OUT" --work "$WORK/models" --llama-bench "$BENCH" "${tokenizer[@]}"
