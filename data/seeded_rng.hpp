#pragma once
// The plan's only source of randomness. Written out (SplitMix64, Lemire's
// unbiased bounded draw, Fisher-Yates) rather than std::mt19937 +
// std::shuffle, whose algorithms differ between standard libraries: the same
// seed must give the same plan on every build (DESIGN invariant 6).
#include <cstdint>
#include <span>
#include <utility>

#include "data/checksum.hpp"

namespace dflow::data {

class SeededRng {
 public:
  explicit SeededRng(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound > 0.
  uint64_t below(uint64_t bound) {
    unsigned __int128 product = static_cast<unsigned __int128>(next()) * bound;
    auto low = static_cast<uint64_t>(product);
    if (low < bound) {
      const uint64_t threshold = -bound % bound;
      while (low < threshold) {
        product = static_cast<unsigned __int128>(next()) * bound;
        low = static_cast<uint64_t>(product);
      }
    }
    return static_cast<uint64_t>(product >> 64);
  }

  // Uniform in [0, 1) with 53 random bits.
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  template <typename T>
  void shuffle(std::span<T> values) {
    for (size_t i = values.size(); i > 1; --i) {
      std::swap(values[i - 1], values[below(i)]);
    }
  }

 private:
  uint64_t state_;
};

// One independent stream per (run seed, epoch, dataset, purpose).
inline uint64_t derive_seed(uint64_t seed, int epoch, uint64_t data_fingerprint, uint64_t stream) {
  uint64_t h = hash_combine(seed, static_cast<uint64_t>(epoch));
  h = hash_combine(h, data_fingerprint);
  return hash_combine(h, stream);
}

}  // namespace dflow::data
