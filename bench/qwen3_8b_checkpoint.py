"""The `dflow make-tiny-target --preset qwen3-8b` checkpoint, written a shard at a time.

    qwen3_8b_checkpoint.py OUT_DIR

Same config.json, tensor names, shapes, bf16 dtype and 512 MiB sharding
(model.safetensors.index.json) as the preset, with random normal weights
(not the preset's scaling: only sizes and layout matter for what this is used
for, host memory when loading). The preset draws every tensor in memory before
writing (about 24 GB of host memory on a CPU, more than a 24 GB machine has);
this holds one shard (at most the 1.2 GB embedding) at a time. Needs the
venv's torch and safetensors.
"""
import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

VOCAB, HIDDEN, LAYERS, HEADS, KV_HEADS, HEAD_DIM, MLP = 151936, 4096, 36, 32, 8, 128, 12288
MAX_SHARD_BYTES = 512 << 20

CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
    "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
    "head_dim": HEAD_DIM, "intermediate_size": MLP, "vocab_size": VOCAB, "max_position_embeddings": 40960,
    "rms_norm_eps": 1e-6, "rope_theta": 1e6, "rope_scaling": None, "hidden_act": "silu", "attention_bias": False,
    "attention_dropout": 0.0, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "bos_token_id": None,
    "eos_token_id": 151645, "dflow_mask_token_id": 151669, "dflow_tiny_pattern": "random",
}


def shapes():
    """(name, shape) in make_tiny_target's order."""
    yield "model.embed_tokens.weight", (VOCAB, HIDDEN)
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        yield p + "input_layernorm.weight", (HIDDEN,)
        yield p + "self_attn.q_proj.weight", (HEADS * HEAD_DIM, HIDDEN)
        yield p + "self_attn.k_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN)
        yield p + "self_attn.v_proj.weight", (KV_HEADS * HEAD_DIM, HIDDEN)
        yield p + "self_attn.o_proj.weight", (HIDDEN, HEADS * HEAD_DIM)
        yield p + "self_attn.q_norm.weight", (HEAD_DIM,)
        yield p + "self_attn.k_norm.weight", (HEAD_DIM,)
        yield p + "post_attention_layernorm.weight", (HIDDEN,)
        yield p + "mlp.gate_proj.weight", (MLP, HIDDEN)
        yield p + "mlp.up_proj.weight", (MLP, HIDDEN)
        yield p + "mlp.down_proj.weight", (HIDDEN, MLP)
    yield "model.norm.weight", (HIDDEN,)
    yield "lm_head.weight", (VOCAB, HIDDEN)


def groups():
    """Whole tensors per shard, at most MAX_SHARD_BYTES each (a larger tensor alone), as save_pretrained groups them."""
    group, size = [], 0
    for name, shape in shapes():
        nbytes = 2 * torch.Size(shape).numel()
        if group and size + nbytes > MAX_SHARD_BYTES:
            yield group
            group, size = [], 0
        group.append((name, shape))
        size += nbytes
    if group:
        yield group


def main():
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    all_groups = list(groups())
    weight_map, total = {}, 0
    for index, group in enumerate(all_groups):
        shard = f"model-{index + 1:05d}-of-{len(all_groups):05d}.safetensors"
        tensors = {}
        for name, shape in group:
            t = torch.ones(shape, dtype=torch.bfloat16) if name.endswith("norm.weight") else \
                torch.randn(shape, dtype=torch.bfloat16) * 0.02
            tensors[name] = t
            weight_map[name] = shard
            total += t.numel() * 2
        save_file(tensors, str(out / shard), metadata={"format": "pt"})
        del tensors
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    print(f"{out}: {len(all_groups)} shards, {total / 1e9:.2f} GB")


if __name__ == "__main__":
    main()
