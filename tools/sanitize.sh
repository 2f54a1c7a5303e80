#!/usr/bin/env bash
# Builds the test suite under a sanitizer (its own build directory) and runs it
# there. Every instrumented process, the `dflow` commands the CLI tests start
# and both ranks of the 2-rank Gloo runs included, writes its reports into
# <build>/sanitizer-logs/; the run fails if any report was written, even from
# a process whose exit status no test looks at.
#   tools/sanitize.sh address,undefined [AREA...]   # build-asan/
#   tools/sanitize.sh thread [AREA...]              # build-tsan/
# AREAs are test folders (config graph data text formats target drafter
# train report nodes tools); all of them by default. DFLOW_SANITIZE_CASES='Train.*,Dist.*' runs
# only the matching doctest cases of each area's binary (directly, not
# through ctest) when a whole area takes too long under the sanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
kind="${1:?usage: tools/sanitize.sh address,undefined|thread [AREA...]}"
shift
case "$kind" in
  address,undefined|undefined,address) build_dir="${DFLOW_BUILD_DIR:-build-asan}" ;;
  thread) build_dir="${DFLOW_BUILD_DIR:-build-tsan}" ;;
  *) echo "[sanitize] error: expected 'address,undefined' or 'thread', got '$kind'" >&2; exit 2 ;;
esac
areas=("$@")
((${#areas[@]})) || areas=(config graph data text formats target drafter train report nodes tools)
targets=()
for a in "${areas[@]}"; do
  [ -d "tests/$a" ] || { echo "[sanitize] error: no test area '$a' (tests/$a)" >&2; exit 2; }
  targets+=("test_$a")
  case "$a" in formats|target|drafter|train|nodes|tools) need_cli=1 ;; esac
done
[ -n "${need_cli:-}" ] && targets=(dflow "${targets[@]}")
supp="$PWD/tools/sanitizers"
DFLOW_BUILD_DIR="$build_dir" tools/build.sh --sanitize "$kind" "${targets[@]}"

logs="$PWD/$build_dir/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
common="log_path=$logs/report:log_exe_name=1:print_stacktrace=1:external_symbolizer_path=$(command -v llvm-symbolizer || true)"
export UBSAN_OPTIONS="$common:halt_on_error=1:exitcode=86:suppressions=$supp/ubsan.supp"
export ASAN_OPTIONS="$common:halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export TSAN_OPTIONS="$common:halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp:history_size=4"
# Instrumented code runs several times slower (ThreadSanitizer 5-15x): the
# tests' limits against hangs are stretched, never their assertions.
if [ "$kind" = thread ]; then export DFLOW_TIME_SCALE=15; else export DFLOW_TIME_SCALE=4; fi
started=$(date +%s)
status=0
if [ -n "${DFLOW_SANITIZE_CASES:-}" ]; then
  test_log="$build_dir/sanitizer-cases-output.log"
  : > "$test_log"
  for a in "${areas[@]}"; do
    "$build_dir/tests/test_$a" --no-intro -tc="$DFLOW_SANITIZE_CASES" 2>&1 | tee -a "$test_log" || status=$?
  done
else
  test_log="$build_dir/Testing/Temporary/LastTest.log"
  pattern="^($(IFS='|'; echo "${areas[*]}"))\$"
  ctest --test-dir "$build_dir" --output-on-failure --timeout 3600 -R "$pattern" || status=$?
fi
elapsed=$(( $(date +%s) - started ))
reports=$(find "$logs" -type f | wc -l)
# GCC's UndefinedBehaviorSanitizer, linked into AddressSanitizer's runtime,
# ignores log_path and reports on stderr (and exits 86, UBSAN_OPTIONS
# exitcode): its reports are found in the tests' output (ctest keeps it in
# LastTest.log; the CLI tests pass on what their commands printed).
if [ -f "$test_log" ] && grep -q "runtime error: " "$test_log"; then
  grep -B2 -A12 "runtime error: " "$test_log" > "$logs/ubsan-from-test-output.txt"
  reports=$((reports + 1))
fi
echo "[sanitize] $kind (${areas[*]}${DFLOW_SANITIZE_CASES:+, cases $DFLOW_SANITIZE_CASES}): exit $status, $reports report file(s) in $logs, ${elapsed} s"
if [ "$reports" -gt 0 ]; then
  for f in "$logs"/*; do echo "== $f"; head -60 "$f"; done
  exit 1
fi
exit "$status"
