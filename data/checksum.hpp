#pragma once
// XXH64 (the 64-bit xxHash of Yann Collet, same digests as the reference
// implementation): fast enough to verify every shard byte at open, and strong
// enough that a flipped bit or a truncated write never goes unnoticed.
#include <cstddef>
#include <cstdint>
#include <span>

namespace dflow::data {

uint64_t xxhash64(const void* bytes, size_t size_bytes, uint64_t seed = 0);

template <typename T>
uint64_t xxhash64(std::span<const T> values, uint64_t seed = 0) {
  return xxhash64(values.data(), values.size_bytes(), seed);
}

// Order-dependent combination of 64-bit values (for fingerprints and seeds).
uint64_t hash_combine(uint64_t accumulated, uint64_t value);

}  // namespace dflow::data
