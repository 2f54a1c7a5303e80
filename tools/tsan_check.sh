#!/usr/bin/env bash
# ThreadSanitizer build of the torch-free data tests (the epoch plan cache
# that the loader and the step all-reduce share across threads), in its own
# build directory, then runs them. Usage: tools/tsan_check.sh [doctest args]
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION="2.15.0"
VENV="${DFLOW_VENV:-/opt/dflow/torch-${TORCH_VERSION}}"
BUILD_DIR="${DFLOW_TSAN_BUILD_DIR:-build-tsan}"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  prefix=$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) \
    || { echo "[tsan] error: no torch in $VENV; run tools/setup.sh first" >&2; exit 1; }
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
    -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" >/dev/null
fi
cmake --build "$BUILD_DIR" --target test_data -- -j"${DFLOW_BUILD_JOBS:-2}"
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" "$BUILD_DIR/tests/test_data" --no-intro "$@"
