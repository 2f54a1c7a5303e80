#!/usr/bin/env python3
"""Reference renderings for dflow's chat templates: each model's own Jinja
chat template (templates/*.jinja, sources in their first line) rendered with
the `jinja2` PyPI package the way transformers' apply_chat_template renders it
(sandboxed, trim_blocks, lstrip_blocks, loopcontrols), on a set of conversations.

Writes OUT_DIR/chat_cases.jsonl: {"template", "messages", "add_generation_prompt",
"enable_thinking", "text"} per line. Usage: render_chat_templates.py OUT_DIR
"""
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {"qwen3": "qwen3.jinja", "qwen2.5": "qwen2.5.jinja", "llama3": "llama3.jinja"}


def u(text):
    return {"role": "user", "content": text}


def a(text, reasoning=None):
    m = {"role": "assistant", "content": text}
    if reasoning is not None:
        m["reasoning_content"] = reasoning
    return m


def s(text):
    return {"role": "system", "content": text}


def t(text):
    return {"role": "tool", "content": text}


CONVERSATIONS = [
    [u("Hi"), a("Hello! How can I help?")],
    [s("You are terse."), u("What is 2+2?"), a("4")],
    [u("First question"), a("First answer"), u("Second question"), a("Second answer")],
    [s("Sys"), u(""), a("")],
    [u("你好，世界 🌍 مرحبا"), a("こんにちは 👨‍👩‍👧‍👦\n\tcode:\n\tx = 1")],
    [u("Think first"), a("The answer is 42.", reasoning="Let me think.\nSix times seven.")],
    [u("Q1"), a("<think>\nold reasoning\n</think>\n\nA1"), u("Q2"), a("<think>\nnew reasoning\n</think>\n\nA2")],
    [u("Weather?"), a("Let me check."), t("sunny"), t("22C"), a("Sunny and 22C.")],
    [u("Q"), a("\n\nleading newlines"), s("a late system message"), u("Q again"), a("  spaced  ")],
    [u("  padded user  \n"), a("\n answer with spaces \n")],
    [u("literal <|im_end|> and <think> inside"), a("ok <|im_start|> fine")],
    [s("only a system and a user"), u("Tell me a story.")],
    [u("Reason, then answer"), a("answer", reasoning="\n\nreasoning with blank lines\n\n")],
    [u("one"), a("two", reasoning="why two"), u("three"), a("four")],
]


def render(env, template, messages, add_generation_prompt, enable_thinking):
    kwargs = {"messages": messages, "add_generation_prompt": add_generation_prompt,
              "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "tools": None}
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    return template.render(**kwargs)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    lines = []
    for name, file in TEMPLATES.items():
        template = env.from_string(open(os.path.join(HERE, "templates", file), encoding="utf-8").read())
        for messages in CONVERSATIONS:
            ends_with_user = messages[-1]["role"] != "assistant"
            options = [(False, None)]
            if ends_with_user:
                options += [(True, None), (True, False)] if name == "qwen3" else [(True, None)]
            else:
                options += [(True, False)] if name == "qwen3" else []
            for add_generation_prompt, enable_thinking in options:
                text = render(env, template, messages, add_generation_prompt, enable_thinking)
                lines.append({"template": name, "messages": messages, "add_generation_prompt": add_generation_prompt,
                              "enable_thinking": enable_thinking, "text": text})
    path = os.path.join(out_dir, "chat_cases.jsonl")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    print(f"[fixture] rendered {len(lines)} conversations with jinja2 {jinja2.__version__} into {path}")


if __name__ == "__main__":
    main()
