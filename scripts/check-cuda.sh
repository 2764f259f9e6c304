#!/usr/bin/env bash
# Checks that `--features cuda` still compiles, on a machine without a GPU or a CUDA
# install: nvcc, the runtime headers, CCCL and the CRT come from NVIDIA's PyPI wheels,
# installed into a virtualenv under target/. Not part of CI: it compiles candle's CUDA
# kernels, about twenty minutes on two cores. Linking would need libcuda, which only a
# machine with the driver has, so this runs `cargo check`, which does not link.
#
#   scripts/check-cuda.sh            # cargo check --features cuda
#   scripts/check-cuda.sh --tests    # extra arguments go to cargo check
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/target/cuda-toolkit"
if [ ! -x "$venv/bin/python" ]; then
    echo "check-cuda: creating $venv"
    python3 -m venv "$venv"
fi
echo "check-cuda: installing the CUDA toolkit wheels (nvcc, runtime, cccl, crt)"
"$venv/bin/pip" install --quiet --disable-pip-version-check \
    nvidia-cuda-nvcc nvidia-cuda-runtime nvidia-cuda-cccl nvidia-cuda-crt
cuda="$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "check-cuda: no nvcc under $cuda" >&2
    exit 1
fi
export CUDA_ROOT="$cuda" CUDA_PATH="$cuda" CUDA_HOME="$cuda"
export PATH="$cuda/bin:$PATH"
# cudarc cannot tell 13.5 from the headers; 13.4's API is the one it knows.
export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13040}"
# Without a GPU nothing can report its compute capability; 9.0 is the H100/H200 class.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
echo "check-cuda: $("$cuda/bin/nvcc" --version | tail -1)"
cd "$root"
CARGO_TARGET_DIR="$root/target/cuda-check" cargo check --release --features cuda "$@"
echo "check-cuda: the cuda build compiles"
