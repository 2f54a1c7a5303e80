#!/usr/bin/env bash
# Configure (once) and build dflow against the venv's LibTorch.
#   tools/build.sh [--sanitize address,undefined|thread] [TARGET...]
# Plain builds go to build/ (DFLOW_BUILD_DIR overrides); sanitizer builds go to
# their own directory (build-asan/ for address,undefined, build-tsan/ for
# thread) so that switching never rebuilds the other. TARGETs default to all,
# the test executables included; `tools/build.sh dflow` builds the command line
# alone (what the demo runs).
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_VERSION="2.15.0"
VENV="${DFLOW_VENV:-/opt/dflow/torch-${TORCH_VERSION}}"
SANITIZE=""
targets=()
while (($#)); do
  case "$1" in
    --sanitize) SANITIZE="${2:?--sanitize needs a list: address,undefined or thread}"; shift 2 ;;
    --sanitize=*) SANITIZE="${1#--sanitize=}"; shift ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
build_type=Release
san_flags=""
case "$SANITIZE" in
  "") BUILD_DIR="${DFLOW_BUILD_DIR:-build}" ;;
  address,undefined|undefined,address|address)
    BUILD_DIR="${DFLOW_BUILD_DIR:-build-asan}"
    # vptr checks need RTTI of every library in the process; LibTorch's is not
    # instrumented, so that one check is left out. Every other finding aborts.
    san_flags="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=all" ;;
  thread)
    BUILD_DIR="${DFLOW_BUILD_DIR:-build-tsan}"
    san_flags="-fsanitize=thread" ;;
  *) echo "[build] error: --sanitize takes 'address,undefined' or 'thread', not '$SANITIZE'" >&2; exit 2 ;;
esac
# Warnings fail the build with DFLOW_WERROR=ON (GCC 12, tools/setup.sh's
# Debian 12 compiler, prints none for a plain build). Off by default: the flag
# is part of each compile's command, so turning it on recompiles everything
# once (ccache keys on it), and other compilers may warn where GCC 12 does not.
# A build directory configured otherwise is reconfigured.
werror="${DFLOW_WERROR:-OFF}"
case "$werror" in
  ON|OFF) ;;
  *) echo "[build] error: DFLOW_WERROR is ON or OFF, not '$werror'" >&2; exit 2 ;;
esac
# ccache keyed on paths relative to the checkout: a fresh clone elsewhere
# (as CI makes) reuses what earlier builds compiled. The sloppiness lets
# ccache cache the precompiled <torch/torch.h> and every file built on it
# (without it those compiles are uncacheable and each clone rebuilds them).
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  prefix=$("$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' 2>/dev/null) \
    || { echo "[build] error: no torch in $VENV; run tools/setup.sh first" >&2; exit 1; }
  extra=()
  if [ "$SANITIZE" = thread ]; then
    # oneTBB hands messages between threads inside libtbb; ThreadSanitizer
    # sees that only in an instrumented libtbb (built once, outside the repo).
    tbb_prefix=$(tools/tbb_tsan.sh) || { echo "[build] error: could not build the instrumented oneTBB" >&2; exit 1; }
    extra+=(-DTBB_DIR="$tbb_prefix/lib/cmake/TBB")
  fi
  if [ -n "$san_flags" ]; then
    # -O0 with line tables: readable sanitizer stacks, and the fastest build of
    # the LibTorch-heavy files (their time is spent in LibTorch anyway).
    build_type=Sanitize
    extra+=(-DCMAKE_CXX_FLAGS_SANITIZE="-O0 -g1 -fno-omit-frame-pointer $san_flags"
           -DCMAKE_EXE_LINKER_FLAGS_SANITIZE="$san_flags" -DCMAKE_SHARED_LINKER_FLAGS_SANITIZE="$san_flags"
           -DDFLOW_SANITIZE="$SANITIZE")
  fi
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=$build_type -DCMAKE_PREFIX_PATH="$prefix" \
    -DDFLOW_WERROR=$werror "${extra[@]}" >/dev/null
elif ! grep -qx "DFLOW_WERROR:BOOL=$werror" "$BUILD_DIR/CMakeCache.txt"; then
  cmake -S . -B "$BUILD_DIR" -DDFLOW_WERROR=$werror >/dev/null
fi
cmake --build "$BUILD_DIR" ${targets:+--target "${targets[@]}"} -- -j"${DFLOW_BUILD_JOBS:-2}"
