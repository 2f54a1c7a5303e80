#pragma once
// Engine hidden-state files (hs_<i>.safetensors, vLLM's layout) for the
// features.engine tests, written two ways: from dflow's own target in
// training's batch shapes (the same float32 features target_forward computes,
// so training from them is bit for bit the online run's), and by
// tools/write_engine_features.py from Hugging Face's forward, as an engine
// would write them.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "formats/safetensors.hpp"
#include "nodes/feature_source.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "test_paths.hpp"
#include "tools/run_command.hpp"
#include "train/engine_files.hpp"
#include "train_fixture.hpp"

namespace dflow::testing {

// The config with its target node reading engine files from `dir`.
inline config::Config from_engine(config::Config config, const std::filesystem::path& dir,
                                  const std::string& params = "engine_layer_ids: [2, 4], dtype: float32") {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "target") {
      n.type = "features.engine";
      n.params.reset(YAML::Load("{dir: " + dir.string() + ", " + params + "}"));
    }
  return config;
}

// Slots [engine id l + 1 for each of config's feature layers l, increasing
// and each once as vLLM writes them, then the last layer] (the demo's
// [1, 1, 1]: engine ids [2, 4]): the features target_forward computes for
// epoch 0's batches; the last slot (the layer before the final norm, which
// dflow's target does not expose) holds zeros, and no drafter here reads it.
inline void write_dflow_features_as_engine_files(const config::Config& config, const std::filesystem::path& dir) {
  nodes::RunOptions options;
  options.prepare_nodes = false;
  nodes::RunContext run(config, options, nullptr);
  const auto& target = *run.targets.front();
  std::filesystem::create_directories(dir);
  const std::set<int64_t> distinct(run.feature_layer_ids.begin(), run.feature_layer_ids.end());
  const std::vector<int64_t> layers(distinct.begin(), distinct.end());
  for (const auto& plan : run.plans().get(0)->batches()) {
    const auto padded = nodes::collate_padded(run, plan, {}, 0, false);
    const auto hidden = torch::stack(target.forward(padded.input_ids, layers, false).hidden_states, 2);
    for (const auto& place : nodes::sample_places(plan, run.dataset.lengths())) {
      auto rows = hidden[place.row].narrow(0, place.first, place.length);  // [L, n, H]
      auto slots = torch::cat({rows, torch::zeros({place.length, 1, rows.size(2)})}, 1).contiguous();
      const auto ids = run.dataset.sample(place.sample_id).input_ids;
      auto tokens = torch::tensor(std::vector<int64_t>(ids.begin(), ids.end()), torch::kInt64);
      dflow::formats::write_safetensors(train::engine_file_path(dir, place.sample_id),
                               {{"token_ids", tokens}, {"hidden_states", slots}});
    }
  }
}

// tools/write_engine_features.py on the test assets; `arguments` as its CLI takes them.
inline Outcome write_engine_files_with_python(const std::filesystem::path& dir, const std::string& arguments) {
  if (python().empty()) FAIL("no Python beside the venv's torch: run tools/setup.sh");
  return run_command(python() + " " + source_dir() + "/tools/write_engine_features.py --target " +
                         (assets_dir() / "target").string() + " --samples " + (assets_dir() / "data.jsonl").string() +
                         " --max-length 128 --out " + dir.string() + " " + arguments,
                     600);
}

// 48 samples of 40..120 tokens below a vocabulary of 300 (the checkpoints
// tests/target/hf_random_checkpoints.py and hf_wrapper_checkpoints.py write), prepared
// into shards; returns the JSONL (what the engine's writer reads too).
inline std::filesystem::path prepare_small_vocabulary_data(const std::filesystem::path& dir) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> token(12, 299), length(40, 120);
  const std::filesystem::path jsonl = dir / "data.jsonl";
  {
    std::ofstream out(jsonl);
    for (int i = 0; i < 48; ++i) {
      const int n = length(rng);
      std::string ids, mask;
      for (int t = 0; t < n; ++t) {
        ids.append(t ? "," : "").append(std::to_string(token(rng)));
        mask.append(t ? "," : "").append(t < n / 4 ? "0" : "1");
      }
      out << R"({"input_ids": [)" << ids << R"(], "loss_mask": [)" << mask << "]}\n";
    }
  }
  const auto o = run_command(dflow_binary() + " prepare " + jsonl.string() + " --out " + (dir / "data").string() +
                                 " --max-length 128 --vocab-size 300",
                             120);
  INFO(o.output);
  REQUIRE(o.exit_code == 0);
  return jsonl;
}

// The resume signature features.engine gives `params` (YAML text): what a
// resume of a run with those params must match.
inline std::string engine_resume_signature(const std::string& params) {
  static const graph::NodeRegistry registry = [] {
    graph::NodeRegistry r;
    nodes::register_all_nodes(r);
    return r;
  }();
  const nodes::RunHooks* hooks = nodes::run_hooks(registry, "features.engine");
  REQUIRE(hooks != nullptr);
  config::YamlSection section(YAML::Load(params), "params", std::make_shared<config::Origins>());
  return hooks->resume_signature(section);
}

}  // namespace dflow::testing
