#pragma once
// Qwen3.5's chat template as its own Jinja template writes it
// (tests/text/templates/qwen3.5.jinja): every message's content trimmed, a
// think block in each assistant turn after the last user query (reasoning
// from `reasoning_content` or <think>...</think> in the content), tool calls
// as <function=NAME> blocks with one <parameter=KEY> block per argument, the
// tools preamble before the system message, and the generation prompt
// "<|im_start|>assistant\n<think>\n" (thinking off: an empty think block).
// What the model writes after that prompt is what it learns.
#include "text/chat_template.hpp"

namespace dflow::text {

const ChatTemplate& qwen35_template();

}  // namespace dflow::text
