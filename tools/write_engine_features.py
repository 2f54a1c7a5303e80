#!/usr/bin/env python3
"""Writes hidden-state files as a serving engine's extraction does.

The layout is vLLM's extract_hidden_states output as vllm-project/speculators
reads it: one hs_<i>.safetensors per sample i (0-based, dataset order) with
  token_ids      int64 [L]
  hidden_states  [L, K+1, H]: the engine layer ids asked for, in that order.
Engine layer id k is the residual stream entering decoder layer k (0: the
embeddings), so id k for k >= 1 is decoder layer k-1's output, and id N (the
target's layer count, appended as speculators' launch_vllm does) is the last
layer's output BEFORE the final norm. The states are captured with forward
hooks on the decoder layers, not taken from Hugging Face's hidden_states,
whose last entry is after the norm.

--dtype float8_e4m3fn writes hs-connectors' fp8 backend layout (speculators'
`fp8` hidden-states backend): hidden_states in float8_e4m3fn, quantized by
hs_connectors' own quantize_tensor_to_fp8 from the bfloat16 states vLLM
hands its connector, with their per-token scales, hidden_states_scales
float32 [L, 1, 1]. With --random-states (shapes alone, for benchmarks) the
random bfloat16 states are quantized in the same layout (scale = per-token
amax / 448), without hs_connectors.

--format specforge writes SpecForge's offline capture instead
(scripts/prepare_hidden_states.py): rows_<g>-<g+G>/data_<i>.ckpt, one
torch.save dict per sample (gzip-compressed, .ckpt.gz, with --compress) of
  input_ids, loss_mask  int64 [L] (loss_mask all 1 here)
  hidden_states         [1, L, n * H]: --layer-ids in SpecForge's numbering
                        (id k is decoder layer k's output), sorted, each once,
                        concatenated
  target_last_hidden_states [1, L, H] (--strategy dspark): the last layer's
                        output after the final norm.
The last layer N-1 is taken as --capture says: sglang (prepare_hidden_states.py's
SGLang, which captures id k before layer k+1 and so leaves N-1 out: one tap
fewer), hf (SpecForge's Hugging Face target backend, the Domino configs'
launchers: hidden_states[k+1] of the forward's output_hidden_states, whose
entry N is the last layer after the final norm) or sglang-end-layer (an
SGLang patched to capture at its end layer: before the final norm).
--batch-size B pads each run of B consecutive samples to the longest with
token 0 and loss_mask 0 and runs the forward over the padded rows, as
SpecForge's capture batches do.

It stands in for the engine in dflow's tests and benchmarks: --rate writes
files at a set rate (files/s), each written in pieces with pauses between
them (never atomically), so a reader sees files that are still growing.

  python tools/write_engine_features.py --target TARGET_DIR --samples DATA.jsonl \
      --out HS_DIR [--layer-ids 2 3 4] [--dtype bfloat16|float32] [--rate 20]

A multimodal wrapper (Qwen3_5MoeForConditionalGeneration, ...) runs as its
text model: AutoModelForCausalLM loads it (Qwen3_5MoeForCausalLM) from the
wrapper's checkpoint, and engine id k counts every decoder layer, linear
attention and full alike.

--samples is the JSONL `dflow prepare` read ({"input_ids": [...]} per line,
in dataset order); --max-length truncates as prepare's --max-length does.

--random-states writes random hidden states of the target's shapes (from its
config.json) beside the real token ids, without running the target: what a
check of the reading path, its speed and its memory needs at real sizes (the
GPU check, whose machine may lack transformers and safetensors). Only torch
is needed then: the files are serialized by hand in the safetensors layout.
"""
import argparse
import gzip
import io
import json
import os
import sys
import time

