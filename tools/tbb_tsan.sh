#!/usr/bin/env bash
# A ThreadSanitizer-instrumented oneTBB for tools/sanitize.sh thread.
#
# The flow graph hands messages between threads inside libtbb (task spawn and
# steal): with Debian's uninstrumented libtbb ThreadSanitizer cannot see that
# hand-off and reports every message as a race. This builds the same oneTBB
# version as the installed libtbb-dev, from Debian's source package, with
# -fsanitize=thread, into a prefix outside the repository that later runs
# reuse (like the torch venv). The system's apt configuration is not touched:
# a private sources list names Debian's deb-src archive.
# Prints the prefix (for CMake's TBB_DIR: <prefix>/lib/cmake/TBB).
set -euo pipefail
version=$(dpkg-query -W -f='${Version}' libtbb-dev 2>/dev/null) || { echo "[tbb-tsan] error: libtbb-dev is not installed (tools/setup.sh)" >&2; exit 1; }
upstream="${version%%-*}"
prefix="${DFLOW_TBB_TSAN_PREFIX:-/opt/dflow/tbb-tsan-${upstream}}"
if [ -f "$prefix/lib/cmake/TBB/TBBConfig.cmake" ] && [ -f "$prefix/.complete" ]; then
  echo "$prefix"; exit 0
fi
say() { printf '[tbb-tsan] %s\n' "$*" >&2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say "fetching Debian's source of onetbb $version"
cat > "$work/sources.list" <<LIST
deb-src http://deb.debian.org/debian bookworm main
LIST
apt_private=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
             -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache" -o Debug::NoLocking=1)
mkdir -p "$work/lists/partial" "$work/cache/archives/partial"
apt-get "${apt_private[@]}" update -qq >&2
(cd "$work" && apt-get "${apt_private[@]}" source --download-only "onetbb=$version" >&2 2>/dev/null) \
  || (cd "$work" && apt-get "${apt_private[@]}" source --download-only onetbb >&2)
tar -xf "$work"/onetbb_"$upstream".orig.tar.* -C "$work"
src=$(find "$work" -maxdepth 1 -type d -name 'oneTBB*' | head -1)
[ -n "$src" ] || { say "error: no oneTBB source in the Debian package"; exit 1; }
say "building oneTBB $upstream with -fsanitize=thread into $prefix"
cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTBB_SANITIZE=thread \
  -DTBB_TEST=OFF -DTBB_EXAMPLES=OFF -DTBBMALLOC_BUILD=OFF -DTBB_STRICT=OFF \
  -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib >&2
cmake --build "$work/build" -- -j"${DFLOW_BUILD_JOBS:-2}" >&2
cmake --install "$work/build" >&2
touch "$prefix/.complete"
echo "$prefix"
