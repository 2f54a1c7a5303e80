#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into fuzz/corpus/<target>/.

The seeds are small, hand-picked inputs taken from the tests (their fixtures
and the literals they check): valid files of each format and a few of the
malformed ones the tests refuse. Checksums in the binary seeds are left zero:
the shard targets repair them (fuzz/shard_fixup.hpp). Re-running rewrites the
same files; what libFuzzer finds goes to build-fuzz/, never here.
"""
import gzip
import io
import json
import pathlib
import shutil
import struct
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "fuzz" / "corpus"


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def config_seeds():
    put("fuzz_config", "default.yaml", (ROOT / "config" / "default.yaml").read_text())
    for example in sorted((ROOT / "examples").glob("*.yaml")):
        put("fuzz_config", example.name, example.read_text())
    put("fuzz_config", "pipeline_edges.yaml",
        "pipeline: {nodes: [{name: a, type: b}], edges: [{from: a, to: b, capacity: 1, initial: 1}]}\n")
    put("fuzz_config", "faults.yaml", "faults: [{kind: exception, node: target, step: 3}]\n")
    put("fuzz_config", "typo.yaml", "pipeline: {nodes: [{name: a, typ: b}], edges: []}\n")
    put("fuzz_config_overrides", "lr.txt", "train.lr=0.001\nrun.seed=7\n")
    put("fuzz_config_overrides", "lists.txt", "data.buckets=[64, 128]\ndevices.target=[cpu, cpu]\n")
    put("fuzz_config_overrides", "bad.txt", "train=3\nrun.name.x=1\nguard.policy=rollback\n")
    put("fuzz_config_overrides", "pipeline.txt",
        "pipeline.nodes.target.type=features.cached\npipeline.nodes.drafter.params.objective=dpace\n"
        "pipeline.nodes.pad.params.a.b=3\npipeline.edges.load->pad.capacity=32\npipeline.edges.reorder->drafter.capacity=2\n"
        "pipeline.nodes.targte.type=x\npipeline.edges.load-=4\n")
    put("fuzz_sweep_plan", "grid.txt",
        "V train.lr=0.01,0.02\nV pipeline.nodes.optimizer.type=optimizer_step.adamw,optimizer_step.muon\n"
        "N baseline\nN dpace: pipeline.nodes.drafter.params={objective: dpace, alpha: 0.5}\n"
        "N sliding: model.drafter.layer_types=[sliding_attention] model.drafter.sliding_window=32\n")
    put("fuzz_sweep_plan", "lists.txt", "xx\nV model.drafter.layer_types=[a, b],[c]\nV run.name='a,b',c\n")


def jsonl_seeds():
    lines = [
        '{"input_ids": [5, 6, 7, 8], "loss_mask": [0, 0, 1, 1]}',
        '{"input_ids": [1, 2,',
        '{"input_ids": [1, 2.5], "loss_mask": [1, 1]}',
        '{"input_ids": [-3, 1], "loss_mask": [1, 1]}',
        '{"input_ids": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "loss_mask": [0, 0, 0, 0, 0, 0, 0, 0, 1, 1]}',
        '{"input_ids": [1, 2], "loss_mask": [1, 1]}\r',
    ]
    for i, line in enumerate(lines):
        put("fuzz_jsonl_sample", f"line{i}.jsonl", line)


def quarantine_seeds():
    put("fuzz_quarantine", "two.jsonl",
        '{"global_step": 31, "reason": "loss 41.2 > spike threshold 9.7", "sample_ids": [803, 17]}\n'
        '{"global_step": 40, "reason": "rollback", "sample_ids": [1, 2, 3]}\n')
    put("fuzz_quarantine", "torn.jsonl", '{"global_step": 1, "sample_ids": [5]}\n{"global_step": 2, "sample_')
    put("fuzz_quarantine", "bad.jsonl", '{"sample_ids": [-1]}\n')
    put("fuzz_quarantine", "release.jsonl",
        '{"global_step": 15, "sample_ids": [1, 2]}\n{"global_step": 18, "released_sample_ids": [2, 9]}\n')


def byte_level_alphabet():
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return table


def tokenizer_seeds():
    alphabet = byte_level_alphabet()
    bl = lambda s: "".join(alphabet[b] for b in s.encode())
    vocab = {alphabet[b]: b for b in range(256)}
    merges, next_id = [], 256
    for left, right in [("h", "e"), ("he", "l"), ("hel", "l"), ("hell", "o"), (" ", "w")]:
        merges.append([bl(left), bl(right)])
        vocab[bl(left + right)] = next_id
        next_id += 1
    spec = {
        "version": "1.0",
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": r" ?\p{L}+| ?\p{N}|\s+(?!\S)|\s+| ?[^\s\p{L}\p{N}]+"},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges, "ignore_merges": False},
        "added_tokens": [{"id": 300, "content": "<|im_start|>", "special": True, "normalized": False},
                         {"id": 301, "content": "<|im_end|>", "special": True, "normalized": False}],
    }
    put("fuzz_tokenizer_json", "tiny.json", json.dumps(spec, ensure_ascii=False))
    spec2 = dict(spec, normalizer=None, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False,
                                                       "use_regex": True})
    spec2["model"] = dict(spec["model"], merges=[" ".join(m) for m in merges], ignore_merges=True)
    put("fuzz_tokenizer_json", "gpt2_regex.json", json.dumps(spec2, ensure_ascii=False))
    put("fuzz_tokenizer_json", "wordpiece.json", json.dumps({"model": {"type": "WordPiece", "vocab": {"a": 0}}}))


def conversation_seeds():
    lines = [
        '{"messages": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hello world"}]}',
        '{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}',
        '{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}, '
        '{"role": "assistant", "content": "4", "reasoning_content": "add"}, {"role": "user", "content": "and?"}, '
        '{"role": "assistant", "content": "<think>x</think>done"}]}',
        '{"messages": [{"role": "narrator", "content": "x"}]}',
        '{"conversations": [{"from": "human", "value": 3}]}',
    ]
    for i, line in enumerate(lines):
        put("fuzz_conversation", f"line{i}.jsonl", line)


def record_bytes(n):
    return n * 4 + (n + 3) // 4 * 4


def shard(number, samples):
    body = b""
    for ids, mask in samples:
        rec = struct.pack(f"<{len(ids)}i", *ids) + bytes(mask)
        body += rec + b"\0" * (record_bytes(len(ids)) - len(rec))
    tokens = sum(len(ids) for ids, _ in samples)
    header = b"DFLSHRD1" + struct.pack("<IIQQQQQQ", 1, 64, number, len(samples), tokens, 64 + len(body), 0, 0)
    return header + body


def index(shards, lengths, vocab=0, max_id=-1):
    entries, first = b"", 0
    for samples in shards:
        tokens = sum(len(ids) for ids, _ in samples)
        size = 64 + sum(record_bytes(len(ids)) for ids, _ in samples)
        entries += struct.pack("<QQQQ", first, len(samples), tokens, size)
        first += len(samples)
    lens = struct.pack(f"<{len(lengths)}i", *lengths)
    lens += b"\0" * ((-len(lens)) % 8)
    body = entries + lens + b"\0" * (8 * len(lengths))
    header = b"DFLINDX1" + struct.pack("<IIQQQqqQQQ", 1, 80, len(shards), len(lengths), sum(lengths), vocab, max_id,
                                       len(body), 0, 0)
    return header + body


def shard_seeds():
    s0 = [([5, 6, 7, 8], [0, 0, 1, 1]), ([1, 2, 3], [0, 1, 1])]
    s1 = [([9], [1]), ([4, 4, 4, 4, 4], [0, 0, 0, 1, 1])]
    one = index([s0], [4, 3], vocab=100, max_id=8)
    two = index([s0, s1], [4, 3, 1, 5], vocab=0, max_id=9)
    put("fuzz_shard_index", "one_shard.bin", one)
    put("fuzz_shard_index", "two_shards.bin", two)
    put("fuzz_shard_index", "empty.bin", index([], []))
    put("fuzz_shard_set", "one_shard.bin", one + shard(0, s0))
    put("fuzz_shard_set", "two_shards.bin", two + shard(0, s0) + shard(1, s1))


def safetensors(tensors, metadata=None, pad_to=8):
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % pad_to)
    return struct.pack("<Q", len(text)) + text + data


def safetensors_seeds():
    put("fuzz_safetensors_header", "two.safetensors", safetensors(
        [("a.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)), ("b", "BF16", [3], b"\x80\x3f" * 3)],
        metadata={"format": "pt"}))
    put("fuzz_safetensors_header", "dtypes.safetensors", safetensors(
        [("i64", "I64", [1], b"\1" + b"\0" * 7), ("bool", "BOOL", [2, 1], b"\1\0"), ("empty", "F16", [0, 4], b""),
         ("scalar", "U8", [], b"\7")]))
    put("fuzz_safetensors_header", "bad_offsets.safetensors",
        struct.pack("<Q", 60) + b'{"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}}    ' + b"\0" * 8)


def engine_file_seeds():
    tokens = struct.pack("<2q", 3, 4)
    put("fuzz_engine_file", "bf16.safetensors", safetensors(
        [("token_ids", "I64", [2], tokens), ("hidden_states", "BF16", [2, 2, 4], bytes(32))]))
    put("fuzz_engine_file", "fp8.safetensors", safetensors(
        [("token_ids", "I64", [2], tokens), ("hidden_states", "F8_E4M3", [2, 1, 4], b"\x38" * 8),
         ("hidden_states_scales", "F32", [2, 1, 1], struct.pack("<2f", 0.5, 2.0))]))
    put("fuzz_engine_file", "fp8_without_scales.safetensors", safetensors(
        [("token_ids", "I64", [2], tokens), ("hidden_states", "F8_E4M3", [2, 1, 4], b"\x38" * 8)]))


def specforge_container_seeds():
    # A zip as torch.save lays it out (stored entries under archive/), plain and gzipped.
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
        z.writestr("archive/data/0", bytes(16))
        z.writestr("archive/version", b"3\n")
    archive = buffer.getvalue()
    put("fuzz_specforge_container", "archive.ckpt", archive)
    put("fuzz_specforge_container", "archive.ckpt.gz", gzip.compress(archive, mtime=0))
    put("fuzz_specforge_container", "cut.ckpt.gz", gzip.compress(archive, mtime=0)[:40])


def feature_index(dtype, width, entries, bin_bytes):
    """A feature cache shard's .idx as data/feature_cache.cpp writes it (checksum left zero: the target repairs it)."""
    body = b"DFLFIDX1" + struct.pack("<IIqQQ", 1, dtype, width, len(entries), bin_bytes)
    for sample_id, offset, rows in entries:
        body += struct.pack("<qQQQQ", sample_id, offset, rows, 0, 0)
    return body + struct.pack("<Q", 0)


