#pragma once
// The all-reduce of one optimizer step over the ranks: the gradients of the
// state the step's model token carries, then the step's totals (every summed
// field of StepTotals), each rank's busy time, and which planned samples were
// trained on, so that every rank sees the global batch.
#include "nodes/messages.hpp"
#include "nodes/run_context.hpp"

namespace dflow::nodes {

void allreduce_step(const RunContext& run, StepStats& step);

}  // namespace dflow::nodes
