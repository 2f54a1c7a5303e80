#!/usr/bin/env bash
# bench/RESULTS.md "Engine files", streaming: the demo trained from engine
# files (features.engine) that tools/write_engine_features.py writes at a set
# rate while training runs, one run per RATE (files/s), and what it measured:
# the writer's files/s, the reader's samples/s, the reader's wait, the files
# ready ahead at the last step and the report's words on who bounds the run.
#   tools/engine_stream_bench.sh WORK_DIR RATE...   (after tools/build.sh dflow)
# STEPS (default 40) steps per run; training starts with the writer's first
# file, or HEAD_START_S (default 0) seconds after it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dflow="${DFLOW:-$root/build/dflow}"
python="${PYTHON:-python3}"
work="${1:?WORK_DIR}"; shift
steps="${STEPS:-40}"
head_start_s="${HEAD_START_S:-0}"
mkdir -p "$work"
cd "$work"
common=(--set "run.max_steps=$steps" --set checkpoint.every_steps=0 --set "metrics.sinks=[jsonl]"
        --set eval.every_steps=0 --overwrite)
# The demo's assets, and its online run: what training consumes with the target in process.
"$dflow" train "${common[@]}" --set run.out_dir=runs/online > online.log 2>&1
summary() {  # RUN_DIR: samples/s over the run and the reader's telemetry at its last step
  "$python" - "$1" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"kind":"step"' in l.replace(" ", "")]
samples = sum(len(s["sample_ids"]) for s in steps)
elapsed = steps[-1]["time"]["elapsed_s"]
node = next((n for n in steps[-1]["telemetry"]["nodes"] if n["name"] == "target"), {})
print(f"steps {len(steps)} samples {samples} elapsed_s {elapsed:.1f} samples_per_s {samples / elapsed:.1f} "
      f"waited_s {node.get('outside_wait_s', 0):.1f} ready_ahead {node.get('ready_ahead', '-')}")
PY
}
echo "online: $(summary runs/online)"
for rate in "$@"; do
  rm -rf "hs-$rate" "runs/engine-$rate"
  mkdir -p "hs-$rate"
  "$python" "$root/tools/write_engine_features.py" --target runs/demo/target --samples runs/demo/data.jsonl \
      --max-length 256 --out "hs-$rate" --layer-ids 2 --rate "$rate" --precompute > "writer-$rate.log" 2>&1 &
  writer=$!
  # Training starts when the writer writes its first file (its forwards are done: --precompute).
  while [ -z "$(find "hs-$rate" -name 'hs_*.safetensors' -print -quit)" ]; do sleep 0.2; done
  sleep "$head_start_s"
  "$dflow" train "${common[@]}" --set "run.out_dir=runs/engine-$rate" \
      --set pipeline.nodes.target.type=features.engine \
      --set "pipeline.nodes.target.params={dir: hs-$rate, engine_layer_ids: [2, 4], dtype: bfloat16}" > "train-$rate.log" 2>&1
  files=$(find "hs-$rate" -name 'hs_*.safetensors' | wc -l)
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  echo "rate $rate files/s: $(summary "runs/engine-$rate") files_written_by_then $files"
  "$dflow" report "runs/engine-$rate" -o "report-$rate.html" | grep -E "bounds this run" || true
done
