"""transformers' own mixture-of-experts blocks on random weights: the
independent reference for routed_experts (tests/target/test_moe.cpp).

    hf_moe_blocks.py OUT.safetensors

For Qwen3MoeSparseMoeBlock (norm_topk_prob true, top-2 of 8) and GptOssMLP
(top-3 of 8, router bias, expert biases, swiglu_limit 1 so the clamps bite),
writes their parameters under their own names in transformers' layouts
(`{family}.{parameter}`, float32), the input `{family}.x` [3, 11, 64], and
`{family}.{implementation}.{dtype}.out`: the block's output run with
transformers' "grouped_mm" (its default) and "eager" experts, in float32
and in bfloat16 (the block and x cast to it).
"""
import copy
import sys

import torch
from safetensors.torch import save_file
from transformers import GptOssConfig, Qwen3MoeConfig
from transformers.models.gpt_oss.modeling_gpt_oss import GptOssMLP
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

HIDDEN, INTER, EXPERTS = 64, 24, 8  # 2I != H: a transposed layout cannot pass


def blocks():
    qwen = Qwen3MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=INTER, num_experts=EXPERTS, num_experts_per_tok=2,
                          norm_topk_prob=True)
    oss = GptOssConfig(hidden_size=HIDDEN, intermediate_size=INTER, num_local_experts=EXPERTS, num_experts_per_tok=3,
                       swiglu_limit=1.0)
    return {"qwen3_moe": (qwen, Qwen3MoeSparseMoeBlock), "gpt_oss": (oss, GptOssMLP)}


def main():
    out = {}
    for seed, (family, (config, make)) in enumerate(blocks().items()):
        torch.manual_seed(400 + seed)
        block = make(config).eval()
        with torch.no_grad():
            for name, parameter in block.named_parameters():
                if "bias" in name:
                    parameter.normal_(0.0, 0.1)
                else:  # the input dimension: H for the router and gate_up, I for down
                    fan_in = INTER if "down" in name else HIDDEN
                    parameter.normal_(0.0, fan_in ** -0.5)
                out[f"{family}.{name}"] = parameter.detach().clone().contiguous()
        x = torch.randn(3, 11, HIDDEN)
        out[f"{family}.x"] = x
        for implementation in ("grouped_mm", "eager"):
            config._experts_implementation = implementation
            for dtype_name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
                run = copy.deepcopy(block).to(dtype)  # the float32 weights stay unrounded for the next run
                with torch.no_grad():
                    result = run(x.to(dtype))
                result = result[0] if isinstance(result, tuple) else result  # GptOssMLP also returns its scores
                out[f"{family}.{implementation}.{dtype_name}.out"] = result.float().contiguous()
    save_file(out, sys.argv[1])
    print("wrote", len(out), "tensors")


if __name__ == "__main__":
    main()
