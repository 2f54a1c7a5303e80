#pragma once
// The epoch plan's options of a run: what training plans, and what `dflow
// extraction-order` walks to write the order training reads the samples in.
#include "config/config.hpp"
#include "data/plan.hpp"

namespace dflow::nodes {

struct Batching;  // nodes/run_context.hpp

// For `config` over `world_size` ranks with the pipeline's `batching`.
data::PlanOptions plan_options(const config::Config& config, const Batching& batching, int world_size, int epoch);

}  // namespace dflow::nodes
