# Sourced by check-cuda.sh and gpu-bundle.sh (with $root set): installs NVIDIA's CUDA
# toolkit wheels (nvcc, NVVM, runtime, CCCL, CRT) into a virtualenv under target/ and exports
# what candle's and cudarc's build scripts read.
#
# CUDA_WHEELS picks the toolkit's version, e.g. 13.0 (default: the newest). candle embeds
# PTX that the driver compiles at start, and a driver refuses PTX from a newer toolkit
# than its own CUDA version (CUDA_ERROR_UNSUPPORTED_PTX_VERSION): to run on a GPU machine,
# build with the CUDA version its `nvidia-smi` prints.
ver="${CUDA_WHEELS:-}"
venv="$root/target/cuda-toolkit${ver:+-$ver}"
if [ ! -x "$venv/bin/python" ]; then
    echo "cuda-toolkit: creating $venv"
    python3 -m venv "$venv"
fi
pin="${ver:+==$ver.*}"
echo "cuda-toolkit: installing the CUDA toolkit wheels${ver:+ $ver} (nvcc, nvvm, runtime, cccl, crt)"
"$venv/bin/pip" install --quiet --disable-pip-version-check \
    "nvidia-cuda-nvcc$pin" "nvidia-nvvm$pin" "nvidia-cuda-runtime$pin" "nvidia-cuda-cccl$pin" \
    "nvidia-cuda-crt$pin"
cuda="$("$venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')"
if [ ! -x "$cuda/bin/nvcc" ]; then
    echo "cuda-toolkit: no nvcc under $cuda" >&2
    exit 1
fi
export CUDA_ROOT="$cuda" CUDA_PATH="$cuda" CUDA_HOME="$cuda"
export PATH="$cuda/bin:$PATH"
# cudarc cannot tell 13.5 from the headers; 13.4's API is the newest it knows.
if [ -n "$ver" ]; then
    major="${ver%%.*}" minor="${ver#*.}"
    export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-$((major * 1000 + minor * 10))}"
else
    export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13040}"
fi
# Without a GPU nothing can report its compute capability; 9.0 is the H100/H200 class.
export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-90}"
# One build folder per toolkit: candle's kernels are compiled by the toolkit's nvcc.
export CARGO_TARGET_DIR="$root/target/cuda-check${ver:+-$ver}"
echo "cuda-toolkit: $("$cuda/bin/nvcc" --version | tail -1)"
