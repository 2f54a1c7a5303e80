#pragma once
// The per-step record (invariant 4: exactly one optimizer step, exact sums)
// and the guard decision that goes into it.
#include <nlohmann/json.hpp>
#include <string>

#include "nodes/messages.hpp"
#include "nodes/run_state.hpp"

namespace dflow::nodes {

// Deterministic training fields at the top level; wall-clock fields under
// "time" (they vary run to run; everything else must not).
nlohmann::json make_step_record(RunState& state, const StepStats& step, double loss, double grad_norm, double lr,
                                const train::GuardVerdict& guard);

}  // namespace dflow::nodes
