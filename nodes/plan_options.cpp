#include "nodes/plan_options.hpp"

#include "nodes/run_context.hpp"

namespace dflow::nodes {

data::PlanOptions plan_options(const config::Config& config, const Batching& batching, int world_size, int epoch) {
  data::PlanOptions o;
  o.seed = config.run.seed;
  o.epoch = epoch;
  o.buckets = config.data.buckets;
  o.tokens_per_batch = config.data.tokens_per_batch;
  o.max_length = config.data.max_length;
  o.batching = batching.policy;
  o.grad_accum = config.train.grad_accum;
  o.world_size = world_size;
  return o;
}

}  // namespace dflow::nodes
