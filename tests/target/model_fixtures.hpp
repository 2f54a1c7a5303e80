// Shared fixtures for the model tests: scratch directories and one tiny
// random target per test process.
#pragma once

#include <torch/torch.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "drafter/drafter.hpp"
#include "target/target.hpp"
#include "target/tiny_target.hpp"

namespace dflow::target::testing {

// A fresh directory under the system temp dir, removed when the object dies.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("dflow-model-test-" + std::to_string(::getpid()) + "-" + tag + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The tiny target used across tests: 4 layers, hidden 64, 4 heads over 2 KV
// heads, vocab 512, written once per process.
inline const std::filesystem::path& tiny_target_dir() {
  static ScratchDir dir("tiny-target");
  static bool written = [] {
    TinyTargetOptions options;
    options.out_dir = dir.path();
    options.seed = 7;
    make_tiny_target(options);
    return true;
  }();
  (void)written;
  return dir.path();
}

// A drafter spec of the given width for tests that do not need a target on disk.
inline dflow::drafter::DrafterSpec small_drafter_spec(int64_t num_layers, int64_t block_size, int64_t num_features) {
  HFConfig target;
  target.hidden_size = 32;
  target.num_hidden_layers = 6;
  target.num_attention_heads = 4;
  target.num_key_value_heads = 2;
  target.head_dim = 8;
  target.intermediate_size = 48;
  target.vocab_size = 50;
  target.max_position_embeddings = 256;
  target.rope_theta = 10000.0;
  target.mask_token_id = 49;
  dflow::drafter::DrafterOptions options;
  options.num_layers = num_layers;
  options.block_size = block_size;
  options.num_target_features = num_features;
  return dflow::drafter::make_drafter_spec(target, options);
}

}  // namespace dflow::target::testing
