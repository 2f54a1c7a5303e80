#include "text/tokenize_jsonl.hpp"

#include <fmt/format.h>

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "text/text_error.hpp"

namespace dflow::text {
namespace {

using nlohmann::json;

// get<std::vector<int32_t>>() would narrow 4294967297, 1.5 and true to 1.
std::vector<int32_t> token_ids(const Tokenizer& tokenizer, const json& list) {
  std::vector<int32_t> ids;
  ids.reserve(list.size());
  const int64_t vocab = tokenizer.vocab_size();
  for (size_t i = 0; i < list.size(); ++i) {
    const json& id = list[i];
    const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() < static_cast<uint64_t>(vocab)
                                                  : id.is_number_integer() && id.get<int64_t>() >= 0 &&
                                                        id.get<int64_t>() < vocab;
    if (!in_range) {
      throw TextError(fmt::format("ids[{}] is {}, not a token id of {} (an integer in [0, {}))", i, id.dump(),
                                  tokenizer.file().string(), vocab));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

json convert(const Tokenizer& tokenizer, const json& line, const TokenizeJsonlOptions& options) {
  if (options.decode) {
    if (!line.is_object() || !line.contains("ids") || !line["ids"].is_array()) {
      throw TextError("expected {\"ids\": [...]}");
    }
    return json{{"text", tokenizer.decode(token_ids(tokenizer, line["ids"]), options.skip_special_tokens)}};
  }
  if (!line.is_object() || !line.contains("text") || !line["text"].is_string()) {
    throw TextError("expected {\"text\": \"...\"}");
  }
  return json{{"ids", tokenizer.encode(line["text"].get_ref<const std::string&>())}};
}

}  // namespace

int64_t tokenize_jsonl(const Tokenizer& tokenizer, std::istream& in, std::ostream& out, const std::string& source,
                       const TokenizeJsonlOptions& options) {
  int64_t converted = 0;
  std::string text;
  for (int64_t line_number = 1; std::getline(in, text); ++line_number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      out << convert(tokenizer, json::parse(text), options).dump() << "\n";
    } catch (const std::exception& e) {  // json errors say "invalid UTF-8 byte at index N" themselves
      throw TextError(fmt::format("{}:{}: {}", source, line_number, e.what()));
    }
    ++converted;
  }
  return converted;
}

}  // namespace dflow::text
