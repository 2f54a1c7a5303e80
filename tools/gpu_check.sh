#!/usr/bin/env bash
# The GPU check: builds dflow on a machine that has a compiler, CMake, ninja
# and PyTorch (LibTorch inside the wheel) but no Debian -dev packages and no
# network, then checks and measures it on cuda:0 in under 8 minutes:
#   1. build: unpacks the .debs that tools/gpu_debs.sh fetched (.debs/) into a
#      prefix with `dpkg -x`, configures against this Python's
#      torch.utils.cmake_prefix_path, builds dflow and bench_gpu on all cores;
#   2. CPU: `dflow version`, the demo for 60 steps on CPU (the reference);
#   3. GPU: CUDA vs CPU (target forward, drafter forward+backward, fp32 and
#      bf16, packed rows in bf16 through flash attention's variable-length
#      kernel, or the per-document path where it cannot run); the demo for 60 steps on cuda:0 (loss follows the CPU run, no
#      NaN, a checkpoint at step 30 resumes); 20 steps with the target on
#      cuda:0 and the drafter on the CPU (losses follow the CPU run); 20 steps
#      with a sliding-window draft layer, with D-PACE and with Muon; a one-rank NCCL process group;
#      the qwen3-8b graph again from a bfloat16 feature cache (cache-features, then features.cached)
#      and from a serving engine's hidden-state files (features.engine, the
#      target head-only: peak RSS and GPU memory against the online run; bf16
#      and FP8 files; a few steps of each drafter kind from them)
#      (the step's all-reduce); throughput at the qwen3-8b preset with the
#      recipe in bf16 (bench_gpu throughput) and through the whole graph;
#      CUDA vs CPU again on tiny Qwen3-MoE and gpt-oss (MXFP4 resident) echo
#      targets, and the CUDA-only expert unit checks where test_target is built;
#      a head-only run at Qwen3.5-35B-A3B's shapes (tools/make_wrapper_head.py);
#      the qwen3-30b-a3b preset (Qwen3-MoE) made on the GPU and its target
#      forward (tokens/s, peak GPU memory: bench_gpu throughput);
#      the qwen3.5-35b-a3b preset's first 4 layers (three Gated DeltaNet, one
#      gated full attention, every one with 256 experts and a shared expert)
#      made on the GPU and trained 6 steps with the target in-process
#      (target_forward in bf16): tokens/s, peak RSS and GPU memory;
#      the drafter step's compute (bench_drafter_compute, bf16, 512 anchors):
#      4 sliding + 1 full against 5 full layers at 2k/4k/8k with the FLOP
#      ratio beside it, grouped against repeated K/V heads, the grad norm in
#      one reduction against one read per parameter, recomputation's time and
#      peak memory (the caching allocator's) against the memory model.
# Without a usable GPU it runs 1 and 2 (here the build is the ordinary
# tools/build.sh one, and the prefix is only configured, to spare the CPU;
# DFLOW_GPU_CHECK_PREFIX_BUILD=1 builds it too) and says the GPU parts were
# skipped. Results: a summary table on stdout and in $OUT/gpu_check.md (or
# runs/gpu-check/gpu_check.md), logs beside it.
#
#   tools/gpu_debs.sh                # here, once: fills .debs/ (ignored by git)
#   tools/gpu_check.sh               # on the GPU machine, with .debs carried along
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
START_S=$(date +%s)
RESULTS="${OUT:-$ROOT/runs/gpu-check}"
WORK="${DFLOW_GPU_CHECK_WORK:-/tmp/dflow-gpu-check}"
PREFIX="${DFLOW_DEBS_PREFIX:-/tmp/dflow-debs-prefix}"
DEBS="${DFLOW_DEBS_DIR:-$ROOT/.debs}"
PY="${DFLOW_PYTHON:-python3}"
mkdir -p "$RESULTS" "$WORK"
SUMMARY="$RESULTS/gpu_check.md"
: >"$SUMMARY"
FAILED=0
# The drafter kinds trained a few steps each at Qwen3-8B's shapes from the
# engine files (tokens/s, peak memory); DFLOW_GPU_CHECK_KINDS="" skips them.
ENGINE_KINDS="${DFLOW_GPU_CHECK_KINDS-dflash dspark dflash2 xpress dspine}"

say() { printf '[gpu_check %4ss] %s\n' "$(($(date +%s) - START_S))" "$*"; }
row() { printf '| %s | %s | %s |\n' "$1" "$2" "$3" | tee -a "$SUMMARY"; }
fail() { row "$1" "FAIL" "$2"; FAILED=1; }
# run NAME LIMIT_S COMMAND...: the command's output into $RESULTS/NAME.log; a
# program is stopped after LIMIT_S, a function of this script runs in it (its
# exports stay) and relies on the caller's overall limit.
run() {
  local name=$1 limit=$2; shift 2
  say "$name: $*"
  if declare -F "$1" >/dev/null; then
    "$@" >"$RESULTS/$name.log" 2>&1
  else
    timeout "$limit" "$@" >"$RESULTS/$name.log" 2>&1
  fi
  local rc=$?
  [ $rc -eq 124 ] && say "$name: stopped after ${limit}s"
  return $rc
}

