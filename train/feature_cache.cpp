#include "train/feature_cache.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "data/checksum.hpp"
#include "data/mapped_file.hpp"

namespace dflow::train {

namespace fs = std::filesystem;

namespace {

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

std::string file_hash(const fs::path& file) {
  if (!fs::exists(file)) return "none";
  data::MappedFile mapped(file);
  const auto bytes = mapped.bytes();
  return hex(data::xxhash64(bytes.data(), bytes.size()));
}

torch::Tensor byte_view(std::span<const unsigned char> bytes, int64_t rows, int64_t row_bytes) {
  // Read only: from_blob wants a non-const pointer.
  return torch::from_blob(const_cast<unsigned char*>(bytes.data()), {rows, row_bytes}, torch::kUInt8);
}

}  // namespace

std::string weights_fingerprint(const fs::path& target_dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(target_dir))
    if (entry.path().extension() == ".safetensors") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  uint64_t h = 0;
  constexpr uint64_t kStripe = 64 << 10, kStripes = 16;
  for (const auto& file : files) {
    data::MappedFile mapped(file);
    const auto bytes = mapped.bytes();
    const std::string name = file.filename().string();
    h = data::hash_combine(h, data::xxhash64(name.data(), name.size()));
    h = data::hash_combine(h, bytes.size());
    if (bytes.size() <= kStripe * kStripes) {
      h = data::hash_combine(h, data::xxhash64(bytes.data(), bytes.size()));
      continue;
    }
    uint64_t header = 0;  // safetensors: u64 header length, then the JSON header
    std::memcpy(&header, bytes.data(), sizeof header);
    h = data::hash_combine(h, data::xxhash64(bytes.data(), std::min<uint64_t>(8 + header, bytes.size())));
    for (uint64_t i = 0; i < kStripes; ++i) {
      const uint64_t at = (bytes.size() - kStripe) * i / (kStripes - 1);
      h = data::hash_combine(h, data::xxhash64(bytes.data() + at, kStripe));
    }
  }
  return hex(h);
}

data::FeatureCacheManifest feature_manifest_for(const fs::path& target_dir, const target::HFConfig& config,
                                                torch::Dtype target_dtype, const std::vector<int64_t>& layer_ids) {
  data::FeatureCacheManifest m;
  m.target_config = file_hash(target_dir / "config.json");
  m.target_weights = weights_fingerprint(target_dir);
  m.tokenizer = file_hash(target_dir / "tokenizer.json");
  m.target_dtype = target_dtype == torch::kFloat32    ? "float32"
                   : target_dtype == torch::kBFloat16 ? "bfloat16"
                   : target_dtype == torch::kFloat16  ? "float16"
                   : target_dtype == torch::kFloat64  ? "float64"
                                                      : std::string(c10::toString(target_dtype));
  m.target_path = target_dir.string();
  m.layer_ids = layer_ids;
  m.hidden_size = config.hidden_size;
  return m;
}

void encode_feature_rows(const torch::Tensor& rows, data::FeatureDtype dtype, std::vector<unsigned char>& out) {
  TORCH_CHECK(rows.dim() == 2, "feature rows must be [T, W], got ", rows.sizes());
  torch::Tensor encoded;  // [T, row_bytes] uint8, contiguous, CPU
  switch (dtype) {
    case data::FeatureDtype::float32:
      encoded = rows.to(torch::kCPU, torch::kFloat32).contiguous().view(torch::kUInt8);
      break;
    case data::FeatureDtype::bfloat16:
      encoded = rows.to(torch::kCPU, torch::kBFloat16).contiguous().view(torch::kUInt8);
      break;
    case data::FeatureDtype::float8_e4m3: {
      // Per row: scale so that the largest magnitude lands on e4m3's largest
      // finite value (448); an all-zero row keeps scale 1.
      auto values = rows.to(torch::kCPU, torch::kFloat32);
      auto scale = values.abs().amax(1, /*keepdim=*/true) / 448.0f;
      scale = torch::where(scale > 0, scale, torch::ones_like(scale));
      auto quantized = (values / scale).to(torch::kFloat8_e4m3fn).contiguous().view(torch::kUInt8);
      encoded = torch::cat({scale.contiguous().view(torch::kUInt8), quantized}, 1);
      break;
    }
  }
  const auto* begin = encoded.data_ptr<uint8_t>();
  out.insert(out.end(), begin, begin + encoded.numel());
}

void decode_feature_rows(std::span<const unsigned char> record, int64_t rows, data::FeatureDtype dtype,
                         torch::Tensor out) {
  TORCH_CHECK(out.dim() == 2 && out.size(0) == rows, "decode target must be [", rows, ", W], got ", out.sizes());
  const int64_t width = out.size(1);
  const auto row_bytes = static_cast<int64_t>(data::feature_row_bytes(dtype, width));
  TORCH_CHECK(static_cast<int64_t>(record.size()) == rows * row_bytes, "a record of ", record.size(), " bytes for ",
              rows, " rows of ", row_bytes);
  if (rows == 0) return;
  const auto raw = byte_view(record, rows, row_bytes);
  switch (dtype) {
    case data::FeatureDtype::float32: out.copy_(raw.view(torch::kFloat32)); break;
    case data::FeatureDtype::bfloat16: out.copy_(raw.view(torch::kBFloat16)); break;
    case data::FeatureDtype::float8_e4m3: {
      const auto scale = raw.narrow(1, 0, 4).contiguous().view(torch::kFloat32);  // [T, 1]
      const auto values = raw.narrow(1, 4, width).contiguous().view(torch::kFloat8_e4m3fn);
      out.copy_(values.to(torch::kFloat32) * scale);
      break;
    }
  }
}

}  // namespace dflow::train
