"""An independent reference of DFlash greedy speculative decoding, written as
the Hugging Face based serving code drafts (tests/drafter/test_hf_reference.cpp
compares dflow's acceptance lengths with it, prompt by prompt).

    dflash_reference.py TARGET_DIR DRAFTER_DIR MAX_NEW_TOKENS ID,ID,...;ID,ID,...

The target is transformers' AutoModelForCausalLM (float32); the drafter is
computed here from its exported model.safetensors and config.json. The
context of the drafter is cat(hidden_states[l + 1] for l in target_layer_ids)
of the committed tokens; each cycle drafts the block [bonus, MASK ...] in one
non-causal pass at positions start .., takes the argmax at slots 1 .. B-1, and
the target accepts the longest prefix equal to its own argmax. Prints one line
"REFERENCE " + {"acceptance_lengths": [[tau, ...], ...], "tokens": [[...], ...]}.
"""
import json
import math
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM
from transformers.utils import logging


def rms_norm(x, weight, eps):
    normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def rotate(x, positions, theta):
    """NeoX ("rotate half") RoPE of x [heads, T, D] at positions [T]."""
    dim = x.shape[-1]
    inverse = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    angles = positions.float()[:, None] * inverse[None, :]
    cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
    first, second = x.chunk(2, -1)
    return x * cos + torch.cat((-second, first), -1) * sin


class Drafter:
    def __init__(self, directory):
        config = json.loads((Path(directory) / "config.json").read_text())
        self.w = {k: v.float() for k, v in load_file(str(Path(directory) / "model.safetensors")).items()}
        self.layer_ids = config["dflash_config"]["target_layer_ids"]
        self.mask_token_id = config["dflash_config"]["mask_token_id"]
        self.block_size = config["block_size"]
        self.layers = config["num_hidden_layers"]
        self.heads = config["num_attention_heads"]
        self.kv_heads = config["num_key_value_heads"]
        self.head_dim = config["head_dim"]
        self.eps = config["rms_norm_eps"]
        self.theta = config["rope_theta"]

    def linear(self, x, name):
        y = x @ self.w[name + ".weight"].T
        return y + self.w[name + ".bias"] if name + ".bias" in self.w else y

    def block_hidden(self, context_features, block_embeddings, start):
        """context_features [T, n*H] of positions 0 .. T-1, the block's
        embeddings [B, H] at positions start .. start+B-1 -> [B, H] after the
        drafter's final norm."""
        w, heads, kv_heads, dim = self.w, self.heads, self.kv_heads, self.head_dim
        context = rms_norm(self.linear(context_features, "fc"), w["hidden_norm.weight"], self.eps)
        length, block = context.shape[0], block_embeddings.shape[0]
        assert length == start, "the context is every committed token before the bonus"
        positions = torch.arange(start + block)
        block_positions = positions[start:]
        h = block_embeddings
        for i in range(self.layers):
            p = f"layers.{i}."
            x = rms_norm(h, w[p + "input_layernorm.weight"], self.eps)
            q = self.linear(x, p + "self_attn.q_proj").view(block, heads, dim)
            q = rotate(rms_norm(q, w[p + "self_attn.q_norm.weight"], self.eps).transpose(0, 1), block_positions, self.theta)
            both = torch.cat((context, x), 0)  # keys and values: context first, then the block
            k = self.linear(both, p + "self_attn.k_proj").view(length + block, kv_heads, dim)
            k = rotate(rms_norm(k, w[p + "self_attn.k_norm.weight"], self.eps).transpose(0, 1), positions, self.theta)
            v = self.linear(both, p + "self_attn.v_proj").view(length + block, kv_heads, dim).transpose(0, 1)
            k, v = k.repeat_interleave(heads // kv_heads, 0), v.repeat_interleave(heads // kv_heads, 0)
            scores = q @ k.transpose(1, 2) / math.sqrt(dim)  # every block slot sees everything: non-causal
            attended = (torch.softmax(scores.float(), -1).to(v.dtype) @ v).transpose(0, 1).reshape(block, heads * dim)
            h = h + self.linear(attended, p + "self_attn.o_proj")
            y = rms_norm(h, w[p + "post_attention_layernorm.weight"], self.eps)
            gate, up = self.linear(y, p + "mlp.gate_proj"), self.linear(y, p + "mlp.up_proj")
            h = h + self.linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj")
        return rms_norm(h, w["norm.weight"], self.eps)


def speculative_greedy(target, drafter, prompt, max_new_tokens):
    embedding = target.get_input_embeddings().weight
    lm_head = target.get_output_embeddings().weight
    block_size = drafter.block_size

    def run_target(ids):
        out = target(input_ids=torch.tensor([ids]), output_hidden_states=True)
        features = torch.cat([out.hidden_states[l + 1][0] for l in drafter.layer_ids], -1)  # [S, n*H]
        return out.logits[0], features

    committed = list(prompt)
    logits, features = run_target(committed)
    bonus = int(logits[-1].argmax())
    tokens, taus = [bonus], []
    while len(tokens) < max_new_tokens:
        start = len(committed)  # the bonus's position
        block = [bonus] + [drafter.mask_token_id] * (block_size - 1)
        hidden = drafter.block_hidden(features, embedding[torch.tensor(block)], start)
        block = [bonus] + (hidden[1:] @ lm_head.T).argmax(-1).tolist()
        # The target verifies the block; causal, so the committed tokens'
        # features from this pass equal those of the committed tokens alone.
        logits, features = run_target(committed + block)
        predicted = logits[start:].argmax(-1).tolist()
        accepted = 0
        while accepted + 1 < block_size and block[accepted + 1] == predicted[accepted]:
            accepted += 1
        committed += block[: accepted + 1]
        features = features[: len(committed)]
        taus.append(accepted + 1)
        tokens += (block[1 : accepted + 1] + [predicted[accepted]])[: max_new_tokens - len(tokens)]
        bonus = predicted[accepted]
    return taus, tokens


def main():
    target_dir, drafter_dir, max_new_tokens, rows = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    torch.set_num_threads(1)
    logging.disable_progress_bar()
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=torch.float32)
    target.eval()
    drafter = Drafter(drafter_dir)
    result = {"acceptance_lengths": [], "tokens": []}
    with torch.no_grad():
        for row in rows.split(";"):
            taus, tokens = speculative_greedy(target, drafter, [int(t) for t in row.split(",")], max_new_tokens)
            result["acceptance_lengths"].append(taus)
            result["tokens"].append(tokens)
    print("REFERENCE " + json.dumps(result))


if __name__ == "__main__":
    main()
