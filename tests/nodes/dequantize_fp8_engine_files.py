#!/usr/bin/env python3
"""speculators' reading of hs-connectors' FP8 engine files, the reference for
dflow's: each hs_<i>.safetensors of SRC read through hs_connectors'
FP8Transfer (what speculators' training reads with the `fp8` hidden-states
backend: dequantized in bfloat16) and written to DST as a plain bfloat16
engine file.

  python dequantize_fp8_engine_files.py SRC DST
"""
import os
import sys
from pathlib import Path

from hs_connectors import FP8Transfer
from safetensors.torch import save_file


def main():
    src, dst = Path(sys.argv[1]), Path(sys.argv[2])
    os.makedirs(dst, exist_ok=True)
    transfer = FP8Transfer(src)
    written = 0
    for name in sorted(os.listdir(src)):
        if not (name.startswith("hs_") and name.endswith(".safetensors")):
            continue
        sample = transfer.get_cached(int(name[len("hs_"):-len(".safetensors")]))
        save_file({"token_ids": sample["token_ids"], "hidden_states": sample["hidden_states"].contiguous()},
                  str(dst / name))
        written += 1
    print(f"{written} files dequantized by hs_connectors.FP8Transfer")


if __name__ == "__main__":
    main()
