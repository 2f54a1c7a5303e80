// prepare's JSONL lines (data/jsonl_sample.cpp): one line, under two rule
// sets. An accepted sample must satisfy what the rules promise.
#include <algorithm>
#include <cstdlib>

#include "data/data_error.hpp"
#include "data/jsonl_sample.hpp"
#include "fuzz/fuzz_common.hpp"

namespace {

void check(std::string_view line, const dflow::data::SampleRules& rules) {
  using namespace dflow::data;
  ParsedSample sample;
  sample.input_ids.assign(3, 7);  // stale contents the parser must replace
  sample.loss_mask.assign(5, 1);
  const auto rejection = parse_jsonl_sample(line, 1, rules, sample);
  if (rejection) {
    if (rejection->str().empty()) std::abort();
    return;
  }
  const auto limit = rules.vocab_size > 0 ? rules.vocab_size : (int64_t{1} << 31);
  if (sample.input_ids.empty() || sample.input_ids.size() != sample.loss_mask.size() ||
      sample.input_ids.size() > static_cast<size_t>(rules.max_length) ||
      std::any_of(sample.input_ids.begin(), sample.input_ids.end(), [&](int32_t id) { return id < 0 || id >= limit; }) ||
      std::any_of(sample.loss_mask.begin(), sample.loss_mask.end(), [](uint8_t m) { return m > 1; }) ||
      std::find(sample.loss_mask.begin(), sample.loss_mask.end(), 1) == sample.loss_mask.end()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace dflow::data;
  const auto line = dflow::fuzz::as_text(data, size);
  check(line, SampleRules{512, TooLongPolicy::Truncate, 0});
  check(line, SampleRules{4, TooLongPolicy::Skip, 300});
  check(line, SampleRules{3, TooLongPolicy::Truncate, 300});
  return 0;
}
