// What a features.cached run pays at start-up for its cache: opening the
// reader (manifest and every shard's index) and checking the cached records
// against the dataset (check_cached_samples), best of REPEATS, warm page
// cache. tools/cache_bench.sh's STARTUP part makes a cache of a few thousand
// samples and runs this.
//   bench_cache_startup CONFIG CACHE_DIR [REPEATS] [--set KEY=VALUE ...]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/feature_cache.hpp"
#include "nodes/features_cached.hpp"
#include "nodes/run_context.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s CONFIG CACHE_DIR [REPEATS] [--set KEY=VALUE ...]\n", argv[0]);
    return 2;
  }
  int repeats = 5;
  std::vector<std::string> overrides;
  for (int i = 3; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--set" && i + 1 < argc) overrides.push_back(argv[++i]);
    else repeats = std::atoi(argv[i]);
  }
  const auto config = dflow::config::load_config(argv[1], overrides);
  dflow::nodes::RunOptions options;
  options.prepare_nodes = false;  // the bench checks the cache itself, timed
  dflow::nodes::RunContext run(config, options, nullptr);
  double open_best = 1e30, check_best = 1e30;
  int64_t samples = 0;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    dflow::data::FeatureCacheReader reader(argv[2]);
    const auto t1 = std::chrono::steady_clock::now();
    dflow::nodes::check_cached_samples(run, reader);
    const auto t2 = std::chrono::steady_clock::now();
    samples = reader.num_samples();
    open_best = std::min(open_best, std::chrono::duration<double>(t1 - t0).count());
    check_best = std::min(check_best, std::chrono::duration<double>(t2 - t1).count());
  }
  std::printf("RESULT start-up on %lld cached samples (dataset %lld): open the reader %.2f ms, check the samples %.2f ms "
              "(best of %d, warm)\n",
              static_cast<long long>(samples), static_cast<long long>(run.dataset.size()), open_best * 1e3,
              check_best * 1e3, repeats);
  return 0;
}
