#pragma once
// A small but real training setup shared by the end-to-end tests: the demo's
// tiny Qwen3-architecture target (echo pattern), prompts whose responses it
// regenerated itself, prepared into shards, and held-out prompts (made once
// per test process), and the demo config pointed at them with sizes that run
// in seconds on 2 cores (its eval node measures tau on 2 held-out prompts).
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "train/demo.hpp"

namespace dflow::testing {

namespace fs = std::filesystem;

inline const fs::path& assets_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("dflow-e2e-assets-" + std::to_string(::getpid()));
    fs::remove_all(d);
    auto config = config::load_config("", {"model.target.path=" + (d / "target").string(),
                                           "data.train=[" + (d / "data").string() + "]", "data.max_length=128",
                                           "data.buckets=[64, 128]", "eval.prompts=" + (d / "heldout.jsonl").string()});
    train::DemoDataOptions options;
    options.num_prompts = 240;
    options.max_prompt_tokens = 32;
    options.max_new_tokens = 80;
    torch::set_num_threads(1);
    train::ensure_demo_assets(config, options);
    return d;
  }();
  return dir;
}

// The demo config on the shared assets, writing into `out_dir`, plus overrides.
// The drafter reads target layers [1, 1, 1] (one layer three times), the
// demo's layers when these tests' fixtures were written (engine files with
// engine ids [2, 4], the pinned records); the demo itself now reads the
// rising [0, 1, 2] (tests/tools/kind_exports_cli_test.cpp runs it as it is).
inline std::vector<std::string> small_run_overrides(const fs::path& out_dir, std::vector<std::string> extra = {}) {
  std::vector<std::string> o{"model.drafter.target_layer_ids=[1, 1, 1]",
                             "model.target.path=" + (assets_dir() / "target").string(),
                             "data.train=[" + (assets_dir() / "data").string() + "]",
                             "run.out_dir=" + out_dir.string(),
                             "data.max_length=128",
                             "data.buckets=[64, 128]",
                             "data.tokens_per_batch=1024",
                             "train.grad_accum=1",
                             "metrics.sinks=[jsonl]",
                             "checkpoint.every_steps=0",
                             "eval.prompts=" + (assets_dir() / "heldout.jsonl").string(),
                             "eval.max_prompts=2",
                             "eval.max_new_tokens=16",
                             "run.log_level=warn"};
  o.insert(o.end(), extra.begin(), extra.end());
  return o;
}

inline config::Config small_run_config(const fs::path& out_dir, std::vector<std::string> extra = {}) {
  return config::load_config("", small_run_overrides(out_dir, std::move(extra)));
}

// The config with its batching node ("pad") of another kind: pad_bucket.pack, say.
inline config::Config with_pad(config::Config config, const std::string& type) {
  for (auto& n : config.pipeline.nodes)
    if (n.name == "pad") n.type = type;
  return config;
}

inline fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("dflow-e2e-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// Stopped after `step` steps as an interruption would (a stop fault): the LR
// schedule stays the whole run's, which run.max_steps would size instead.
inline config::Config stopped_after(config::Config c, int64_t step) {
  config::FaultDecl stop;
  stop.kind = "stop";
  stop.step = step;
  c.faults.push_back(stop);
  return c;
}

// The records of one kind ("step", "eval", "alarm", "guard") of a run, in file order.
inline std::vector<nlohmann::json> records_of_kind(const fs::path& out_dir, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(out_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (auto r = nlohmann::json::parse(line); r.value("kind", "") == kind) out.push_back(r);
  return out;
}

// Step records of a run, without the wall-clock and telemetry fields (the
// only fields allowed to differ between two runs of the same config).
inline std::vector<nlohmann::json> step_records(const fs::path& out_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(out_dir / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto r = nlohmann::json::parse(line);
    if (r.value("kind", "") != "step") continue;
    r.erase("time");
    r.erase("telemetry");
    out.push_back(r);
  }
  return out;
}

}  // namespace dflow::testing
