#include "data/feature_cache.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "config/log.hpp"
#include "data/checksum.hpp"
#include "data/data_error.hpp"

namespace dflow::data {

namespace {

constexpr char kIndexMagic[8] = {'D', 'F', 'L', 'F', 'I', 'D', 'X', '1'};
constexpr uint32_t kIndexVersion = 1;
constexpr const char* kManifestFile = "manifest.json";

// "[1, 2, 3]", at most `limit` ids then "... (N in all)".
std::string list_ids(const std::vector<int64_t>& ids, size_t limit = 10) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < limit; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > limit) out += ", ... (" + std::to_string(ids.size()) + " in all)";
  return out + "]";
}

// Index file: magic, version, dtype, width, count, the .bin's size, the
// entries, then xxh64 of everything before it.
struct IndexHeader {
  char magic[8];
  uint32_t version;
  uint32_t dtype;
  int64_t width;
  uint64_t count;
  uint64_t bin_bytes;
};
static_assert(sizeof(IndexHeader) == 40);
static_assert(sizeof(FeatureIndexEntry) == 40);

void write_index(const fs::path& path, FeatureDtype dtype, int64_t width, uint64_t bin_bytes,
                 const std::vector<FeatureIndexEntry>& entries) {
  IndexHeader header{};
  std::memcpy(header.magic, kIndexMagic, sizeof header.magic);
  header.version = kIndexVersion;
  header.dtype = static_cast<uint32_t>(dtype);
  header.width = width;
  header.count = entries.size();
  header.bin_bytes = bin_bytes;
  std::vector<unsigned char> bytes(sizeof header + entries.size() * sizeof(FeatureIndexEntry));
  std::memcpy(bytes.data(), &header, sizeof header);
  if (!entries.empty()) std::memcpy(bytes.data() + sizeof header, entries.data(), entries.size() * sizeof(FeatureIndexEntry));
  const uint64_t checksum = xxhash64(bytes.data(), bytes.size());
  fs::path tmp = path;
  tmp += ".tmp";
  {
    OutputFile out(tmp);
    out.write(bytes.data(), bytes.size());
    out.write(&checksum, sizeof checksum);
    out.close_synced();
  }
  fs::rename(tmp, path);
}

struct ShardIndexFile {
  FeatureDtype dtype;
  int64_t width;
  uint64_t bin_bytes;
  std::vector<FeatureIndexEntry> entries;
};

ShardIndexFile read_index(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto corrupt = [&](const std::string& what) {
    return DataError("feature cache index " + path.string() + ": " + what +
                     "; delete it and its .bin and fill the cache again (only that shard's samples are rewritten)");
  };
  if (bytes.size() < sizeof(IndexHeader) + sizeof(uint64_t)) throw corrupt("truncated (" + std::to_string(bytes.size()) + " bytes)");
  IndexHeader header;
  std::memcpy(&header, bytes.data(), sizeof header);
  if (std::memcmp(header.magic, kIndexMagic, sizeof header.magic) != 0) throw corrupt("not a feature cache index");
  if (header.version != kIndexVersion)
    throw corrupt("format version " + std::to_string(header.version) + ", this dflow reads " + std::to_string(kIndexVersion));
  // The count is checked against the entries' room before it is multiplied:
  // a crafted count would wrap count x 40 to the file's size.
  const uint64_t entry_room = bytes.size() - sizeof header - sizeof(uint64_t);
  if (header.count > entry_room / sizeof(FeatureIndexEntry) || header.count * sizeof(FeatureIndexEntry) != entry_room)
    throw corrupt(std::to_string(bytes.size()) + " bytes hold " + std::to_string(entry_room / sizeof(FeatureIndexEntry)) +
                  " entries, its header says " + std::to_string(header.count));
  uint64_t stored;
  std::memcpy(&stored, bytes.data() + bytes.size() - sizeof stored, sizeof stored);
  if (stored != xxhash64(bytes.data(), bytes.size() - sizeof stored)) throw corrupt("fails its checksum");
  ShardIndexFile out{static_cast<FeatureDtype>(header.dtype), header.width, header.bin_bytes, {}};
  out.entries.resize(header.count);
  if (header.count) std::memcpy(out.entries.data(), bytes.data() + sizeof header, header.count * sizeof(FeatureIndexEntry));
  return out;
}

