"""Small random Qwen3.5/3.6 wrapper checkpoints (dense and MoE, tied and
untied, several layer_types patterns) written by transformers, and
transformers' own outputs on them: the independent reference for dflow's
in-process Qwen3.5 target (tests/target/test_qwen3_5_reference.cpp).

    hf_qwen3_5_reference.py OUT_DIR [--checkpoints-only] [NAME ...]

writes, for each checkpoint (or only those named) OUT_DIR/<name>/, what hf_moe_reference.py
writes (config.json, save_pretrained's safetensors with the vision tower,
reference.safetensors and reference.json), with a third row of 150 tokens
so that the delta rule runs over several of its 64-token chunks. The text
model runs transformers' torch fallback of Gated DeltaNet (no fla).
--checkpoints-only writes the checkpoints without transformers' outputs
(for tests that need only the weights: tests/drafter/test_target_memory.cpp).
"""
import importlib.util
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
import transformers as T
from transformers.utils import logging

from hf_reference_common import greedy_float64, reference_states, rows_and_prompts

TEXT = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=512,
            max_position_embeddings=512, rms_norm_eps=1e-6, linear_num_value_heads=4, linear_num_key_heads=2,
            linear_key_head_dim=16, linear_value_head_dim=16, linear_conv_kernel_dim=4)
VISION = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64)
MOE = dict(moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8, num_experts_per_tok=2)
LINEAR, FULL = "linear_attention", "full_attention"

CHECKPOINTS = {  # name: (moe, tied, sharded, text config)
    # Transformers' default pattern (every 4th layer full), one file.
    "qwen3_5-dense-untied": (False, False, False, dict(num_hidden_layers=4, intermediate_size=96)),
    # Full attention first and last, partial rotary of half the head, sharded.
    "qwen3_5-dense-tied-full-first": (False, True, True, dict(
        num_hidden_layers=4, intermediate_size=96, layer_types=[FULL, LINEAR, LINEAR, FULL],
        rope_parameters=dict(rope_type="default", rope_theta=10000.0, partial_rotary_factor=0.5))),
    "qwen3_5-moe-untied": (True, False, False, dict(num_hidden_layers=4, **MOE)),
    "qwen3_5-moe-tied-alternating": (True, True, True, dict(num_hidden_layers=3, layer_types=[LINEAR, FULL, LINEAR],
                                                             **MOE)),
}


def make(moe, tied, text):
    if moe:
        return T.Qwen3_5MoeForConditionalGeneration(
            T.Qwen3_5MoeConfig(text_config=dict(TEXT, **text), vision_config=VISION, tie_word_embeddings=tied))
    return T.Qwen3_5ForConditionalGeneration(
        T.Qwen3_5Config(text_config=dict(TEXT, **text), vision_config=VISION, tie_word_embeddings=tied))


def randomize(model):
    """O(1) activations: zero-centred norms near 0 (a scale near 1), the
    gated norm near 1, projections of unit-variance outputs; A_log keeps
    transformers' init (decays in (0.01, 16)); decisive routing."""
    with torch.no_grad():
        for name, parameter in model.model.language_model.named_parameters():
            if name.endswith("A_log"):
                continue
            if name.endswith("linear_attn.norm.weight"):
                parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
            elif parameter.dim() == 1:  # zero-centred norms, dt_bias
                parameter.copy_(0.1 * torch.randn_like(parameter))
            elif "embed_tokens" in name:
                parameter.normal_(0.0, 1.0)
            else:
                parameter.normal_(0.0, parameter.shape[-1] ** -0.5)
                if name.endswith("mlp.gate.weight"):
                    parameter.mul_(3.0)
        if model.lm_head.weight.data_ptr() != model.model.language_model.embed_tokens.weight.data_ptr():
            model.lm_head.weight.normal_(0.0, 1.0)


def main():
    assert importlib.util.find_spec("fla") is None, "fla is installed: the reference must be the torch fallback"
    out_dir = Path(sys.argv[1])
    logging.disable_progress_bar()
    new_tokens = 10
    checkpoints_only = "--checkpoints-only" in sys.argv[2:]
    only = set(sys.argv[2:]) - {"--checkpoints-only"}
    for seed, (name, (moe, tied, sharded, text)) in enumerate(CHECKPOINTS.items()):
        if only and name not in only:
            continue
        torch.manual_seed(500 + seed)
        model = make(moe, tied, text).eval()
        randomize(model)
        directory = out_dir / name
        model.save_pretrained(directory, max_shard_size="100KB" if sharded else "10GB")
        if checkpoints_only:
            continue
        cls = type(model)
        rows, prompts = rows_and_prompts(600 + seed, TEXT["vocab_size"])
        rows.append(torch.randint(0, TEXT["vocab_size"], (150,), generator=torch.Generator().manual_seed(seed)).tolist())
        tensors, _ = reference_states(lambda dtype: cls.from_pretrained(directory, dtype=dtype).eval(), rows)
        save_file(tensors, str(directory / "reference.safetensors"))
        extra = dict(experts_implementation="eager") if moe else {}
        float64 = cls.from_pretrained(directory, dtype=torch.float64, **extra).eval()
        reference = {"rows": rows, "prompts": prompts, "greedy_float64": greedy_float64(float64, prompts, new_tokens)}
        (directory / "reference.json").write_text(json.dumps(reference))
        print(name, "tied" if tied else "untied", "sharded" if sharded else "single", "greedy",
              reference["greedy_float64"])


if __name__ == "__main__":
    main()
