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
# tau at step BUDGET_STEP, for each seed. The variants run as one `dflow sweep`
# (SEEDS gives how many seeds, from its first), which prints the comparison
# with seeds grouped (the HTML page in OUT_DIR/compare.html).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/recipes}"
STEPS="${2:-60}"
THRESHOLD="${TAU_THRESHOLD:-8}"
BUDGET="${BUDGET_STEP:-30}"
SEEDS="${SEEDS:-1234 1235 1236}"
BIN=build/dflow
[ -x "$BIN" ] || { echo "[recipes] error: build dflow first (tools/build.sh dflow)" >&2; exit 1; }
# (dflow sweep makes the demo's assets once, before the variants that share them.)

common=(--set run.max_steps="$STEPS" --set eval.every_steps=2 --set eval.temperature=1.0 --set eval.max_prompts=16
        --set checkpoint.every_steps=0 --set metrics.sinks=[jsonl] --set run.log_level=warn)
first_seed="${SEEDS%% *}"
seed_count=$(wc -w <<<"$SEEDS")
# One axis changes per variant against the 2025 baseline; the seeds are
# first_seed, first_seed + 1, ... (dflow sweep --seeds). A rerun skips the
# variants that finished.
"$BIN" sweep --out "$OUT" "${common[@]}" --set run.seed="$first_seed" --seeds "$seed_count" --tau-target "$THRESHOLD" \
  --variant baseline \
  --variant 'dpace: pipeline.nodes.drafter.params={objective: dpace, alpha: 0.5}' \
  --variant 'muon: pipeline.nodes.optimizer.type=optimizer_step.muon' \
  --variant 'sliding: model.drafter.layer_types=[sliding_attention] model.drafter.sliding_window=32'
echo
echo "tau >= $THRESHOLD first reached at (step, seconds) and tau at step $BUDGET, per seed; mean over seeds:"
python3 - "$OUT" "$THRESHOLD" "$BUDGET" $(seq "$first_seed" $((first_seed + seed_count - 1))) <<'PY'
import json, sys
out, threshold, budget, seeds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
for name in ["baseline", "dpace", "muon", "sliding"]:
    rows = []
    for seed in seeds:
        elapsed, reached, at_budget = {}, None, None
        run = f"{name}+seed={seed}" if len(seeds) > 1 else name
        for line in open(f"{out}/{run}/metrics.jsonl"):
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