// Whether a record of `e.rows` rows at `e.offset` lies within `size` bytes,
// without the sum or the product wrapping on a crafted index.
bool record_fits(const FeatureIndexEntry& e, uint64_t row_bytes, uint64_t size) {
  if (e.offset > size) return false;
  return row_bytes == 0 || e.rows <= (size - e.offset) / row_bytes;
}

fs::path index_path_of(const fs::path& bin) {
  fs::path idx = bin;
  idx.replace_extension(".idx");
  return idx;
}

// <writer>-<seq>.<ext>: the sequence number when `name` is one of `writer`'s files.
std::optional<int> shard_seq(const std::string& name, const std::string& writer, const std::string& ext) {
  const std::string prefix = writer + "-";
  if (name.rfind(prefix, 0) != 0 || name.size() <= prefix.size() + ext.size()) return std::nullopt;
  if (name.compare(name.size() - ext.size(), ext.size(), ext) != 0) return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - ext.size());
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return std::nullopt;
  return std::stoi(digits);
}

}  // namespace

std::string to_string(FeatureDtype dtype) {
  switch (dtype) {
    case FeatureDtype::float32: return "float32";
    case FeatureDtype::bfloat16: return "bfloat16";
    case FeatureDtype::float8_e4m3: return "float8_e4m3";
  }
  return "unknown(" + std::to_string(static_cast<uint32_t>(dtype)) + ")";
}

FeatureDtype parse_feature_dtype(const std::string& name) {
  if (name == "float32" || name == "f32") return FeatureDtype::float32;
  if (name == "bfloat16" || name == "bf16") return FeatureDtype::bfloat16;
  if (name == "float8_e4m3" || name == "fp8" || name == "e4m3") return FeatureDtype::float8_e4m3;
  throw std::invalid_argument("unknown feature dtype '" + name +
                              "': float32 (exact), bfloat16 (half the bytes) or float8_e4m3 (a quarter, per-row scale)");
}

uint64_t feature_row_bytes(FeatureDtype dtype, int64_t width) {
  const auto w = static_cast<uint64_t>(width);
  switch (dtype) {
    case FeatureDtype::float32: return 4 * w;
    case FeatureDtype::bfloat16: return 2 * w;
    case FeatureDtype::float8_e4m3: return w + 4;  // the row's float32 scale first
  }
  throw std::invalid_argument("unknown feature dtype " + std::to_string(static_cast<uint32_t>(dtype)));
}

uint64_t tokens_hash(std::span<const int32_t> input_ids) { return xxhash64(input_ids); }

std::string FeatureCacheManifest::to_json() const {
  nlohmann::ordered_json j;
  j["version"] = last_layer ? 2 : version;
  j["target"] = {{"config", target_config}, {"weights", target_weights}, {"tokenizer", tokenizer},
                 {"dtype", target_dtype}, {"path", target_path}};
  j["layer_ids"] = layer_ids;
  if (last_layer) j["last_layer"] = true;
  j["hidden_size"] = hidden_size;
  j["dtype"] = data::to_string(dtype);
  j["dataset"] = {{"fingerprint", dataset_fingerprint}, {"samples", dataset_samples}};
  j["source"] = source;
  return j.dump(2) + "\n";
}