"$PY" -c 'import torch' 2>/dev/null || PY=/opt/dflow/torch-2.15.0/bin/python
TORCH_PREFIX=$("$PY" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)') \
  || { say "error: no PyTorch for $PY"; exit 1; }
TORCH_VERSION=$("$PY" -c 'import torch; print(torch.__version__)')
HAVE_GPU=0
"$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null && HAVE_GPU=1
printf '# dflow GPU check, %s\n\ntorch %s; GPU: %s\n\n| check | result | figures |\n| --- | --- | --- |\n' \
  "$(date -u +%Y-%m-%dT%H:%MZ)" "$TORCH_VERSION" \
  "$([ $HAVE_GPU = 1 ] && "$PY" -c 'import torch; print(torch.cuda.get_device_name(0))' || echo none)" >"$SUMMARY"

# --- 1. build ------------------------------------------------------------------
# The .debs into a prefix (never into /); their pkg-config files name /usr, so
# they are pointed at the prefix (their CMake files find their own place).
# Where dpkg is missing: a .deb is an ar archive whose data.tar.* holds the files.
unpack_deb_python() {
  "$PY" - "$1" "$PREFIX" <<'PYEOF'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"!<arch>\n", "not an ar archive"
pos = 8
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
PYEOF
}
unpack_debs() {
  compgen -G "$DEBS/*.deb" >/dev/null || { say "error: no .deb files in $DEBS (run tools/gpu_debs.sh where apt works)"; return 1; }
  rm -rf "$PREFIX" && mkdir -p "$PREFIX"
  for deb in "$DEBS"/*.deb; do
    if command -v dpkg >/dev/null; then dpkg -x "$deb" "$PREFIX" || return 1; else unpack_deb_python "$deb" || return 1; fi
  done
  find "$PREFIX" -name '*.pc' -exec sed -i "s|^prefix=/usr\$|prefix=$PREFIX/usr|" {} +
  # Debian's pkg-config is a wrapper script calling /usr/bin/pkgconf.
  [ -x "$PREFIX/usr/bin/pkgconf" ] || return 1
}
# The prefix's programs (protoc, pkgconf), libraries and pkg-config files;
# exported only where the prefix build is built and run (not around build/).
MULTIARCH="$PREFIX/usr/lib/x86_64-linux-gnu"
PREFIX_ENV=(PATH="$PREFIX/usr/bin:$PATH" LD_LIBRARY_PATH="$MULTIARCH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
            PKG_CONFIG_LIBDIR="$MULTIARCH/pkgconfig:$PREFIX/usr/share/pkgconfig:$PREFIX/usr/lib/pkgconfig")
configure_prefix_build() {
  env "${PREFIX_ENV[@]}" cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$PREFIX/usr;$TORCH_PREFIX" \
    -DPKG_CONFIG_EXECUTABLE="$PREFIX/usr/bin/pkgconf" -DProtobuf_PROTOC_EXECUTABLE="$PREFIX/usr/bin/protoc" \
    -DCMAKE_FIND_USE_CMAKE_SYSTEM_PATH=OFF
}

if ! command -v c++ >/dev/null || ! command -v cmake >/dev/null || ! command -v ninja >/dev/null; then
  fail "build" "needs c++, cmake and ninja on PATH"
  exit 1
fi
if run unpack 60 unpack_debs; then
  row "unpack .debs" "ok" "$(ls "$DEBS"/*.deb | wc -l) packages into $PREFIX"
else
  fail "unpack .debs" "see unpack.log"
fi
BUILD="${DFLOW_GPU_CHECK_BUILD:-build-gpu}"
if run configure 180 configure_prefix_build "$BUILD"; then
  row "configure (prefix)" "ok" "LibTorch $TORCH_VERSION at $TORCH_PREFIX; $(grep -o 'CUDA build: [A-Z]*' "$RESULTS/configure.log")"
else
  fail "configure (prefix)" "$(grep -m1 -A3 'CMake Error' "$RESULTS/configure.log" | tr '\n' ' ' | cut -c1-300)"
  [ $HAVE_GPU = 1 ] && exit 1
fi
if [ $HAVE_GPU = 1 ] || [ "${DFLOW_GPU_CHECK_PREFIX_BUILD:-0}" = 1 ]; then
  export "${PREFIX_ENV[@]}"
  if run build 420 cmake --build "$BUILD" --target dflow bench_gpu -- -j"$(nproc)"; then
    row "build (prefix, $(nproc) cores)" "ok" "$(($(date +%s) - START_S)) s since start"
  else
    fail "build (prefix)" "$(grep -m1 -B2 -A6 'error' "$RESULTS/build.log" | tr '\n' ' ' | cut -c1-400)"
    exit 1
  fi
else
  # No GPU: the ordinary build/ (configured by tools/build.sh against the
  # system's packages), only the two programs this script runs.
  build_here() {
    [ -f build/build.ninja ] || DFLOW_BUILD_JOBS="${DFLOW_BUILD_JOBS:-2}" tools/build.sh || return 1
    cmake --build build --target dflow bench_gpu -- -j"${DFLOW_BUILD_JOBS:-2}"
  }
  if run build 3000 build_here; then
    BUILD=build
    row "build (tools/build.sh)" "ok" "the prefix build is only configured without a GPU"
  else
    fail "build" "see build.log"
    exit 1
  fi
fi
DFLOW="$ROOT/$BUILD/dflow"
BENCH="$ROOT/$BUILD/bench/bench_gpu"

# --- 2. CPU checks -------------------------------------------------------------
if run version 60 "$DFLOW" version; then
  row "dflow version" "ok" "$(tr '\n' ' ' <"$RESULTS/version.log" | cut -c1-200)"
else
  fail "dflow version" "see version.log"
fi
# The demo: its assets once (runs/demo), then 60 steps per device.
DEMO_SET=(--set run.max_steps=60 --set metrics.sinks=[jsonl] --set checkpoint.every_steps=30 --set eval.every_steps=0
          --set eval.max_prompts=2 --set eval.max_new_tokens=16 --set run.log_level=warn)
train_demo() {  # OUT_DIR DEVICE [more --set ...]; DEMO_CONFIG: a config file to start from
  local out=$1 device=$2; shift 2
  rm -rf "$out"
  "$DFLOW" train ${DEMO_CONFIG:-} "${DEMO_SET[@]}" --set run.out_dir="$out" --set devices.target=["$device"] \
    --set devices.drafter="$device" "$@"
}
# loss_stats A B: steps in both, NaNs in B, mean and max |B - A| per step over
# A's first loss (the curve's scale: the demo's loss falls 15-fold, so a ratio
# per step would measure the slope), first and last losses.
loss_stats() {
  "$PY" - "$1" "$2" <<'PYEOF'
import json, math, sys
def losses(d):
    out = {}
    for line in open(d + "/metrics.jsonl"):
        r = json.loads(line)
        if r.get("kind") == "step": out[r["global_step"]] = r["loss"]
    return out
a, b = losses(sys.argv[1]), losses(sys.argv[2])
common = sorted(set(a) & set(b))
nan = sum(1 for s in b if not math.isfinite(b[s]))
rel = [abs(b[s] - a[s]) / abs(a[common[0]]) for s in common if math.isfinite(b[s])]
print(f"{len(common)} {nan} {sum(rel) / max(1, len(rel)):.4f} {max(rel, default=float('nan')):.4f} "
      f"{a[common[0]]:.3f} {a[common[-1]]:.3f} {b[common[-1]]:.3f}" if common else "0 0 nan nan nan nan nan")
PYEOF
}
if run demo_cpu 400 train_demo "$WORK/demo-cpu" cpu; then
  read -r steps nans _ _ first last _ <<<"$(loss_stats "$WORK/demo-cpu" "$WORK/demo-cpu")"
  row "demo, CPU, 60 steps" "ok" "$steps steps, $nans NaN, loss $first -> $last"
else
  fail "demo, CPU, 60 steps" "see demo_cpu.log"
fi

# resume_check DEVICE REFERENCE_DIR: 30 steps resumed from the reference's
# step-30 checkpoint follow its steps 31-60.
resume_check() {
  local device=$1 reference=$2 name="resume_${1//:/}"
  if run "$name" 180 train_demo "$WORK/demo-resume-$name" "$device" --resume "$reference/checkpoints/step-30"; then
    read -r steps nans mean_rel max_rel _ _ _ <<<"$(loss_stats "$reference" "$WORK/demo-resume-$name")"
    local verdict=ok
    [ "$steps" = 30 ] && [ "$nans" = 0 ] && "$PY" -c "import sys; sys.exit(0 if $max_rel < 0.01 else 1)" || verdict=FAIL
    [ $verdict = FAIL ] && FAILED=1
    row "resume from step 30 on $device" "$verdict" "$steps steps 31-60 vs uninterrupted: max abs difference / first loss $max_rel (< 0.01)"
  else
    fail "resume from step 30 on $device" "see $name.log"
  fi
}
resume_check cpu "$WORK/demo-cpu"

# --- 3. GPU checks -------------------------------------------------------------
if [ $HAVE_GPU = 0 ]; then
  row "GPU checks" "skipped" "no usable CUDA device: parity, demo on cuda:0, NCCL, qwen3-8b throughput not run"
  say "no GPU: the GPU parts were skipped; summary in $SUMMARY"
  cat "$SUMMARY"
  exit $FAILED
fi
if run parity 120 "$BENCH" parity --target runs/demo/target; then
  row "CUDA vs CPU (fp32 1e-4, bf16 3e-2)" "ok" "$(grep RESULT "$RESULTS/parity.log" | awk '{printf "%s %s; ", $2, $5}')"
  row "packed rows, bf16 attention path" "ok" "$(grep -m1 '^packed rows' "$RESULTS/parity.log" | cut -d: -f3- | cut -c2-)"
else
  fail "CUDA vs CPU" "$(grep -E 'RESULT.*fail|error' "$RESULTS/parity.log" | tr '\n' ' ' | cut -c1-300)"
fi
# The same parity on the mixture-of-experts families: Qwen3-MoE (bf16 takes
# the grouped-GEMM experts) and gpt-oss with MXFP4 experts kept resident
# (sink attention, sliding layers, YaRN, each expert dequantized on the GPU
# while it computes). Echo targets: their experts add little, so a routing
# choice that bf16 rounds the other way moves the features little.
for arch in qwen3_moe gpt_oss; do
  packing=""
  [ "$arch" = gpt_oss ] && packing="--mxfp4"
  if run "tiny_$arch" 120 "$DFLOW" make-tiny-target --arch "$arch" $packing --pattern echo --out "$WORK/tiny-$arch" &&
    run "parity_$arch" 180 "$BENCH" parity --target "$WORK/tiny-$arch"; then
    row "CUDA vs CPU, $arch target" "ok" "$(grep RESULT "$RESULTS/parity_$arch.log" | awk '{printf "%s %s; ", $2, $5}')"
  else
    fail "CUDA vs CPU, $arch target" "$(grep -hE 'RESULT.*fail|error' "$RESULTS/tiny_$arch.log" "$RESULTS/parity_$arch.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
  fi
done
# The CUDA-only unit checks of the expert paths (grouped GEMM against the CPU loop).
if [ -x "$BUILD/tests/test_target" ] && run moe_cuda_tests 300 "$BUILD/tests/test_target" --no-intro -tc='Model.Moe.*,Model.Mxfp4Resident.*'; then
  row "Model.Moe.*, Model.Mxfp4Resident.* (CUDA paths)" "ok" "$(grep -m1 'test cases' "$RESULTS/moe_cuda_tests.log" | tr -s ' ')"
elif [ -x "$BUILD/tests/test_target" ]; then
  fail "Model.Moe.* on CUDA" "$(grep -m3 -E 'ERROR|FAILED' "$RESULTS/moe_cuda_tests.log" | tr '\n' ' ' | cut -c1-300)"
else
  row "Model.Moe.* (CUDA paths)" "skipped" "$BUILD has no tests/test_target (build it there to run the grouped-GEMM check)"
fi
# 60 steps on cuda:0 (checkpoints at 30 and 60), then 30 resumed from step 30.
if run demo_cuda 240 train_demo "$WORK/demo-cuda" cuda:0; then
  read -r steps nans mean_rel max_rel first last last_gpu <<<"$(loss_stats "$WORK/demo-cpu" "$WORK/demo-cuda")"
  verdict=ok
  [ "$steps" = 60 ] && [ "$nans" = 0 ] && "$PY" -c "import sys; sys.exit(0 if $mean_rel < 0.01 and $max_rel < 0.03 else 1)" || verdict=FAIL
  [ $verdict = FAIL ] && FAILED=1
  row "demo on cuda:0, 60 steps vs CPU" "$verdict" \
    "$steps steps, $nans NaN, loss ${first} -> CPU ${last} / CUDA ${last_gpu}; abs(CUDA - CPU) / first loss: mean ${mean_rel} (< 0.01), max ${max_rel} (< 0.03)"
else
  fail "demo on cuda:0" "see demo_cuda.log"
fi
resume_check cuda:0 "$WORK/demo-cuda"
# A CUDA target feeding a drafter on the CPU: the features must reach host
# memory before the drafter reads them, so the losses follow the CPU run (its
# 60 steps: run.max_steps sizes the LR schedule, so a shorter run would differ).
if run demo_split 240 train_demo "$WORK/demo-split" cuda:0 --set devices.drafter=cpu --set checkpoint.every_steps=0; then
  read -r steps nans mean_rel max_rel _ _ _ <<<"$(loss_stats "$WORK/demo-cpu" "$WORK/demo-split")"
  verdict=ok
  [ "$steps" = 60 ] && [ "$nans" = 0 ] && "$PY" -c "import sys; sys.exit(0 if $mean_rel < 0.01 and $max_rel < 0.03 else 1)" || verdict=FAIL
  [ $verdict = FAIL ] && FAILED=1
  row "demo, target cuda:0 + drafter cpu, 60 steps vs CPU" "$verdict" \
    "$steps steps, $nans NaN; abs(split - CPU) / first loss: mean ${mean_rel} (< 0.01), max ${max_rel} (< 0.03)"
else
  fail "demo, target cuda:0 + drafter cpu" "see demo_split.log"
fi
# The 2026 recipe's axes, 20 steps each on cuda:0: sliding-window draft
# layers (a layer of 32 beside a full one, and the run's eval drafting with
# the window), D-PACE position weights (drafter params), Muon (optimizer
# type): finite losses that fall.
for variant in sliding dpace muon; do
  cfg="$WORK/$variant.yaml" extra=()
  "$DFLOW" config "${DEMO_SET[@]}" >"$cfg" 2>/dev/null
  case $variant in
    sliding) extra=(--set model.drafter.num_layers=2 --set model.drafter.layer_types=[sliding_attention,full_attention]
                    --set model.drafter.sliding_window=32) ;;
    dpace) sed -i 's/{name: drafter, type: drafter_step}/{name: drafter, type: drafter_step, params: {objective: dpace}}/' "$cfg" ;;
    muon) sed -i 's/type: optimizer_step.adamw}/type: optimizer_step.muon}/' "$cfg" ;;
  esac
  if DEMO_CONFIG="$cfg" run "demo_$variant" 180 train_demo "$WORK/demo-$variant" cuda:0 --set run.max_steps=20 \
      --set checkpoint.every_steps=0 ${extra[@]+"${extra[@]}"}; then
    read -r steps nans _ _ first last _ <<<"$(loss_stats "$WORK/demo-$variant" "$WORK/demo-$variant")"
    verdict=ok
    [ "$steps" = 20 ] && [ "$nans" = 0 ] && "$PY" -c "import sys; sys.exit(0 if $last < $first else 1)" || verdict=FAIL
    [ $verdict = FAIL ] && FAILED=1
    row "demo on cuda:0, $variant, 20 steps" "$verdict" "$steps steps, $nans NaN, loss $first -> $last"
  else
    fail "demo on cuda:0, $variant" "see demo_$variant.log"
  fi
done
if run nccl 120 "$BENCH" nccl; then
  row "NCCL, one rank" "ok" "$(grep -h 'backend\|RESULT' "$RESULTS/nccl.log" | tr '\n' ' ' | cut -c1-200)"
else
  fail "NCCL, one rank" "$(tail -n3 "$RESULTS/nccl.log" | tr '\n' ' ' | cut -c1-300)"
fi
# The qwen3-8b preset: random weights drawn on the GPU, 16 GB of bf16 shards.
# The drafter step computes only what it needs (issue 36): each figure a
# ratio measured in one run, in bf16 with Qwen3-8B's 512 anchors per row.
# Built here, on its own, so that a LibTorch it does not build against
# fails this row only.
drafter_compute() {
  cmake --build "$BUILD" --target bench_drafter_compute -- -j"$(nproc)" &&
    timeout 300 "$ROOT/$BUILD/bench/bench_drafter_compute" --device cuda --dtype bfloat16 --threads 1 --anchors 512 --rounds 3
}
if run drafter_compute 400 drafter_compute; then
  grep RESULT "$RESULTS/drafter_compute.log" | while read -r _ name figures; do row "drafter compute: $name" "ok" "$figures"; done
else
  fail "drafter compute" "$(tail -n3 "$RESULTS/drafter_compute.log" | tr '\n' ' ' | cut -c1-300)"
fi
if run preset 240 "$DFLOW" make-tiny-target --preset qwen3-8b --device cuda --out "$WORK/qwen3-8b"; then
  row "make-tiny-target --preset qwen3-8b" "ok" "$(du -sh "$WORK/qwen3-8b" | cut -f1), $(ls "$WORK/qwen3-8b"/*.safetensors | wc -l) shards"
  if run throughput 300 "$BENCH" throughput --target "$WORK/qwen3-8b" --batch 4 --seq 3072 --anchors 512 --steps 5; then
    grep RESULT "$RESULTS/throughput.log" | while read -r _ name verdict figures; do row "qwen3-8b $name" "$verdict" "$figures"; done
  else
    fail "qwen3-8b throughput" "$(tail -n3 "$RESULTS/throughput.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  # The whole graph on the recipe: 64 synthetic samples of 1024-3072 tokens.
  graph_run() {
    "$PY" - "$WORK/qwen3-8b.jsonl" <<'PYEOF'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(64):
        n = random.randint(1024, 3072); p = n // 4
        f.write(json.dumps({"input_ids": [random.randrange(151643) for _ in range(n)],
                            "loss_mask": [0] * p + [1] * (n - p)}) + "\n")
PYEOF
    rm -rf "$WORK/qwen3-8b-data" "$WORK/qwen3-8b-run"
    "$DFLOW" prepare "$WORK/qwen3-8b.jsonl" --out "$WORK/qwen3-8b-data" --max-length 3072 --vocab-size 151936 &&
      "$DFLOW" train examples/qwen3-8b.yaml --set model.target.path="$WORK/qwen3-8b" \
        --set data.train=["$WORK/qwen3-8b-data"] --set run.out_dir="$WORK/qwen3-8b-run" --set run.max_steps=12 \
        --set metrics.sinks=[jsonl] --set checkpoint.every_steps=0 --set devices.target=[cuda:0] \
        --set devices.drafter=cuda:0 --set run.log_level=warn
  }
  if run graph 300 graph_run; then
    figures=$("$PY" - "$WORK/qwen3-8b-run/metrics.jsonl" <<'PYEOF'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step"][2:]  # after 2 warm-up steps
tokens = sum(r["real_tokens"] for r in steps); seconds = sum(r["time"]["step_s"] for r in steps)
print(f"{tokens / seconds:.0f} real tokens/s per GPU over steps 3-{len(steps) + 2} ({seconds / len(steps):.2f} s/step)")
PYEOF
)
    row "qwen3-8b whole graph (goal 8K tok/s)" "ok" "$figures"
  else
    fail "qwen3-8b whole graph" "$(tail -n3 "$RESULTS/graph.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  # The same graph reading a bfloat16 feature cache of the same data
  # (features.cached in the target's place): the fill's speed, the bytes a
  # token, and steps per second cached against online.
  cached_run() {
    rm -rf "$WORK/qwen3-8b-cache" "$WORK/qwen3-8b-cached"
    sed 's/type: target_forward[^}]*}/type: features.cached, params: {dir: CACHE_DIR, dtype: bfloat16}}/' \
      <("$DFLOW" config examples/qwen3-8b.yaml) | sed "s#CACHE_DIR#$WORK/qwen3-8b-cache#" >"$WORK/qwen3-8b-cached.yaml"
    grep -q features.cached "$WORK/qwen3-8b-cached.yaml" || { echo "no target_forward node to swap" >&2; return 1; }
    local sets=(--set model.target.path="$WORK/qwen3-8b" --set data.train=["$WORK/qwen3-8b-data"]
                --set run.max_steps=12 --set metrics.sinks=[jsonl] --set checkpoint.every_steps=0
                --set devices.target=[cuda:0] --set devices.drafter=cuda:0 --set run.log_level=warn)
    /usr/bin/time -f "fill wall %e s" "$DFLOW" cache-features "$WORK/qwen3-8b-cached.yaml" "${sets[@]}" --log-level info &&
      "$DFLOW" train "$WORK/qwen3-8b-cached.yaml" "${sets[@]}" --set run.out_dir="$WORK/qwen3-8b-cached"
  }
  if [ -f "$WORK/qwen3-8b-run/metrics.jsonl" ] && run cached 300 cached_run; then
    figures=$("$PY" - "$WORK/qwen3-8b-run/metrics.jsonl" "$WORK/qwen3-8b-cached/metrics.jsonl" <<'PYEOF'
import json, sys
def rate(path):
    steps = [r for r in map(json.loads, open(path)) if r.get("kind") == "step"][2:]
    return len(steps) / sum(r["time"]["step_s"] for r in steps), sum(r["real_tokens"] for r in steps) / sum(r["time"]["step_s"] for r in steps)
(on_s, on_t), (ca_s, ca_t) = rate(sys.argv[1]), rate(sys.argv[2])
print(f"cached {ca_s:.2f} steps/s ({ca_t:.0f} tok/s) vs online {on_s:.2f} steps/s ({on_t:.0f} tok/s): x{ca_s / on_s:.2f}")
PYEOF
)
    row "qwen3-8b cached (bf16 cache) vs online" "ok" "$figures; $(grep -h 'fill wall\|bytes a token' "$RESULTS/cached.log" | tr '\n' ' ' | cut -c1-200)"
  else
    fail "qwen3-8b cached" "$(tail -n3 "$RESULTS/cached.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
  fi
  # The same data from a serving engine's files (features.engine in the
  # target's place): random states of the preset's shapes beside the real
  # tokens (the writer needs torch alone), engine ids = dflow's layers + 1 and
  # the last layer 36. No node runs the target, so it is loaded head-only: the
  # process's peak RSS and the GPU's peak memory against the online run's.
  # The same again from FP8 files (speculators' fp8 backend layout, half
  # the bytes), and one short run of each drafter kind from the bf16 files.
  engine_run() {
    rm -rf "$WORK/qwen3-8b-hs" "$WORK/qwen3-8b-hs-fp8" "$WORK/qwen3-8b-engine"
    for dtype in bfloat16 float8_e4m3fn; do
      "$PY" tools/write_engine_features.py --target "$WORK/qwen3-8b" --samples "$WORK/qwen3-8b.jsonl" \
        --out "$WORK/qwen3-8b-hs$([ $dtype = bfloat16 ] || echo -fp8)" --layer-ids 2 10 18 26 34 --dtype $dtype \
        --random-states || return 1
    done
    local sets=(--set model.target.path="$WORK/qwen3-8b" --set data.train=["$WORK/qwen3-8b-data"]
                --set run.max_steps=12 --set metrics.sinks=[jsonl] --set checkpoint.every_steps=0
                --set devices.target=[cuda:0] --set devices.drafter=cuda:0 --set run.log_level=info)
    local engine_ids="engine_layer_ids: [2, 10, 18, 26, 34, 36]"
    for mode in online engine fp8 $ENGINE_KINDS; do
      local engine_sets=()
      case "$mode" in
        online) ;;
        fp8) engine_sets=(--set "pipeline.nodes.target.params={dir: $WORK/qwen3-8b-hs-fp8, $engine_ids, dtype: float8_e4m3fn}") ;;
        *) engine_sets=(--set "pipeline.nodes.target.params={dir: $WORK/qwen3-8b-hs, $engine_ids, dtype: bfloat16}") ;;
      esac
      [ "$mode" = online ] || engine_sets+=(--set pipeline.nodes.target.type=features.engine
                                           --set pipeline.nodes.target.replicas=2)
      case "$mode" in online|engine|fp8) ;; *) engine_sets+=(--set model.drafter.kind="$mode"
                                                            --set run.max_steps=6) ;; esac
      nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$RESULTS/gpu-mem-$mode.txt" &
      local sampler=$!
      /usr/bin/time -f "$mode peak RSS %M KiB" "$DFLOW" train examples/qwen3-8b.yaml "${sets[@]}" "${engine_sets[@]}" \
        --set run.out_dir="$WORK/qwen3-8b-$mode-mem" --overwrite || { kill $sampler; return 1; }
      kill $sampler; wait $sampler 2>/dev/null
      echo "$mode peak GPU memory $(sort -n "$RESULTS/gpu-mem-$mode.txt" | tail -n1) MiB"
    done
  }
  if [ -d "$WORK/qwen3-8b-data" ]; then
    if run engine 400 engine_run; then
      figures=$("$PY" - "$WORK"/qwen3-8b-{online,engine,fp8}-mem/metrics.jsonl <<'PYEOF'
import json, sys
def rate(path):
    steps = [r for r in map(json.loads, open(path)) if r.get("kind") == "step"][2:]
    return sum(r["real_tokens"] for r in steps) / sum(r["time"]["step_s"] for r in steps)
print(f"engine files {rate(sys.argv[2]):.0f} tok/s (fp8 files {rate(sys.argv[3]):.0f}) vs online {rate(sys.argv[1]):.0f} tok/s")
PYEOF
)
      row "qwen3-8b from engine files (bf16, fp8), head-only target" "ok" "$figures; $(grep -h 'peak RSS\|peak GPU\|head only\|head-only' "$RESULTS/engine.log" | grep -E '^(online|engine|fp8) |head.only' | tr '\n' ' ' | cut -c1-400)"
      for kind in $ENGINE_KINDS; do
        figures=$("$PY" - "$WORK/qwen3-8b-$kind-mem/metrics.jsonl" <<'PYEOF'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step"][2:]
print(f"{sum(r['real_tokens'] for r in steps) / sum(r['time']['step_s'] for r in steps):.0f} tok/s, loss {steps[-1]['loss']:.3f}")
PYEOF
)
        row "qwen3-8b drafter kind: $kind, from engine files" "ok" "$figures; $(grep -h "^$kind peak" "$RESULTS/engine.log" | tr '\n' ' ')"
      done
    else
      fail "qwen3-8b from engine files" "$(tail -n3 "$RESULTS/engine.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
    fi
    rm -rf "$WORK/qwen3-8b-hs" "$WORK/qwen3-8b-hs-fp8"
  fi
else
  fail "make-tiny-target --preset qwen3-8b" "see preset.log"
fi
# 48 samples of 1024..3072 random token ids below Qwen3.5's vocabulary, the
# first quarter of each untrained, as JSONL: the Qwen3.5 steps' data.
q35_samples() {
  "$PY" - "$1" <<'PYEOF'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(48):
        n = random.randint(1024, 3072); p = n // 4
        f.write(json.dumps({"input_ids": [random.randrange(248000) for _ in range(n)],
                            "loss_mask": [0] * p + [1] * (n - p)}) + "\n")
PYEOF
}
# Qwen3.5-35B-A3B's shapes head-only (hidden 2048, vocabulary 248,320, 40
# layers): its wrapper's embedding, norm and LM head written at random, random
# engine files of its width, six steps of the recipe with kl (the target's
# distribution through its head): tokens/s, peak RSS and GPU memory.
qwen35_head_run() {
  rm -rf "$WORK"/q35*
  "$PY" tools/make_wrapper_head.py --preset qwen3.5-35b-a3b --out "$WORK/q35-target" --device cuda &&
    q35_samples "$WORK/q35.jsonl" &&
    "$PY" tools/write_engine_features.py --target "$WORK/q35-target" --samples "$WORK/q35.jsonl" --out "$WORK/q35-hs" \
      --layer-ids 2 11 20 29 38 --dtype bfloat16 --random-states &&
    "$DFLOW" prepare "$WORK/q35.jsonl" --out "$WORK/q35-data" --max-length 3072 --vocab-size 248320 || return 1
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$RESULTS/gpu-mem-q35.txt" &
  local sampler=$!
  /usr/bin/time -f "peak RSS %M KiB" "$DFLOW" train examples/qwen3-8b.yaml --set model.target.path="$WORK/q35-target" \
    --set data.train=["$WORK/q35-data"] --set run.out_dir="$WORK/q35-run" --set run.max_steps=6 \
    --set metrics.sinks=[jsonl] --set checkpoint.every_steps=0 --set devices.target=[cuda:0] --set devices.drafter=cuda:0 \
    --set model.drafter.target_layer_ids=[1,10,19,28,37] --set model.drafter.mask_token_id=248319 \
    --set pipeline.nodes.target.type=features.engine --set pipeline.nodes.target.replicas=2 \
    --set "pipeline.nodes.target.params={dir: $WORK/q35-hs, engine_layer_ids: [2, 11, 20, 29, 38, 40], dtype: bfloat16}" \
    --set pipeline.nodes.drafter.params.loss=kl --set run.log_level=info || { kill $sampler; return 1; }
  kill $sampler; wait $sampler 2>/dev/null
  echo "peak GPU memory $(sort -n "$RESULTS/gpu-mem-q35.txt" | tail -n1) MiB"
}
if run qwen35_head 400 qwen35_head_run; then
  figures=$("$PY" - "$WORK/q35-run/metrics.jsonl" <<'PYEOF'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step"][2:]
print(f"{sum(r['real_tokens'] for r in steps) / sum(r['time']['step_s'] for r in steps):.0f} tok/s, loss {steps[-1]['loss']:.3f}")
PYEOF
)
  row "qwen3.5-35b-a3b shapes, head-only, kl, from engine files" "ok" "$figures; $(grep -h 'peak RSS\|peak GPU' "$RESULTS/qwen35_head.log" | tr '\n' ' ')"
else
  fail "qwen3.5-35b-a3b shapes, head-only" "$(tail -n3 "$RESULTS/qwen35_head.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
fi
rm -rf "$WORK"/q35*
# The qwen3-30b-a3b preset (Qwen3-MoE, 128 experts top-8): random weights
# drawn on the GPU, then the target's forward through bench_gpu throughput
# (target tokens/s, peak GPU memory with a drafter step beside it). Its 61 GB
# of bf16 shards need the disk the 8B preset held: that one goes first, and
# where the disk still holds less, the preset's first layers only (every
# shape else the real one; the row says how many).
rm -rf "$WORK"/qwen3-8b*
MOE_LAYERS=48
avail_gib=$(df -BG --output=avail "$WORK" | tail -n1 | tr -dc 0-9)
if [ "${avail_gib:-0}" -lt 66 ]; then MOE_LAYERS=$(( (${avail_gib:-0} - 8) * 48 / 58 )); fi
if [ "$MOE_LAYERS" -lt 4 ]; then
  fail "make-tiny-target --preset qwen3-30b-a3b" "${avail_gib:-?} GiB free under $WORK: too little for 4 of its 48 layers"
elif run preset_moe 300 "$DFLOW" make-tiny-target --preset qwen3-30b-a3b --preset-layers "$MOE_LAYERS" --device cuda \
    --out "$WORK/qwen3-30b-a3b"; then
  row "make-tiny-target --preset qwen3-30b-a3b" "ok" \
    "$MOE_LAYERS of 48 layers, $(du -sh "$WORK/qwen3-30b-a3b" | cut -f1), $(ls "$WORK/qwen3-30b-a3b"/*.safetensors | wc -l) shards"
  if run throughput_moe 300 "$BENCH" throughput --target "$WORK/qwen3-30b-a3b" --batch 4 --seq 3072 --anchors 512 --steps 5; then
    grep RESULT "$RESULTS/throughput_moe.log" | while read -r _ name verdict figures; do
      row "qwen3-30b-a3b ($MOE_LAYERS layers) $name" "$verdict" "$figures"
    done
  else
    fail "qwen3-30b-a3b throughput" "$(tail -n3 "$RESULTS/throughput_moe.log" | tr '\n' ' ' | cut -c1-300)"
  fi
  rm -rf "$WORK/qwen3-30b-a3b"
else
  fail "make-tiny-target --preset qwen3-30b-a3b" "see preset_moe.log"
fi
# Qwen3.5-35B-A3B in-process: the preset's first 4 layers (linear,
# linear, linear, full: both kinds; every shape else the real one, ~8.8 GB
# of bf16) drawn on the GPU, then six steps of the recipe whose target node
# runs it (target_forward, bf16, features of all four layers): tokens/s,
# the loss, peak RSS and GPU memory.
qwen35_inprocess_run() {
  rm -rf "$WORK"/q35-inproc*
  "$DFLOW" make-tiny-target --preset qwen3.5-35b-a3b --preset-layers 4 --device cuda --out "$WORK/q35-inproc-target" &&
    q35_samples "$WORK/q35-inproc.jsonl" &&
    "$DFLOW" prepare "$WORK/q35-inproc.jsonl" --out "$WORK/q35-inproc-data" --max-length 3072 --vocab-size 248320 || return 1
  echo "preset on disk $(du -sh "$WORK/q35-inproc-target" | cut -f1)"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 200 >"$RESULTS/gpu-mem-q35-inproc.txt" &
  local sampler=$!
  /usr/bin/time -f "peak RSS %M KiB" "$DFLOW" train examples/qwen3-8b.yaml --set model.target.path="$WORK/q35-inproc-target" \
    --set data.train=["$WORK/q35-inproc-data"] --set run.out_dir="$WORK/q35-inproc-run" --set run.max_steps=6 \
    --set metrics.sinks=[jsonl] --set checkpoint.every_steps=0 --set devices.target=[cuda:0] --set devices.drafter=cuda:0 \
    --set model.drafter.target_layer_ids=[0,1,2,3] --set model.drafter.mask_token_id=248319 \
    --set run.log_level=info || { kill $sampler; return 1; }
  kill $sampler; wait $sampler 2>/dev/null
  echo "peak GPU memory $(sort -n "$RESULTS/gpu-mem-q35-inproc.txt" | tail -n1) MiB"
}
avail_gib=$(df -BG --output=avail "$WORK" | tail -n1 | tr -dc 0-9)
if [ "${avail_gib:-0}" -lt 12 ]; then
  fail "qwen3.5-35b-a3b (4 layers) in-process" "${avail_gib:-?} GiB free under $WORK: its 4 layers need ~9 GB and the data"
elif run qwen35_inprocess 480 qwen35_inprocess_run; then
  figures=$("$PY" - "$WORK/q35-inproc-run/metrics.jsonl" <<'PYEOF'
import json, sys
steps = [r for r in map(json.loads, open(sys.argv[1])) if r.get("kind") == "step"][2:]
print(f"{sum(r['real_tokens'] for r in steps) / sum(r['time']['step_s'] for r in steps):.0f} tok/s, loss {steps[-1]['loss']:.3f}")
PYEOF
)
  row "qwen3.5-35b-a3b (4 layers) in-process, target_forward bf16" "ok" \
    "$figures; $(grep -h '^preset on disk\|peak RSS\|peak GPU' "$RESULTS/qwen35_inprocess.log" | tr '\n' ' ')"
else
  fail "qwen3.5-35b-a3b (4 layers) in-process" "$(tail -n3 "$RESULTS/qwen35_inprocess.log" 2>/dev/null | tr '\n' ' ' | cut -c1-300)"
fi
rm -rf "$WORK"/q35-inproc*
say "done in $(($(date +%s) - START_S)) s; summary in $SUMMARY"
cat "$SUMMARY"
exit $FAILED
