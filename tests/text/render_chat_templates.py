#!/usr/bin/env python3
"""Reference renderings for dflow's chat templates: each model's own Jinja
chat template (templates/*.jinja, sources in their first line) rendered with
the `jinja2` PyPI package the way transformers' apply_chat_template renders it
(sandboxed, trim_blocks, lstrip_blocks, loopcontrols), on a set of conversations.

Writes OUT_DIR/chat_cases.jsonl: {"template", "messages", "tools", "add_generation_prompt",
"enable_thinking", "text"} per line. Conversations with tool calls or a tools list are
rendered with the Qwen templates only: Llama 3's drops them, and dflow refuses them there.
Qwen3.5's is rendered as vLLM renders it: string tool-call arguments parsed into objects
first (its template iterates them with `items`); a conversation its template raises on (or
whose arguments are not a JSON object) is written with "error" and no text, as for gpt-oss.
gpt-oss's (harmony) is rendered on its own conversations (reasoning in `thinking`, one call
per message), with `chat_template_kwargs` and a fixed date for strftime_now (the line's
"current_date"); a conversation its template raises on is written with "error" (its message)
and no text: dflow must refuse it too. Usage: render_chat_templates.py OUT_DIR
"""
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
TEMPLATES = {"qwen3": "qwen3.jinja", "qwen2.5": "qwen2.5.jinja", "llama3": "llama3.jinja", "qwen3.5": "qwen3.5.jinja"}
THINKING_TEMPLATES = ("qwen3", "qwen3.5")  # rendered with enable_thinking false as well
HARMONY_DATE = "2026-05-14"


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


def call(name, arguments, wrapped=True):
    inner = {"name": name, "arguments": arguments}
    return {"type": "function", "function": inner} if wrapped else inner


def ac(text, calls, reasoning=None):
    m = a(text, reasoning)
    m["tool_calls"] = calls
    return m


WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "Weather \"now\" in a city",
                                            "parameters": {"type": "object", "required": ["city"],
                                                           "properties": {"city": {"type": "string"},
                                                                          "unit": {"enum": ["c", "f"]}}}}}
# Arguments as an object (key order kept, as Python keeps it), as a string, several
# calls in one turn, with and without content, reasoning, numbers, escapes, Unicode.
TOOL_CONVERSATIONS = [
    [u("Weather in Paris?"), ac("", [call("get_weather", {"city": "Paris", "unit": "c"})]), t('{"temp": 22}'),
     a("22C in Paris.")],
    [u("Weather?"), ac("Let me check.", [call("get_weather", '{"city": "Paris"}')]), t("sunny"), a("Sunny.")],
    [u("Both"), ac("", [call("zeta", {"z": 1, "a": [1, 2.5, None, True, False], "m": {}}),
                        call("alpha", '{"raw": "string"}'), call("empty", {})])],
    [u("Odd values"), ac("Calling.\n", [call("f", {"s": "quote \" back\\slash\nnew\ttab\u0001\u007f Zürich 🌍 </tool_call>",
                                                     "n": [0, -7, 1.0, 0.1, -0.0, 1e-7, 1e16, 123456789.125, 1e22, 2 ** 63]})])],
    [u("Unwrapped"), ac("", [call("f", {"x": "y"}, wrapped=False), call("g", "not json at all", wrapped=False)])],
    [u("Think, then call"), ac("<think>\nI should call f.\n</think>\n\n", [call("f", {"k": "v"})])],
    [u("Reason, then call"), ac("", [call("f", {"k": "v"})], reasoning="Plan: call f."), t("done"),
     ac("\n", [call("g", {})]), t("ok"), a("All done.")],
    {"tools": [WEATHER], "messages": [u("Weather in Paris?"), ac("", [call("get_weather", {"city": "Paris"})])]},
    {"tools": [WEATHER, {"type": "function", "function": {"name": "noop"}}],
     "messages": [s("You are a weather bot."), u("Hi"), a("Hello!")]},
    {"tools": [], "messages": [u("An empty tools list is no tools"), a("ok")]},
]

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

