#include "data/checksum.hpp"

#include <bit>
#include <cstring>

namespace dflow::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "shards are little-endian; a big-endian host would need byte swaps");

constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL;
constexpr uint64_t kPrime2 = 0xC2B2AE3D27D4EB4FULL;
constexpr uint64_t kPrime3 = 0x165667B19E3779F9ULL;
constexpr uint64_t kPrime4 = 0x85EBCA77C2B2AE63ULL;
constexpr uint64_t kPrime5 = 0x27D4EB2F165667C5ULL;

uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint64_t round(uint64_t accumulator, uint64_t input) {
  accumulator += input * kPrime2;
  accumulator = std::rotl(accumulator, 31);
  return accumulator * kPrime1;
}

uint64_t merge_round(uint64_t accumulator, uint64_t lane) {
  accumulator ^= round(0, lane);
  return accumulator * kPrime1 + kPrime4;
}

uint64_t avalanche(uint64_t h) {
  h ^= h >> 33;
  h *= kPrime2;
  h ^= h >> 29;
  h *= kPrime3;
  h ^= h >> 32;
  return h;
}

}  // namespace

uint64_t xxhash64(const void* bytes, size_t size_bytes, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(bytes);
  const unsigned char* const end = p + size_bytes;
  uint64_t h;
  if (size_bytes >= 32) {
    uint64_t v1 = seed + kPrime1 + kPrime2;
    uint64_t v2 = seed + kPrime2;
    uint64_t v3 = seed;
    uint64_t v4 = seed - kPrime1;
    const unsigned char* const last_stripe = end - 32;
    do {
      v1 = round(v1, read64(p));
      v2 = round(v2, read64(p + 8));
      v3 = round(v3, read64(p + 16));
      v4 = round(v4, read64(p + 24));
      p += 32;
    } while (p <= last_stripe);
    h = std::rotl(v1, 1) + std::rotl(v2, 7) + std::rotl(v3, 12) + std::rotl(v4, 18);
    h = merge_round(h, v1);
    h = merge_round(h, v2);
    h = merge_round(h, v3);
    h = merge_round(h, v4);
  } else {
    h = seed + kPrime5;
  }
  h += static_cast<uint64_t>(size_bytes);
  // Compared as distances: for an empty input p and end may be null, and
  // null + 8 is undefined behaviour.
  while (end - p >= 8) {
    h ^= round(0, read64(p));
    h = std::rotl(h, 27) * kPrime1 + kPrime4;
    p += 8;
  }
  if (end - p >= 4) {
    h ^= static_cast<uint64_t>(read32(p)) * kPrime1;
    h = std::rotl(h, 23) * kPrime2 + kPrime3;
    p += 4;
  }
  while (p < end) {
    h ^= static_cast<uint64_t>(*p) * kPrime5;
    h = std::rotl(h, 11) * kPrime1;
    ++p;
  }
  return avalanche(h);
}

uint64_t hash_combine(uint64_t accumulated, uint64_t value) {
  return xxhash64(&value, sizeof value, accumulated);
}

}  // namespace dflow::data
