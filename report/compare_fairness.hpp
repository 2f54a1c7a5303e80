#pragma once
// Which compared runs a metric may rank. A loss means the same thing only
// between runs on the same data and target, with the same block size and the
// same objective; tau only between runs that measured it on the same
// prompts, with the same temperature and token budget, against the same
// target. What a node's params make of its figure is the node kind's to say
// (RunSummary::terms, asked by the caller: report/ names no node kind). Runs
// that differ only in their seed are one variant measured several times:
// grouped, never ranked against each other.
#include <map>
#include <string>
#include <vector>

#include "report/compare.hpp"

namespace dflow::report {

// The run config keys that define what any run's loss means, whatever its nodes.
inline constexpr const char* kLossRunKeys[] = {"data.train", "data.max_length", "model.target.path",
                                               "model.drafter.block_size"};

// The keys (dotted, as FlatConfig) and values that define what a run's loss
// means: kLossRunKeys ("(default)" where the config has none) and its nodes'
// loss terms. Nullopt when the run has no config, or its terms are unknown.
std::optional<std::map<std::string, std::string>> loss_definition(const RunSummary& run);

// The same for tau: its nodes' tau terms (empty when none measures tau).
std::optional<std::map<std::string, std::string>> tau_definition(const RunSummary& run);

// "" when every run has the same definition; else each key that differs,
// with each distinct value and the runs that have it:
// "model.drafter.block_size is 16 in a, b and 8 in c" ("; " between keys). A
// run without a definition (no config yet, or terms that could not be read)
// makes it unknown: its name is said, with `unknown_because` of it.
std::string why_not_comparable(const std::vector<std::optional<std::map<std::string, std::string>>>& definitions,
                               const std::vector<std::string>& names, const std::vector<std::string>& unknown_because);

// The config without the keys that only tell runs of one variant apart
// (run.seed, run.name, run.out_dir): equal for runs that differ only in seed.
FlatConfig variant_key(const FlatConfig& config);

}  // namespace dflow::report
