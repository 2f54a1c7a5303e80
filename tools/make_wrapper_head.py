#!/usr/bin/env python3
"""Writes the head of a multimodal-wrapper target at a real model's shapes.

A drafter trained from a serving engine's hidden-state files reads of its
target only config.json and three tensors: the text model's input
embedding, its final norm and its LM head (docs/targets.md, "Multimodal
wrappers: Qwen3.5/3.6, Qwen3-VL, Llama 4 (head only)"). This writes those, random, under the wrapper's names, with the model's
config.json, so that a head-only run can be measured at the real shapes
without the real weights (tools/gpu_check.sh):

  model.language_model.embed_tokens.weight  [V, H]
  model.language_model.norm.weight          [H] (zero-centred: the norm scales by 1 + w)
  lm_head.weight                            [V, H]  (untied, as the model ships)

  python tools/make_wrapper_head.py --preset qwen3.5-35b-a3b --out DIR [--device cuda]
      [--hidden-size H --vocab-size V]   # smaller shapes, to try the path on a CPU

The preset is Qwen3.5-35B-A3B's text config (hidden 2048, 40 layers of three
Gated DeltaNet layers to one gated-attention layer, 256 experts of which 8
and a shared one run, vocabulary 248,320); the other tensors of the model
are not written, so dflow can only read it head-only.
"""
import argparse
import json
import os

import torch

PRESETS = {
    "qwen3.5-35b-a3b": {
        "architectures": ["Qwen3_5MoeForConditionalGeneration"],
        "model_type": "qwen3_5_moe",
        "tie_word_embeddings": False,
        "text_config": {
            "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40, "vocab_size": 248320,
            "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "rms_norm_eps": 1e-6,
            "max_position_embeddings": 262144, "full_attention_interval": 4,
            "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 10,
            "linear_num_value_heads": 32, "linear_num_key_heads": 16, "linear_key_head_dim": 128,
            "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 256,
            "num_experts_per_tok": 8, "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512,
            "partial_rotary_factor": 0.25, "rope_parameters": {"rope_theta": 10000000, "rope_type": "default"},
            "eos_token_id": 248044, "tie_word_embeddings": False,
        },
    },
}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--hidden-size", type=int, help="a smaller hidden size (attention heads scaled down with it)")
    p.add_argument("--vocab-size", type=int, help="a smaller vocabulary")
    args = p.parse_args()
    config = json.loads(json.dumps(PRESETS[args.preset]))
    text = config["text_config"]
    if args.hidden_size:
        text["num_attention_heads"] = max(1, text["num_attention_heads"] * args.hidden_size // text["hidden_size"])
        text["num_key_value_heads"] = min(text["num_key_value_heads"], text["num_attention_heads"])
        text["head_dim"] = args.hidden_size // text["num_attention_heads"]
        text["hidden_size"] = args.hidden_size
    if args.vocab_size:
        text["vocab_size"] = args.vocab_size
        text["eos_token_id"] = args.vocab_size - 1
    hidden, vocab = text["hidden_size"], text["vocab_size"]
    generator = torch.Generator(device=args.device).manual_seed(0)

    def random(*shape, scale):
        return (torch.randn(*shape, generator=generator, device=args.device) * scale).to(torch.bfloat16).cpu()

    tensors = {
        "model.language_model.embed_tokens.weight": random(vocab, hidden, scale=0.02),
        "model.language_model.norm.weight": random(hidden, scale=0.1),
        "lm_head.weight": random(vocab, hidden, scale=hidden ** -0.5),
    }
    os.makedirs(args.out, exist_ok=True)
    try:
        from safetensors.torch import save_file
        save_file(tensors, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    except ImportError:  # the GPU machine may lack safetensors: its layout, written here
        header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
        for name, tensor in tensors.items():
            blob = tensor.contiguous().view(torch.uint8).numpy().tobytes()
            header[name] = {"dtype": "BF16", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(blob)]}
            blobs.append(blob)
            offset += len(blob)
        text_header = json.dumps(header, separators=(",", ":")).encode()
        text_header += b" " * (-len(text_header) % 8)
        with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
            f.write(len(text_header).to_bytes(8, "little") + text_header + b"".join(blobs))
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    print(json.dumps({"out": args.out, "hidden_size": hidden, "vocab_size": vocab,
                      "num_hidden_layers": text["num_hidden_layers"]}))


if __name__ == "__main__":
    main()