FeatureCacheManifest FeatureCacheManifest::from_json(const std::string& text, const fs::path& file) {
  FeatureCacheManifest m;
  std::string field;
  try {
    const auto j = nlohmann::json::parse(text);
    auto get = [&](const nlohmann::json& at, const char* key) -> const nlohmann::json& {
      field = key;
      return at.at(key);
    };
    // Numbers must be integers: nlohmann converts a float to an integer
    // without a range check (undefined for 1e50).
    auto integer = [&](const nlohmann::json& at, const char* key) -> int64_t {
      const auto& v = get(at, key);
      if (!v.is_number_integer()) throw DataError(file.string() + ": '" + key + "' must be an integer, got " + v.dump());
      return v.get<int64_t>();
    };
    const int64_t version = integer(j, "version");
    m.version = version == 1 || version == 2 ? static_cast<int>(version) : 0;
    if (m.version == 0)
      throw DataError(file.string() + ": feature cache format version " + std::to_string(version) +
                      ", this dflow reads versions 1 and 2");
    const auto& target = get(j, "target");
    m.target_config = get(target, "config").get<std::string>();
    m.target_weights = get(target, "weights").get<std::string>();
    m.tokenizer = get(target, "tokenizer").get<std::string>();
    m.target_dtype = get(target, "dtype").get<std::string>();
    m.target_path = get(target, "path").get<std::string>();
    const auto& layers = get(j, "layer_ids");
    if (!layers.is_array()) throw DataError(file.string() + ": 'layer_ids' must be a list of layer numbers");
    for (const auto& id : layers) {
      if (!id.is_number_integer()) throw DataError(file.string() + ": 'layer_ids' holds " + id.dump() + ", not a layer number");
      m.layer_ids.push_back(id.get<int64_t>());
    }
    if (j.contains("last_layer")) {
      field = "last_layer";
      if (!j.at("last_layer").is_boolean())
        throw DataError(file.string() + ": 'last_layer' must be true or false, got " + j.at("last_layer").dump());
      m.last_layer = j.at("last_layer").get<bool>();
    }
    m.hidden_size = integer(j, "hidden_size");
    m.dtype = parse_feature_dtype(get(j, "dtype").get<std::string>());
    const auto& dataset = get(j, "dataset");
    m.dataset_fingerprint = get(dataset, "fingerprint").get<std::string>();
    m.dataset_samples = integer(dataset, "samples");
    m.source = get(j, "source").get<std::string>();
    // Bounds that keep width() and the row size from overflowing on a crafted file.
    if (m.hidden_size < 1 || m.hidden_size > (int64_t{1} << 20))
      throw DataError(file.string() + ": hidden_size " + std::to_string(m.hidden_size) + " is no model's (1 .. 1048576)");
    if (m.layer_ids.empty() || m.layer_ids.size() > 4096)
      throw DataError(file.string() + ": layer_ids has " + std::to_string(m.layer_ids.size()) +
                      " layers; a cache holds 1 .. 4096");
  } catch (const DataError&) {
    throw;
  } catch (const std::exception& e) {
    throw DataError(file.string() + ": not a feature cache manifest (field '" + field + "': " + e.what() + ")");
  }
  return m;
}

std::vector<std::string> manifest_differences(const FeatureCacheManifest& cache, const FeatureCacheManifest& wanted) {
  std::vector<std::string> out;
  auto check = [&](const char* what, const std::string& a, const std::string& b) {
    if (a != b) out.push_back(std::string(what) + ": cache " + a + ", this run " + b);
  };
  check("target config.json (xxh64)", cache.target_config, wanted.target_config);
  check("target weights (fingerprint)", cache.target_weights, wanted.target_weights);
  check("tokenizer (xxh64 of tokenizer.json)", cache.tokenizer, wanted.tokenizer);
  check("target dtype", cache.target_dtype, wanted.target_dtype);
  check("layer ids", list_ids(cache.layer_ids), list_ids(wanted.layer_ids));
  check("hidden size", std::to_string(cache.hidden_size), std::to_string(wanted.hidden_size));
  if (wanted.last_layer && !cache.last_layer)
    out.push_back("the target's last hidden state, layer N-1 (after its final norm): this run needs it "
                  "(loss: kl), the cache lacks it and holds only the feature layers " + list_ids(cache.layer_ids));
  return out;
}

FeatureCacheManifest read_manifest(const fs::path& dir) {
  const fs::path file = dir / kManifestFile;
  std::ifstream in(file);
  if (!in)
    throw DataError(file.string() + ": no feature cache here (" +
                    (fs::is_directory(dir) ? "the manifest is missing" : "the directory does not exist") +
                    "); fill it with `dflow cache-features CONFIG`, `dflow regenerate --features DIR`, or a "
                    "features.cached node with fill: true");
  std::stringstream text;
  text << in.rdbuf();
  return FeatureCacheManifest::from_json(text.str(), file);
}

