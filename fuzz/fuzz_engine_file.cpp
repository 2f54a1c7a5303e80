// vLLM/speculators engine files (train/engine_files.cpp, hs_<i>.safetensors,
// FP8 with hs-connectors' scales among them): the input is the whole file,
// probed and read as features.engine does. Only data::DataError may come out;
// a file that reads must hold what its shape says (hidden_bytes of positions
// x slots x hidden_size values of its dtype, one token a position, and for
// FP8 one positive finite scale a position), touched here so ASan sees any
// read outside them.
#include <cmath>
#include <cstdlib>

#include "data/data_error.hpp"
#include "fuzz/fuzz_common.hpp"
#include "train/engine_files.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow;
  const auto path = train::engine_file_path(fuzz::scratch_dir(), 0);
  fuzz::write_file(path, data, size);
  try {
    if (train::probe_engine_file(path) != train::EngineFileState::ready) return 0;
    const auto sample = train::read_engine_file(path);
    const size_t bytes = sample.dtype_name == "F8_E4M3" ? 1 : sample.dtype_name == "F32" ? 4 : 2;
    const auto values = static_cast<size_t>(sample.positions * sample.slots * sample.hidden_size);
    if (sample.hidden_bytes.size() != values * bytes) std::abort();
    if (sample.token_ids.size() != static_cast<size_t>(sample.positions)) std::abort();
    if (sample.dtype_name == "F8_E4M3") {
      if (sample.scales.size() != static_cast<size_t>(sample.positions)) std::abort();
      for (const float scale : sample.scales)
        if (!(std::isfinite(scale) && scale > 0)) std::abort();
    } else if (!sample.scales.empty()) {
      std::abort();
    }
    volatile unsigned char sink = 0;
    for (const unsigned char b : sample.hidden_bytes) sink = sink ^ b;
  } catch (const data::DataError&) {
  }
  return 0;
}
