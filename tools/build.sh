#!/usr/bin/env bash
# Configure (once) and build dflow into build/ against the venv's LibTorch.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION="2.15.0"
VENV="${DFLOW_VENV:-/opt/dflow/torch-${TORCH_VERSION}}"
BUILD_DIR="${DFLOW_BUILD_DIR:-build}"
# ccache keyed on paths relative to the checkout: a fresh clone elsewhere
# (as CI makes) reuses what earlier builds compiled. The sloppiness lets
# ccache cache the precompiled <torch/torch.h> and every file built on it
# (without it those compiles are uncacheable and each clone rebuilds them).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  prefix=$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) \
    || { echo "[build] error: no torch in $VENV; run tools/setup.sh first" >&2; exit 1; }
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
fi
cmake --build "$BUILD_DIR" -- -j"${DFLOW_BUILD_JOBS:-2}"
