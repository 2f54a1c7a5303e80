#!/usr/bin/env bash
# Set up, build everything (dflow and every test executable) and run the
# whole test suite, DFLOW_TEST_JOBS (default 2) ctest entries at a time
# (many cases run one thread or wait on Python references and dflow
# processes: two entries at once keep two cores busy).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
tools/build.sh
ctest --test-dir "${DFLOW_BUILD_DIR:-build}" --output-on-failure --parallel "${DFLOW_TEST_JOBS:-2}" "$@"
