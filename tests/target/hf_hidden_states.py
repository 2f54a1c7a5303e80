"""Hugging Face's hidden states of a target checkpoint, the independent
reference for dflow's target features (tests/drafter/test_hf_reference.cpp).

    hf_hidden_states.py TARGET_DIR OUT.safetensors ID,ID,...;ID,ID,...

Runs transformers' AutoModelForCausalLM in float32 with
output_hidden_states=True over each row of ids and writes
`row{r}.hidden_states.{i}` ([S, H], i = 0 .. L: the embeddings, then one per
decoder layer, the last after the final norm) and `row{r}.logits`.
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging


def main():
    target_dir, out_path, rows = sys.argv[1], sys.argv[2], sys.argv[3]
    logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    model.eval()
    tensors = {}
    with torch.no_grad():
        for r, row in enumerate(rows.split(";")):
            ids = torch.tensor([[int(t) for t in row.split(",")]], dtype=torch.long)
            out = model(input_ids=ids, output_hidden_states=True)
            for i, hidden in enumerate(out.hidden_states):
                tensors[f"row{r}.hidden_states.{i}"] = hidden[0].contiguous()
            tensors[f"row{r}.logits"] = out.logits[0].contiguous()
    save_file(tensors, out_path)
    print(f"{len(out.hidden_states)} hidden states per row, {r + 1} rows")


if __name__ == "__main__":
    main()