import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", required=True, help="the target model (Hugging Face layout)")
    p.add_argument("--samples", required=True, help="JSONL with input_ids per line, in dataset order")
    p.add_argument("--out", required=True, help="directory for hs_<i>.safetensors")
    p.add_argument("--layer-ids", type=int, nargs="+", default=None,
                   help="engine layer ids (default: 2, N//2, N-3 as launch_vllm.py); N is appended")
    p.add_argument("--no-last-layer", action="store_true", help="do not append the last layer N")
    p.add_argument("--dtype", choices=["bfloat16", "float32", "float16", "float8_e4m3fn"], default="bfloat16",
                   help="dtype of hidden_states in the files (the target runs in float32); float8_e4m3fn: "
                        "hs-connectors' fp8 layout")
    p.add_argument("--format", choices=["vllm", "specforge"], default="vllm", help="the capture layout to write")
    p.add_argument("--strategy", choices=["dflash", "dspark"], default="dflash",
                   help="specforge: dspark also stores target_last_hidden_states")
    p.add_argument("--capture", choices=["sglang", "hf", "sglang-end-layer"], default="sglang",
                   help="specforge: how the last layer N-1 is captured (left out, after or before the final norm)")
    p.add_argument("--compress", action="store_true", help="specforge: gzip each file (data_<i>.ckpt.gz)")
    p.add_argument("--file-group-size", type=int, default=2000, help="specforge: samples per rows_ folder")
    p.add_argument("--batch-size", type=int, default=1, help="specforge: pad runs of this many samples together")
    p.add_argument("--max-length", type=int, default=0, help="truncate samples to this many tokens")
    p.add_argument("--first", type=int, default=0, help="first sample to write")
    p.add_argument("--count", type=int, default=0, help="samples to write (0: all from --first)")
    p.add_argument("--rate", type=float, default=0.0, help="files per second (0: as fast as possible)")
    p.add_argument("--precompute", action="store_true",
                   help="compute every file before writing the first, so that --rate is the writing rate alone "
                        "(an engine's output rate, not this script's forward)")
    p.add_argument("--pieces", type=int, default=1,
                   help="write each file in this many pieces with a pause between them (default 4 with --rate)")
    p.add_argument("--wrong-tokens", type=int, nargs="*", default=[],
                   help="samples whose token_ids are written altered (for tests of the token check)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--random-states", action="store_true",
                   help="random hidden states of the target's shapes instead of its forward (needs only torch)")
    return p.parse_args()


def text_config(target):
    """config.json's text model: a multimodal wrapper's (Qwen3.5/3.6,
    Qwen3-VL, Llama 4) is its text_config; AutoModelForCausalLM loads that
    text model alone from the wrapper's checkpoint."""
    with open(os.path.join(target, "config.json")) as f:
        config = json.load(f)
    return config.get("text_config", config)


def read_samples(path, max_length):
    samples = []
    with open(path) as f:
        for line in f:
            if line.strip():
                ids = json.loads(line)["input_ids"]
                samples.append(ids[:max_length] if max_length > 0 else ids)
    return samples


class LayerCapture:
    """The residual stream at each engine layer id, from forward hooks."""

    def __init__(self, model, layer_ids):
        inner = model.model
        self.layer_ids = layer_ids
        self.states = {}
        hooks = [inner.embed_tokens.register_forward_hook(self._keep(0))]
        for i, layer in enumerate(inner.layers):
            hooks.append(layer.register_forward_hook(self._keep(i + 1)))
        hooks.append(inner.norm.register_forward_hook(self._keep("normed")))
        self.hooks = hooks

    def _keep(self, engine_id):
        def hook(_module, _inputs, output):
            self.states[engine_id] = output[0] if isinstance(output, tuple) else output
        return hook

    def stack(self):
        return torch.stack([self.states[k][0] for k in self.layer_ids], dim=1)  # [L, K+1, H]


SAFETENSORS_DTYPES = {torch.int64: "I64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
                      torch.float8_e4m3fn: "F8_E4M3"}