void create_or_check_manifest(const fs::path& dir, const FeatureCacheManifest& manifest) {
  fs::create_directories(dir / "shards");
  const fs::path file = dir / kManifestFile;
  if (fs::exists(file)) {
    const auto existing = read_manifest(dir);
    auto differences = manifest_differences(existing, manifest);
    if (existing.dtype != manifest.dtype)
      differences.push_back("storage dtype: cache " + data::to_string(existing.dtype) + ", asked " +
                            data::to_string(manifest.dtype));
    if (!differences.empty()) {
      std::string list;
      for (const auto& d : differences) list += "\n  " + d;
      throw DataError("feature cache " + dir.string() + " was made from something else:" + list +
                      "\n  use another directory, or delete this one to refill it");
    }
    return;
  }
  // Unique per process: ranks that race each write a whole file and rename it.
  fs::path tmp = file;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    OutputFile out(tmp);
    const std::string text = manifest.to_json();
    out.write(text.data(), text.size());
    out.close_synced();
  }
  fs::rename(tmp, file);
  sync_directory(dir);
}

// ---- writer ----

FeatureCacheWriter::FeatureCacheWriter(fs::path dir, std::string writer, FeatureDtype dtype, int64_t width,
                                       uint64_t shard_bytes)
    : shards_dir_(std::move(dir) / "shards"), writer_(std::move(writer)), dtype_(dtype), width_(width),
      shard_bytes_(std::max<uint64_t>(shard_bytes, 1)) {
  fs::create_directories(shards_dir_);
  lock_name();  // before the leftovers below: they may be a live writer's open shard
  // A killed writer's leftovers: its open shard (.tmp) and a shard renamed
  // but never indexed. Published shards (with an .idx) are kept.
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(shards_dir_)) {
    const std::string name = entry.path().filename().string();
    if (auto seq = shard_seq(name, writer_, ".idx")) next_seq_ = std::max(next_seq_, *seq + 1);
    if (shard_seq(name, writer_, ".bin.tmp") || shard_seq(name, writer_, ".idx.tmp")) stale.push_back(entry.path());
    if (shard_seq(name, writer_, ".bin") && !fs::exists(index_path_of(entry.path()))) stale.push_back(entry.path());
  }
  for (const auto& path : stale) {
    log::info("data", log::str("feature cache: removing ", path.string(), " (unfinished by an earlier writer)"));
    fs::remove(path);
  }
}

void FeatureCacheWriter::lock_name() {
  const fs::path path = shards_dir_ / (writer_ + ".lock");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    throw DataError("feature cache " + shards_dir_.parent_path().string() + ": cannot open " + path.string() +
                    " to lock writer '" + writer_ + "': " + std::strerror(errno));
  // flock locks an open file description: a second writer of the name in
  // this process is refused as well as one in another process.
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char text[32] = {};
    const auto got = ::pread(fd, text, sizeof text - 1, 0);
    ::close(fd);
    std::string holder = got > 0 ? std::string(text, static_cast<size_t>(got)) : std::string();
    holder.erase(std::remove_if(holder.begin(), holder.end(), [](char c) { return !std::isdigit(static_cast<unsigned char>(c)); }), holder.end());
    if (error != EWOULDBLOCK)
      throw DataError("feature cache " + shards_dir_.parent_path().string() + ": cannot lock writer '" + writer_ +
                      "' (" + path.string() + "): " + std::strerror(error));
    throw DataError("feature cache " + shards_dir_.parent_path().string() + ": writer '" + writer_ +
                    "' is in use by another filler (" + (holder.empty() ? "pid unknown" : "pid " + holder) +
                    ", holding " + path.string() +
                    "); two writers of one name would remove each other's open shards. Wait for it to finish, or "
                    "give this one another writer name (another rank or replica)");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))
    log::warn("data", log::str("feature cache: could not write the pid into ", path.string(), " (", std::strerror(errno),
                               "); the lock holds all the same"));
  lock_fd_ = fd;
}

