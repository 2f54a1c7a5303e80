#!/usr/bin/env bash
# Set up, build everything (dflow and every test executable) and run the
# whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
ctest --test-dir "${DFLOW_BUILD_DIR:-build}" --output-on-failure "$@"
