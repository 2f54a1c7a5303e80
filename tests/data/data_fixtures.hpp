#pragma once
// Helpers shared by the data tests: temporary directories, JSONL files and
// synthetic datasets with seeded contents.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "data/shard_writer.hpp"

namespace dflow::data::test {

// A fresh directory under the system temp dir, removed with its contents.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dflow-data-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

inline void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

inline void write_lines(const std::filesystem::path& path, const std::vector<std::string>& lines) {
  std::string text;
  for (const auto& line : lines) text += line + "\n";
  write_text(path, text);
}

struct Sample {
  std::vector<int32_t> input_ids;
  std::vector<uint8_t> loss_mask;
};

// A sample of `length` tokens: a prompt of about a third, then the response.
inline Sample make_sample(int length, std::mt19937_64& rng, int32_t vocab_size = 1000) {
  Sample sample;
  std::uniform_int_distribution<int32_t> token(0, vocab_size - 1);
  const int prompt_tokens = length / 3;
  for (int t = 0; t < length; ++t) {
    sample.input_ids.push_back(token(rng));
    sample.loss_mask.push_back(t >= prompt_tokens ? 1 : 0);
  }
  return sample;
}

// Long-tailed lengths (log-normal, clamped), like chat data.
inline std::vector<int> lognormal_lengths(size_t count, uint64_t seed, int min_length, int max_length,
                                          double median_length = 300.0, double sigma = 0.9) {
  std::mt19937_64 rng(seed);
  std::lognormal_distribution<double> draw(std::log(median_length), sigma);
  std::vector<int> lengths;
  for (size_t i = 0; i < count; ++i) {
    lengths.push_back(std::clamp(static_cast<int>(draw(rng)), min_length, max_length));
  }
  return lengths;
}

// Writes samples of the given lengths to `dir` and returns them.
inline std::vector<Sample> write_dataset(const std::filesystem::path& dir, const std::vector<int>& lengths,
                                         uint64_t seed, int64_t samples_per_shard = 1000, int64_t vocab_size = 0) {
  std::mt19937_64 rng(seed);
  std::vector<Sample> samples;
  ShardWriter writer(dir, ShardWriterOptions{samples_per_shard, vocab_size, false});
  for (const int length : lengths) {
    samples.push_back(make_sample(length, rng));
    writer.add(samples.back().input_ids, samples.back().loss_mask);
  }
  writer.finish();
  return samples;
}

}  // namespace dflow::data::test