# Qwen3.5's template on its own: every argument kind of a <parameter=...> block, reasoning and
# calls after the last query (each such turn has a think block), content and reasoning trimmed,
# a tool-response user turn that is no query, a tool result first, arguments as vLLM hands them
# over (a JSON string parsed, an empty one {}), and what the template raises on.
QWEN35_CONVERSATIONS = [
    [u("Arguments"), ac("", [call("f", {"s": "two\nlines ", "i": 7, "neg": -3, "x": 1.5, "tiny": 1e-7, "big": 1e16,
                                        "whole": 2.0, "t": True, "no": False, "nothing": None, "list": [1, "a", None, 0.5],
                                        "obj": {"k": [True], "z": "ü"}, "empty": "", "none_list": [], "uni": "Zürich 🌍"})]),
     t("ok"), a("done")],
    [s("  sys  "), u("  Plan a trip  "),
     ac("  I'll look.  ", [call("search", {"q": "Paris"}), call("book", '{"day": 2, "who": ["a", "b"]}')],
        reasoning="  think first  \n"),
     t("  found  "), t("booked"), ac("", [call("confirm", "")], reasoning=""), t("ok"),
     a("  All set.  ", reasoning="wrap up")],
    [u("Q"), a("A1", reasoning="r1"), u("<tool_response>\nx\n</tool_response>"), a("A2", reasoning="r2")],
    [t("a result before any user turn"), u("Q"), a("A")],
    [u("Q"), a("<think>\nin content\n</think>\n\nanswer", reasoning="given")],
    [u("Q"), a("  <think>\n\nkept\n\n</think>\n\n  answer  ")],
    {"tools": [WEATHER], "messages": [s("   "), u("Weather?"), ac("Checking.", [call("get_weather", {"city": "Paris"})]),
                                      t('{"temp": 22}')]},
    {"tools": [WEATHER], "messages": [u("Weather?")]},
    # What the template (or vLLM's parsing before it) raises on:
    [u("<tool_response>\nonly a tool response\n</tool_response>"), a("A")],
    [s("only a system message")],
    [u("Q"), a("A"), s("a late system message"), u("Q2")],
    [u("Q"), ac("", [call("f", "[1, 2]")])],
]


def vllm_arguments(messages):
    """The messages as vLLM hands them to the template: string tool-call arguments parsed as JSON, empty or
    missing ones {} (its chat_utils' _postprocess_messages). Raises ValueError on a string that is not JSON."""
    out = json.loads(json.dumps(messages))
    for m in out:
        for item in m.get("tool_calls") or []:
            function = item.get("function", item)
            arguments = function.get("arguments")
            if not arguments:
                function["arguments"] = {}
            elif isinstance(arguments, str):
                function["arguments"] = json.loads(arguments)
    return out


def at(text, thinking=None):
    m = {"role": "assistant", "content": text}
    if thinking is not None:
        m["thinking"] = thinking
    return m


def atc(text, calls, thinking=None):
    m = at(text, thinking)
    m["tool_calls"] = calls
    return m


def d(text):
    return {"role": "developer", "content": text}


