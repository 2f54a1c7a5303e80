#pragma once
// Which compared runs a metric may rank. A loss means the same thing only
// between runs with the same objective, position weighting and block size;
// tau only between runs that measured it on the same prompts, with the same
// temperature and token budget, against the same target. Runs that differ
// only in their seed are one variant measured several times: grouped, never
// ranked against each other.
#include <map>
#include <string>
#include <vector>

#include "report/config_diff.hpp"

namespace dflow::report {

// The keys (dotted, as FlatConfig) and values that define what a run's loss
// means: model.drafter.block_size, train.loss_decay_gamma, and each drafter
// node's type and params (its objective, D-PACE's alpha, ...) except those
// that change only how it is computed (kLossNeutralParams). A key absent
// from the config reads "(default)".
std::map<std::string, std::string> loss_definition(const FlatConfig& config);

// The same for tau: the target (model.target.path) and, for the eval node,
// its prompts, max_prompts, max_new_tokens and temperature (its params, else
// the eval section's). Empty when the run declares no eval node.
std::map<std::string, std::string> tau_definition(const FlatConfig& config);

inline constexpr const char* kLossNeutralParams[] = {"recompute"};

// "" when every config has the same definition; else each key that
// differs, with each distinct value and the runs that have it:
// "model.drafter.block_size is 16 in a, b and 8 in c" ("; " between keys). A null config (a run
// without a checkpoint yet) makes the definitions unknown: its name is said.
std::string why_not_comparable(const std::vector<const FlatConfig*>& configs, const std::vector<std::string>& names,
                               std::map<std::string, std::string> (*definition)(const FlatConfig&));

// The config without the keys that only tell runs of one variant apart
// (run.seed, run.name, run.out_dir): equal for runs that differ only in seed.
FlatConfig variant_key(const FlatConfig& config);

}  // namespace dflow::report
