#pragma once
// With several ranks: the step's gradients and sums, all-reduced, so that a
// step over W ranks equals one rank's step over the same global batch (up to
// the order of float additions). Called by accumulate while it holds the model
// token, so every rank issues the same collectives in the same order.
#include "nodes/messages.hpp"
#include "nodes/run_state.hpp"

namespace dflow::nodes {

// Sums gradients (bucketed) and the step's numerators and denominators over
// the ranks; sample ids and lengths come out in plan order (as one rank has
// them); step.rank_busy_s gets each rank's time from its previous step's
// all-reduce to this one.
void allreduce_step(RunState& state, StepStats& step);

}  // namespace dflow::nodes
