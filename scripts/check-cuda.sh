#!/usr/bin/env bash
# Checks that `--features cuda` still compiles, on a machine without a GPU or a CUDA
# install: nvcc, NVVM, the runtime headers, CCCL and the CRT come from NVIDIA's PyPI wheels,
# installed into a virtualenv under target/ (scripts/cuda-toolkit.sh). Not part of CI: it
# compiles candle's CUDA kernels, about twenty minutes on two cores. Linking would need
# libcuda, which only a machine with the driver has, so this runs `cargo check`, which
# does not link; scripts/gpu-bundle.sh links and packs binaries for a GPU machine.
#
#   scripts/check-cuda.sh                    # cargo check --features cuda, newest toolkit
#   CUDA_WHEELS=13.0 scripts/check-cuda.sh   # with the CUDA 13.0 toolkit
#   scripts/check-cuda.sh --tests            # extra arguments go to cargo check
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
source "$root/scripts/cuda-toolkit.sh"
cd "$root"
cargo check --release --features cuda "$@"
echo "check-cuda: the cuda build compiles"
