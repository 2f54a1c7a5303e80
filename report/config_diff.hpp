#pragma once
// What differs between the resolved configs of several runs. A run's resolved
// config is saved only in its checkpoints (checkpoints/step-N/config.yaml),
// so the newest one that holds it is read; a run without one yet has none.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dflow::report {

// Dotted keys ("train.lr") to their YAML text ("0.02", "[64, 128]"). Pipeline
// nodes by name ("pipeline.nodes.pad.type", "pipeline.nodes.pad.params.token_budget",
// "pipeline.nodes.target.replicas", 1 when absent) and edges by their ends
// ("pipeline.edges.load->pad.capacity"), so that reordering them is no difference.
using FlatConfig = std::map<std::string, std::string>;

// Throws std::runtime_error when the text is not YAML.
FlatConfig flatten_config(const std::string& yaml_text);

struct RunConfig {
  std::filesystem::path file;  // the config.yaml read
  FlatConfig values;
};

// The config.yaml of the run's newest checkpoint (step-N or best-step-N, the
// highest N that has one); nullopt when no checkpoint holds one. Throws
// std::runtime_error naming the file when it is not YAML.
std::optional<RunConfig> read_run_config(const std::filesystem::path& run_dir);

// One key whose value is not the same in every run that has a config.
struct ConfigDifference {
  std::string key;
  std::vector<std::string> values;  // one per run: the YAML text, "(absent)", or "?" for a run without config
};

// configs[i] is run i's config, nullptr when it has none. Keys that always
// differ between runs (kIgnoredKeys: where each run writes, and its label) are left out.
// Empty when fewer than two runs have a config.
std::vector<ConfigDifference> diff_configs(const std::vector<const FlatConfig*>& configs);

inline constexpr const char* kIgnoredKeys[] = {"run.out_dir", "run.name"};
inline constexpr const char* kAbsent = "(absent)";
inline constexpr const char* kUnknown = "?";

}  // namespace dflow::report
