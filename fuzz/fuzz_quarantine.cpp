// The quarantine file (data/quarantine.cpp read_quarantine): the input is the
// whole file. Only DataError may come out.
#include "data/data_error.hpp"
#include "data/quarantine.hpp"
#include "fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = dflow::fuzz::scratch_dir() / "quarantine.jsonl";
  dflow::fuzz::write_file(path, data, size);
  try {
    const auto ids = dflow::data::read_quarantine(path);
    for (const int64_t id : ids) {
      if (id < 0) __builtin_trap();
    }
  } catch (const dflow::data::DataError&) {
  }
  return 0;
}
