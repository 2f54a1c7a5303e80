"""Checks a `dflow export --format speculators` directory against what
vllm-project/speculators' DFlashDraftModel reads, and the default export
against z-lab's layout. speculators itself is not installed: its facts are
transcribed here, each with the file it comes from.

usage: check_speculators_export.py SPECULATORS_DIR DFLASH_DIR TARGET_DIR VERIFIER_NAME
Prints "ok" and exits 0, or names the first disagreement and exits 1.
"""

import json
import sys

import torch
from safetensors.torch import load_file

spec_dir, dflash_dir, target_dir, verifier_name = sys.argv[1:5]


def load_dir_tensors(path):
    import glob

    tensors = {}
    for f in sorted(glob.glob(path + "/*.safetensors")):
        tensors.update(load_file(f))
    return tensors


def fail(what):
    print("FAIL: " + what)
    sys.exit(1)


def expect(cond, what):
    if not cond:
        fail(what)


config = json.load(open(spec_dir + "/config.json"))
zlab = json.load(open(dflash_dir + "/config.json"))
target_config = json.load(open(target_dir + "/config.json"))

# The default export is z-lab's layout, as before: exactly these keys (plus
# the attention layout's when a draft layer slides), and nothing speculators'.
zlab_keys = {"architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
             "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
             "rms_norm_eps", "rope_theta", "rope_scaling", "hidden_act", "attention_bias", "attention_dropout",
             "use_sliding_window", "tie_word_embeddings", "torch_dtype", "block_size", "num_target_layers",
             "dflash_config", "dflow_trained_against"}
expect(set(zlab) == zlab_keys, "default export keys %s" % sorted(set(zlab) ^ zlab_keys))
expect(zlab["architectures"] == ["DFlashDraftModel"], "default export architectures")
expect(set(zlab["dflash_config"]) == {"mask_token_id", "target_layer_ids"}, "default export dflash_config")

# src/speculators/config.py SpeculatorModelConfig + models/dflash/config.py
# DFlashSpeculatorConfig: speculators_model_type "dflash" selects the class;
# its default architectures is ["DFlashSpeculator"].
expect(config.get("speculators_model_type") == "dflash", "speculators_model_type")
expect(isinstance(config.get("speculators_version"), str), "speculators_version")
expect(config.get("architectures") == ["DFlashSpeculator"], "architectures %s" % config.get("architectures"))
for key in ("transformer_layer_config", "draft_vocab_size", "block_size", "aux_hidden_state_layer_ids",
            "mask_token_id", "speculators_config"):
    expect(key in config, "missing " + key)

# What the drafter was trained against travels in both (dflow's record, a
# key the configs' loaders keep), the same record; it is not the layers'.
expect(config.get("dflow_trained_against") == zlab["dflow_trained_against"], "dflow_trained_against differs")
expect(zlab["dflow_trained_against"]["target_layer_ids"] == zlab["dflash_config"]["target_layer_ids"],
       "the record's layers are not the drafter's")

# src/speculators/convert/dflash/converter.py: the transformer layer config
# is z-lab's config minus _NON_TRANSFORMER_KEYS (and dflow's record).
non_transformer = {"architectures", "auto_map", "block_size", "dflash_config", "num_target_layers",
                   "dflow_trained_against"}
layer_config = config["transformer_layer_config"]
expect(layer_config == {k: v for k, v in zlab.items() if k not in non_transformer},
       "transformer_layer_config differs from z-lab's config minus %s" % sorted(non_transformer))
expect(layer_config["model_type"] == "qwen3", "transformer_layer_config.model_type")
expect(config["block_size"] == zlab["block_size"], "block_size")
expect(config["mask_token_id"] == zlab["dflash_config"]["mask_token_id"], "mask_token_id")

# converter.py: aux ids are z-lab's target_layer_ids + 1, the verifier's
# last layer excluded (its serving path takes that one apart).
num_verifier_layers = target_config["num_hidden_layers"]
aux = config["aux_hidden_state_layer_ids"]
expect(aux == [i + 1 for i in zlab["dflash_config"]["target_layer_ids"]], "aux ids %s" % aux)
expect(all(i < num_verifier_layers for i in aux), "aux ids name the last layer")

# models/dflash/config.py validate_transformer_config builds the layer config
# with transformers' class for its model_type; it must keep the drafter's shape.
from transformers import AutoConfig

built = AutoConfig.for_model(model_type=layer_config["model_type"]).__class__(**layer_config)
# z-lab's loader reads its config.json as transformers' Qwen3Config: the
# record is kept as an attribute and changes nothing of the shape.
zlab_built = AutoConfig.for_model(model_type=zlab["model_type"]).__class__(**zlab)
expect(zlab_built.dflow_trained_against == zlab["dflow_trained_against"], "z-lab's config loses the record")
expect(zlab_built.hidden_size == zlab["hidden_size"], "z-lab's config with the record changes hidden_size")
for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
            "intermediate_size", "vocab_size", "rms_norm_eps"):
    expect(getattr(built, key) == layer_config[key], "transformers' Qwen3Config changes " + key)

