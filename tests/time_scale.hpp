#pragma once
// Sanitizer builds run several times slower (tools/sanitize.sh sets
// DFLOW_TIME_SCALE: about 4 under AddressSanitizer, 15 under
// ThreadSanitizer). Limits against hangs and the simulated work of test
// nodes are stretched by this factor, so timing-shaped checks keep their
// meaning; no assertion about what a run computes changes.
#include <cstdlib>

namespace dflow::testing {

inline double time_scale() {
  const char* text = std::getenv("DFLOW_TIME_SCALE");
  const double scale = text != nullptr ? std::atof(text) : 1.0;
  return scale >= 1.0 ? scale : 1.0;
}

inline int scaled(int limit) { return static_cast<int>(limit * time_scale()); }

}  // namespace dflow::testing
