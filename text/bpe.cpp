#include "text/bpe.hpp"

#include <fmt/format.h>

#include <queue>
#include <tuple>

#include "config/errors.hpp"

namespace dflow::text {
namespace {

constexpr size_t kCacheEntries = 1 << 17;
constexpr size_t kCacheMaxBytes = 256;   // longer pre-tokens are rare and not worth keeping
constexpr size_t kShortWord = 48;        // up to this many symbols a plain scan beats a heap

}  // namespace

BpeModel::BpeModel(std::vector<std::string> vocab, const std::vector<std::pair<std::string, std::string>>& merges,
                   bool ignore_merges, const std::string& source)
    : vocab_(std::move(vocab)), ignore_merges_(ignore_merges) {
  ids_.reserve(vocab_.size());
  for (size_t id = 0; id < vocab_.size(); ++id) {
    if (!vocab_[id].empty()) ids_.emplace(vocab_[id], static_cast<int32_t>(id));
  }
  for (int b = 0; b < 256; ++b) {
    byte_ids_[b] = find(std::string_view(reinterpret_cast<const char*>(&b), 1));
    if (byte_ids_[b] < 0) {
      throw ConfigError(fmt::format("{}: the vocabulary has no token for byte 0x{:02X}; a byte-level BPE "
                                    "vocabulary holds all 256 bytes",
                                    source, b));
    }
  }
  merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [left, right] = merges[rank];
    const int32_t left_id = find(left), right_id = find(right), result = find(left + right);
    if (left_id < 0 || right_id < 0 || result < 0) {
      throw ConfigError(fmt::format("{}: merge {} names a token that is not in the vocabulary", source, rank));
    }
    // A pair listed twice keeps its last rank, as Hugging Face's map does.
    merges_.insert_or_assign(pair_key(left_id, right_id), Merge{static_cast<int32_t>(rank), result});
  }
}

int32_t BpeModel::find(std::string_view bytes) const {
  const auto it = ids_.find(bytes);
  return it == ids_.end() ? -1 : it->second;
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
  const auto it = merges_.find(pair_key(left, right));
  return it == merges_.end() ? nullptr : &it->second;
}

void BpeModel::merge_short(std::vector<int32_t>& symbols) const {
  while (symbols.size() > 1) {
    const Merge* best = nullptr;
    size_t best_at = 0;
    for (size_t i = 0; i + 1 < symbols.size(); ++i) {
      const Merge* merge = find_merge(symbols[i], symbols[i + 1]);
      if (merge && (!best || merge->rank < best->rank)) {
        best = merge;
        best_at = i;
      }
    }
    if (!best) return;
    symbols[best_at] = best->result;
    symbols.erase(symbols.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
  }
}

// A heap of candidate merges over a linked list of symbols; stale entries are
// skipped when popped. Same order as merge_short: rank, then position.
void BpeModel::merge_long(std::vector<int32_t>& symbols) const {
  const int n = static_cast<int>(symbols.size());
  std::vector<int> next(n), prev(n);
  std::vector<char> alive(n, 1);
  for (int i = 0; i < n; ++i) {
    next[i] = i + 1 < n ? i + 1 : -1;
    prev[i] = i - 1;
  }
  using Candidate = std::tuple<int32_t, int, int>;  // rank, left position, right position
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto push = [&](int left) {
    if (left < 0 || next[left] < 0) return;
    if (const Merge* m = find_merge(symbols[left], symbols[next[left]])) heap.emplace(m->rank, left, next[left]);
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const auto [rank, left, right] = heap.top();
    heap.pop();
    if (!alive[left] || !alive[right] || next[left] != right) continue;
    const Merge* m = find_merge(symbols[left], symbols[right]);
    if (!m || m->rank != rank) continue;
    symbols[left] = m->result;
    alive[right] = 0;
    next[left] = next[right];
    if (next[right] >= 0) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  size_t out = 0;
  for (int i = 0; i >= 0 && i < n; i = next[i]) symbols[out++] = symbols[i];
  symbols.resize(out);
}

void BpeModel::encode(std::string_view pre_token, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (const int32_t whole = find(pre_token); whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  const bool cacheable = pre_token.size() <= kCacheMaxBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (const auto it = cache_.find(pre_token); it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> symbols;
  symbols.reserve(pre_token.size());
  for (const char c : pre_token) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  if (symbols.size() <= kShortWord) {
    merge_short(symbols);
  } else {
    merge_long(symbols);
  }
  out.insert(out.end(), symbols.begin(), symbols.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(pre_token), std::move(symbols));
  }
}

}  // namespace dflow::text
