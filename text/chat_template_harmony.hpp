#pragma once
// gpt-oss's harmony chat format as its own Jinja chat template writes it
// (tests/text/templates/gpt-oss.jinja): a system message with the model
// identity, knowledge cutoff, current date, reasoning effort and channels; the
// first system (or developer) message as the developer's "# Instructions";
// assistant answers on the final channel, their reasoning (`thinking`) on the
// analysis channel of the last turn only, tool calls to functions.* on the
// commentary channel, and the generation prompt "<|start|>assistant".
#include <string_view>

#include "text/chat_template.hpp"

namespace dflow::text {

// "harmony" or "gpt-oss" (the same template under either name).
const ChatTemplate& harmony_template(std::string_view name);

// "YYYY-MM-DD" of today in the local time zone (the template's strftime_now("%Y-%m-%d")).
std::string today_local_date();

}  // namespace dflow::text
