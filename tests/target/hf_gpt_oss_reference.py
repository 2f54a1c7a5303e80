"""Small random gpt-oss checkpoints written by transformers, and transformers'
own outputs on them: the independent reference for dflow's gpt-oss target
(tests/target/test_gpt_oss_reference.cpp).

    hf_gpt_oss_reference.py OUT_DIR

writes, for each checkpoint OUT_DIR/<name>/:
  config.json and the safetensors: "gpt-oss-bf16" as save_pretrained writes
    it (bf16, the published dtype); "gpt-oss-mxfp4" the same model with its
    experts as MXFP4 blocks and scales (random codes, the layout of the
    published checkpoints) and quantization_config mxfp4, sharded;
  reference.safetensors: `{dtype}.row{r}.hidden_states.{i}` ([S, H], i = 0 ..
    L: the embeddings, then one per decoder layer, the last after the final
    norm) from AutoModelForCausalLM (eager attention, the only one with sinks
    on the CPU) with output_hidden_states, in float32 and bfloat16, and
    `float32.row{r}.logits`; the MXFP4 checkpoint as transformers itself
    dequantizes it on load;
  reference.json: the rows, the prompts, each prompt's greedy continuation
    decoded in float64 (argmax of a full forward per step), and per layer the
    share of expert pre-activations the SwiGLU limit clamps.
and OUT_DIR/mxfp4_dequantize.safetensors: random blocks and scales and
transformers' convert_moe_packed_tensors of them in float32 and bfloat16.

Layers alternate sliding (window 4, shorter than every row) and full; YaRN
as gpt-oss's own config (factor 32 over 4096 positions); sinks, attention and
expert biases are nonzero; the experts' gate_up is scaled so that the limit
7 clamps some values; two experts of layer 0 share a router row and bias, so
they tie on every token.
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, GptOssConfig, GptOssForCausalLM, Mxfp4Config
from transformers.integrations.mxfp4 import convert_moe_packed_tensors
from transformers.utils import logging

from hf_reference_common import greedy_float64, reference_states, rows_and_prompts

SIZES = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
             intermediate_size=32, vocab_size=512, num_local_experts=4, num_experts_per_tok=2,
             max_position_embeddings=131072, sliding_window=4, swiglu_limit=7.0, tie_word_embeddings=False,
             layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
             rope_parameters={"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                              "truncate": False, "original_max_position_embeddings": 4096, "rope_theta": 150000.0})
TIED_EXPERTS = [1, 3]  # router rows and biases made equal in layer 0


def randomize(model):
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("sinks"):
                parameter.normal_(0.0, 1.0)
            elif parameter.dim() == 1 or name.endswith("_bias"):  # norms near 1, biases near 0
                parameter.copy_((1.0 if "norm" in name else 0.0) + 0.1 * torch.randn_like(parameter))
            elif "embed_tokens" in name or "lm_head" in name:
                parameter.normal_(0.0, 1.0)
            elif name.endswith("experts.gate_up_proj"):  # [E, H, 2I]: large enough to clamp
                parameter.normal_(0.0, 4.0 * parameter.shape[1] ** -0.5)
            elif name.endswith("experts.down_proj"):  # [E, I, H]
                parameter.normal_(0.0, 0.25 * parameter.shape[1] ** -0.5)
            else:  # [out, in]: unit-variance outputs; routers decisive
                parameter.normal_(0.0, (3.0 if "router" in name else 1.0) * parameter.shape[-1] ** -0.5)
        router = model.model.layers[0].mlp.router
        router.weight[TIED_EXPERTS] = router.weight[TIED_EXPERTS[0]].clone() * 2.0
        router.bias[TIED_EXPERTS] = router.bias[TIED_EXPERTS[0]].clone()


def load(directory, dtype, **kwargs):
    if "quantization_config" in json.loads((directory / "config.json").read_text()):
        # transformers' own dequantization on load (its MXFP4 kernels need a GPU and Triton).
        kwargs["quantization_config"] = Mxfp4Config(dequantize=True)
    return AutoModelForCausalLM.from_pretrained(directory, dtype=dtype, attn_implementation="eager", **kwargs).eval()


def clamped_shares(model, rows):
    """Per layer, the share of gate/up pre-activations beyond swiglu_limit (all experts, all tokens)."""
    inputs = {}
    def keep(i):
        def hook(module, args, output):
            inputs[i] = args[0].detach()
        return hook
    hooks = [layer.mlp.register_forward_hook(keep(i)) for i, layer in enumerate(model.model.layers)]
    with torch.no_grad():
        model(input_ids=torch.tensor([rows[0]]))
    for hook in hooks:
        hook.remove()
    shares = []
    limit = model.config.swiglu_limit
    for i, layer in enumerate(model.model.layers):
        experts = layer.mlp.experts
        gate_up = torch.einsum("sh,ehk->esk", inputs[i][0].float(), experts.gate_up_proj.float())
        gate_up = gate_up + experts.gate_up_proj_bias.float()[:, None, :]
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        shares.append(float(((gate > limit).sum() + (up.abs() > limit).sum()) / gate_up.numel()))
    return shares


def random_mxfp4(shape, std, generator):
    """Random blocks [..., in / 32, 16] and scales [..., in / 32] of an [..., out, in] weight of about `std`."""
    *lead, inputs = shape
    blocks = torch.randint(0, 256, (*lead, inputs // 32, 16), generator=generator, dtype=torch.int32).to(torch.uint8)
    exponent = round(float(torch.log2(torch.tensor(std / 2.93))))  # e2m1 codes have an rms of about 2.93
    scales = (127 + exponent + torch.randint(-1, 2, (*lead, inputs // 32), generator=generator)).to(torch.uint8)
    return blocks, scales


def write_mxfp4(model, directory, generator):
    """The model with its experts as MXFP4 (random codes) and, in memory, the experts they dequantize to."""
    tensors = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    hidden, inter = model.config.hidden_size, model.config.intermediate_size
    experts = model.config.num_local_experts
    for i in range(model.config.num_hidden_layers):
        prefix = f"model.layers.{i}.mlp.experts."
        for name, (out, inp), std in (("gate_up_proj", (2 * inter, hidden), 4.0 * hidden ** -0.5),
                                      ("down_proj", (hidden, inter), 0.25 * inter ** -0.5)):
            del tensors[prefix + name]
            blocks, scales = random_mxfp4((experts, out, inp), std, generator)
            tensors[prefix + name + "_blocks"], tensors[prefix + name + "_scales"] = blocks, scales
    directory.mkdir(parents=True, exist_ok=True)
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for s, part in enumerate(halves):
        file = f"model-{s + 1:05d}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, str(directory / file), metadata={"format": "pt"})
        weight_map.update({n: file for n in part})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = model.config.to_dict()
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (directory / "config.json").write_text(json.dumps(config, indent=2))


def write_references(directory, rows, prompts, new_tokens):
    tensors, float32_model = reference_states(lambda dtype: load(directory, dtype), rows)
    shares = clamped_shares(float32_model, rows)
    float64 = load(directory, torch.float64, experts_implementation="eager")
    save_file(tensors, str(directory / "reference.safetensors"))
    reference = {"rows": rows, "prompts": prompts, "greedy_float64": greedy_float64(float64, prompts, new_tokens),
                 "clamped_shares": shares}
    (directory / "reference.json").write_text(json.dumps(reference))
    return reference


def write_dequantize_reference(path, generator):
    blocks = torch.randint(0, 256, (3, 5, 4, 16), generator=generator, dtype=torch.int32).to(torch.uint8)
    scales = torch.randint(100, 150, (3, 5, 4), generator=generator, dtype=torch.int32).to(torch.uint8)
    scales[0, 0, 0], scales[0, 0, 1], scales[0, 0, 2] = 0, 254, 127  # the range's ends, and 2^0
    save_file({"blocks": blocks, "scales": scales,
               "float32": convert_moe_packed_tensors(blocks, scales, dtype=torch.float32),
               "bfloat16": convert_moe_packed_tensors(blocks, scales, dtype=torch.bfloat16)}, str(path))


def main():
    out_dir = Path(sys.argv[1])
    logging.disable_progress_bar()
    logging.set_verbosity_error()
    generator = torch.Generator().manual_seed(41)
    torch.manual_seed(400)
    model = GptOssForCausalLM(GptOssConfig(**SIZES)).eval()
    randomize(model)
    model = model.to(torch.bfloat16)
    rows, prompts = rows_and_prompts(500, SIZES["vocab_size"])
    new_tokens = 16
    model.save_pretrained(out_dir / "gpt-oss-bf16")
    write_mxfp4(model, out_dir / "gpt-oss-mxfp4", generator)
    for name in ("gpt-oss-bf16", "gpt-oss-mxfp4"):
        reference = write_references(out_dir / name, rows, prompts, new_tokens)
        print(name, "greedy", reference["greedy_float64"], "clamped", reference["clamped_shares"])
    write_dequantize_reference(out_dir / "mxfp4_dequantize.safetensors", generator)


if __name__ == "__main__":
    main()
