#include "text/dataset_tokenizer.hpp"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "config/errors.hpp"

namespace dflow::text {

std::string tokenizer_fingerprint_json(const Tokenizer& tokenizer, const std::string& chat_template) {
  return nlohmann::json{{"fingerprint", tokenizer.fingerprint()},
                        {"tokenizer", std::filesystem::absolute(tokenizer.file()).string()},
                        {"vocab_size", tokenizer.vocab_size()},
                        {"chat_template", chat_template}}
             .dump(2) +
         "\n";
}

std::optional<std::string> recorded_tokenizer_fingerprint(const std::filesystem::path& dataset_dir) {
  const auto path = dataset_dir / kTokenizerFingerprintFile;
  if (!std::filesystem::exists(path)) return std::nullopt;
  try {
    std::ifstream in(path);
    return nlohmann::json::parse(in).at("fingerprint").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: unreadable ({}); prepare the dataset again", path.string(), e.what()));
  }
}

void check_dataset_tokenizer(const std::vector<std::string>& dataset_dirs, const std::filesystem::path& target_dir) {
  std::shared_ptr<const Tokenizer> target;
  for (const auto& dir : dataset_dirs) {
    const auto recorded = recorded_tokenizer_fingerprint(dir);
    if (!recorded) continue;
    const auto target_file = target_dir / "tokenizer.json";
    if (!std::filesystem::exists(target_file)) {
      throw ConfigError(fmt::format("data.train {} was tokenized with tokenizer {}, but the target {} has no "
                                    "tokenizer.json to check it against; use the target the data was prepared for",
                                    dir, *recorded, target_dir.string()));
    }
    if (!target) target = Tokenizer::load(target_file);
    if (target->fingerprint() != *recorded) {
      throw ConfigError(fmt::format("data.train {} was tokenized with tokenizer {}, but the target's {} is {}: "
                                    "its ids would mean other text; prepare the data with --tokenizer {}",
                                    dir, *recorded, target_file.string(), target->fingerprint(),
                                    target_dir.string()));
    }
  }
}

}  // namespace dflow::text
