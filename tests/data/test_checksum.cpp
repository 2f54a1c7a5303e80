#include <doctest/doctest.h>

#include <string>

#include "data/checksum.hpp"

using dflow::data::xxhash64;

TEST_CASE("Checksum.MatchesReferenceXxHash64") {
  // Digests of the reference implementation (xxhsum -H64), so shards can be
  // checked with standard tools.
  CHECK(xxhash64("", 0) == 0xEF46DB3751D8E999ULL);
  CHECK(xxhash64("a", 1) == 0xD24EC4F1A98C6E5BULL);
  CHECK(xxhash64("abc", 3) == 0x44BC2CF5AD770999ULL);
  const std::string long_text = "Nobody inspects the spammish repetition";
  CHECK(xxhash64(long_text.data(), long_text.size()) == 0xFBCEA83C8A378BF1ULL);
}

TEST_CASE("Checksum.EveryBitFlipChangesTheDigest") {
  std::string bytes(100, 'x');
  const uint64_t original = xxhash64(bytes.data(), bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
      CHECK(xxhash64(bytes.data(), bytes.size()) != original);
      bytes[i] = static_cast<char>(bytes[i] ^ (1 << bit));
    }
  }
}
