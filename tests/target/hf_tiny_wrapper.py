"""Reads make-tiny-target's Qwen3.5 wrappers with transformers, independently of dflow.

    hf_tiny_wrapper.py TARGET_DIR...

Loads each TARGET_DIR with the class its config.json names
(Qwen3_5ForConditionalGeneration or Qwen3_5MoeForConditionalGeneration), in
float32 and in float64 (eager attention and experts, transformers' torch
fallback of Gated DeltaNet), and writes beside the checkpoint:
  transformers.json        {"class", "missing", "unexpected", "mismatched": the
                           float32 load's report, "rows": the token rows}
  reference.safetensors    {float32,float64}.row{r}.hidden_states.{i} (i = 0
                           the embeddings, then one per layer, the last after
                           the final norm) and {float32,float64}.row{r}.logits
The rows: 13 and 9 tokens, and 150 (the delta rule's 64-token chunks, three).
"""
import importlib.util
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
import transformers
from transformers.utils import logging

from hf_reference_common import rows_and_prompts


def main():
    assert importlib.util.find_spec("fla") is None, "fla is installed: the reference must be the torch fallback"
    logging.disable_progress_bar()
    logging.set_verbosity_error()  # the vision tower's missing keys are expected; transformers.json lists them
    for directory in map(Path, sys.argv[1:]):
        config = json.loads((directory / "config.json").read_text())
        cls = getattr(transformers, config["architectures"][0])
        vocab = config["text_config"]["vocab_size"]
        rows, _ = rows_and_prompts(7, vocab - 2)
        rows.append(torch.randint(0, vocab - 2, (150,), generator=torch.Generator().manual_seed(8)).tolist())
        tensors, report = {}, {}
        for name, dtype in (("float32", torch.float32), ("float64", torch.float64)):
            model, info = cls.from_pretrained(directory, dtype=dtype, attn_implementation="eager",
                                              experts_implementation="eager", output_loading_info=True)
            model.eval()
            if dtype == torch.float32:
                report = {"class": type(model).__name__, "missing": sorted(info.get("missing_keys", [])),
                          "unexpected": sorted(info.get("unexpected_keys", [])),
                          "mismatched": [str(m) for m in info.get("mismatched_keys", [])], "rows": rows}
            with torch.no_grad():
                for r, row in enumerate(rows):
                    out = model(input_ids=torch.tensor([row]), output_hidden_states=True)
                    for i, hidden in enumerate(out.hidden_states):
                        tensors[f"{name}.row{r}.hidden_states.{i}"] = hidden[0].contiguous()
                    tensors[f"{name}.row{r}.logits"] = out.logits[0].contiguous()
        save_file(tensors, str(directory / "reference.safetensors"))
        (directory / "transformers.json").write_text(json.dumps(report))
        print(directory.name, report["class"], len(report["missing"]), "missing (the vision tower)")


if __name__ == "__main__":
    main()
