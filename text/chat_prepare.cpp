#include "text/chat_prepare.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "config/errors.hpp"
#include "data/data_error.hpp"
#include "data/shard_writer.hpp"
#include "text/chat_encode.hpp"
#include "text/dataset_tokenizer.hpp"
#include "text/text_error.hpp"

namespace dflow::text {
namespace {

using data::RejectReason;
using data::Rejection;
using nlohmann::json;

// "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> "parse error at column 5: ..."
std::string parse_error_text(std::string message) {
  if (const auto end = message.find("] "); !message.empty() && message.front() == '[' && end != std::string::npos) {
    message.erase(0, end + 2);
  }
  if (const auto at = message.find("at line 1, column "); at != std::string::npos) message.replace(at, 18, "at column ");
  return message;
}

RejectReason reason_of(const std::string& name) {
  if (name == "missing_key") return RejectReason::MissingKey;
  if (name == "unknown_role") return RejectReason::UnknownRole;
  if (name == "empty") return RejectReason::Empty;
  return RejectReason::WrongType;
}

// One line to a sample, or why not.
std::optional<Rejection> encode_line(const std::string& line, int64_t line_number, const Tokenizer& tokenizer,
                                     const ChatTemplate& chat_template, const ChatPrepareOptions& options,
                                     ChatSample& sample, bool& truncated) {
  nlohmann::ordered_json document;  // keys in the line's order: tool-call arguments are rendered in it
  try {
    document = nlohmann::ordered_json::parse(line);
  } catch (const json::exception& error) {
    // parse_error, and out_of_range 406 for a number too large for a double (1E400)
    return Rejection{line_number, RejectReason::BadJson, parse_error_text(error.what())};
  }
  Conversation conversation;
  if (auto problem = read_conversation(document, conversation)) {
    return Rejection{line_number, reason_of(problem->reason), problem->detail};
  }
  const bool has_assistant = std::any_of(conversation.messages.begin(), conversation.messages.end(),
                                         [](const Message& m) { return m.role == Role::Assistant; });
  if (!has_assistant) {
    return Rejection{line_number, RejectReason::NoAssistantTurn, "no assistant (gpt) message to learn from"};
  }
  ChatEncodeOptions encode_options;
  encode_options.last_turn_only = options.last_turn_only;
  encode_options.render.current_date = options.current_date;
  try {
    sample = encode_chat(tokenizer, chat_template, conversation, encode_options);
  } catch (const ChatTemplateError& e) {  // the chosen template cannot write this data: a configuration error
    throw ConfigError(fmt::format("{}:{}: {}", options.input_path.string(), line_number, e.what()));
  }
  truncated = false;
  const auto length = static_cast<int64_t>(sample.input_ids.size());
  if (length > options.max_length) {
    if (options.too_long == data::TooLongPolicy::Skip) {
      return Rejection{line_number, RejectReason::TooLong,
                       fmt::format("{} tokens > max_length {}", length, options.max_length)};
    }
    sample.input_ids.resize(static_cast<size_t>(options.max_length));
    sample.loss_mask.resize(static_cast<size_t>(options.max_length));
    truncated = true;
  }
  if (std::find(sample.loss_mask.begin(), sample.loss_mask.end(), 1) == sample.loss_mask.end()) {
    return Rejection{line_number, RejectReason::NoResponseTokens,
                     truncated ? fmt::format("no assistant token within max_length {} (after truncation)",
                                             options.max_length)
                               : "the assistant turns have no tokens"};
  }
  return std::nullopt;
}

}  // namespace

data::PrepareReport prepare_chats(const ChatPrepareOptions& options) {
  if (options.max_length < 1) throw data::DataError(fmt::format("max_length is {}; it must be at least 1", options.max_length));
  const ChatTemplate& chat_template = text::chat_template(options.chat_template);
  const auto tokenizer = Tokenizer::load(options.tokenizer);
  // A template for another model family would tokenize its tags as plain text.
  tokenizer->require_token_id(chat_template.end_of_turn());
  std::ifstream input(options.input_path, std::ios::binary);
  if (!input) {
    throw data::DataError(fmt::format("{}: cannot open the conversations JSONL; check the path", options.input_path.string()));
  }
  data::PrepareReport report;
  report.input_path = options.input_path;
  report.out_dir = options.out_dir;
  data::ShardWriter writer(options.out_dir, data::ShardWriterOptions{options.samples_per_shard, tokenizer->vocab_size(),
                                                                     options.overwrite});
  std::ofstream jsonl;
  const auto jsonl_temp = options.out_jsonl.string() + ".tmp";
  if (!options.out_jsonl.empty()) {
    jsonl.open(jsonl_temp, std::ios::trunc);
    if (!jsonl) throw data::DataError(fmt::format("{}: cannot write", options.out_jsonl.string()));
  }
  ChatSample sample;
  bool truncated = false;
  data::for_each_sample_line(
      input, options.input_path, report,
      [&](const std::string& line, int64_t line_number) {
        truncated = false;
        return encode_line(line, line_number, *tokenizer, chat_template, options, sample, truncated);
      },
      [&] {
        writer.add(sample.input_ids, sample.loss_mask);
        if (jsonl.is_open())
          jsonl << json{{"input_ids", sample.input_ids}, {"loss_mask", sample.loss_mask}}.dump() << "\n";
        data::count_written(report, sample.input_ids, sample.loss_mask, truncated);
      });
  if (report.samples_written == 0) {
    throw data::DataError(fmt::format("{}: no conversation accepted, nothing written to {}\n{}",
                                      options.input_path.string(), options.out_dir.string(), report.summary()));
  }
  writer.add_file(kTokenizerFingerprintFile, tokenizer_fingerprint_json(*tokenizer, options.chat_template));
  report.shards_written = writer.finish().num_shards;
  if (jsonl.is_open()) {
    jsonl.close();
    if (!jsonl) throw data::DataError(fmt::format("{}: write failed", options.out_jsonl.string()));
    std::filesystem::rename(jsonl_temp, options.out_jsonl);
  }
  return report;
}

}  // namespace dflow::text