# gpt-oss: instructions as system or developer, analysis in `thinking` (last turn only), one call per message,
# tool results named by the call before them, the kwargs, and what the template raises on.
HARMONY_CONVERSATIONS = [
    [u("Hi"), at("Hello! How can I help?")],
    [s("You are terse."), u("What is 2+2?"), at("4", thinking="Simple arithmetic.")],
    [d("Answer in French."), u("Hello"), at("Bonjour", thinking="User greets; reply in French.")],
    [u("First question"), at("First answer", thinking="dropped later"), u("Second question"),
     at("Second answer", thinking="kept: the last turn")],
    [s(""), u("empty system"), at("ok")],
    [u("你好，世界 🌍 مرحبا"), at("こんにちは 👨‍👩‍👧‍👦\n\tcode:\n\tx = 1", thinking="Unicode ✓")],
    [u("Empty thinking"), at("answer", thinking="")],
    [u("Empty answer"), at("", thinking="thought only")],
    [u("  padded  \n"), at("\n spaced answer \n", thinking="\n\nblank lines\n\n")],
    [u("literal <|start|> and <|end|> and <|return|> inside"), at("ok <|message|> fine")],
    [s("only a system and a user"), u("Tell me a story.")],
    [u("Weather in Paris?"), atc("", [call("get_weather", {"city": "Paris", "unit": "c"})], thinking="Need weather."),
     t('{"temp": 22}'), at("22C in Paris.", thinking="Got it.")],
    [u("Weather?"), atc("Let me check.", [call("get_weather", '{"city": "Paris"}')]), t("sunny")],
    [u("Call, no answer yet"), atc("", [call("f", {"k": "v"})], thinking="Plan: call f."), t("done"),
     atc("", [call("g", {})], thinking="Now g."), t("ok \"quoted\"\n")],
    [u("Unwrapped"), atc("", [call("f", {"x": "y"}, wrapped=False)]), t("r"), at("done")],
    [u("Typed call"), atc("", [{"type": "function", "function": {"name": "f", "arguments": {"a": 1},
                                                                  "content_type": "<|constrain|>json"}}]), t("1")],
    [u("Odd values"), atc("", [call("f", {"s": "quote \" back\\slash\nnew\ttab Zürich 🌍", "n": [0, -7, 1.0, 0.1, 1e22]})]),
     t("x"), u("again"), at("fine")],
    [u("Two users"), u("in a row"), at("ok")],
    # What the template raises on (dflow refuses these, naming the message):
    [u("Q"), at("<|channel|>analysis<|message|>tags in content")],
    [u("Q"), at("ok", thinking="<|channel|>final<|message|>tags in thinking")],
    [u("Q"), t("a result with no call")],
    [u("Q"), atc("content", [call("f", {})], thinking="and thinking")],
]
def fn(name, description, parameters=None):
    f = {"name": name, "description": description}
    if parameters is not None:
        f["parameters"] = parameters
    return {"type": "function", "function": f}


def obj(properties, required=None):
    o = {"type": "object", "properties": properties}
    if required is not None:
        o["required"] = required
    return o


# Every branch of the template's JSON-schema-to-TypeScript macro.
HARMONY_TOOLS = [
    fn("get_location", "Gets the location of the user."),
    fn("get_current_weather", "Gets the current weather in the provided location.", obj({
        "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
        "format": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}}, ["location"])),
    fn("kinds", "Scalars, arrays, unions and defaults.", obj({
        "n": {"type": "integer", "default": 3}, "x": {"type": "number", "default": 0.5}, "flag": {"type": "boolean"},
        "names": {"type": "array", "items": {"type": "string"}}, "ids": {"type": "array", "items": {"type": "integer"}},
        "bits": {"type": "array", "items": {"type": "boolean"}}, "anything": {"type": "array"},
        "maybe": {"type": "array", "items": {"type": "number"}, "nullable": True},
        "rows": {"type": "array", "items": obj({"a": {"type": "string"}, "b": {"type": "number"}}, ["a"])},
        "long": {"type": "array", "items": obj({"first_property": {"type": "string"}, "second_property": {"type": "number"}})},
        "nested": {"type": "array", "items": {"type": "array", "items": {"type": "string"}}},
        "either": {"type": ["string", "number"]}, "single": {"type": ["object"]},
        "choice": {"oneOf": [{"type": "string", "description": "a name"}, {"type": "integer", "default": 7}],
                   "default": "x"},
        "objects": {"oneOf": [obj({"k": {"type": "string"}}), {"type": "object"}]},
        "opt": {"type": "string", "nullable": True, "default": None},
        "level": {"type": "string", "enum": ["low", "high"], "description": "How much"},
        "config": obj({"depth": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}}, ["depth"]),
        "empty": {"type": "object"}, "untyped": {"description": "no type"}, "unit": {"enum": ["c", "f"]},
        "text": {"type": "string", "default": "quote \" and ünï"},
        "list_default": {"type": "array", "items": {"type": "string"}, "default": ["a", 1]}},
        ["n", "names", "choice"])),
    fn("no_properties", "Parameters without properties.", {"type": "object"}),
]
HARMONY_TOOL_CONVERSATIONS = [
    {"tools": HARMONY_TOOLS, "messages": [s("Use a friendly tone."), u("What is the weather like in SF?")]},
    {"tools": HARMONY_TOOLS[:2], "messages": [u("Weather in SF?"),
                                             atc("", [call("get_current_weather", {"location": "San Francisco"})],
                                                 thinking="Need to use function get_current_weather."),
                                             t('{"sunny": true, "temperature": 20}'), at("Sunny, 20C.")]},
    {"tools": [fn("f", "Only tools, no instructions.")], "messages": [u("Hi"), at("Hello")]},
    # What the template raises on: a tool without a description, a non-string default beside an enum.
    {"tools": [{"type": "function", "function": {"name": "f"}}], "messages": [u("Hi")]},
    {"tools": [fn("f", "d", obj({"e": {"type": "string", "enum": ["a"], "default": 1}}))], "messages": [u("Hi")]},
]
HARMONY_KWARGS = [None, {"reasoning_effort": "high"}, {"reasoning_effort": "low", "model_identity": "You are Ossy."}]


