#!/usr/bin/env bash
# Builds the library's unit tests for arm64 and runs them under qemu's user-mode emulator,
# so the `sdot` kernel (src/kernels/q8_0/neon.rs) is checked against the scalar reference
# on an x86 machine. qemu emulates the dot-product extension, so this checks results, not
# speed. Not part of CI: it compiles every dependency for arm64 (about fifteen minutes on
# two cores) and needs Debian's cross compiler and qemu, and rustup's arm64 standard library.
#
#   scripts/check-arm64.sh            # every unit test of the library
#   scripts/check-arm64.sh q8_0       # a filter, as for cargo test
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target=aarch64-unknown-linux-gnu
rustup target list --installed | grep -qx "$target" || rustup target add "$target"
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null; then
  apt-get install -y -qq gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user >/dev/null
fi
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
# qemu's default CPU model ("max") has the dot-product extension.
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu"
export CARGO_TARGET_DIR="$root/target/arm64"
cargo test --release --target "$target" --lib "$@"
echo "check-arm64: the arm64 unit tests pass under qemu"