def serialize(tensors):
    """The safetensors layout: an 8-byte little-endian header length, the JSON
    header (dtype, shape, data_offsets per tensor), then the tensors' bytes."""
    header, blobs, offset = {}, [], 0
    for name, tensor in tensors.items():
        blob = tensor.contiguous().cpu().view(torch.uint8).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[tensor.dtype], "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return len(text).to_bytes(8, "little") + text + b"".join(blobs)


class RandomStates:
    """Random states of the target's shapes, the same for a sample on every run."""

    def __init__(self, target, layer_ids):
        self.hidden = text_config(target)["hidden_size"]
        self.slots = len(layer_ids)
        self.device = "cuda" if torch.cuda.is_available() else "cpu"

    def states(self, index, tokens):
        generator = torch.Generator(device=self.device).manual_seed(index)
        return torch.randn(len(tokens), self.slots, self.hidden, generator=generator, device=self.device)


def per_token_fp8(states):
    """[L, K, H] float32 -> (float8_e4m3fn states, float32 [L, 1, 1] scales),
    the fp8 backend's layout: each token scaled by its amax over 448."""
    scales = (states.abs().amax(dim=(1, 2), keepdim=True) / 448.0).clamp(min=1e-12)
    return (states / scales).to(torch.float8_e4m3fn).cpu(), scales.cpu()


try:
    from safetensors.torch import save
except ImportError:
    save = serialize


