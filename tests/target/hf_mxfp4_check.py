"""Dequantizes make-tiny-target's MXFP4 experts with transformers' own code.

    hf_mxfp4_check.py MXFP4_DIR DENSE_DIR OUT_JSON

Both directories hold gpt-oss checkpoints drawn with the same options and
seed, one with --mxfp4. For each layer's gate_up_proj and down_proj,
transformers.integrations.mxfp4.convert_moe_packed_tensors turns the
*_blocks / *_scales into the dense [E, in, out] tensor its GptOssExperts
multiply by; OUT_JSON gets, per tensor, that shape, the dense checkpoint's
shape, and the relative (Frobenius) error between the two.
"""
import json
import sys

import torch
from safetensors.torch import load_file
from transformers.integrations.mxfp4 import convert_moe_packed_tensors


def main():
    quantized, dense = load_file(f"{sys.argv[1]}/model.safetensors"), load_file(f"{sys.argv[2]}/model.safetensors")
    report = {}
    for name in sorted(k for k in quantized if k.endswith("_blocks")):
        base = name.removesuffix("_blocks")
        restored = convert_moe_packed_tensors(quantized[name], quantized[base + "_scales"], dtype=torch.float32)
        reference = dense[base].float()
        entry = {"shape": list(restored.shape), "dense_shape": list(reference.shape), "blocks_dtype": str(quantized[name].dtype)}
        if restored.shape == reference.shape:
            entry["relative_error"] = float((restored - reference).norm() / reference.norm())
        report[base] = entry
    with open(sys.argv[3], "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main()
