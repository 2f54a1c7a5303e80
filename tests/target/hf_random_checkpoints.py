"""Tiny random checkpoints of families dflow cannot run, written by transformers.

    hf_random_checkpoints.py OUT_DIR

writes OUT_DIR/<name>/ with config.json and save_pretrained's safetensors
(one model.safetensors, or shards + model.safetensors.index.json), and
OUT_DIR/<name>/reference.safetensors: the model's own input and output
embeddings and final norm as transformers holds them (the independent
reference the head loader is compared with; the loader never reads it, since
it is neither model.safetensors nor in the index).
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import GptOssConfig, GptOssForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

SIZES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=96, vocab_size=300, max_position_embeddings=256, eos_token_id=[7, 11])


def qwen3_moe(tied):
    config = Qwen3MoeConfig(**SIZES, moe_intermediate_size=32, num_experts=4, num_local_experts=4,
                            num_experts_per_tok=2, tie_word_embeddings=tied)
    return Qwen3MoeForCausalLM(config)


def gpt_oss(tied):
    config = GptOssConfig(**SIZES, num_local_experts=4, num_experts_per_tok=2, sliding_window=8,
                          tie_word_embeddings=tied)
    return GptOssForCausalLM(config)


CHECKPOINTS = {  # name: (model, tied, sharded)
    "qwen3-moe-tied-single": (qwen3_moe, True, False),
    "qwen3-moe-untied-sharded": (qwen3_moe, False, True),
    "gpt-oss-untied-single": (gpt_oss, False, False),
    "gpt-oss-tied-sharded": (gpt_oss, True, True),
}


def main():
    out = Path(sys.argv[1])
    for seed, (name, (make, tied, sharded)) in enumerate(CHECKPOINTS.items()):
        torch.manual_seed(100 + seed)
        model = make(tied).eval()
        with torch.no_grad():  # random, not the near-zero init: a mix-up of the two tensors shows
            for parameter in model.parameters():
                parameter.normal_(0.0, 1.0)
        directory = out / name
        model.save_pretrained(directory, max_shard_size="40KB" if sharded else "10GB")
        reference = {"embedding": model.get_input_embeddings().weight, "lm_head": model.get_output_embeddings().weight,
                     "final_norm": model.model.norm.weight}
        save_file({k: v.detach().contiguous().clone() for k, v in reference.items()},
                  str(directory / "reference.safetensors"))
        print(name, "tied" if tied else "untied", "sharded" if sharded else "single")


if __name__ == "__main__":
    main()
