#!/usr/bin/env bash
# Runs the cuda build on a machine with an NVIDIA GPU, from the folder scripts/gpu-bundle.sh
# made: the library's unit tests, the cuda tests (CPU against GPU), then `bench decode`,
# `generate`, `trace`, `bench serve` and the app itself (in tmux, where there is one) with
# `--device cuda`, and `bench decode` on this machine's CPU for comparison. Needs the
# driver and the CUDA 13 libraries (cuBLAS, cuBLASLt, cuRAND, NVRTC, runtime), found
# wherever they are installed; no Rust. Not part of CI.
#
#   scripts/gpu-check.sh BUNDLE_DIR MODEL.gguf
#   scripts/gpu-check.sh BUNDLE_DIR              # without the model: the tests on tiny models
set -uo pipefail
bundle="$(realpath "$1")"
model="${2:+$(realpath "$2")}"
bin="$bundle/bin"
mkdir -p "$bin"
unxz() { # xz, or Python's lzma where xz is not installed
    if command -v xz >/dev/null; then xz -dc "$1"; else
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' "$1"
    fi
}
for f in "$bundle"/*.xz; do
    unxz "$f" >"$bin/$(basename "$f" .xz)" && chmod +x "$bin/$(basename "$f" .xz)"
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# Each library the loader cannot find: the first copy of it on this machine.
for lib in $(ldd "$bin/inferlab" | awk '/not found/ {print $1}'); do
    found="$(find /usr /opt -name "$lib" 2>/dev/null | head -1)"
    if [ -n "$found" ]; then
        export LD_LIBRARY_PATH="$(dirname "$found")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    else
        echo "gpu-check: $lib is nowhere under /usr or /opt" >&2
    fi
done
ldd "$bin/inferlab" | grep -E 'cuda|cublas|curand|nvrtc'

export INFERLAB_OFFLINE=1 NO_COLOR=1
status=0
step() {
    echo "== $*"
    "$@" || { echo "gpu-check: FAILED: $*"; status=1; }
}
step "$bin/test-lib" -q
if [ -z "$model" ]; then
    step "$bin/test-cuda" --nocapture --test-threads=1 --skip real_model
    exit $status
fi
export INFERLAB_MODEL="$model"
step "$bin/test-cuda" --nocapture --test-threads=1
step "$bin/inferlab" generate --device cuda --max-tokens 32 --stats \
    --prompt "The three primary colors are"
step "$bin/inferlab" trace --device cuda --max-tokens 4 --layer 3 --head 2 \
    --prompt "Paged attention stores keys and values in"
step "$bin/inferlab" bench decode --device cuda --rounds 5
step "$bin/inferlab" bench decode --device cuda --rounds 5 --json
# The batched attention route is the GPU's default; the host route beside it, and the
# operations each step launches by batch size (`device_ops_per_step_by_batch`).
step timeout 180 "$bin/inferlab" bench serve --device cuda --requests 12
step timeout 180 "$bin/inferlab" bench serve --device cuda --requests 12 --attention-route host
step timeout 180 "$bin/inferlab" bench serve --device cuda --requests 12 --json
step "$bin/inferlab" bench decode --device cpu --rounds 1
if command -v tmux >/dev/null; then
    # The app itself on the GPU: its screen after the prefill and five decode steps, then
    # after running on its own for a few seconds.
    tmux new-session -d -s gpu -x 160 -y 48 "$bin/inferlab --device cuda"
    sleep 10
    for _ in 1 2 3 4 5 6; do tmux send-keys -t gpu Space; sleep 1; done
    echo "== the app on the GPU: the prefill and five decode steps"
    tmux capture-pane -p -t gpu
    tmux send-keys -t gpu r
    sleep 6
    echo "== the app on the GPU: 6 s later, running"
    tmux capture-pane -p -t gpu
    tmux send-keys -t gpu q
    sleep 1
    tmux kill-server 2>/dev/null
else
    echo "gpu-check: no tmux here, so the app's screens were not looked at"
fi
exit $status
