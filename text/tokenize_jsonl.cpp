#include "text/tokenize_jsonl.hpp"

#include <fmt/format.h>

#include <istream>
#include <nlohmann/json.hpp>
#include <ostream>

#include "text/text_error.hpp"

namespace dflow::text {
namespace {

using nlohmann::json;

json convert(const Tokenizer& tokenizer, const json& line, const TokenizeJsonlOptions& options) {
  if (options.decode) {
    if (!line.is_object() || !line.contains("ids") || !line["ids"].is_array()) {
      throw TextError("expected {\"ids\": [...]}");
    }
    return json{{"text", tokenizer.decode(line["ids"].get<std::vector<int32_t>>(), options.skip_special_tokens)}};
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
