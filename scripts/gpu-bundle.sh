#!/usr/bin/env bash
# Builds the cuda binaries here, for a GPU machine that has the NVIDIA driver and CUDA 13
# libraries but no Rust: the app, the cuda tests (tests/cuda.rs) and the library's unit
# tests, compressed into one folder that scripts/gpu-check.sh runs there. Not part of CI.
#
# Uses the toolkit scripts/cuda-toolkit.sh installs (CUDA_WHEELS picks its version: the
# GPU machine's driver must be at least that new). Linking needs libcuda (the driver) and
# cuBLAS, cuBLASLt, cuRAND and NVRTC, none of which a machine without a GPU has: each is
# replaced here by a stub that has the library's name and soname and defines every
# function cudarc declares. The binaries record only the sonames, so on the GPU machine
# the dynamic loader binds the real libraries.
#
#   CUDA_WHEELS=13.0 scripts/gpu-bundle.sh [OUT_DIR]   # default OUT_DIR: .gpu (ignored by git)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$(realpath -m "${1:-$root/.gpu}")"
source "$root/scripts/cuda-toolkit.sh"

# One stub per library: every `fn name(` inside cudarc's bindings for it.
cudarc="$(cd "$root" && cargo metadata --format-version 1 --features cuda |
    "$venv/bin/python" -c 'import json,sys; print([p["manifest_path"] for p in json.load(sys.stdin)["packages"] if p["name"]=="cudarc"][0])')"
cudarc="$(dirname "$cudarc")/src"
stubs="$root/target/cuda-stubs"
mkdir -p "$stubs"
stub() { # name soname bindings
    grep -ohE '^\s+fn [A-Za-z0-9_]+\(' "$3" | sed -E 's/^\s+fn ([A-Za-z0-9_]+)\(/void \1(void) {}/' |
        sort -u >"$stubs/$1.c"
    cc -shared -fPIC -Wl,-soname,"$2" -o "$stubs/lib$1.so" "$stubs/$1.c"
}
stub cuda libcuda.so.1 "$cudarc/driver/sys/mod.rs"
stub nvrtc libnvrtc.so.13 "$cudarc/nvrtc/sys/mod.rs"
stub curand libcurand.so.10 "$cudarc/curand/sys/mod.rs"
stub cublas libcublas.so.13 "$cudarc/cublas/sys/mod.rs"
stub cublasLt libcublasLt.so.13 "$cudarc/cublaslt/sys/mod.rs"
# cudarc's build script searches $CUDA_ROOT/lib; the runtime wheel ships only the soname.
cp "$stubs"/lib*.so "$cuda/lib/"
ln -sf libcudart.so.13 "$cuda/lib/libcudart.so"

cd "$root"
cargo build --release --features cuda
json="$(cargo test --release --features cuda --lib --test cuda --no-run --message-format json)"
mkdir -p "$out"
rm -f "$out"/*.xz
# Stripped and compressed: the app alone is ~70 MB, mostly candle's PTX, which packs well.
pack() { strip -o "$out/$2" "$1" && xz -T0 -9 -f "$out/$2"; }
pack "$CARGO_TARGET_DIR/release/inferlab" inferlab
for t in lib cuda; do
    exe="$(printf '%s\n' "$json" | "$venv/bin/python" -c '
import json, sys
kind = sys.argv[1]
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and (m["target"]["kind"] == ["lib"]) == (kind == "lib") \
            and (kind == "lib" or m["target"]["name"] == kind):
        print(m["executable"])' "$t")"
    pack "$exe" "test-$t"
done
ls -la "$out"
echo "gpu-bundle: $out is ready; on the GPU machine: scripts/gpu-check.sh $out MODEL.gguf"
