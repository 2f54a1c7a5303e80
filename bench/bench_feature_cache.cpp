// Read throughput of the feature cache's reader alone: every record of a
// cache read through the memory map (checksum verified), then also decoded
// into a float32 tensor as features.cached does. Compare with a sequential
// read of the same shard files (tools/cache_bench.sh runs `dd` beside it).
//   bench_feature_cache CACHE_DIR [REPEATS] [once]
// `once`: one read + checksum pass only (for a cold page cache: later
// passes would read from memory).
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "data/feature_cache.hpp"
#include "train/feature_cache.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CACHE_DIR [REPEATS]\n", argv[0]);
    return 2;
  }
  torch::set_num_threads(1);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  dflow::data::FeatureCacheReader reader(argv[1]);
  const auto& manifest = reader.manifest();
  const int64_t samples = reader.num_samples();
  const double bytes = static_cast<double>(reader.record_bytes());
  auto run = [&](bool decode, bool verify) {
    auto out = torch::empty({1 << 14, manifest.width()}, torch::kFloat32);
    double best = 1e30;
    for (int r = 0; r < repeats; ++r) {
      const auto start = std::chrono::steady_clock::now();
      uint64_t touched = 0;
      for (int64_t id = 0; id < samples; ++id) {
        if (!reader.contains(id)) continue;
        const auto record = reader.get(id, verify);
        if (decode) dflow::train::decode_feature_rows(record.bytes, record.rows, manifest.dtype, out.narrow(0, 0, record.rows));
        else touched += record.bytes.front() + record.bytes.back();
      }
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      if (touched == 1) std::puts("");  // keeps the reads
    }
    return best;
  };
  if (argc > 3 && std::string(argv[3]) == "once") {
    const double s = run(false, true);
    std::printf("RESULT read + checksum, one pass  %.2f GB/s (%.1f MB of %s records)\n", bytes / s / 1e9, bytes / 1e6,
                dflow::data::to_string(manifest.dtype).c_str());
    return 0;
  }
  const double verify_s = run(false, true), decode_s = run(true, true), decode_only_s = run(true, false);
  std::printf("RESULT cache %s: %lld samples, %.1f MB of %s records\n", argv[1], static_cast<long long>(samples),
              bytes / 1e6, dflow::data::to_string(manifest.dtype).c_str());
  std::printf("RESULT read + checksum      %.2f GB/s\n", bytes / verify_s / 1e9);
  std::printf("RESULT read + checksum + decode to float32  %.2f GB/s\n", bytes / decode_s / 1e9);
  std::printf("RESULT read + decode (verify: false)  %.2f GB/s\n", bytes / decode_only_s / 1e9);
  return 0;
}
