#pragma once
// What every training node reaches through its NodeContext: the run's
// immutable context, its journal, and the home of the model token's state;
// plus the fault-injection hooks (delay / exception) a node honours per step.
#include <chrono>
#include <stdexcept>
#include <thread>

#include "config/errors.hpp"
#include "graph/node_body.hpp"
#include "nodes/messages.hpp"
#include "nodes/run_context.hpp"
#include "nodes/run_journal.hpp"
#include "nodes/trainable_state.hpp"
#include "train/checkpoint_writer.hpp"

namespace dflow::nodes {

// Handed to the graph builder as the nodes' user context.
struct RunEnvironment {
  const RunContext& run;
  RunJournal& journal;
  StateHome& home;
  // Every checkpoint write of the run (background, best, halt), one at a time.
  train::CheckpointWriter& checkpoints;
  // A fresh run's untrained drafter, for an eval node's baseline (null when resumed or without one).
  const train::CheckpointState* untrained = nullptr;
};

inline const RunEnvironment& environment(const graph::NodeContext& context) {
  return *context.user_as<const RunEnvironment*>();
}

// The target replica a target-running node's replica `context.replica`
// computes with; refuses (naming the node) replicas that are not one per
// devices.target entry.
inline const target::TargetModel& target_replica(const graph::NodeContext& context) {
  const auto& run = environment(context).run;
  if (context.replicas != static_cast<int>(run.targets.size()))
    throw ConfigError(context.params.mark_of(""), "pipeline.nodes." + context.name + ".replicas",
                      "node '" + context.name + "' has " + std::to_string(context.replicas) +
                          " replicas but devices.target lists " + std::to_string(run.targets.size()) +
                          " devices: one replica per target device");
  return *run.targets.at(static_cast<size_t>(context.replica));
}

// Applies declared `delay` (from its step on) and `exception` (at its step) faults.
inline void inject_node_faults(const RunContext& run, const std::string& node, int64_t step) {
  for (const auto& f : run.config.faults) {
    if (f.node != node || (f.rank >= 0 && f.rank != run.options.rank)) continue;
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
