#pragma once
// `dflow sweep`'s grid: each `--vary KEY=v1,v2,...` an axis, times seeds; every
// combination one variant with its own --set overrides and a directory name
// that says what it varies ("lr=0.02+optimizer=optimizer_step.muon+seed=1235").
// Any key --set takes is an axis, pipeline nodes and edges included.
#include <cstdint>
#include <string>
#include <vector>

namespace dflow::config {

struct SweepAxis {
  std::string key;                  // "train.lr", "pipeline.nodes.optimizer.type"; "variant" for named variants
  std::vector<std::string> values;  // as written, each a YAML value; the names of named variants
  // Named variants only: each value's overrides ("key=value"), which may set
  // several keys at once (a recipe: an optimizer and its learning rate).
  std::vector<std::vector<std::string>> sets;
};

// "KEY=v1,v2,...": commas inside [...], {...} or quotes do not split
// ("model.drafter.layer_types=[sliding_attention, full_attention],[full_attention, full_attention]").
// Throws ConfigError naming the --vary text for a missing '=', an empty value
// or a value given twice.
SweepAxis parse_vary(const std::string& text);

// "NAME: KEY=VALUE KEY=VALUE ..." (or "NAME" alone: the config as it is)
// added to `axis`, the named variants' axis: space-separated overrides,
// spaces inside [...] or {...} kept. Throws ConfigError naming the --variant
// text for a name given twice, a name that is no plain directory name (only
// letters, digits, '.', '_' and '-', not "." or ".."), or an override
// without '='.
void add_named_variant(SweepAxis& axis, const std::string& text);

struct SweepVariant {
  std::string name;                    // the run's directory name under the sweep's --out
  std::vector<std::string> overrides;  // "key=value" per axis, then run.seed
  uint64_t seed = 0;
};

// Every combination, the first axis slowest, then each seed of
// first_seed .. first_seed + seeds - 1. One variant "base" when there is
// nothing to vary. Throws ConfigError for an axis given twice, seeds < 1, or
// a key the sweep sets itself (run.seed, run.out_dir, run.name) varied or set
// by a named variant.
std::vector<SweepVariant> sweep_variants(const std::vector<SweepAxis>& axes, int seeds, uint64_t first_seed);

// The sweep's own --set overrides ("key=value"): run.seed there is the first
// seed, but run.out_dir and run.name are the sweep's (--out/NAME and NAME)
// and would be replaced in every run. Throws ConfigError naming the --set.
void refuse_sweep_owned_sets(const std::vector<std::string>& sets);

// The short label of an axis in names: "lr" for train.lr, "optimizer" for
// pipeline.nodes.optimizer.type, "drafter.objective" for
// pipeline.nodes.drafter.params.objective, "load-pad.capacity" for an edge;
// the whole key when two axes would share a label.
std::string axis_label(const std::string& key, const std::vector<std::string>& all_keys);

}  // namespace dflow::config
