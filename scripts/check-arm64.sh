#!/usr/bin/env bash
# Builds the tests for arm64 and runs them under qemu's user-mode emulator, so the `sdot`
# kernel (src/kernels/q8_0/neon.rs) and the rest of the arm64 build are checked on an x86
# machine. qemu emulates the dot-product extension, so this checks results, not speed.
# Not part of CI: it compiles every dependency for arm64 (about six minutes on two cores)
# and needs Debian's cross compiler and qemu, and rustup's arm64 standard library.
#
#   scripts/check-arm64.sh                        # the library's unit tests
#   scripts/check-arm64.sh --all                  # and every integration test but the
#                                                 # tmux one (bench's serve, heads and sink
#                                                 # tests run for many minutes emulated)
#   scripts/check-arm64.sh --all serve cli        # and the named integration tests
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
qemu=(qemu-aarch64 -L /usr/aarch64-linux-gnu)
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="${qemu[*]}"
export CARGO_TARGET_DIR="$root/target/arm64"
cargo test --release --target "$target" --lib
echo "check-arm64: the library's unit tests pass under qemu"
[ "${1:-}" = "--all" ] || exit 0
shift
if [ $# -eq 0 ]; then
  set -- $(ls tests/*.rs | xargs -n1 basename | sed 's/\.rs$//' | grep -vx -e e2e_tmux -e cuda)
fi
bins=$(cargo test --release --target "$target" $(printf -- '--test %s ' "$@") --no-run 2>&1 |
  sed -n 's/.*Executable tests\/.* (\(.*\))$/\1/p')
# Tests that run the app start the file cargo built for them, an arm64 binary that this
# machine cannot exec; for the run it is replaced by a script that starts it under qemu.
# Moved, not copied or overwritten: cargo hard-links that file to its own copy in deps/,
# and writing through the link would replace cargo's binary with the script.
app="$CARGO_TARGET_DIR/$target/release/inferlab"
mv "$app" "$app.arm64"
trap 'mv -f "$app.arm64" "$app"' EXIT
printf '#!/bin/sh\nexec %s "%s" "$@"\n' "${qemu[*]}" "$app.arm64" > "$app"
chmod +x "$app"
for b in $bins; do
  echo "check-arm64: $b"
  "${qemu[@]}" "$b"
done
echo "check-arm64: the integration tests pass under qemu"
