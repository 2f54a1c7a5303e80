#pragma once
// The feature cache on disk: per sample, the target's hidden states of the
// layers the drafter reads (every position of the sample), so that training
// pays for the target once. Torch-free: rows are opaque bytes here; their
// encoding (float32, bfloat16, fp8 e4m3 with a per-row scale) is
// train/feature_cache.hpp's.
//
// Layout of a cache directory:
//   manifest.json                 what the features were made from (FeatureCacheManifest)
//   shards/<writer>-<seq>.bin     sample records, one after another
//   shards/<writer>-<seq>.idx     the shard's index: sample id, offset, rows,
//                                 a hash of the sample's tokens, a checksum of
//                                 the record; its existence publishes the shard
//   shards/<writer>.lock          held (flock) while a writer of that name lives
// A writer (one per rank, or per target replica) appends to <writer>-<seq>.bin.tmp
// and publishes a shard by syncing, renaming it and writing the index, so a
// kill loses at most the open shard and a rerun continues from the published
// ones. Readers map published shards only. A writer's name is locked: a second
// writer of the same name (which would remove the first one's open shard) is
// refused; the kernel drops the lock of a process that dies.
#include <cstdint>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <unordered_set>
#include <vector>

#include "data/mapped_file.hpp"
#include "data/output_file.hpp"

namespace dflow::data {

namespace fs = std::filesystem;

enum class FeatureDtype : uint32_t { float32 = 1, bfloat16 = 2, float8_e4m3 = 3 };

std::string to_string(FeatureDtype dtype);
// "float32" | "bfloat16" | "float8_e4m3" (also "f32", "bf16", "fp8");
// throws std::invalid_argument listing them.
FeatureDtype parse_feature_dtype(const std::string& name);
// Bytes of one position's row of `width` values (fp8 rows carry a float32 scale).
uint64_t feature_row_bytes(FeatureDtype dtype, int64_t width);

struct FeatureCacheManifest {
  int version = 1;
  // What must match the run that reads the cache.
  std::string target_config;       // xxh64 of the target's config.json
  std::string target_weights;      // xxh64 over the safetensors headers and sampled weight bytes
  std::string tokenizer;           // xxh64 of tokenizer.json ("none" without one)
  std::string target_dtype;        // the dtype the target computed in
  std::vector<int64_t> layer_ids;  // the fused layers, in order
  // Whether each row also holds the target's last hidden state after its
  // final norm (dflow layer N - 1), after the layer_ids' features: what a
  // run with loss: kl reads as its teacher. Such a manifest is version 2
  // (a reader of version 1 would take the rows for wider features).
  bool last_layer = false;
  int64_t hidden_size = 0;
  FeatureDtype dtype = FeatureDtype::bfloat16;  // how rows are stored
  // What it was filled from (informational: samples are checked by their tokens).
  std::string target_path;
  std::string dataset_fingerprint;  // "" when unknown (regeneration writes before a dataset exists)
  int64_t dataset_samples = 0;
  std::string source;  // "cache-features", "train (hybrid fill)", "regenerate"

  int64_t width() const { return hidden_size * static_cast<int64_t>(layer_ids.size() + (last_layer ? 1 : 0)); }
  std::string to_json() const;
  // Throws DataError naming the file and field.
  static FeatureCacheManifest from_json(const std::string& text, const fs::path& file);
};

// What makes a cache of `cache` unusable for a run that wants `wanted`, one
// line per field ("layer ids: cache [1, 1, 1], this run [1, 2, 3]"); empty
// when usable. A cache with the last layer serves a run that does not want
// it (the extra columns are not read); the reverse is a difference.
std::vector<std::string> manifest_differences(const FeatureCacheManifest& cache, const FeatureCacheManifest& wanted);

// Writes dir/manifest.json when absent (atomically; several ranks may race
// and write the same), else checks the one there. Throws DataError naming
// the differences when it was made from something else.
void create_or_check_manifest(const fs::path& dir, const FeatureCacheManifest& manifest);
FeatureCacheManifest read_manifest(const fs::path& dir);  // throws DataError naming the file

struct FeatureIndexEntry {
  int64_t sample_id = 0;
  uint64_t offset = 0;       // of the record in the shard's .bin
  uint64_t rows = 0;         // positions (the sample's tokens)
  uint64_t tokens_hash = 0;  // xxh64 of the sample's int32 token ids
  uint64_t checksum = 0;     // xxh64 of the record's bytes
};

// xxh64 of a sample's token ids: what ties a cached record to its sample.
uint64_t tokens_hash(std::span<const int32_t> input_ids);

class FeatureCacheWriter {
 public:
  // `writer` names this writer's shards ("r0", "r1-w0", "regen"): writers
  // that run at once need distinct names: the name is locked while the
  // writer lives, and a second writer of it (this process or another) is
  // refused with a DataError naming the directory, the name and the holder's
  // pid. An unfinished shard of this writer (a killed run's .tmp) is removed;
  // numbering continues after its last published shard.
  FeatureCacheWriter(fs::path dir, std::string writer, FeatureDtype dtype, int64_t width,
                     uint64_t shard_bytes = uint64_t{256} << 20);
  FeatureCacheWriter(const FeatureCacheWriter&) = delete;
  FeatureCacheWriter& operator=(const FeatureCacheWriter&) = delete;
  // Publishes what was appended (best effort: a failure is logged, the
  // records stay unpublished and a rerun writes them again).
  ~FeatureCacheWriter();