FeatureCacheWriter::~FeatureCacheWriter() {
  try {
    publish();
  } catch (const std::exception& e) {
    log::warn("data", log::str("feature cache: the last shard of writer '", writer_, "' was not published (", e.what(),
                               "); its ", entries_.size(), " sample(s) are written again by the next fill"));
  }
  // The lock file stays: removing it would let a third writer lock a new
  // file while a second still holds the old one.
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void FeatureCacheWriter::open_shard() {
  char name[64];
  std::snprintf(name, sizeof name, "-%06d.bin", next_seq_++);
  final_path_ = shards_dir_ / (writer_ + name);
  fs::path tmp = final_path_;
  tmp += ".tmp";
  file_ = std::make_unique<OutputFile>(tmp);
}

void FeatureCacheWriter::append(int64_t sample_id, uint64_t hash, int64_t rows, std::span<const unsigned char> record) {
  const uint64_t expected = static_cast<uint64_t>(rows) * feature_row_bytes(dtype_, width_);
  if (record.size() != expected)
    throw std::logic_error("feature cache: sample " + std::to_string(sample_id) + " has " +
                           std::to_string(record.size()) + " bytes, " + std::to_string(rows) + " rows need " +
                           std::to_string(expected));
  if (!file_) open_shard();
  FeatureIndexEntry entry{sample_id, file_->size_bytes(), static_cast<uint64_t>(rows), hash,
                          xxhash64(record.data(), record.size())};
  file_->write(record.data(), record.size());
  entries_.push_back(entry);
  unpublished_.insert(sample_id);
  bytes_written_ += record.size();
  ++samples_written_;
  if (file_->size_bytes() >= shard_bytes_) publish();
}

std::optional<fs::path> FeatureCacheWriter::publish() {
  if (!file_ || entries_.empty()) return std::nullopt;
  const uint64_t bin_bytes = file_->size_bytes();
  const fs::path tmp = file_->path();
  file_->close_synced();
  file_.reset();
  fs::rename(tmp, final_path_);
  const fs::path idx = index_path_of(final_path_);
  write_index(idx, dtype_, width_, bin_bytes, entries_);
  sync_directory(shards_dir_);
  entries_.clear();
  unpublished_.clear();
  ++shards_published_;
  return idx;
}

// ---- reader ----

FeatureCacheReader::FeatureCacheReader(fs::path dir) : dir_(std::move(dir)), manifest_(read_manifest(dir_)) {
  row_bytes_ = feature_row_bytes(manifest_.dtype, manifest_.width());
  std::unique_lock lock(mutex_);
  map_new_shards();
}

size_t FeatureCacheReader::refresh() {
  std::unique_lock lock(mutex_);
  return map_new_shards();
}

size_t FeatureCacheReader::map_new_shards() {
  const fs::path shards_dir = dir_ / "shards";
  if (!fs::is_directory(shards_dir)) return 0;
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(shards_dir))
    if (entry.path().extension() == ".idx" && !shard_names_.count(entry.path().filename().string()))
      found.push_back(entry.path());
  std::sort(found.begin(), found.end());  // the same order on every rank
  for (const auto& idx : found) {
    const auto index = read_index(idx);
    fs::path bin = idx;
    bin.replace_extension(".bin");
    if (index.dtype != manifest_.dtype || index.width != manifest_.width())
      throw DataError("feature cache shard " + bin.string() + " holds " + data::to_string(index.dtype) + " rows of " +
                      std::to_string(index.width) + " values, the manifest says " + data::to_string(manifest_.dtype) +
                      " rows of " + std::to_string(manifest_.width()) +
                      ": it belongs to another cache; delete it and its .idx");
    const uint64_t size = fs::exists(bin) ? fs::file_size(bin) : 0;
    if (size != index.bin_bytes) {
      std::vector<int64_t> lost;
      for (const auto& e : index.entries)
        if (!record_fits(e, row_bytes_, size)) lost.push_back(e.sample_id);
      throw DataError("feature cache shard " + bin.string() + " is truncated: " + std::to_string(size) +
                      " bytes, its index says " + std::to_string(index.bin_bytes) + "; samples " + list_ids(lost) +
                      " cannot be read. Delete it and its .idx and fill the cache again (only that shard's "
                      "samples are rewritten)");
    }
    const size_t shard = shards_.size();
    shards_.emplace_back(bin);
    shard_names_[idx.filename().string()] = shard;
    for (const auto& e : index.entries) {
      if (!record_fits(e, row_bytes_, index.bin_bytes))
        throw DataError("feature cache index " + idx.string() + ": sample " + std::to_string(e.sample_id) +
                        " lies past the end of its shard; delete the shard and its .idx and fill the cache again");
      // A sample written twice (a hybrid fill where ranks raced): the first wins.
      if (samples_.emplace(e.sample_id, Location{shard, e}).second) record_bytes_ += e.rows * row_bytes_;
      else ++duplicate_records_;
    }
  }
  return found.size();
}

