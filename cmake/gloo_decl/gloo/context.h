#pragma once
// See ../README.md: declarations only, for c10d's ProcessGroupGloo.hpp.
#include <chrono>

namespace gloo {

class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);  // defined in the wheel; dflow never calls it
};

}  // namespace gloo
