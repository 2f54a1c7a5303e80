// Conversation JSONL lines of `dflow prepare --chat-template`
// (text/conversation.cpp read_conversation, then text/chat_encode.cpp with
// each chat template and a tiny byte-level tokenizer, as chat_prepare.cpp
// does per line). Only a ConversationProblem, a JSON parse refusal or a
// TextError may come out; an encoded sample has one mask value per id.
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_common.hpp"
#include "text/byte_level.hpp"
#include "text/chat_encode.hpp"
#include "text/chat_template.hpp"
#include "text/conversation.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer.hpp"

namespace {

// The 256 byte tokens (GPT-2's byte-to-unicode alphabet) and two added tokens
// for each template's turn markers, enough to encode anything.
std::shared_ptr<const dflow::text::Tokenizer> tiny_tokenizer() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) {
    const char32_t code = dflow::text::byte_to_code_point(static_cast<unsigned char>(b));
    std::string utf8;
    if (code < 0x80) {
      utf8 = std::string(1, static_cast<char>(code));
    } else {
      utf8 = {static_cast<char>(0xC0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3F))};
    }
    vocab[utf8] = b;
  }
  json added = json::array();
  int next = 256;
  for (const char* token : {"<|im_start|>", "<|im_end|>", "<|begin_of_text|>", "<|start_header_id|>",
                            "<|end_header_id|>", "<|eot_id|>", "<think>", "</think>"}) {
    added.push_back({{"id", next++}, {"content", token}, {"special", true}, {"normalized", false}});
  }
  const json spec = {{"version", "1.0"},
                     {"normalizer", nullptr},
                     {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                     {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}},
                     {"added_tokens", added}};
  const auto path = dflow::fuzz::scratch_dir() / "conversation-tokenizer.json";
  const std::string text = spec.dump();
  dflow::fuzz::write_file(path, text.data(), text.size());
  return dflow::text::Tokenizer::load(path);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::text;
  static const auto tokenizer = tiny_tokenizer();
  const auto document =
      nlohmann::ordered_json::parse(dflow::fuzz::as_text(data, size), nullptr, /*allow_exceptions=*/false);
  if (document.is_discarded()) return 0;
  Conversation conversation;
  if (const auto problem = read_conversation(document, conversation)) {
    if (problem->reason.empty()) __builtin_trap();
    return 0;
  }
  for (const auto& name : chat_template_names()) {
    for (const bool last_turn_only : {false, true}) {
      try {
        ChatEncodeOptions options;
        options.last_turn_only = last_turn_only;
        const ChatSample sample = encode_chat(*tokenizer, chat_template(name), conversation, options);
        if (sample.input_ids.size() != sample.loss_mask.size()) __builtin_trap();
      } catch (const TextError&) {
      }
    }
    try {
      (void)encode_prompt(*tokenizer, chat_template(name), conversation, /*enable_thinking=*/false);
    } catch (const TextError&) {
    }
  }
  return 0;
}