int64_t FeatureCacheReader::duplicate_records() const {
  std::shared_lock lock(mutex_);
  return duplicate_records_;
}

std::optional<FeatureIndexEntry> FeatureCacheReader::entry(int64_t sample_id) const {
  std::shared_lock lock(mutex_);
  const auto it = samples_.find(sample_id);
  if (it == samples_.end()) return std::nullopt;
  return it->second.entry;
}

bool FeatureCacheReader::contains(int64_t sample_id) const {
  std::shared_lock lock(mutex_);
  return samples_.count(sample_id) > 0;
}

int64_t FeatureCacheReader::num_samples() const {
  std::shared_lock lock(mutex_);
  return static_cast<int64_t>(samples_.size());
}

uint64_t FeatureCacheReader::record_bytes() const {
  std::shared_lock lock(mutex_);
  return record_bytes_;
}

CachedFeatures FeatureCacheReader::get(int64_t sample_id, bool verify) const {
  std::shared_lock lock(mutex_);
  const auto it = samples_.find(sample_id);
  if (it == samples_.end())
    throw DataError("feature cache " + dir_.string() + " has no features for sample " + std::to_string(sample_id) +
                    "; fill it (dflow cache-features) or let the node fill it (fill: true)");
  const auto& [shard, entry] = it->second;
  const auto& file = shards_[shard];
  const auto bytes = file.bytes().subspan(entry.offset, entry.rows * row_bytes_);
  if (verify && xxhash64(bytes.data(), bytes.size()) != entry.checksum)
    throw DataError("feature cache shard " + file.path().string() + ": sample " + std::to_string(sample_id) +
                    " (bytes " + std::to_string(entry.offset) + ".." + std::to_string(entry.offset + bytes.size()) +
                    ") fails its checksum: the file is corrupt. Delete it and its .idx and fill the cache again "
                    "(only that shard's samples are rewritten)");
  return {bytes, static_cast<int64_t>(entry.rows), entry.tokens_hash};
}

std::vector<int64_t> FeatureCacheReader::missing(std::span<const int64_t> sample_ids) const {
  std::shared_lock lock(mutex_);
  std::vector<int64_t> out;
  for (int64_t id : sample_ids)
    if (!samples_.count(id)) out.push_back(id);
  return out;
}

fs::path FeatureCacheReader::shard_of(int64_t sample_id) const {
  std::shared_lock lock(mutex_);
  const auto it = samples_.find(sample_id);
  return it == samples_.end() ? fs::path() : shards_[it->second.shard].path();
}

std::string format_bytes(uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (b >= 1e12) std::snprintf(text, sizeof text, "%.2f TB", b / 1e12);
  else if (b >= 1e9) std::snprintf(text, sizeof text, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(text, sizeof text, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(text, sizeof text, "%.1f kB", b / 1e3);
  else std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
  return text;
}

void check_free_space(const fs::path& dir, uint64_t needed_bytes, const std::string& what) {
  fs::path probe = dir;
  while (!probe.empty() && !fs::exists(probe)) probe = probe.parent_path();
  if (probe.empty()) probe = ".";
  const auto space = fs::space(probe);
  if (space.available < needed_bytes)
    throw DataError(what + " needs " + format_bytes(needed_bytes) + " more in " + dir.string() + ", the disk has " +
                    format_bytes(space.available) +
                    " free; free space, choose another directory, or store fewer bytes per value (dtype: bfloat16 or "
                    "float8_e4m3)");
}

}  // namespace dflow::data
