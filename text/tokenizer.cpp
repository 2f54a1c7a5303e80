#include "text/tokenizer.hpp"

#include <fmt/format.h>

#include "config/errors.hpp"
#include "text/byte_level.hpp"
#include "text/normalizer.hpp"
#include "text/text_error.hpp"
#include "text/tokenizer_spec.hpp"
#include "text/utf8.hpp"

namespace dflow::text {
namespace {

// FNV-1a, 64 bit: enough to tell tokenizers apart, no dependency.
class Fingerprint {
 public:
  void add(std::string_view bytes) {
    add_number(bytes.size());
    for (const char c : bytes) mix(static_cast<unsigned char>(c));
  }
  void add_number(uint64_t value) {
    for (int i = 0; i < 8; ++i) mix(static_cast<unsigned char>(value >> (8 * i)));
  }
  std::string hex() const { return fmt::format("{:016x}", hash_); }

 private:
  void mix(unsigned char byte) {
    hash_ ^= byte;
    hash_ *= 0x100000001b3ULL;
  }
  uint64_t hash_ = 0xcbf29ce484222325ULL;
};

std::string fingerprint_of(const Tokenizer::Spec& spec) {
  Fingerprint f;
  f.add("byte-level-bpe/1");
  f.add_number(spec.vocab.size());
  for (const auto& token : spec.vocab) f.add(token);
  f.add_number(spec.merges.size());
  for (const auto& [left, right] : spec.merges) {
    f.add(left);
    f.add(right);
  }
  f.add_number(spec.ignore_merges);
  f.add_number(spec.nfc);
  f.add(spec.split_pattern.value_or(""));
  for (const auto& token : spec.added_tokens) {
    f.add_number(static_cast<uint64_t>(token.id));
    f.add(token.content);
    f.add_number(token.special * 2 + token.normalized);
  }
  return f.hex();
}

}  // namespace

std::shared_ptr<const Tokenizer> Tokenizer::load(const std::filesystem::path& path) {
  return std::make_shared<const Tokenizer>(read_tokenizer_spec(path));
}

Tokenizer::Tokenizer(Spec spec) : file_(spec.file), nfc_(spec.nfc) {
  fingerprint_ = fingerprint_of(spec);
  vocab_size_ = static_cast<int64_t>(spec.vocab.size());
  for (const auto& token : spec.added_tokens) vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{token.id} + 1);
  bpe_ = std::make_unique<BpeModel>(std::move(spec.vocab), spec.merges, spec.ignore_merges, file_.string());
  if (spec.split_pattern) split_ = std::make_unique<SplitRegex>(*spec.split_pattern, file_.string() + " pre_tokenizer");
  added_ = std::move(spec.added_tokens);
  std::vector<const AddedToken*> raw, normalized;
  // tokenizers matches a "normalized": true token by its normalized content
  // (in the normalized text), so a decomposed "e\u0301" token matches "é".
  std::vector<AddedToken> normalized_forms;
  normalized_forms.reserve(added_.size());
  for (size_t i = 0; i < added_.size(); ++i) {
    added_by_id_[added_[i].id] = i;
    if (added_[i].normalized) {
      normalized_forms.push_back(added_[i]);
      normalized_forms.back().content = normalize(added_[i].content);
      normalized.push_back(&normalized_forms.back());
    } else {
      raw.push_back(&added_[i]);
    }
  }
  raw_matcher_ = std::make_unique<AddedTokenMatcher>(raw);
  normalized_matcher_ = std::make_unique<AddedTokenMatcher>(normalized);
}

Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return encode_with_offsets(text).ids; }

Encoding Tokenizer::encode_with_offsets(std::string_view text) const {
  require_utf8(text, "text");
  Encoding out;
  out.ids.reserve(text.size() / 3 + 4);
  out.starts.reserve(text.size() / 3 + 4);
  size_t pos = 0;
  while (pos <= text.size()) {
    const auto match = raw_matcher_->find(text, pos);
    const size_t end = match.id < 0 ? text.size() : match.begin;
    if (end > pos) encode_text(text.substr(pos, end - pos), pos, out);
    if (match.id < 0) break;
    out.ids.push_back(match.id);
    out.starts.push_back(match.begin);
    pos = match.end;
  }
  return out;
}

// A stretch between raw-matched added tokens: normalized, then split on the
// added tokens that match normalized text.
void Tokenizer::encode_text(std::string_view text, size_t offset, Encoding& out) const {
  std::string normalized_storage;
  std::string_view normalized = text;
  if (nfc_) {
    normalized_storage = nfc(text);
    if (normalized_storage != text) out.normalized_changed = true;
    normalized = normalized_storage;
  }
  size_t pos = 0;
  while (pos <= normalized.size()) {
    const auto match = normalized_matcher_->find(normalized, pos);
    const size_t end = match.id < 0 ? normalized.size() : match.begin;
    if (end > pos) encode_normalized(normalized.substr(pos, end - pos), offset + pos, out);
    if (match.id < 0) break;
    out.ids.push_back(match.id);
    out.starts.push_back(offset + match.begin);
    pos = match.end;
  }
}

void Tokenizer::encode_normalized(std::string_view text, size_t offset, Encoding& out) const {
  thread_local std::vector<Piece> pieces;
  pieces.clear();
  if (split_) {
    split_->split(text, pieces);
  } else {
    pieces.push_back({0, text.size()});
  }
  for (const Piece& piece : pieces) {
    const size_t first = out.ids.size();
    bpe_->encode(text.substr(piece.begin, piece.end - piece.begin), out.ids);
    size_t start = offset + piece.begin;
    for (size_t i = first; i < out.ids.size(); ++i) {
      out.starts.push_back(start);
      start += bpe_->bytes_of(out.ids[i]).size();
    }
  }
}

std::string Tokenizer::normalize(std::string_view text) const { return nfc_ ? nfc(text) : std::string(text); }

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) {
    if (const auto it = added_by_id_.find(id); it != added_by_id_.end()) {
      const AddedToken& token = added_[it->second];
      if (skip_special_tokens && token.special) continue;
      // Hugging Face's byte-level decoder maps a token through the alphabet
      // when it can, and takes it as UTF-8 otherwise.
      bytes += byte_level_to_bytes(token.content).value_or(token.content);
      continue;
    }
    if (id < 0 || static_cast<size_t>(id) >= bpe_->size() || bpe_->bytes_of(id).empty()) {
      throw TextError(fmt::format("token id {} is not in the vocabulary of {} (size {})", id, file_.string(),
                                  vocab_size_));
    }
    bytes += bpe_->bytes_of(id);
  }
  return to_valid_utf8(bytes);
}

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  for (const auto& added : added_) {
    if (added.content == token) return added.id;
  }
  if (const int32_t id = bpe_->find(token); id >= 0) return id;
  return std::nullopt;
}

int32_t Tokenizer::require_token_id(std::string_view token) const {
  if (auto id = token_id(token)) return *id;
  throw ConfigError(fmt::format("{}: has no token {}; is it the tokenizer of the model the chat template is for?",
                                file_.string(), token));
}

}  // namespace dflow::text
