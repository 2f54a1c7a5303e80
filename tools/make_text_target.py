"""A small trained target for benchmarks whose tau does not saturate: a byte-level
Qwen3 (transformers' Qwen3ForCausalLM, float32) trained for a few CPU minutes
on the Python standard library's own source, the text that ships with the
Python that runs this script. The demo's echo target is learnt exactly by any
recipe; this one has a real next-token distribution, so recipes differ in
tau (tools/tau_bench.sh, bench/RESULTS.md "Time to tau").

    make_text_target.py OUT_DIR [--steps N] [--threads N] [--seed S]

Writes into OUT_DIR:
  target/          config.json + model.safetensors (Hugging Face layout; ids
                   0-255 are bytes, 256 is end of text, 257 dflow's mask token,
                   named by config.json's dflow_mask_token_id)
  train.jsonl      {"input_ids", "loss_mask"}: 256-byte windows of the
                   training files, the loss on all but the first 16 bytes
  heldout.jsonl    {"prompt_ids"}: 64-byte prompts from files kept out of
                   training (the target never saw them)
  target.json      what was trained on (Python version, files, sha256) and the
                   target's held-out loss
Deterministic for a given Python, torch and seed.
"""
import argparse
import hashlib
import json
import math
import os
import random
import sys
import sysconfig
import time
from pathlib import Path

import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

VOCAB, EOS, MASK = 258, 256, 257
SEQ = 256        # the drafter's training windows
TARGET_SEQ = 128  # the target's


def corpus():
    """The standard library's top-level modules, sorted by name: a list of (name, bytes)."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in stdlib.glob("*.py") if p.is_file())
    return [(p.name, p.read_bytes()) for p in files]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--train-samples", type=int, default=3000)
    parser.add_argument("--heldout-prompts", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)

    files = corpus()
    if len(files) < 20:
        sys.exit("make_text_target: found only %d standard library files" % len(files))
    # Every 10th file is held out: its text is neither the target's nor the drafter's training data.
    heldout_files = [f for i, f in enumerate(files) if i % 10 == 0]
    train_files = [f for i, f in enumerate(files) if i % 10 != 0]
    train_text = b"".join(text + bytes([0x0A]) for _, text in train_files)
    heldout_text = b"".join(text + bytes([0x0A]) for _, text in heldout_files)
    data = torch.tensor(list(train_text), dtype=torch.long)
    held = torch.tensor(list(heldout_text), dtype=torch.long)

    config = Qwen3Config(vocab_size=VOCAB, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=1024,
                         rope_theta=10000.0, rms_norm_eps=1e-6, tie_word_embeddings=False, eos_token_id=EOS,
                         bos_token_id=None, pad_token_id=None, attention_bias=False)
    model = Qwen3ForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.01)
    batch, warmup = 24, 40
    schedule = lambda step: min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * step / args.steps))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    began = time.time()
    model.train()
    for step in range(args.steps):
        starts = torch.randint(0, data.numel() - TARGET_SEQ - 1, (batch,))
        x = torch.stack([data[s:s + TARGET_SEQ] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        if step % 100 == 0 or step == args.steps - 1:
            print("step %d loss %.3f (%.0f s)" % (step, loss.item(), time.time() - began), flush=True)

    model.eval()
    with torch.no_grad():
        g = torch.Generator().manual_seed(args.seed)
        starts = torch.randint(0, held.numel() - SEQ - 1, (32,), generator=g)
        x = torch.stack([held[s:s + SEQ] for s in starts.tolist()])
        heldout_loss = model(input_ids=x, labels=x).loss.item()
    print("held-out loss %.3f nats/byte" % heldout_loss)

    target = out / "target"
    model.save_pretrained(target, safe_serialization=True)
    config_path = target / "config.json"
    saved = json.loads(config_path.read_text())
    saved["dflow_mask_token_id"] = MASK
    saved["torch_dtype"] = "float32"
    config_path.write_text(json.dumps(saved, indent=2) + "\n")
    for extra in ("generation_config.json",):
        if (target / extra).exists():
            (target / extra).unlink()

    with open(out / "train.jsonl", "w") as f:
        for _ in range(args.train_samples):
            s = rng.randrange(0, data.numel() - SEQ)
            ids = data[s:s + SEQ].tolist()
            f.write(json.dumps({"input_ids": ids, "loss_mask": [0] * 16 + [1] * (SEQ - 16)}) + "\n")
    with open(out / "heldout.jsonl", "w") as f:
        for _ in range(args.heldout_prompts):
            s = rng.randrange(0, held.numel() - 64)
            f.write(json.dumps({"prompt_ids": held[s:s + 64].tolist()}) + "\n")
    summary = {
        "python": sys.version.split()[0], "torch": torch.__version__, "seed": args.seed, "steps": args.steps,
        "train_files": len(train_files), "train_bytes": len(train_text),
        "train_sha256": hashlib.sha256(train_text).hexdigest(),
        "heldout_files": [n for n, _ in heldout_files], "heldout_sha256": hashlib.sha256(heldout_text).hexdigest(),
        "heldout_loss_nats_per_byte": heldout_loss, "train_seconds": time.time() - began,
    }
    (out / "target.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("wrote %s (held-out loss %.3f nats/byte)" % (out, heldout_loss))


if __name__ == "__main__":
    main()
