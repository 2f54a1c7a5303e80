#include "nodes/optimizers.hpp"

#include <stdexcept>

#include "nodes/node_params.hpp"
#include "nodes/run_context.hpp"
#include "train/adamw.hpp"
#include "train/muon.hpp"

namespace dflow::nodes {

namespace {

const config::KeySet<train::MuonOptions>& muon_keys() {
  using config::OnResume;
  using train::MuonOptions;
  static const config::KeySet<MuonOptions> keys = [] {
    config::KeySet<MuonOptions> k;
    k.add("lr", [](MuonOptions& o) -> auto& { return o.lr; }, OnResume::must_match,
          "the Muon group's peak learning rate (the schedule scales it like train.lr)",
          config::must<double>([](double v) { return v > 0; }, "must be > 0"));
    k.add("weight_decay", [](MuonOptions& o) -> auto& { return o.weight_decay; }, OnResume::must_match,
          "the Muon group's decoupled weight decay", config::must<double>([](double v) { return v >= 0; }, "must be >= 0"));
    k.add("momentum", [](MuonOptions& o) -> auto& { return o.momentum; }, OnResume::must_match, "Nesterov momentum",
          config::must<double>([](double v) { return v >= 0 && v < 1; }, "must lie in [0, 1)"));
    k.add("ns_steps", [](MuonOptions& o) -> auto& { return o.ns_steps; }, OnResume::must_match,
          "Newton-Schulz iterations", config::must<int>([](int v) { return v >= 1 && v < 100; }, "must lie in [1, 100)"));
    return k;
  }();
  return keys;
}

train::MuonOptions read_muon_params(config::YamlSection& params) { return read_params(muon_keys(), params); }

}  // namespace

RunHooks optimizer_hooks(const std::string& optimizer) {
  RunHooks hooks;
  if (optimizer == "adamw") {
    hooks.optimizer = [](const RunContext& run, config::YamlSection&,
                         std::vector<std::pair<std::string, torch::Tensor>> parameters) -> std::unique_ptr<train::Optimizer> {
      return std::make_unique<train::AdamW>(std::move(parameters), train::adamw_options(run.config.train));
    };
    hooks.resume_signature = [](config::YamlSection&) { return std::string(); };
    return hooks;
  }
  if (optimizer == "muon") {
    hooks.optimizer = [](const RunContext& run, config::YamlSection& params,
                         std::vector<std::pair<std::string, torch::Tensor>> parameters) -> std::unique_ptr<train::Optimizer> {
      return std::make_unique<train::Muon>(std::move(parameters), read_muon_params(params),
                                           train::adamw_options(run.config.train), run.config.train.lr);
    };
    hooks.resume_signature = [](config::YamlSection& params) { return resume_text(muon_keys(), read_muon_params(params)); };
    return hooks;
  }
  throw std::logic_error("optimizer_hooks: no optimizer '" + optimizer + "'");
}

void check_optimizer_params(const std::string& optimizer, config::YamlSection& params) {
  if (optimizer == "muon") read_muon_params(params);
}

std::vector<config::KeyDoc> optimizer_params(const std::string& optimizer) {
  return optimizer == "muon" ? muon_keys().docs() : std::vector<config::KeyDoc>{};
}

}  // namespace dflow::nodes
