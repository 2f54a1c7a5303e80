#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang into build-fuzz/ and runs
# each for a bounded time, one after the other.
#   tools/fuzz.sh [SECONDS_PER_TARGET | --runs N | --seeds] [TARGET...]
# SECONDS_PER_TARGET defaults to 60. --runs N stops each target after N
# inputs instead; --seeds only replays the committed seeds (fuzz/corpus/) and
# the regression inputs (fuzz/regressions/), a quick check. TARGETs default
# to every fuzz_* target. Each target starts from its committed seeds plus
# what earlier runs found (build-fuzz/corpus/<target>/, never committed);
# crashes go to build-fuzz/artifacts/<target>/, logs to build-fuzz/logs/, and
# one line per run is appended to build-fuzz/fuzz-runs.tsv. Exits 1 when a
# target crashed (or leaked, or timed out on an input).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=time; amount=60; targets=()
while (($#)); do
  case "$1" in
    --runs) mode=runs; amount="${2:?--runs needs a count}"; shift 2 ;;
    --seeds) mode=seeds; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    [0-9]*) amount="$1"; shift ;;
    *) targets+=("$1"); shift ;;
  esac
done
BUILD_DIR=build-fuzz
command -v clang++ >/dev/null || { echo "[fuzz] error: no clang++; run tools/setup.sh (clang, libclang-rt-14-dev)" >&2; exit 1; }
# ccache keyed on paths relative to the checkout, as tools/build.sh does.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  # -O2 with assertions on (no NDEBUG) and line tables for the stacks.
  CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DDFLOW_FUZZ=ON -DCMAKE_BUILD_TYPE=Fuzz \
    -DCMAKE_CXX_FLAGS_FUZZ="-O2 -g" >/dev/null
fi
if ((${#targets[@]} == 0)); then
  mapfile -t targets < <(sed -n 's/^dflow_fuzz_target(\(fuzz_[a-z_]*\).*/\1/p' fuzz/CMakeLists.txt)
fi
cmake --build "$BUILD_DIR" --target "${targets[@]}" -- -j"${DFLOW_BUILD_JOBS:-2}"

# Longest input per target: a little above its largest seed, so that the
# fuzzer spends its time on structure rather than on size.
max_len() {
  case "$1" in
    fuzz_tokenizer_json) echo 16384 ;;
    fuzz_config) echo 8192 ;;
    fuzz_shard_set|fuzz_jsonl_sample|fuzz_conversation|fuzz_safetensors_header|fuzz_checkpoint_manifest|fuzz_quarantine) echo 4096 ;;
    *) echo 2048 ;;
  esac
}

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
mkdir -p "$BUILD_DIR/logs"
results="$BUILD_DIR/fuzz-runs.tsv"
[ -f "$results" ] || printf 'date\ttarget\tmode\tseconds\texecutions\tcorpus\tcrashes\n' >"$results"
status=0
printf '%-28s %8s %12s %8s %8s\n' target seconds executions corpus crashes
for t in "${targets[@]}"; do
  exe="$BUILD_DIR/fuzz/$t"
  work="$BUILD_DIR/corpus/$t" artifacts="$BUILD_DIR/artifacts/$t" log="$BUILD_DIR/logs/$t.log"
  mkdir -p "$work" "$artifacts"
  flags=(-max_len="$(max_len "$t")" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
         -artifact_prefix="$artifacts/")
  inputs=("$work" "fuzz/corpus/$t")
  [ -d "fuzz/regressions/$t" ] && inputs+=("fuzz/regressions/$t")
  case "$mode" in
    time) flags+=(-max_total_time="$amount"); limit=$((amount + 120)) ;;
    runs) flags+=(-runs="$amount"); limit=$((6 * 3600)) ;;
    seeds) flags+=(-runs=0); inputs=("fuzz/corpus/$t"); [ -d "fuzz/regressions/$t" ] && inputs+=("fuzz/regressions/$t")
           limit=120 ;;
  esac
  start=$(date +%s)
  rc=0
  timeout "$limit" "$exe" "${flags[@]}" "${inputs[@]}" >"$log" 2>&1 || rc=$?
  seconds=$(($(date +%s) - start))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  corpus=$(find "$work" -type f | wc -l)
  crashes=$(find "$artifacts" -type f -newermt "@$start" | wc -l)
  if ((rc != 0)); then
    status=1
    echo "[fuzz] $t exited with $rc; see $log" >&2
    grep -m3 -E "^==[0-9]+==ERROR|runtime error|SUMMARY|Test unit written" "$log" >&2 || true
  fi
  printf '%-28s %8s %12s %8s %8s\n' "$t" "$seconds" "${execs:-?}" "$corpus" "$crashes"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%FT%TZ)" "$t" "$mode" "$seconds" "${execs:-0}" "$corpus" \
    "$crashes" >>"$results"
done
exit "$status"
