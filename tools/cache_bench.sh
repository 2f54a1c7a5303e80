#!/usr/bin/env bash
# The feature cache's figures (bench/RESULTS.md "Feature cache"):
#   tools/cache_bench.sh [OUT_DIR]       (env: DEMO=0 or PRESET=0 skips that part)
# 1. The demo (312 steps): online, then from caches filled by
#    `dflow cache-features` in float32, bfloat16 and float8_e4m3: steps per
#    second, bytes per token, the last step's loss and the last tau against
#    the online run's (float32: every step record equal, bit for bit).
# 2. The reader alone (bench_feature_cache) against `dd` of the same shards.
# 3. The qwen3-0.6b preset (float32 on this CPU) on 48 demo samples: steps
#    per second online and cached (bfloat16), 6 steps each.
# 4. Start-up (STARTUP=0 skips it): a
#    cache of the demo's samples repeated 15 times, filled by cache-features,
#    then bench_cache_startup: opening the reader and checking the samples.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/cache-bench}"
BIN=build/dflow
[ -x "$BIN" ] && [ -x build/bench/bench_feature_cache ] || {
  echo "[cache-bench] error: build first (tools/build.sh dflow bench_feature_cache)" >&2; exit 1; }
mkdir -p "$OUT"
[ -f runs/demo/target/config.json ] || "$BIN" train --set run.max_steps=1 --set run.out_dir="$OUT/assets" --overwrite >/dev/null
quiet=(--set checkpoint.every_steps=0 --set metrics.sinks=[jsonl] --set run.log_level=warn)
"$BIN" config > "$OUT/online.yaml"

cached_config() {  # dtype: the demo with its target node reading OUT/cache-DTYPE
  sed "s#type: target_forward[^}]*}#type: features.cached, params: {dir: $OUT/cache-$1, dtype: $1}}#" \
    "$OUT/online.yaml" > "$OUT/cached-$1.yaml"
  grep -q "features.cached" "$OUT/cached-$1.yaml"
}

if [ "${DEMO:-1}" = 1 ]; then
echo "[cache-bench] demo online"
"$BIN" train "$OUT/online.yaml" --set run.out_dir="$OUT/online" "${quiet[@]}" --overwrite > /dev/null
for dtype in float32 bfloat16 float8_e4m3; do
  cached_config "$dtype"
  rm -rf "$OUT/cache-$dtype"
  echo "[cache-bench] fill $dtype"
  "$BIN" cache-features "$OUT/cached-$dtype.yaml" | tee "$OUT/fill-$dtype.txt"
  echo "[cache-bench] demo cached $dtype"
  "$BIN" train "$OUT/cached-$dtype.yaml" --set run.out_dir="$OUT/cached-$dtype" "${quiet[@]}" --overwrite > /dev/null
done

