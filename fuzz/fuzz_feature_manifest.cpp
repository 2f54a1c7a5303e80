// A feature cache's manifest.json (data/feature_cache.cpp
// FeatureCacheManifest::from_json, read_manifest): only DataError may come
// out, and an accepted manifest must survive to_json -> from_json unchanged.
#include <cstdlib>
#include <string>

#include "data/data_error.hpp"
#include "data/feature_cache.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::data;
  const std::string text(dflow::fuzz::as_text(data, size));
  const auto file = dflow::fuzz::scratch_dir() / "manifest.json";
  try {
    const auto m = FeatureCacheManifest::from_json(text, file);
    const auto again = FeatureCacheManifest::from_json(m.to_json(), file);
    if (!manifest_differences(m, again).empty() || again.to_json() != m.to_json()) std::abort();
    (void)m.width();
  } catch (const DataError&) {
  }
  return 0;
}
