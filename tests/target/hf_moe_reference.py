"""Small random Qwen3-MoE checkpoints written by transformers, and
transformers' own outputs on them: the independent reference for dflow's
Qwen3-MoE target (tests/target/test_moe_reference.cpp).

    hf_moe_reference.py OUT_DIR

writes, for each checkpoint OUT_DIR/<name>/:
  config.json and save_pretrained's safetensors (single file or sharded);
  reference.safetensors: `{dtype}.row{r}.hidden_states.{i}` ([S, H], i = 0 .. L:
    the embeddings, then one per decoder layer, the last after the final
    norm) from AutoModelForCausalLM with output_hidden_states, in float32
    and bfloat16 (the checkpoint loaded in that dtype), and
    `float32.row{r}.logits`;
  reference.json: the rows, the prompts, and each prompt's greedy
    continuation decoded in float64 (argmax of a full forward per step;
    transformers' eager experts, its grouped_mm having no float64 kernel).
The weights are random at a scale that keeps activations O(1) (transformers'
init is near zero), and one sparse layer has three experts with the same
router row, so that routing ties among them on every token.
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM
from transformers.utils import logging

from hf_reference_common import greedy_float64, reference_states, rows_and_prompts

SIZES = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
             vocab_size=512, max_position_embeddings=256, rope_theta=10000.0, moe_intermediate_size=32,
             num_experts=8, num_experts_per_tok=2)

CHECKPOINTS = {
    # A dense middle layer by mlp_only_layers, renormalised top-k, one file.
    "qwen3-moe-norm-topk": dict(num_hidden_layers=3, mlp_only_layers=[1], norm_topk_prob=True, sharded=False,
                                attention_bias=False, tie_word_embeddings=False),
    # Every other layer sparse by decoder_sparse_step, raw top-k weights,
    # attention biases, sharded. (Untied: with tied random embeddings greedy
    # decoding only repeats the last token.)
    "qwen3-moe-sparse-step": dict(num_hidden_layers=4, decoder_sparse_step=2, norm_topk_prob=False, sharded=True,
                                  attention_bias=True, tie_word_embeddings=False),
}
TIED_EXPERTS = [1, 2, 5]  # router rows made equal in the first sparse layer


def randomize(model):
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if parameter.dim() == 1:  # norms (and biases): near 1, near 0
                parameter.copy_((1.0 if "norm" in name else 0.0) + 0.1 * torch.randn_like(parameter))
            elif "embed_tokens" in name or "lm_head" in name:
                parameter.normal_(0.0, 1.0)
            else:  # [.., out, in] (routers and experts too): unit-variance outputs
                parameter.normal_(0.0, parameter.shape[-1] ** -0.5)
        for layer in model.model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate.weight.mul_(3.0)  # decisive routing: few near-ties that rounding could flip
                gate.weight[TIED_EXPERTS] = gate.weight[TIED_EXPERTS[0]].clone() * 2.0
                break


def main():
    out_dir = Path(sys.argv[1])
    logging.disable_progress_bar()
    new_tokens = 12
    for seed, (name, spec) in enumerate(CHECKPOINTS.items()):
        spec = dict(spec)
        sharded = spec.pop("sharded")
        torch.manual_seed(200 + seed)
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**SIZES, **spec)).eval()
        randomize(model)
        directory = out_dir / name
        model.save_pretrained(directory, max_shard_size="100KB" if sharded else "10GB")
        rows, prompts = rows_and_prompts(300 + seed, SIZES["vocab_size"])
        tensors, _ = reference_states(
            lambda dtype: AutoModelForCausalLM.from_pretrained(directory, dtype=dtype).eval(), rows)
        save_file(tensors, str(directory / "reference.safetensors"))
        # transformers' default grouped_mm has no float64 kernel: its eager loop over experts.
        float64 = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float64,
                                                       experts_implementation="eager").eval()
        reference = {"rows": rows, "prompts": prompts, "greedy_float64": greedy_float64(float64, prompts, new_tokens)}
        (directory / "reference.json").write_text(json.dumps(reference))
        print(name, "sharded" if sharded else "single", "greedy", reference["greedy_float64"])


if __name__ == "__main__":
    main()