  // One sample's record: rows x feature_row_bytes(dtype, width) bytes.
  // Publishes the shard once it reaches the shard size. Throws
  // std::runtime_error naming the file and the OS error (a full disk).
  void append(int64_t sample_id, uint64_t tokens_hash, int64_t rows, std::span<const unsigned char> record);
  // Publishes the open shard (nothing when it is empty); returns its index path.
  std::optional<fs::path> publish();

  // Whether `sample_id` was appended to the open shard (not yet published):
  // readers cannot see it until publish().
  bool unpublished(int64_t sample_id) const { return unpublished_.count(sample_id) > 0; }
  size_t unpublished_samples() const { return entries_.size(); }
  const std::string& name() const { return writer_; }

  uint64_t bytes_written() const { return bytes_written_; }
  int64_t samples_written() const { return samples_written_; }
  int64_t shards_published() const { return shards_published_; }

 private:
  void open_shard();
  void lock_name();

  fs::path shards_dir_;
  std::string writer_;
  FeatureDtype dtype_;
  int64_t width_;
  uint64_t shard_bytes_;
  int next_seq_ = 0;
  std::unique_ptr<OutputFile> file_;
  fs::path final_path_;
  std::vector<FeatureIndexEntry> entries_;  // of the open shard
  std::unordered_set<int64_t> unpublished_;  // their sample ids
  int lock_fd_ = -1;                         // shards/<writer>.lock, flock'ed
  uint64_t bytes_written_ = 0;
  int64_t samples_written_ = 0;
  int64_t shards_published_ = 0;
};

// One sample's cached record, valid while the reader lives.
struct CachedFeatures {
  std::span<const unsigned char> bytes;
  int64_t rows = 0;
  uint64_t tokens_hash = 0;
};

// The published shards of a cache directory, memory-mapped. Thread-safe:
// get() from any number of threads; refresh() maps shards published since.
class FeatureCacheReader {
 public:
  // Throws DataError naming the file for a missing or unreadable manifest, a
  // corrupt index or a truncated shard (with the samples it loses).
  explicit FeatureCacheReader(fs::path dir);

  const FeatureCacheManifest& manifest() const { return manifest_; }
  const fs::path& dir() const { return dir_; }
  // Maps shards published since the last look; returns how many.
  size_t refresh();
  bool contains(int64_t sample_id) const;
  int64_t num_samples() const;
  uint64_t record_bytes() const;  // of all mapped records
  // Records of samples that an earlier shard already holds (ignored: the
  // first one wins). A fill that computes each sample once writes none.
  int64_t duplicate_records() const;
  // The tokens hash and positions the index gives for `sample_id` (read
  // from the index alone; the record's bytes are not touched); nullopt when
  // not cached.
  std::optional<FeatureIndexEntry> entry(int64_t sample_id) const;
  // Throws DataError naming the shard and the sample when the record fails
  // its checksum (with `verify`), or when the sample is not cached.
  CachedFeatures get(int64_t sample_id, bool verify = true) const;
  // Of `sample_ids`, those not cached (in the order given).
  std::vector<int64_t> missing(std::span<const int64_t> sample_ids) const;
  // The shard a sample lives in (for messages).
  fs::path shard_of(int64_t sample_id) const;

 private:
  struct Location {
    size_t shard;
    FeatureIndexEntry entry;
  };
  size_t map_new_shards();  // caller holds the unique lock

  fs::path dir_;
  FeatureCacheManifest manifest_;
  uint64_t row_bytes_ = 0;
  mutable std::shared_mutex mutex_;
  std::deque<MappedFile> shards_;  // deque: spans stay valid as shards are added
  std::map<std::string, size_t> shard_names_;
  std::map<int64_t, Location> samples_;
  uint64_t record_bytes_ = 0;
  int64_t duplicate_records_ = 0;
};

// Readable byte counts ("1.27 GB").
std::string format_bytes(uint64_t bytes);

// Throws DataError naming both figures when `dir`'s file system has less than
// `needed_bytes` available: "needs 1.4 GB more, the disk has 0.9 GB free".
void check_free_space(const fs::path& dir, uint64_t needed_bytes, const std::string& what);

}  // namespace dflow::data
