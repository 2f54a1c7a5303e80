#pragma once
// Where training stands: one object for the run's progress, held by the model
// token's state (nodes/trainable_state.hpp). `completed_steps` optimizer steps
// are done and `cursor` names the first planned batch not yet trained on (it
// always sits on a step boundary). Checkpoints save it with to_json() and a
// resume reads it back with from_json(); cadences (checkpoints, evaluations,
// rollback snapshots) ask due().
#include <cstdint>
#include <nlohmann/json.hpp>

#include "data/plan.hpp"

namespace dflow::nodes {

// Where a micro-batch sits in the run (invariant 5: progress is unambiguous).
struct StepPosition {
  int epoch = 0;                 // 0-based
  int64_t step_in_epoch = 0;     // 0-based
  int64_t steps_per_epoch = 0;   // exact, from the plan
  int64_t global_step = 0;       // 0-based optimizer step this micro-batch belongs to
  int micro_in_step = 0;
  int micros_in_step = 0;
  bool last_micro() const { return micro_in_step + 1 == micros_in_step; }
};

struct Progress {
  int64_t completed_steps = 0;  // global optimizer steps done (global_step of the last record)
  data::PlanCursor cursor;      // first batch not yet trained on

  // True every `every_steps` completed steps (never for every_steps <= 0).
  bool due(int64_t every_steps) const { return every_steps > 0 && completed_steps % every_steps == 0; }
  // The step at `position` is done; each step spans `batches_per_step` planned batches.
  void complete_step(const StepPosition& position, int64_t batches_per_step);

  // {"global_step", "epoch", "next_batch"}: the keys checkpoints have always held.
  nlohmann::json to_json() const;
  // Throws naming the missing key.
  static Progress from_json(const nlohmann::json& json);
};

}  // namespace dflow::nodes
