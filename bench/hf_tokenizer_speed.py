#!/usr/bin/env python3
"""Hugging Face `tokenizers` on one thread, for bench_tokenizer: encodes the
texts of CORPUS_JSON (a JSON list of strings) with TOKENIZER_JSON twice (cold,
then warm cache) and prints {"cold_s", "warm_s", "tokens"}.
Run with RAYON_NUM_THREADS=1 (bench_tokenizer sets it)."""
import json
import sys
import time

from tokenizers import Tokenizer

tokenizer = Tokenizer.from_file(sys.argv[1])
texts = json.load(open(sys.argv[2], encoding="utf-8"))
times = []
for _ in range(2):
    start = time.perf_counter()
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    times.append(time.perf_counter() - start)
print(json.dumps({"cold_s": times[0], "warm_s": times[1], "tokens": sum(len(e.ids) for e in encodings)}))
