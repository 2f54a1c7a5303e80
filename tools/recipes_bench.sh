#!/usr/bin/env bash
# Time to tau: trains each variant of the 2026 recipe for the same budget on
# the demo's echo target and compares them (bench/RESULTS.md "Recipe variants").
#   tools/recipes_bench.sh [OUT_DIR] [STEPS]     (env: SEEDS, TAU_THRESHOLD, BUDGET_STEP)
# One axis changes per run against the 2025 baseline (decay, AdamW, full
# attention): dpace, muon, sliding. The echo target's tau climbs from 1 to
# its plateau (16 greedy, about 15 sampled) between steps 20 and 40, so the
# variants are told apart by where that climb happens: tau is measured every
# 2 steps with speculative sampling (eval.temperature 1), and each variant
# reports the first step (and second) at which tau reached TAU_THRESHOLD and
# tau at step BUDGET_STEP, for each seed of SEEDS. Prints `dflow compare` of
# the first seed's runs (the HTML page in OUT_DIR/compare.html).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/recipes}"
STEPS="${2:-60}"
THRESHOLD="${TAU_THRESHOLD:-8}"
BUDGET="${BUDGET_STEP:-30}"
SEEDS="${SEEDS:-1234 1235 1236}"
BIN=build/dflow
[ -x "$BIN" ] || { echo "[recipes] error: build dflow first (tools/build.sh dflow)" >&2; exit 1; }
mkdir -p "$OUT"
# The demo's assets (target, data, held-out prompts) once.
[ -f runs/demo/target/config.json ] || "$BIN" train --set run.max_steps=1 --set run.out_dir="$OUT/assets" --overwrite >/dev/null

common=(--set run.max_steps="$STEPS" --set eval.every_steps=2 --set eval.temperature=1.0 --set eval.max_prompts=16
        --set checkpoint.every_steps=0 --set metrics.sinks=[jsonl] --set run.log_level=warn)
base="$OUT/base.yaml"
"$BIN" config "${common[@]}" > "$base"

variant() {  # name, then sed expressions and --set=KEY=VALUE overrides for it; once per seed
  local name="$1"; shift
  local file="$OUT/$name.yaml" sets=() exprs=() seed
  for arg in "$@"; do
    case "$arg" in --set=*) sets+=(--set "${arg#--set=}") ;; *) exprs+=(-e "$arg") ;; esac
  done
  if ((${#exprs[@]})); then sed "${exprs[@]}" "$base" > "$file"; else cp "$base" "$file"; fi
  for seed in $SEEDS; do
    echo "[recipes] $name seed $seed"
    "$BIN" train "$file" --set run.out_dir="$OUT/$name-$seed" --set run.name="$name-$seed" --set run.seed="$seed" \
      ${sets[@]+"${sets[@]}"} --overwrite >/dev/null
  done
}

variant baseline
variant dpace 's/{name: drafter, type: drafter_step}/{name: drafter, type: drafter_step, params: {objective: dpace, alpha: 0.5}}/'
variant muon 's/type: optimizer_step.adamw}/type: optimizer_step.muon}/'
variant sliding --set=model.drafter.layer_types=[sliding_attention] --set=model.drafter.sliding_window=32

first_seed="${SEEDS%% *}"
"$BIN" compare "$OUT"/{baseline,dpace,muon,sliding}-"$first_seed" -o "$OUT/compare.html"
echo
echo "tau >= $THRESHOLD first reached at (step, seconds) and tau at step $BUDGET, per seed; mean over seeds:"
python3 - "$OUT" "$THRESHOLD" "$BUDGET" $SEEDS <<'PY'
import json, sys
out, threshold, budget, seeds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
for name in ["baseline", "dpace", "muon", "sliding"]:
    rows = []
    for seed in seeds:
        elapsed, reached, at_budget = {}, None, None
        for line in open(f"{out}/{name}-{seed}/metrics.jsonl"):
            r = json.loads(line)
            if r.get("kind") == "step":
                elapsed[r["global_step"]] = r.get("time", {}).get("elapsed_s", 0.0)
            if r.get("kind") == "eval":
                if reached is None and r["mean_tau"] >= threshold:
                    reached = r["global_step"]
                if r["global_step"] == budget:
                    at_budget = r["mean_tau"]
        seconds = elapsed.get(reached, float("nan")) if reached is not None else float("nan")
        rows.append((reached, seconds, at_budget))
    cells = "  ".join(f"{'-' if r[0] is None else r[0]:>3} {r[1]:5.1f}s {float('nan') if r[2] is None else r[2]:5.2f}"
                      for r in rows)
    steps = [r[0] for r in rows if r[0] is not None]
    taus = [r[2] for r in rows if r[2] is not None]
    mean_steps = f"{sum(steps) / len(steps):.1f}" if len(steps) == len(rows) else "-"
    mean_tau = f"{sum(taus) / len(taus):.2f}" if taus else "-"
    print(f"  {name:9s} {cells}   mean: step {mean_steps}, tau@{budget} {mean_tau}")
PY
