#pragma once
// The optimizers an optimizer_step node type picks (RunHooks::optimizer):
//   optimizer_step.adamw  AdamW on every parameter (train.lr, train.weight_decay, train.adam_*)
//   optimizer_step.muon   Muon on the 2-D hidden weights (params: lr, weight_decay, momentum,
//                         ns_steps), AdamW as above on the rest
// and what of their params a resume must keep (another optimizer, or other
// Muon params, is refused).
#include <string>
#include <vector>

#include "nodes/node_kind.hpp"

namespace dflow::nodes {

// "adamw" or "muon"; throws std::logic_error for another.
RunHooks optimizer_hooks(const std::string& optimizer);
// The kind's check_params: reads and checks its params (none for adamw).
void check_optimizer_params(const std::string& optimizer, config::YamlSection& params);
// The kind's params as `dflow nodes` lists them (none for adamw).
std::vector<config::KeyDoc> optimizer_params(const std::string& optimizer);

}  // namespace dflow::nodes
