#!/usr/bin/env bash
# One-command setup for dflow on Debian 12: the Debian packages it builds
# against, and LibTorch from the pinned PyPI `torch` wheel in a virtual
# environment outside the repository (reused by later runs and by CI), with the
# pinned `tensorboard` whose event reader the tests use.
# Idempotent: when everything is present it only checks, and downloads nothing.
set -euo pipefail

TORCH_VERSION="2.15.0"
TENSORBOARD_VERSION="2.21.0"  # tests read the tensorboard sink's event files with its reader
VENV="${DFLOW_VENV:-/opt/dflow/torch-${TORCH_VERSION}}"
DEB_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config   # toolchain
  libtbb-dev            # oneTBB: flow graph runtime
  libyaml-cpp-dev       # YAML pipelines and configs
  libspdlog-dev         # logging with area tags
  doctest-dev           # unit tests
  nlohmann-json3-dev    # metrics records, safetensors headers, exports
  libcli11-dev          # the dflow command line
  libcpp-httplib-dev    # the live view (dflow train --serve)
  libprotobuf-dev protobuf-compiler  # TensorBoard event records (the tensorboard sink)
  libisal-dev           # CRC32C of TensorBoard's record framing (ISA-L)
  chromium              # renders the HTML run report in tests (headless)
  curl                  # tests query the live view
  python3-venv          # the venv that holds the torch wheel
)

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq || die "apt-get update failed"
  for p in "${missing[@]}"; do
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$p" >/dev/null \
      || die "could not install Debian package '$p'"
  done
else
  say "Debian packages present"
fi

PY="$VENV/bin/python"
have_torch() { [ -x "$PY" ] && "$PY" - <<PYEOF 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("torch") == "${TORCH_VERSION}" else 1)
PYEOF
}
if have_torch; then
  say "torch ${TORCH_VERSION} present in $VENV"
else
  say "installing torch==${TORCH_VERSION} (LibTorch for C++) into $VENV"
  mkdir -p "$(dirname "$VENV")"
  [ -x "$PY" ] || python3 -m venv "$VENV" || die "could not create venv $VENV"
  "$PY" -m pip install -q --upgrade pip >/dev/null || die "could not upgrade pip in $VENV"
  "$PY" -m pip install -q "torch==${TORCH_VERSION}" numpy || die "could not install PyPI package torch==${TORCH_VERSION}"
fi
"$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' > /dev/null || die "torch in $VENV does not import"
have_tensorboard() { "$PY" - <<PYEOF 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version("tensorboard") == "${TENSORBOARD_VERSION}" else 1)
PYEOF
}
if have_tensorboard; then
  say "tensorboard ${TENSORBOARD_VERSION} present in $VENV"
else
  say "installing tensorboard==${TENSORBOARD_VERSION} (the tests' event-file reader) into $VENV"
  "$PY" -m pip install -q "tensorboard==${TENSORBOARD_VERSION}" || die "could not install PyPI package tensorboard==${TENSORBOARD_VERSION}"
fi
say "ok"