# vLLM (vllm/transformers_utils/configs/speculators/algos.py update_dflash)
# maps aux ids back to z-lab's target_layer_ids as i - 1, requires
# mask_token_id, and makes the blocks causal unless sliding_window_non_causal.
expect([i - 1 for i in aux] == zlab["dflash_config"]["target_layer_ids"], "vLLM's i - 1 does not give back the ids")
expect(isinstance(config["mask_token_id"], int), "mask_token_id is required")
expect(config.get("sliding_window_non_causal") is True, "dflow's blocks are bidirectional")
expect(config.get("sample_from_anchor") is False, "sample_from_anchor")

# config.py SpeculatorsConfig / VerifierConfig, proposals/greedy.py.
sc = config["speculators_config"]
expect(sc.get("algorithm") == "dflash", "algorithm")
methods = sc.get("proposal_methods")
expect(isinstance(methods, list) and len(methods) == 1, "proposal_methods")
expect(methods[0].get("proposal_type") == "greedy", "proposal_type")
expect(methods[0].get("speculative_tokens") == config["block_size"] - 1, "speculative_tokens != block_size - 1")
expect(sc.get("default_proposal_method") in [m["proposal_type"] for m in methods], "default_proposal_method")
verifier = sc.get("verifier", {})
expect(verifier.get("name_or_path") == verifier_name, "verifier.name_or_path %s" % verifier.get("name_or_path"))
expect(verifier.get("architectures") == target_config["architectures"],
       "verifier.architectures %s, target's %s" % (verifier.get("architectures"), target_config["architectures"]))

# models/dflash/core.py DFlashDraftModel + model.py DraftVocabMixin: the state
# dict its save_pretrained writes (verifier_lm_head and verifier_norm are in
# _keys_to_ignore_on_save; t2d/d2t are None without a smaller draft vocab).
H = layer_config["hidden_size"]
heads, kv_heads, head_dim = (layer_config["num_attention_heads"], layer_config["num_key_value_heads"],
                             layer_config["head_dim"])
inter = layer_config["intermediate_size"]
V = layer_config["vocab_size"]
expect(config["draft_vocab_size"] == V, "draft_vocab_size")
shapes = {"embed_tokens.weight": (V, H), "lm_head.weight": (config["draft_vocab_size"], H),
          "fc.weight": (H, len(aux) * H), "hidden_norm.weight": (H,), "norm.weight": (H,)}
# models/dflash/model_definitions.py Qwen3DFlashDecoderLayer / Qwen3DFlashAttention.
for i in range(layer_config["num_hidden_layers"]):
    p = "layers.%d." % i
    proj = {"q_proj": (heads * head_dim, H), "k_proj": (kv_heads * head_dim, H), "v_proj": (kv_heads * head_dim, H),
            "o_proj": (H, heads * head_dim)}
    for name, shape in proj.items():
        shapes[p + "self_attn." + name + ".weight"] = shape
        if layer_config["attention_bias"]:
            shapes[p + "self_attn." + name + ".bias"] = (shape[0],)
    shapes[p + "self_attn.q_norm.weight"] = (head_dim,)
    shapes[p + "self_attn.k_norm.weight"] = (head_dim,)
    shapes[p + "mlp.gate_proj.weight"] = (inter, H)
    shapes[p + "mlp.up_proj.weight"] = (inter, H)
    shapes[p + "mlp.down_proj.weight"] = (H, inter)
    shapes[p + "input_layernorm.weight"] = (H,)
    shapes[p + "post_attention_layernorm.weight"] = (H,)

tensors = load_file(spec_dir + "/model.safetensors")
expect(set(tensors) == set(shapes), "tensor names: extra %s, missing %s" %
       (sorted(set(tensors) - set(shapes)), sorted(set(shapes) - set(tensors))))
for name, shape in shapes.items():
    expect(tuple(tensors[name].shape) == shape, "%s has shape %s, expected %s" % (name, tuple(tensors[name].shape), shape))

# The body is the default export's, the head the target's (model.py load_verifier_weights).
body = load_file(dflash_dir + "/model.safetensors")
for name, tensor in body.items():
    expect(torch.equal(tensors[name], tensor), name + " differs from the default export's")
target = load_dir_tensors(target_dir)
embed = target["model.embed_tokens.weight"].to(tensors["embed_tokens.weight"].dtype)
lm_head = target.get("lm_head.weight", target["model.embed_tokens.weight"]).to(embed.dtype)
expect(torch.equal(tensors["embed_tokens.weight"], embed), "embed_tokens.weight is not the target's")
expect(torch.equal(tensors["lm_head.weight"], lm_head), "lm_head.weight is not the target's")
print("ok")
