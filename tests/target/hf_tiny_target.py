"""Reads make-tiny-target checkpoints with transformers, independently of dflow.

    hf_tiny_target.py OUT_JSON PROMPTS NEW_TOKENS TARGET_DIR...

Loads each TARGET_DIR with AutoModelForCausalLM.from_pretrained (float32,
eager attention: the reference implementation, sinks included) and writes
OUT_JSON, keyed by TARGET_DIR:
  {"class": the model class transformers picked from config.json,
   "missing" / "unexpected" / "mismatched": the loading report's keys,
   "greedy": for each prompt of PROMPTS ("1,2,3;4,5"), its greedy
             continuation of NEW_TOKENS tokens (argmax of a full forward
             per step: no generation config, no stopping at eos)}
"""
import json
import sys

import torch
from transformers import AutoModelForCausalLM


def greedy(model, prompt, new_tokens):
    ids = torch.tensor([prompt], dtype=torch.long)
    out = []
    with torch.no_grad():
        for _ in range(new_tokens):
            next_id = int(model(input_ids=ids).logits[0, -1].argmax())
            out.append(next_id)
            ids = torch.cat([ids, torch.tensor([[next_id]])], dim=1)
    return out


def main():
    out_path, prompts_text, new_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    prompts = [[int(t) for t in row.split(",")] for row in prompts_text.split(";") if row]
    report = {}
    for directory in sys.argv[4:]:
        model, info = AutoModelForCausalLM.from_pretrained(
            directory, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
        model.eval()
        report[directory] = {
            "class": type(model).__name__,
            "missing": sorted(info.get("missing_keys", [])),
            "unexpected": sorted(info.get("unexpected_keys", [])),
            "mismatched": [str(m) for m in info.get("mismatched_keys", [])],
            "greedy": [greedy(model, p, new_tokens) for p in prompts] if new_tokens > 0 else [],
        }
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
