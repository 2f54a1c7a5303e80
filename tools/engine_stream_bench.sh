#!/usr/bin/env bash
# bench/RESULTS.md "Engine files", streaming: the demo trained from engine
# files (features.engine) that tools/write_engine_features.py writes at a set
# rate while training runs, one run per RATE (files/s), and what it measured:
# the writer's files/s, the reader's samples/s, the reader's wait, the files
# ready ahead at the last step and the report's words on who bounds the run.
#   tools/engine_stream_bench.sh WORK_DIR RATE...   (after tools/build.sh dflow)
# STEPS (default 40) steps per run; training starts with the writer's first
# file, or HEAD_START_S (default 0) seconds after it. ORDER=training (default
# dataset) has the writer write the samples in the order training first reads
# them: the rows `dflow extraction-order` writes, file k row k, and the reader
# follows its map (params.file_order).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
dflow="${DFLOW:-$root/build/dflow}"
python="${PYTHON:-python3}"
work="${1:?WORK_DIR}"; shift
steps="${STEPS:-40}"
head_start_s="${HEAD_START_S:-0}"
order="${ORDER:-dataset}"
case "$order" in dataset|training) ;; *) echo "ORDER must be dataset or training, not '$order'" >&2; exit 2 ;; esac
mkdir -p "$work"
cd "$work"
settings=(--set "run.max_steps=$steps" --set checkpoint.every_steps=0 --set "metrics.sinks=[jsonl]"
          --set eval.every_steps=0)
common=("${settings[@]}" --overwrite)
# The demo's assets, and its online run: what training consumes with the target in process.
"$dflow" train "${common[@]}" --set run.out_dir=runs/online > online.log 2>&1
summary() {  # RUN_DIR: samples/s over the run and the reader's telemetry at its last step
  "$python" - "$1" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl") if '"kind":"step"' in l.replace(" ", "")]
samples = sum(len(s["sample_ids"]) for s in steps)
elapsed = steps[-1]["time"]["elapsed_s"]
node = next((n for n in steps[-1]["telemetry"]["nodes"] if n["name"] == "target"), {})
waited = node.get('outside_wait_s', 0)
print(f"steps {len(steps)} samples {samples} elapsed_s {elapsed:.1f} samples_per_s {samples / elapsed:.1f} "
      f"waited_s {waited:.1f} waited_share {100 * waited / elapsed:.0f}% ready_ahead {node.get('ready_ahead', '-')}")
PY
}
echo "online: $(summary runs/online)"
# The rows the writer reads, and which sample each file holds.
samples=runs/demo/data.jsonl file_order=""
if [ "$order" = training ]; then
  "$dflow" extraction-order "${settings[@]}" --out order.jsonl --map order.map.json > order.log 2>&1
  samples=order.jsonl file_order=", file_order: order.map.json"
fi
for rate in "$@"; do
  rm -rf "hs-$order-$rate" "runs/engine-$order-$rate"
  mkdir -p "hs-$order-$rate"
  "$python" "$root/tools/write_engine_features.py" --target runs/demo/target --samples "$samples" \
      --max-length 256 --out "hs-$order-$rate" --layer-ids 2 --rate "$rate" --precompute > "writer-$order-$rate.log" 2>&1 &
  writer=$!
  # Training starts when the writer writes its first file (its forwards are done: --precompute).
  while [ -z "$(find "hs-$order-$rate" -name 'hs_*.safetensors' -print -quit)" ]; do sleep 0.2; done
  sleep "$head_start_s"
  "$dflow" train "${common[@]}" --set "run.out_dir=runs/engine-$order-$rate" \
      --set pipeline.nodes.target.type=features.engine \
      --set "pipeline.nodes.target.params={dir: hs-$order-$rate, engine_layer_ids: [2, 4], dtype: bfloat16$file_order}" > "train-$order-$rate.log" 2>&1
  files=$(find "hs-$order-$rate" -name 'hs_*.safetensors' | wc -l)
  kill "$writer" 2>/dev/null || true
  wait "$writer" 2>/dev/null || true
  echo "order $order rate $rate files/s: $(summary "runs/engine-$order-$rate") files_written_by_then $files"
  "$dflow" report "runs/engine-$order-$rate" -o "report-$order-$rate.html" | grep -E "bounds this run" || true
done
