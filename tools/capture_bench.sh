#!/usr/bin/env bash
# The capture graph's figures (bench/RESULTS.md "Capture as a graph"):
#   tools/capture_bench.sh OLD_DFLOW [OUT_DIR]     (env: DEMO=0 or PRESET=0 skips that part, ROUNDS=2)
# OLD_DFLOW is a dflow built before `cache-features` became a graph (the
# serial loop: collate, forward, blocking copy, encode and write in turn),
# e.g. from a worktree at the commit before it. Each round fills a fresh
# bfloat16 cache with the old binary, then with build/dflow, back to back, on
# 1. the demo (1200 samples, 104 batches) and
# 2. the qwen3-0.6b preset (real shapes, random weights, float32 on the CPU)
#    on 48 demo samples.
# tokens/s = the plan's real tokens / the seconds the summary line reports
# (the fill itself: from the first batch to the last shard published).
set -euo pipefail
cd "$(dirname "$0")/.."
OLD="${1:?usage: tools/capture_bench.sh OLD_DFLOW [OUT_DIR]}"
OUT="${2:-runs/capture-bench}"
NEW=build/dflow
ROUNDS="${ROUNDS:-2}"
[ -x "$NEW" ] && [ -x "$OLD" ] || { echo "[capture-bench] error: build first (tools/build.sh dflow) and give OLD_DFLOW" >&2; exit 1; }
mkdir -p "$OUT"
[ -f runs/demo/target/config.json ] || "$NEW" train --set run.max_steps=1 --set run.out_dir="$OUT/assets" --overwrite >/dev/null
"$NEW" config > "$OUT/online.yaml"

# fill NAME BIN CONFIG [--set ...]: one fresh fill; prints "NAME tokens/s seconds".
fill() {
  local name="$1" bin="$2" config="$3"; shift 3
  local dir="$OUT/cache-$name"
  sed "s#type: target_forward[^}]*}#type: features.cached, params: {dir: $dir, dtype: bfloat16}}#" "$config" > "$OUT/$name.yaml"
  rm -rf "$dir"
  "$bin" cache-features "$OUT/$name.yaml" --set run.out_dir="$OUT/run-$name" "$@" > "$OUT/$name.log" 2>&1
  python3 - "$OUT/$name.log" "$name" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
real = int(re.search(r"\((\d+) real / \d+ padded tokens\)", text).group(1))
seconds = float(re.search(r"samples \([^)]*\) in ([0-9.e+-]+) s", text).group(1))
print(f"RESULT {sys.argv[2]}: {real} tokens in {seconds:.2f} s = {real / seconds:.0f} tokens/s")
PY
}

if [ "${DEMO:-1}" = 1 ]; then
  for round in $(seq "$ROUNDS"); do
    fill "demo-loop-$round" "$OLD" "$OUT/online.yaml"
    fill "demo-graph-$round" "$NEW" "$OUT/online.yaml"
  done
  grep -A3 "where the capture waited" "$OUT/demo-graph-1.log" || true
fi

if [ "${PRESET:-1}" = 1 ]; then
  P="$OUT/qwen3-0.6b"
  mkdir -p "$P"
  [ -f "$P/target/config.json" ] || "$NEW" make-tiny-target --preset qwen3-0.6b --out "$P/target" > /dev/null
  head -48 runs/demo/data.jsonl > "$P/data.jsonl"
  [ -d "$P/data" ] || "$NEW" prepare "$P/data.jsonl" --out "$P/data" > /dev/null
  pre=(--set model.target.path="$P/target" --set model.target.dtype=float32 --set data.train=["$P/data"]
       --set model.drafter.target_layer_ids=[] --set model.drafter.num_target_features=5
       --set data.tokens_per_batch=1024 --set train.grad_accum=1)
  for round in $(seq "$ROUNDS"); do
    fill "qwen3-0.6b-loop-$round" "$OLD" "$OUT/online.yaml" "${pre[@]}"
    fill "qwen3-0.6b-graph-$round" "$NEW" "$OUT/online.yaml" "${pre[@]}"
  done
  grep -A3 "where the capture waited" "$OUT/qwen3-0.6b-graph-1.log" || true
fi
