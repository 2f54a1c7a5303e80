#pragma once
// Writes a prepared dataset directory (shards + index.bin, see
// shard_format.hpp). Everything goes to a temporary sibling directory that is
// renamed into place by finish(), so a half-written output never looks valid.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/shard_index.hpp"

namespace dflow::data {

struct ShardWriterOptions {
  int64_t samples_per_shard = 65536;
  int64_t vocab_size = 0;   // recorded in the index as checked; 0 = not checked
  bool overwrite = false;   // replace an existing out_dir once the new one is complete
};

struct WrittenDataset {
  std::filesystem::path dir;
  int64_t num_samples = 0;
  int64_t num_tokens = 0;
  int64_t num_shards = 0;
};

class OutputFile;

class ShardWriter {
 public:
  // Throws DataError when out_dir exists and options.overwrite is false.
  ShardWriter(std::filesystem::path out_dir, ShardWriterOptions options);
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;
  ~ShardWriter();  // without finish(): removes the temporary directory

  // Appends one sample; both spans have the same, non-zero length.
  void add(std::span<const int32_t> input_ids, std::span<const uint8_t> loss_mask);

  // Adds a small file beside the shards (e.g. the tokenizer the ids came
  // from); it appears with them, atomically, at finish().
  void add_file(const std::string& name, const std::string& content);

  // Closes the last shard, writes index.bin and renames the directory into place.
  WrittenDataset finish();

  int64_t samples_written() const { return index_.num_samples(); }

 private:
  void open_shard();
  void close_shard();

  std::filesystem::path out_dir_;
  std::filesystem::path temp_dir_;
  ShardWriterOptions options_;
  ShardIndex index_;
  std::unique_ptr<OutputFile> shard_;
  format::ShardEntry current_{};
  std::vector<unsigned char> record_;  // scratch for one sample's record
  bool finished_ = false;
};

}  // namespace dflow::data
