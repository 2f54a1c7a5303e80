#pragma once
// The per-step record (invariant 4: exactly one optimizer step, exact sums)
// and the guard decision that goes into it.
#include <nlohmann/json.hpp>
#include <string>

#include "nodes/messages.hpp"
#include "nodes/run_state.hpp"

namespace dflow::nodes {

struct GuardDecision {
  bool apply = true;     // take the optimizer update
  bool halt = false;     // stop the run (policy halt)
  std::string reason;    // "non-finite loss", ...
  std::string action;    // "applied", "skipped", "halted"
};

// policy none applies everything; halt stops on a non-finite loss or grad
// norm; skip/quarantine/rollback skip a non-finite update.
GuardDecision decide_guard(const std::string& policy, double loss, double grad_norm);

// Deterministic training fields at the top level; wall-clock fields under
// "time" (they vary run to run; everything else must not).
nlohmann::json make_step_record(RunState& state, const StepStats& step, double loss, double grad_norm, double lr,
                                const GuardDecision& guard);

}  // namespace dflow::nodes
