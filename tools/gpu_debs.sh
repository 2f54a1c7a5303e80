#!/usr/bin/env bash
# Fetches the Debian 12 packages dflow builds against (headers, CMake and
# pkg-config files, their shared libraries, protoc, pkg-config) as .deb files
# into .debs/ (ignored by git), for a machine that has a compiler, CMake and
# PyTorch but no -dev packages and no network: tools/gpu_check.sh unpacks them
# there with `dpkg -x` into a prefix (never into /). Needs apt-get and a
# network here; downloads only what is missing. About 15 MiB.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST="${DFLOW_DEBS_DIR:-.debs}"
PACKAGES=(
  libtbb-dev libtbb12 libtbbmalloc2 libtbbbind-2-5 libhwloc15  # oneTBB (the targets file names every library)
  libyaml-cpp-dev libyaml-cpp0.7
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  doctest-dev nlohmann-json3-dev libcli11-dev
  libcpp-httplib-dev libcpp-httplib0.11 libssl-dev libssl3 zlib1g-dev zlib1g libbrotli-dev libbrotli1  # httplib and its pkg-config Requires
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libisal-dev libisal2
  pkgconf pkgconf-bin libpkgconf3 pkg-config
)
say() { printf '[gpu_debs] %s\n' "$*"; }
command -v apt-get >/dev/null || { say "error: apt-get is needed (run this on the Debian machine)"; exit 1; }
mkdir -p "$DEST"
missing=()
for p in "${PACKAGES[@]}"; do
  compgen -G "$DEST/${p}_*.deb" >/dev/null || missing+=("$p")
done
if ((${#missing[@]})); then
  say "downloading: ${missing[*]}"
  (cd "$DEST" && apt-get download -qq "${missing[@]}") || {
    say "error: apt-get download failed (run 'apt-get update' first?)"; exit 1; }
else
  say "all ${#PACKAGES[@]} packages present in $DEST"
fi
say "$(ls "$DEST"/*.deb | wc -l) .deb files, $(du -sh "$DEST" | cut -f1) in $DEST"
