#!/usr/bin/env bash
# Time to tau for the drafter kinds: each trained by cross-entropy on the
# data's tokens (ce) and by distillation on the target's distribution (kl,
# speculators' default objective), three seeds each, on a target that does
# not saturate (bench/RESULTS.md "Time to tau: every drafter kind, ce and kl").
#   tools/tau_bench.sh [OUT_DIR] [STEPS]     (env: SEEDS, PARALLEL, KINDS, DFLOW_BIN)
# The target is a small byte-level Qwen3 trained by tools/make_text_target.py
# (a few CPU minutes, once) on the Python standard library's source; the
# drafters train on 256-byte windows of that text (bench/tau_bench.yaml) and
# tau is measured with speculative sampling (temperature 1) on 16 held-out
# prompts every 25 steps. Each kind's two recipes run as one `dflow sweep`
# (OUT_DIR/sweep-KIND; a rerun resumes it); the table gives tau at fixed
# steps and the CPU minutes (user + system, the step records' cpu_s) each
# run took to reach them, per seed and as the mean over seeds, for every
# kind whose sweep is there. The vocabulary is 258 bytes, so DSpark's Markov
# head runs at rank 32 (at its default 256 the table would be a full bigram
# table, which a real vocabulary never allows).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-runs/tau-bench}"
STEPS="${2:-300}"
SEEDS="${SEEDS:-3}"
PARALLEL="${PARALLEL:-2}"
KINDS="${KINDS:-dflash dspark dflash2 xpress dspine}"
BIN="${DFLOW_BIN:-build/dflow}"  # a copy keeps a long bench off the binary a rebuild replaces
PY="${DFLOW_VENV:-/opt/dflow/torch-2.15.0}/bin/python"
[ -x "$BIN" ] || { echo "[tau] error: build dflow first (tools/build.sh dflow)" >&2; exit 1; }
[ -x "$PY" ] || { echo "[tau] error: no venv Python at $PY (run tools/setup.sh)" >&2; exit 1; }

if [ ! -f "$OUT/text/target/config.json" ]; then
  echo "[tau] training the text target into $OUT/text (once)"
  "$PY" tools/make_text_target.py "$OUT/text" --threads 2
fi
if [ ! -d "$OUT/data" ]; then
  "$BIN" prepare "$OUT/text/train.jsonl" --out "$OUT/data" --max-length 256 --vocab-size 258
fi

# The base config names runs/tau-bench; another OUT_DIR is set here.
paths=(--set model.target.path="$OUT/text/target" --set data.train=["$OUT/data"]
       --set eval.prompts="$OUT/text/heldout.jsonl" --set run.max_steps="$STEPS")
# Each kind's params beyond the defaults, for this target (hidden 128, vocabulary 258),
# as model.drafter overrides (a variant's KEY=VALUE pairs are separated by spaces).
kind_params() {
  case "$1" in
    dspark) echo " model.drafter.markov_rank=32" ;;
    xpress) echo " model.drafter.xpress_rank=32" ;;   # the refiner's vocabulary factors, at DSpark's rank
    dspine) echo " model.drafter.transfer_rank=64 model.drafter.message_size=64" ;;  # the codes' rank within the hidden size 128
    *) echo "" ;;
  esac
}
for kind in $KINDS; do
  extra=$(kind_params "$kind")
  "$BIN" sweep bench/tau_bench.yaml --out "$OUT/sweep-$kind" "${paths[@]}" --seeds "$SEEDS" --parallel "$PARALLEL" \
    --variant "$kind-ce: model.drafter.kind=$kind$extra pipeline.nodes.drafter.params={loss: ce}" \
    --variant "$kind-kl: model.drafter.kind=$kind$extra pipeline.nodes.drafter.params={loss: kl}"
done

echo
"$PY" - "$OUT" "$SEEDS" "$STEPS" <<'PY'
import json, math, os, sys
out, seeds, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
first_seed = 1234
kinds = [k for k in ("dflash", "dspark", "dflash2", "xpress", "dspine") if os.path.isdir(f"{out}/sweep-{k}")]
names = [f"{k}-{loss}" for k in kinds for loss in ("ce", "kl")]
at_steps = [s for s in (50, 100, 200, 300, 400, 600) if s < steps] + [steps]

def runs(name):
    for k in range(seeds):
        sweep = f"{out}/sweep-{name.rsplit('-', 1)[0]}"
        run = f"{sweep}/{name}+seed={first_seed + k}" if seeds > 1 else f"{sweep}/{name}"
        cpu, tau = {}, {}
        for line in open(os.path.join(run, "metrics.jsonl")):
            r = json.loads(line)
            if r.get("kind") == "step":
                cpu[r["global_step"]] = r["time"]["cpu_s"] / 60.0
            elif r.get("kind") == "eval":
                tau[r["global_step"]] = r["mean_tau"]
        yield cpu, tau

def tau_within(cpu, tau, minutes):
    """tau of the last evaluation whose step had used at most `minutes` of CPU."""
    done = [s for s in sorted(tau) if s in cpu and cpu[s] <= minutes]
    return tau[done[-1]] if done else None

def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else float("nan")

def cell(values):
    return f"{mean(values):.2f} [" + " ".join("-" if v is None else f"{v:.2f}" for v in values) + "]"

data = {name: list(runs(name)) for name in names}
longest = max(cpu.get(steps, 0.0) for d in data.values() for cpu, _ in d)
budgets = sorted({round(longest * f, 1) for f in (0.25, 0.5, 0.75, 1.0)})
print(f"sampled tau (temperature 1) on 16 held-out prompts (block 16): mean over {seeds} seeds [each seed]")
print()
print("| recipe | " + " | ".join(f"step {s}" for s in at_steps) + f" | CPU min for {steps} steps |")
print("|---|" + "---|" * (len(at_steps) + 1))
for name in names:
    cells = [cell([tau.get(s) for _, tau in data[name]]) for s in at_steps]
    print(f"| {name} | " + " | ".join(cells) + f" | {mean([cpu.get(steps) for cpu, _ in data[name]]):.2f} |")
print()
print("tau reached within a CPU budget (user + system minutes of the training process, evaluations included):")
print()
print("| recipe | " + " | ".join(f"{b} CPU min" for b in budgets) + " |")
print("|---|" + "---|" * len(budgets))
for name in names:
    print(f"| {name} | " + " | ".join(cell([tau_within(cpu, tau, b) for cpu, tau in data[name]]) for b in budgets) + " |")
PY
