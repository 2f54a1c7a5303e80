"""Reads a run's TensorBoard event files with the tensorboard package's own
reader and checks them against the run's metrics.jsonl: every scalar the
tensorboard sink promises, at every step, equal to the record's value (as a
float32), each step once per tag, guard events as text.

The expected tags are derived here independently of the C++ sink, from the
records alone. Exit 0 and a one-line summary when all agree, 1 with the
differences otherwise, 2 when the tensorboard package is missing.

usage: tensorboard_check.py RUN_DIR [--restart-steps S,...] [--require TAG,...]
  --restart-steps: first steps of resumed invocations (their graph telemetry
                   starts anew, so busy shares restart from zero there)
  --require:       tags that must be present (a prefix ending in / means one or more)
"""
import argparse
import json
import math
import os
import sys

try:
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator as ea
except ImportError as e:  # pragma: no cover
    print(f"tensorboard is not installed in {sys.executable}: run tools/setup.sh ({e})")
    sys.exit(2)


def number(v):
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if v in ("nan", "inf", "-inf"):
        return float(v)
    return None


def expected_points(records, restart_steps):
    """(tag, step) -> value, and (tag, step) -> text, from metrics.jsonl records."""
    scalars, texts = {}, {}
    prev_busy, prev_elapsed = {}, 0.0

    def put(tag, step, value):
        v = number(value)
        if v is not None:
            scalars[(tag, step)] = v

    for r in records:
        kind, step = r.get("kind"), r.get("global_step")
        if kind == "step":
            for key in ("loss", "grad_norm", "lr", "padding_efficiency", "real_tokens", "padded_tokens",
                        "anchors", "micro_batches", "excluded_samples"):
                put("train/" + key, step, r.get(key))
            for i, v in enumerate(r.get("accuracy_per_position", [])):
                put(f"train/accuracy@{i + 1}", step, v)
            put("tau/expected", step, r.get("expected_tau"))
            for key in ("tokens_per_s", "step_s", "eta_s", "allreduce_s"):
                put("time/" + key, step, r.get("time", {}).get(key))
            for key in ("epoch", "epoch_progress", "run_progress"):
                put("progress/" + key, step, r.get(key))
            for length, bucket in r.get("buckets", {}).items():
                put("bucket_loss/" + length, step, bucket.get("loss"))
                put("bucket_grad_norm/" + length, step, bucket.get("grad_norm"))
            t = r.get("telemetry")
            if t is not None:
                for e in t.get("edges", []):
                    put("edge_occupancy/" + e["name"], step, e.get("occupancy"))
                busy = {}
                for n in t.get("nodes", []):
                    b = busy.setdefault(n["name"], [0.0, 1])
                    b[0] += n.get("busy_s", 0.0)
                    b[1] = n.get("replicas", 1)
                elapsed = t.get("elapsed_s", 0.0)
                if step in restart_steps or elapsed < prev_elapsed:
                    prev_busy, prev_elapsed = {}, 0.0
                interval = elapsed - prev_elapsed
                for name, (busy_s, replicas) in busy.items():
                    if interval > 0:
                        put("node_busy_share/" + name, step, (busy_s - prev_busy.get(name, 0.0)) / (replicas * interval))
                    prev_busy[name] = busy_s
                prev_elapsed = elapsed
        elif kind == "eval":
            put("eval/mean_tau", step, r.get("mean_tau"))
            put("tau/measured", step, r.get("mean_tau"))
            put("eval/best_tau", step, r.get("best_tau"))
            for i, v in enumerate(r.get("acceptance_by_position", [])):
                put(f"eval/acceptance@{i + 1}", step, v)
            put("eval/speculative_tokens_per_s", step, r.get("time", {}).get("speculative_tokens_per_s"))
        elif kind == "guard":
            texts[("guard", step)] = r
        elif kind == "alarm":
            texts[("alarm", step)] = r
    return scalars, texts


def same(a, b):
    if math.isnan(b):
        return math.isnan(a)
    return a == float(np.float32(b)) or abs(a - b) <= 1e-6 * max(1.0, abs(b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run_dir")
    parser.add_argument("--restart-steps", default="")
    parser.add_argument("--require", default="")
    args = parser.parse_args()
    restart_steps = {int(s) for s in args.restart_steps.split(",") if s}

    # The last record of a (kind, step) wins: a crashed run's steps past its
    # checkpoint are trained again after a resume.
    latest = {}
    with open(os.path.join(args.run_dir, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                latest[(r.get("kind"), r.get("global_step"))] = r
    records = sorted(latest.values(), key=lambda r: r.get("global_step", 0))
    # Keep file order among records of one step (step, then guard, then alarm).
    scalars, texts = expected_points(records, restart_steps)

    acc = ea.EventAccumulator(os.path.join(args.run_dir, "tensorboard"),
                              size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
    acc.Reload()
    tags = acc.Tags()
    problems = []
    seen = set()
    for tag in tags["scalars"]:
        steps = [e.step for e in acc.Scalars(tag)]
        if len(steps) != len(set(steps)):
            problems.append(f"{tag}: steps written more than once: {sorted(s for s in set(steps) if steps.count(s) > 1)[:10]}")
        for e in acc.Scalars(tag):
            seen.add((tag, e.step))
            want = scalars.get((tag, e.step))
            if want is None:
                problems.append(f"{tag} at step {e.step}: {e.value} has no record field in metrics.jsonl")
            elif not same(e.value, want):
                problems.append(f"{tag} at step {e.step}: {e.value} in TensorBoard, {want} in metrics.jsonl")
    missing = sorted(k for k in scalars if k not in seen)
    for tag, step in missing[:20]:
        problems.append(f"{tag} at step {step}: in metrics.jsonl ({scalars[(tag, step)]}), not in TensorBoard")
    text_count = 0
    for tag in tags["tensors"]:
        events = acc.Tensors(tag)
        steps = [e.step for e in events]
        if len(steps) != len(set(steps)):
            problems.append(f"{tag}: text written more than once at a step")
        for e in events:
            text_count += 1
            want = texts.get((tag, e.step))
            got = e.tensor_proto.string_val[0].decode() if e.tensor_proto.string_val else ""
            if want is None:
                problems.append(f"text {tag} at step {e.step} has no {tag} record")
            elif tag == "guard" and (str(want.get("event")) not in got or str(want.get("action")) not in got):
                problems.append(f"guard text at step {e.step} lacks the event or action: {got!r}")
            elif tag == "alarm" and got != want.get("message"):
                problems.append(f"alarm text at step {e.step}: {got!r}, record says {want.get('message')!r}")
    for key in texts:
        if key[0] not in tags["tensors"] or key[1] not in [e.step for e in acc.Tensors(key[0])]:
            problems.append(f"{key[0]} record at step {key[1]} is not a text summary in TensorBoard")
    all_tags = set(tags["scalars"]) | set(tags["tensors"])
    for required in [t for t in args.require.split(",") if t]:
        ok = any(t.startswith(required) for t in all_tags) if required.endswith("/") else required in all_tags
        if not ok:
            problems.append(f"required tag {required} is missing")
    if problems:
        print(f"{len(problems)} differences between TensorBoard and metrics.jsonl:")
        for p in problems[:40]:
            print("  " + p)
        sys.exit(1)
    steps = sorted({s for (_, s) in seen})
    print(f"tensorboard agrees with metrics.jsonl: {len(seen)} scalars under {len(tags['scalars'])} tags, "
          f"{text_count} texts, steps {steps[0] if steps else '-'}..{steps[-1] if steps else '-'}")


if __name__ == "__main__":
    main()
