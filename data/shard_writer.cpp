#include "data/shard_writer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <fmt/format.h>

#include "data/checksum.hpp"
#include "data/data_error.hpp"
#include "data/output_file.hpp"

namespace dflow::data {
namespace {

std::filesystem::path sibling(const std::filesystem::path& dir, const char* tag) {
  std::filesystem::path name = dir.filename();
  name += fmt::format(".{}-{}", tag, ::getpid());
  return dir.parent_path() / name;
}

void refuse_existing(const std::filesystem::path& out_dir) {
  throw DataError(fmt::format("{}: already exists; remove it, choose another output directory, or allow overwrite",
                              out_dir.string()));
}

}  // namespace

ShardWriter::ShardWriter(std::filesystem::path out_dir, ShardWriterOptions options)
    : out_dir_(std::move(out_dir)), options_(options) {
  if (out_dir_.filename().empty()) out_dir_ = out_dir_.parent_path();  // "dir/" names "dir"
  if (options_.samples_per_shard < 1) {
    throw DataError(fmt::format("samples_per_shard is {}; it must be at least 1", options_.samples_per_shard));
  }
  if (std::filesystem::exists(out_dir_) && !options_.overwrite) refuse_existing(out_dir_);
  if (!out_dir_.parent_path().empty()) std::filesystem::create_directories(out_dir_.parent_path());
  temp_dir_ = sibling(out_dir_, "tmp");
  std::filesystem::remove_all(temp_dir_);  // a leftover of a crashed run with the same pid
  std::filesystem::create_directory(temp_dir_);
  index_.vocab_size = options_.vocab_size;
}

ShardWriter::~ShardWriter() {
  if (finished_) return;
  shard_.reset();
  std::error_code ignored;
  std::filesystem::remove_all(temp_dir_, ignored);
}

void ShardWriter::add(std::span<const int32_t> input_ids, std::span<const uint8_t> loss_mask) {
  if (finished_) throw DataError("ShardWriter::add after finish()");
  if (input_ids.empty() || input_ids.size() != loss_mask.size()) {
    throw DataError(fmt::format("ShardWriter::add: sample {} has {} input_ids and {} loss_mask values; both must "
                                "be equal and non-zero",
                                index_.num_samples(), input_ids.size(), loss_mask.size()));
  }
  const auto [min_id, max_id] = std::minmax_element(input_ids.begin(), input_ids.end());
  if (*min_id < 0) {
    throw DataError(fmt::format("ShardWriter::add: sample {} has token id {}; ids must be >= 0",
                                index_.num_samples(), *min_id));
  }
  if (!shard_) open_shard();
  const uint64_t length = input_ids.size();
  // One contiguous record (ids, mask, zero padding), hashed as the reader will.
  record_.assign(format::record_bytes(length), 0);
  std::memcpy(record_.data(), input_ids.data(), input_ids.size_bytes());
  std::memcpy(record_.data() + input_ids.size_bytes(), loss_mask.data(), loss_mask.size_bytes());
  const uint64_t checksum = xxhash64(record_.data(), record_.size());
  shard_->write(record_.data(), record_.size());

  index_.lengths.push_back(static_cast<int32_t>(length));
  index_.record_checksums.push_back(checksum);
  index_.max_token_id = std::max<int64_t>(index_.max_token_id, *max_id);
  current_.num_samples += 1;
  current_.num_tokens += length;
  if (current_.num_samples == static_cast<uint64_t>(options_.samples_per_shard)) close_shard();
}

void ShardWriter::add_file(const std::string& name, const std::string& content) {
  if (finished_) throw DataError("ShardWriter::add_file after finish()");
  OutputFile file(temp_dir_ / name);
  file.write(content.data(), content.size());
  file.close_synced();
}

void ShardWriter::open_shard() {
  current_ = format::ShardEntry{};
  current_.first_sample = static_cast<uint64_t>(index_.num_samples());
  const auto name = format::shard_file_name(index_.shards.size());
  shard_ = std::make_unique<OutputFile>(temp_dir_ / name);
  const format::ShardHeader placeholder{};  // rewritten by close_shard() once counts are known
  shard_->write(&placeholder, sizeof placeholder);
}

void ShardWriter::close_shard() {
  format::ShardHeader header{};
  std::memcpy(header.magic, format::kShardMagic, sizeof header.magic);
  header.format_version = format::kFormatVersion;
  header.header_bytes = sizeof header;
  header.shard_number = index_.shards.size();
  header.num_samples = current_.num_samples;
  header.num_tokens = current_.num_tokens;
  header.file_bytes = shard_->size_bytes();
  header.header_checksum = xxhash64(&header, offsetof(format::ShardHeader, header_checksum));
  shard_->write_at(0, &header, sizeof header);
  shard_->close_synced();
  current_.file_bytes = header.file_bytes;
  index_.shards.push_back(current_);
  shard_.reset();
}

WrittenDataset ShardWriter::finish() {
  if (finished_) throw DataError("ShardWriter::finish called twice");
  if (shard_) close_shard();
  write_shard_index(temp_dir_ / format::kIndexFileName, index_);
  sync_directory(temp_dir_);
  if (std::filesystem::exists(out_dir_)) {
    if (!options_.overwrite) refuse_existing(out_dir_);
    // Move the old directory aside first: rename cannot replace a non-empty one.
    const auto old_dir = sibling(out_dir_, "old");
    std::filesystem::remove_all(old_dir);
    std::filesystem::rename(out_dir_, old_dir);
    std::filesystem::rename(temp_dir_, out_dir_);
    std::filesystem::remove_all(old_dir);
  } else {
    std::filesystem::rename(temp_dir_, out_dir_);
  }
  const auto parent = out_dir_.parent_path();
  sync_directory(parent.empty() ? std::filesystem::path(".") : parent);
  finished_ = true;
  return WrittenDataset{out_dir_, index_.num_samples(), index_.num_tokens(),
                        static_cast<int64_t>(index_.shards.size())};
}

}  // namespace dflow::data
