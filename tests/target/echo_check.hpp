// The echo pattern's promise (target/tiny_target.hpp), checked on greedy
// continuations: token[t] = perm(token[t - lag]) for one permutation of the
// text vocabulary, the same for every prompt, never eos or the mask token.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <set>
#include <vector>

namespace dflow::target::testing {

class EchoPermutation {
 public:
  EchoPermutation(int64_t lag, int64_t text_vocab) : lag_(lag), text_vocab_(text_vocab) {}

  // Checks each token after the prompt against the permutation seen so far;
  // returns how many it checked.
  int64_t follow(const std::vector<int64_t>& prompt, const std::vector<int64_t>& continuation) {
    std::vector<int64_t> sequence = prompt;
    sequence.insert(sequence.end(), continuation.begin(), continuation.end());
    for (size_t t = prompt.size(); t < sequence.size(); ++t) {
      const auto [it, fresh] = images_.emplace(sequence[t - static_cast<size_t>(lag_)], sequence[t]);
      CHECK(it->second == sequence[t]);  // the same source always gives the same token
      CHECK(sequence[t] < text_vocab_);  // never eos or mask
    }
    return static_cast<int64_t>(continuation.size());
  }

  // Injective, and (a random permutation of hundreds of tokens) hardly any fixed point.
  void check_is_a_permutation() const {
    std::set<int64_t> images;
    int64_t fixed_points = 0;
    for (const auto& [source, image] : images_) {
      images.insert(image);
      fixed_points += source == image;
    }
    CHECK(images.size() == images_.size());
    CHECK(fixed_points <= 3);
  }

 private:
  int64_t lag_, text_vocab_;
  std::map<int64_t, int64_t> images_;
};

}  // namespace dflow::target::testing
