"""Tiny random multimodal-wrapper checkpoints, written by transformers.

    hf_wrapper_checkpoints.py OUT_DIR

writes OUT_DIR/<name>/ with config.json and save_pretrained's safetensors
(text model under the wrapper's names beside the vision tower), and
OUT_DIR/<name>/reference.safetensors: the text model's input and output
embeddings and final norm as transformers holds them, and the independent
reference of the kl teacher: hidden states `hidden_f32` / `hidden_bf16` and
transformers' final norm of them (`normed_f32`, `normed_bf16`) and its LM head
over the float32 ones (`logits_f32`).
"""
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file
import transformers as T

TEXT = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            vocab_size=300, max_position_embeddings=256, eos_token_id=[7, 11], rms_norm_eps=1e-6)
LINEAR = dict(linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=16, linear_value_head_dim=16)
QWEN_VISION = dict(depth=1, hidden_size=32, intermediate_size=32, num_heads=2, out_hidden_size=64)


def qwen3_5_moe(tied):  # the 35B-A3B's shape: no dense intermediate_size
    text = dict(TEXT, **LINEAR, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=4,
                num_experts_per_tok=2)
    config = T.Qwen3_5MoeConfig(text_config=text, vision_config=QWEN_VISION, tie_word_embeddings=tied)
    return T.Qwen3_5MoeForConditionalGeneration(config)


def qwen3_5(tied):
    text = dict(TEXT, **LINEAR, intermediate_size=96)
    config = T.Qwen3_5Config(text_config=text, vision_config=QWEN_VISION, tie_word_embeddings=tied)
    return T.Qwen3_5ForConditionalGeneration(config)


def qwen3_vl(tied):
    vision = dict(QWEN_VISION, deepstack_visual_indexes=[0])
    config = T.Qwen3VLConfig(text_config=dict(TEXT, intermediate_size=96), vision_config=vision,
                             tie_word_embeddings=tied)
    return T.Qwen3VLForConditionalGeneration(config)


def llama4(tied):
    text = dict(TEXT, intermediate_size=96, intermediate_size_mlp=96, num_local_experts=2)
    vision = dict(hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14, vision_output_dim=32, projector_input_dim=32, projector_output_dim=64)
    config = T.Llama4Config(text_config=text, vision_config=vision, tie_word_embeddings=tied)
    return T.Llama4ForConditionalGeneration(config)


def gemma3(tied):
    vision = dict(hidden_size=32, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, image_size=28,
                  patch_size=14)
    config = T.Gemma3Config(text_config=dict(TEXT, intermediate_size=96), vision_config=vision,
                            tie_word_embeddings=tied)
    return T.Gemma3ForConditionalGeneration(config)


CHECKPOINTS = {  # name: (model, tied, sharded)
    "qwen3_5-moe-untied-single": (qwen3_5_moe, False, False),
    "qwen3_5-moe-tied-sharded": (qwen3_5_moe, True, True),
    "qwen3_5-dense-untied-sharded": (qwen3_5, False, True),
    "qwen3-vl-untied-single": (qwen3_vl, False, False),
    "llama4-untied-single": (llama4, False, False),
    "gemma3-tied-single": (gemma3, True, False),
}


def text_model(model):
    return model.model.language_model if hasattr(model, "model") else model.language_model.model


def main():
    out = Path(sys.argv[1])
    for seed, (name, (make, tied, sharded)) in enumerate(CHECKPOINTS.items()):
        torch.manual_seed(200 + seed)
        model = make(tied).eval()
        with torch.no_grad():  # random, not the init: a mix-up of tensors, or a norm's 1 + weight left out, shows
            for parameter in model.parameters():
                parameter.normal_(0.0, 1.0)
        directory = out / name
        model.save_pretrained(directory, max_shard_size="40KB" if sharded else "10GB")
        norm = text_model(model).norm
        lm_head = model.get_output_embeddings()
        hidden = torch.randn(6, 64) * 3
        with torch.no_grad():
            reference = {"embedding": model.get_input_embeddings().weight, "lm_head": lm_head.weight,
                         "final_norm": norm.weight, "hidden_f32": hidden, "normed_f32": norm(hidden),
                         "logits_f32": lm_head(norm(hidden)), "hidden_bf16": hidden.bfloat16(),
                         "normed_bf16": norm(hidden.bfloat16())}
        save_file({k: v.detach().contiguous().clone() for k, v in reference.items()},
                  str(directory / "reference.safetensors"))
        print(name, type(norm).__name__, "tied" if tied else "untied", "sharded" if sharded else "single")


if __name__ == "__main__":
    main()
