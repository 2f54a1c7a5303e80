#!/usr/bin/env bash
# The fault drills in full (tests/tools/drill_test.cpp; ctest runs a short
# form of the same tests as its `drills` entry): SIGKILL at random moments
# with resume, a disk that fills while a checkpoint is written (a tmpfs: needs
# root), a killed and a stopped rank of a 2-rank run, and many live-view
# clients during training. Prints the figures and writes them to
# docs/reliability-drills.md. About 15 minutes on 2 cores.
#   tools/drills.sh [doctest args, e.g. -tc='Drill.Kill*']
# Sizes (environment): DFLOW_DRILL_TRIALS (20 kill trials), DFLOW_DRILL_SEED
# (the clock), DFLOW_DRILL_LOAD_S (60 s of load per run), DFLOW_DRILL_PAIRS (3
# runs without and 3 with clients, alternating), DFLOW_DRILL_CLIENTS (32),
# DFLOW_DRILL_STRICT (1: throughput under load within 5%).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${DFLOW_BUILD_DIR:-build}"
tools/build.sh dflow test_tools >/dev/null
export DFLOW_DRILL_TRIALS="${DFLOW_DRILL_TRIALS:-20}" DFLOW_DRILL_LOAD_S="${DFLOW_DRILL_LOAD_S:-60}"
export DFLOW_DRILL_PAIRS="${DFLOW_DRILL_PAIRS:-3}" DFLOW_DRILL_CLIENTS="${DFLOW_DRILL_CLIENTS:-32}"
export DFLOW_DRILL_STRICT="${DFLOW_DRILL_STRICT:-1}" DFLOW_DRILL_FULL=1
figures=$(mktemp)
export DFLOW_DRILL_FIGURES="$figures"
trap 'rm -f "$figures"' EXIT
start=$(date +%s)
status=0
"$BUILD_DIR/tests/test_tools" --no-intro -tc='Drill.*' "$@" || status=$?
took=$(( $(date +%s) - start ))

verdict=$([ "$status" = 0 ] && echo "all passed" || echo "FAILED (exit $status)")
{
  echo "# Fault drills"
  echo
  echo "\`tools/drills.sh\` on $(date -u +%Y-%m-%d), $(nproc) cores, ${took} s: ${verdict}."
  echo "Trials ${DFLOW_DRILL_TRIALS}, load ${DFLOW_DRILL_LOAD_S} s x ${DFLOW_DRILL_PAIRS} pairs, ${DFLOW_DRILL_CLIENTS} clients."
  echo "CI runs the same tests short (\`ctest -R drills\`: 3 kill trials, 6 s of load, no throughput assertion)."
  echo "Each row says what its drill asserts and the figures it measured; the verdict above says whether every assertion held."
  echo
  echo "| drill | what was done | result |"
  echo "|---|---|---|"
  jq -r '
    if .drill == "kill" then
      "| SIGKILL + resume | \(.trials) trials of \(.steps) steps (checkpoint every 2, keep 2), seed \(.seed): \(.kills) kills at random moments, \(.kills_mid_checkpoint_write) of them while a checkpoint was half written, \(.resumes) resumes | `latest` loaded after \(.survived)/\(.kills) kills; every trial ended with the uninterrupted run'"'"'s records and final weights (bit for bit); nothing saved lost |"
    elif .drill == "disk_full_halt" then
      "| disk full, on_write_error: halt | tmpfs of \(.tmpfs_bytes) bytes on checkpoints/ (a checkpoint takes \(.checkpoint_bytes)); \(.failed_at) does not fit | exit \(.exit_code) naming the file and \"No space left on device\"; latest still \(.latest_after) and loads; no temporary left; after freeing space, resumed to the end with identical records: \(.resumed_to_end) |"
    elif .drill == "disk_full_continue" then
      "| disk full, on_write_error: continue | same tmpfs; \(.failed_at) does not fit, then room is freed | an alarm record and a warning; training went on (records identical); checkpoints after: \(.checkpoints_after | join(", ")); exit \(.exit_code) |"
    elif (.drill | startswith("rank_")) then
      "| 2 ranks, rank \(.victim_rank) gets \(.signal) | distributed.timeout_s \(.timeout_s) | launcher exit \(.launcher_exit) after \(.exit_after_s * 10 | round / 10) s, naming rank \(.victim_rank) |"
    elif .drill == "live_view_load" then
      "| live view under load | \(.clients) clients polling /, /metrics, /graph.json, /records.json (from its cursor, as the page does) every 50-100 ms, \(.load_s) s x \(.pairs) | \(.requests) requests (\(.requests_per_s | round)/s), \(.failed) failed; median step \(.median_step_s_quiet * 1000 | round) ms quiet vs \(.median_step_s_loaded * 1000 | round) ms loaded: throughput ratio \(.throughput_ratio * 1000 | round / 1000); POST/PUT/DELETE/PATCH 4xx, path escapes 4xx, records unchanged |"
    else empty end' "$figures"
} > docs/reliability-drills.md
cat docs/reliability-drills.md
exit "$status"
