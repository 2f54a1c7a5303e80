#pragma once
// A config whose node `node` sleeps `seconds` more on every step from
// `from_step` on (a `delay` fault): the node then bounds the run by a known
// margin, whatever else shares the machine. (train_fixture.hpp's
// stopped_after is the other fault the end-to-end tests add this way.)
#include <string>

#include "config/config.hpp"

namespace dflow::testing {

inline config::Config slowed(config::Config c, const std::string& node, double seconds, int64_t from_step = 0) {
  config::FaultDecl delay;
  delay.kind = "delay";
  delay.node = node;
  delay.step = from_step;
  delay.seconds = seconds;
  c.faults.push_back(delay);
  return c;
}

}  // namespace dflow::testing