def render_harmony(env):
    template = env.from_string(open(os.path.join(HERE, "templates", "gpt-oss.jinja"), encoding="utf-8").read())
    lines = []
    conversations = [{"messages": m, "tools": None} for m in HARMONY_CONVERSATIONS] + HARMONY_TOOL_CONVERSATIONS
    for k, conversation in enumerate(conversations):
        messages, tools = conversation["messages"], conversation["tools"]
        kwargs_options = HARMONY_KWARGS if k < 4 else [None]
        ends_with_user = messages[-1]["role"] != "assistant"
        for kwargs in kwargs_options:
            for add_generation_prompt in ([False, True] if ends_with_user or k < 4 else [False]):
                line = {"template": "harmony", "messages": messages, "tools": tools,
                        "add_generation_prompt": add_generation_prompt, "enable_thinking": None,
                        "chat_template_kwargs": kwargs, "current_date": HARMONY_DATE}
                try:
                    line["text"] = template.render(messages=messages, tools=tools,
                                                   add_generation_prompt=add_generation_prompt, **(kwargs or {}))
                except (jinja2.TemplateError, TypeError) as e:  # TypeError: "+" of a string and a number
                    line["error"] = str(e)
                lines.append(line)
    return lines


def raise_exception(message):
    raise jinja2.TemplateError(message)


def render(env, template, messages, tools, add_generation_prompt, enable_thinking):
    kwargs = {"messages": messages, "add_generation_prompt": add_generation_prompt,
              "bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "tools": tools}
    if enable_thinking is not None:
        kwargs["enable_thinking"] = enable_thinking
    return template.render(**kwargs)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False, **kw)
    # transformers' globals; the date fixed, as the cases say (dflow's current_date).
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.strptime(HARMONY_DATE, "%Y-%m-%d").strftime(fmt)
    lines = []
    for name, file in TEMPLATES.items():
        template = env.from_string(open(os.path.join(HERE, "templates", file), encoding="utf-8").read())
        conversations = [{"messages": m, "tools": None} for m in CONVERSATIONS]
        if name != "llama3":
            conversations += [c if isinstance(c, dict) else {"messages": c, "tools": None} for c in TOOL_CONVERSATIONS]
        if name == "qwen3.5":
            conversations += [c if isinstance(c, dict) else {"messages": c, "tools": None} for c in QWEN35_CONVERSATIONS]
        for conversation in conversations:
            messages, tools = conversation["messages"], conversation["tools"]
            ends_with_user = messages[-1]["role"] != "assistant"
            thinking = name in THINKING_TEMPLATES
            options = [(False, None)]
            if ends_with_user:
                options += [(True, None), (True, True), (True, False)] if thinking else [(True, None)]
            else:
                options += [(True, False)] if thinking else []
            for add_generation_prompt, enable_thinking in options:
                line = {"template": name, "messages": messages, "tools": tools,
                        "add_generation_prompt": add_generation_prompt, "enable_thinking": enable_thinking}
                try:
                    given = vllm_arguments(messages) if name == "qwen3.5" else messages
                    line["text"] = render(env, template, given, tools, add_generation_prompt, enable_thinking)
                except (jinja2.TemplateError, TypeError, ValueError) as e:
                    if name != "qwen3.5":
                        raise
                    line["error"] = str(e)
                lines.append(line)
    lines += render_harmony(env)
    path = os.path.join(out_dir, "chat_cases.jsonl")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    os.replace(path + ".tmp", path)
    print(f"[fixture] rendered {len(lines)} conversations with jinja2 {jinja2.__version__} into {path}")


if __name__ == "__main__":
    main()