def write_file(path, data, pieces, pause_s):
    # In place and in pieces, as a copy onto shared storage would: a reader
    # must check the size against the header before it reads.
    with open(path, "wb") as f:
        step = max(1, -(-len(data) // pieces))
        for at in range(0, len(data), step):
            f.write(data[at:at + step])
            f.flush()
            if at + step < len(data) and pause_s > 0:
                time.sleep(pause_s)


def specforge_path(out, i, group, compress):
    g = i // group * group
    return os.path.join(out, f"rows_{g}-{g + group}", f"data_{i}.ckpt" + (".gz" if compress else ""))


def specforge_bytes(record, path, compress):
    """The bytes SpecForge's _save_tensor_sync leaves in `path`: torch.save
    of the dict, through gzip.open(path, "wb", compresslevel=6) with --compress."""
    buffer = io.BytesIO()
    if compress:
        with gzip.GzipFile(filename=path, mode="wb", compresslevel=6, fileobj=buffer) as f:
            torch.save(record, f)
    else:
        torch.save(record, buffer)
    return buffer.getvalue()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    config = text_config(args.target)
    layers, vocab_size = config["num_hidden_layers"], config["vocab_size"]
    specforge = args.format == "specforge"
    ids = args.layer_ids if args.layer_ids is not None else [2, layers // 2, layers - 3]
    if specforge:
        # SpecForge's id k is layer k's output: the stream entering layer k + 1,
        # captured in layer order (SGLang's layers_to_capture), each once.
        if any(k < 0 or k > layers - 1 for k in ids):
            sys.exit(f"--layer-ids {ids}: SpecForge ids lie in [0, {layers - 1}] for a {layers}-layer target")
        if args.capture == "sglang":
            ids = [k for k in ids if k < layers - 1]  # SGLang's layer loop never reaches a layer N
        ids = sorted(set(k + 1 for k in ids))
    elif args.capture != "sglang":
        sys.exit("--capture is SpecForge's: set --format specforge")
    elif not args.no_last_layer and layers not in ids:
        ids = ids + [layers]
    ids = sorted(set(ids))  # as vLLM keeps the layers it is asked for: tuple(sorted(set(layers)))
    if any(k < 0 or k > layers for k in ids):
        sys.exit(f"--layer-ids {ids}: engine ids lie in [0, {layers}] for a {layers}-layer target")
    if specforge and (args.random_states or args.dtype == "float8_e4m3fn"):
        sys.exit("--format specforge writes the target's forward in bfloat16, float16 or float32")
    if args.random_states:
        source = RandomStates(args.target, ids)
    else:
        from transformers import AutoModelForCausalLM
        model = AutoModelForCausalLM.from_pretrained(args.target, dtype=torch.float32)
        model.eval()
        capture = LayerCapture(model, ids)
    dtype = getattr(torch, args.dtype) if args.dtype != "float8_e4m3fn" else None
    samples = read_samples(args.samples, args.max_length)
    last = len(samples) if args.count <= 0 else min(len(samples), args.first + args.count)
    pieces = args.pieces if args.pieces > 1 or args.rate <= 0 else 4
    os.makedirs(args.out, exist_ok=True)

    hf_capture = specforge and args.capture == "hf"

    def states(tokens):
        with torch.no_grad():
            out = model(input_ids=tokens[None], output_hidden_states=hf_capture)
        if hf_capture:  # SpecForge's HF target backend: hidden_states[k + 1] for its id k
            return torch.stack([out.hidden_states[k][0] for k in ids], dim=1)
        return capture.stack()

    def padded_length(i):
        first = i // args.batch_size * args.batch_size
        return max(len(samples[j]) for j in range(first, min(first + args.batch_size, len(samples))))

    def file_bytes(i):
        tokens = torch.tensor(samples[i], dtype=torch.int64)
        written = tokens.clone()
        if i in args.wrong_tokens:
            written[0] = (written[0] + 1) % vocab_size
        if specforge:
            pad = padded_length(i) - len(samples[i])
            tokens = torch.cat([tokens, torch.zeros(pad, dtype=torch.int64)])
            written = torch.cat([written, torch.zeros(pad, dtype=torch.int64)])
            hidden = states(tokens).to(dtype)
            record = {"input_ids": written, "loss_mask": (torch.arange(len(tokens)) < len(samples[i])).to(torch.int64),
                      "hidden_states": hidden.reshape(len(tokens), -1).unsqueeze(0).contiguous()}
            if args.strategy == "dspark":
                record["target_last_hidden_states"] = capture.states["normed"].to(dtype).contiguous()
            return specforge_bytes(record, file_path(i), args.compress)
        if args.random_states and args.dtype == "float8_e4m3fn":
            fp8, scales = per_token_fp8(source.states(i, samples[i]).to(torch.bfloat16).float())
            return save({"token_ids": written, "hidden_states": fp8, "hidden_states_scales": scales})
        if args.random_states:
            hidden = source.states(i, samples[i]).to(dtype)
        elif args.dtype == "float8_e4m3fn":
            from hs_connectors.fp8_utils import SCALES_KEY, quantize_tensor_to_fp8
            # vLLM hands its connector the states in the model's dtype (bf16).
            fp8, scales = quantize_tensor_to_fp8(states(tokens).to(torch.bfloat16).contiguous())
            return save({"token_ids": written, "hidden_states": fp8, SCALES_KEY: scales})
        else:
            hidden = states(tokens).to(dtype).contiguous()
        return save({"token_ids": written, "hidden_states": hidden})

    def file_path(i):
        if specforge:
            return specforge_path(args.out, i, args.file_group_size, args.compress)
        return os.path.join(args.out, f"hs_{i}.safetensors")

    ready = {i: file_bytes(i) for i in range(args.first, last)} if args.precompute else {}
    began = time.monotonic()
    for n, i in enumerate(range(args.first, last)):
        data = ready.pop(i) if args.precompute else file_bytes(i)
        if args.rate > 0:
            due = began + n / args.rate
            time.sleep(max(0.0, due - time.monotonic()))
        pause_s = 0.25 / args.rate / pieces if args.rate > 0 else 0.0
        os.makedirs(os.path.dirname(file_path(i)), exist_ok=True)
        write_file(file_path(i), data, pieces, pause_s)
    elapsed = time.monotonic() - began
    print(json.dumps({"files": last - args.first, "layer_ids": ids, "dtype": args.dtype,
                      "elapsed_s": round(elapsed, 3)}))


if __name__ == "__main__":
    main()
