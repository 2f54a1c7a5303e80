#pragma once
// Which tokenizer a prepared dataset's ids come from. `dflow prepare` from
// conversations writes <dir>/tokenizer_fingerprint.json; training refuses a
// target whose tokenizer differs (its ids would mean other text).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"

namespace dflow::text {

inline constexpr const char* kTokenizerFingerprintFile = "tokenizer_fingerprint.json";

// The file's content for a dataset tokenized by `tokenizer` with `chat_template`.
std::string tokenizer_fingerprint_json(const Tokenizer& tokenizer, const std::string& chat_template);

// The fingerprint a dataset directory records, or nullopt (datasets prepared
// from token ids record none). Throws ConfigError for an unreadable file.
std::optional<std::string> recorded_tokenizer_fingerprint(const std::filesystem::path& dataset_dir);

// Throws ConfigError when any directory records a tokenizer fingerprint and
// the target directory's tokenizer.json is missing or has another one (naming
// both). Loads the target's tokenizer only when some directory records one.
void check_dataset_tokenizer(const std::vector<std::string>& dataset_dirs, const std::filesystem::path& target_dir);

}  // namespace dflow::text
