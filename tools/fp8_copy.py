"""An FP8 copy of a target checkpoint, laid out as the FP8 checkpoints users
serve (Qwen3-8B-FP8, Qwen3.5/3.6-FP8; transformers' FineGrainedFP8): each 2-D
weight of the decoder layers stored float8 E4M3 (`<w>.weight`) beside a
float32 `<w>.weight_scale_inv` per block of BLOCK x BLOCK (the largest
magnitude of the block / 448), the embedding, LM head and norms as they were,
and config.json's quantization_config {quant_method: fp8, fmt: e4m3,
activation_scheme: dynamic, weight_block_size: [BLOCK, BLOCK]}. For
benchmarks (bench/RESULTS.md, "FP8 targets in-process"): dflow eval of one
drafter against a target and its FP8 copy.

    fp8_copy.py TARGET_DIR OUT_DIR [--block 128]
"""
import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file


def quantize(weight: torch.Tensor, block: int):
    w = weight.to(torch.float32)
    out, inp = w.shape
    rows, cols = -(-out // block), -(-inp // block)
    padded = torch.zeros(rows * block, cols * block)
    padded[:out, :inp] = w
    blocks = padded.reshape(rows, block, cols, block)
    scale = blocks.abs().amax(dim=(1, 3)).clamp_min(1e-12) / 448.0
    q = (blocks / scale[:, None, :, None]).reshape(rows * block, cols * block)[:out, :inp]
    return q.to(torch.float8_e4m3fn).contiguous(), scale.contiguous()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--block", type=int, default=128)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tensors = {}
    files = sorted(args.target.glob("*.safetensors"))
    for file in files:
        tensors.update(load_file(file))
    for item in args.target.iterdir():
        if item.is_file() and item.suffix != ".safetensors" and item.name != "model.safetensors.index.json":
            shutil.copy(item, args.out / item.name)
    written, quantized = {}, 0
    for name, tensor in tensors.items():
        if ".layers." in name and name.endswith(".weight") and tensor.dim() == 2:
            written[name], written[name + "_scale_inv"] = quantize(tensor, args.block)
            quantized += 1
        else:
            written[name] = tensor.contiguous()
    save_file(written, args.out / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((args.out / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                     "weight_block_size": [args.block, args.block]}
    (args.out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"{args.out}: {quantized} weights in FP8 E4M3, blocks of {args.block}x{args.block}")


if __name__ == "__main__":
    main()
