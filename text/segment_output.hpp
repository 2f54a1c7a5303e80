#pragma once
// The segments a chat template writes, built up piece by piece: neighbouring
// text of the same message and trainability joins one segment.
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/chat_template.hpp"

namespace dflow::text {

class SegmentOutput {
 public:
  void add(std::string_view text, bool trainable = false, int message = -1) {
    if (text.empty()) return;
    if (!segments_.empty() && segments_.back().trainable == trainable && segments_.back().message == message) {
      segments_.back().text += text;
    } else {
      segments_.push_back({std::string(text), trainable, message});
    }
  }
  std::vector<Segment> take() { return std::move(segments_); }

 private:
  std::vector<Segment> segments_;
};

// Refuses a message of a role the template has no turn for (its Jinja would
// drop it), naming the message.
void refuse_role(const Conversation& conversation, Role role, std::string_view template_name,
                 std::string_view advice);

// The Qwen templates' reasoning of an assistant message and its content:
// `reasoning_content` when given, else what `content` holds between <think>
// and </think> (newlines stripped) and what follows </think>; the content as
// it is when it has no </think>.
std::pair<std::string, std::string> split_reasoning(const Message& message, std::string_view content);

}  // namespace dflow::text
