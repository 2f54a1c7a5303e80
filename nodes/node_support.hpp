#pragma once
// Small helpers every training node uses: the run state from the context,
// and the fault-injection hooks (delay / exception) a node honours per step.
#include <chrono>
#include <stdexcept>
#include <thread>

#include "graph/node_body.hpp"
#include "nodes/messages.hpp"
#include "nodes/run_state.hpp"

namespace dflow::nodes {

inline RunState& run_state(const graph::NodeContext& context) { return *context.user_as<RunState*>(); }

// Applies declared `delay` (from its step on) and `exception` (at its step) faults.
inline void inject_node_faults(const RunState& state, const std::string& node, int64_t step) {
  for (const auto& f : state.config.faults) {
    if (f.node != node) continue;
    if (f.kind == "delay" && step >= f.step)
      std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
    if (f.kind == "exception" && step == f.step)
      throw std::runtime_error("injected fault (faults: kind exception) at step " + std::to_string(step));
  }
}

// "batch 12 of epoch 0 (step 7, micro 1/2, 14 samples x 128 tokens, first sample 803)".
inline std::string describe_batch(const data::PlannedBatch& plan, const StepPosition& position) {
  return "batch " + std::to_string(plan.index_in_epoch) + " of epoch " + std::to_string(plan.epoch) + " (step " +
         std::to_string(position.global_step + 1) + ", micro " + std::to_string(position.micro_in_step + 1) + "/" +
         std::to_string(position.micros_in_step) + ", " + std::to_string(plan.rows()) + " samples x " +
         std::to_string(plan.padded_length) + " tokens, first sample " +
         (plan.sample_ids.empty() ? std::string("-") : std::to_string(plan.sample_ids.front())) + ")";
}

// Runs `body`, adding the batch to any error's message.
template <class Body>
void with_batch_context(const data::PlannedBatch& plan, const StepPosition& position, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    throw std::runtime_error(describe_batch(plan, position) + ": " + e.what());
  }
}

}  // namespace dflow::nodes