echo "[cache-bench] reader alone (float32 cache) against dd of its shards, warm page cache then cold"
dd_all() {  # seconds to read every shard with dd bs=1M
  local t0 t1
  t0=$(date +%s.%N)
  for f in "$OUT"/cache-float32/shards/*.bin; do dd if="$f" of=/dev/null bs=1M status=none; done
  t1=$(date +%s.%N)
  python3 -c "print(f'{$t1 - $t0:.4f}')"
}
bytes=$(cat "$OUT"/cache-float32/shards/*.bin | wc -c)
{
  build/bench/bench_feature_cache "$OUT/cache-float32" 3
  s=$(dd_all); s=$(dd_all)
  python3 -c "print(f'RESULT dd bs=1M, warm: {$bytes / $s / 1e9:.2f} GB/s')"
  if (sync && echo 3 > /proc/sys/vm/drop_caches) 2>/dev/null; then
    build/bench/bench_feature_cache "$OUT/cache-float32" 1 once | sed 's/^RESULT /RESULT cold: /'
    sync && echo 3 > /proc/sys/vm/drop_caches
    s=$(dd_all)
    python3 -c "print(f'RESULT cold: dd bs=1M: {$bytes / $s / 1e9:.2f} GB/s')"
  else
    echo "RESULT cold: not measured (cannot drop the page cache here)"
  fi
} | tee "$OUT/reader.txt"

python3 - "$OUT" <<'PY'
import json, sys, os
out = sys.argv[1]
def load(name):
    steps, evals = {}, []
    for line in open(f"{out}/{name}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("kind") == "step": steps[r["global_step"]] = r
        if r.get("kind") == "eval": evals.append(r)
    return steps, evals
def strip(r):
    r = dict(r); r.pop("time", None); r.pop("telemetry", None); return r
base, base_evals = load("online")
last = max(base)
def rate(steps):
    t = [s["time"]["elapsed_s"] for s in steps.values() if "time" in s]
    return len(steps) / max(t) if t else float("nan")
first = base[min(base)]["loss"]
print(f"| run | steps/s | bytes a token | loss at step {last} | abs(cached - online) / first loss: mean, max | last tau | steps equal to online |")
print("| --- | --- | --- | --- | --- | --- | --- |")
print(f"| online | {rate(base):.2f} | - | {base[last]['loss']:.6g} | - | {base_evals[-1]['mean_tau']:.2f} | - |")
for dtype in ["float32", "bfloat16", "float8_e4m3"]:
    steps, evals = load(f"cached-{dtype}")
    fill = open(f"{out}/fill-{dtype}.txt").read()
    per_token = fill.split(" bytes a token")[0].rsplit(", ", 1)[-1]
    equal = sum(strip(steps[k]) == strip(base[k]) for k in base if k in steps)
    rel = [abs(steps[k]["loss"] - base[k]["loss"]) / first for k in base]
    print(f"| cached {dtype} | {rate(steps):.2f} | {per_token} | {steps[last]['loss']:.6g} | "
          f"{sum(rel) / len(rel):.2e}, {max(rel):.2e} | {evals[-1]['mean_tau']:.2f} | {equal} of {len(base)} |")
PY
fi

if [ "${PRESET:-1}" = 1 ]; then
  P="$OUT/qwen3-0.6b"
  mkdir -p "$P"
  [ -f "$P/target/config.json" ] || "$BIN" make-tiny-target --preset qwen3-0.6b --out "$P/target" > /dev/null
  head -48 runs/demo/data.jsonl > "$P/data.jsonl"
  [ -d "$P/data" ] || "$BIN" prepare "$P/data.jsonl" --out "$P/data" > /dev/null
  pre=(--set model.target.path="$P/target" --set model.target.dtype=float32 --set data.train=["$P/data"]
       --set model.drafter.target_layer_ids=[] --set model.drafter.num_target_features=5 --set eval.every_steps=0
       --set data.tokens_per_batch=1024 --set run.max_steps=6 --set train.grad_accum=1 --set train.epochs=1)
  # Without the eval node: tau is not measured here, and drafting with a
  # float32 0.6B target on 2 cores would take longer than training.
  grep -v 'type: eval.tau\|to: eval,' "$OUT/online.yaml" > "$P/online.yaml"
  sed "s#type: target_forward[^}]*}#type: features.cached, params: {dir: $P/cache, dtype: bfloat16}}#" \
    "$P/online.yaml" > "$P/cached.yaml"
  echo "[cache-bench] qwen3-0.6b online"
  /usr/bin/time -f "RESULT qwen3-0.6b online process: wall %e s, cpu %U s user + %S s sys" \
    "$BIN" train "$P/online.yaml" --set run.out_dir="$P/online" "${pre[@]}" "${quiet[@]}" --overwrite 2>&1 > /dev/null | tail -1
  echo "[cache-bench] qwen3-0.6b fill"
  rm -rf "$P/cache"
  /usr/bin/time -f "fill wall %e s" "$BIN" cache-features "$P/cached.yaml" "${pre[@]}" 2>&1 | tee "$P/fill.txt"
  echo "[cache-bench] qwen3-0.6b cached"
  /usr/bin/time -f "RESULT qwen3-0.6b cached process: wall %e s, cpu %U s user + %S s sys" \
    "$BIN" train "$P/cached.yaml" --set run.out_dir="$P/cached" "${pre[@]}" "${quiet[@]}" --overwrite 2>&1 > /dev/null | tail -1
  python3 - "$P" <<'PY'
import json, sys
p = sys.argv[1]
for name in ["online", "cached"]:
    steps = [json.loads(l) for l in open(f"{p}/{name}/metrics.jsonl") if '"kind":"step"' in l.replace(" ", "")]
    t = steps[-1]["time"]["elapsed_s"]
    print(f"RESULT qwen3-0.6b {name}: {len(steps)} steps in {t:.1f} s = {len(steps) / t:.3f} steps/s, "
          f"loss at step {steps[-1]['global_step']} {steps[-1]['loss']:.6g}")
PY
fi

if [ "${STARTUP:-1}" = 1 ]; then
  [ -x build/bench/bench_cache_startup ] || {
    echo "[cache-bench] error: build first (tools/build.sh bench_cache_startup)" >&2; exit 1; }
  S="$OUT/startup"
  mkdir -p "$S"
  [ -f "$S/data.jsonl" ] || for i in $(seq 15); do cat runs/demo/data.jsonl; done > "$S/data.jsonl"
  [ -d "$S/data" ] || "$BIN" prepare "$S/data.jsonl" --out "$S/data" > /dev/null
  sed "s#type: target_forward[^}]*}#type: features.cached, params: {dir: $S/cache, dtype: bfloat16}}#" \
    "$OUT/online.yaml" > "$S/cached.yaml"
  [ -f "$S/cache/manifest.json" ] || "$BIN" cache-features "$S/cached.yaml" --set data.train=["$S/data"] > /dev/null
  echo "[cache-bench] start-up on a cache of $(wc -l < "$S/data.jsonl") samples"
  build/bench/bench_cache_startup "$S/cached.yaml" "$S/cache" 5 --set data.train=["$S/data"] --set run.log_level=warn |
    tee "$S/startup.txt"
fi