def feature_cache_seeds():
    # float32 rows of 4 values (16 bytes): samples 0 (2 rows) and 1 (3 rows) in 80 bytes.
    put("fuzz_feature_index", "two_samples.idx", feature_index(1, 4, [(0, 0, 2), (1, 32, 3)], 80))
    put("fuzz_feature_index", "fp8.idx", feature_index(3, 8, [(5, 0, 1)], 12))
    put("fuzz_feature_index", "past_the_end.idx", feature_index(2, 4, [(0, 72, 2)], 80))
    put("fuzz_feature_manifest", "manifest.json", json.dumps({
        "version": 1, "target": {"config": "c0ffee", "weights": "beef", "tokenizer": "none", "dtype": "float32",
                                 "path": "runs/demo/target"},
        "layer_ids": [1, 1, 1], "hidden_size": 64, "dtype": "bfloat16",
        "dataset": {"fingerprint": "", "samples": 240}, "source": "cache-features"}, indent=2) + "\n")
    put("fuzz_feature_manifest", "bad_dtype.json", '{"version": 1, "dtype": "int4"}\n')


def manifest_seeds():
    manifest = {"format_version": 1, "global_step": 3, "files": {
        "drafter/model.safetensors": {"bytes": 1234, "xxhash64": "9f2c0e5d7a1b3c4d"},
        "drafter/config.json": {"bytes": 300, "xxhash64": "1a"},
        "optimizer.safetensors": {"bytes": 2000, "xxhash64": "ffffffffffffffff"},
        "state.json": {"bytes": 80, "xxhash64": "0"}, "config.yaml": {"bytes": 900, "xxhash64": "abc"}}}
    put("fuzz_checkpoint_manifest", "step.json", json.dumps(manifest, indent=2))
    put("fuzz_checkpoint_manifest", "best.json", json.dumps(dict(manifest, eval={"tau": 2.5, "prompts": 16})))


if __name__ == "__main__":
    shutil.rmtree(CORPUS, ignore_errors=True)
    config_seeds()
    jsonl_seeds()
    quarantine_seeds()
    tokenizer_seeds()
    conversation_seeds()
    shard_seeds()
    safetensors_seeds()
    manifest_seeds()
    feature_cache_seeds()
    engine_file_seeds()
    specforge_container_seeds()
