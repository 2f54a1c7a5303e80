#include "nodes/optimizers.hpp"

#include <iomanip>
#include <sstream>
#include <stdexcept>

#include "nodes/run_context.hpp"
#include "train/adamw.hpp"
#include "train/muon.hpp"

namespace dflow::nodes {

namespace {

train::MuonOptions read_muon_params(config::YamlSection& params) {
  train::MuonOptions o;
  params.read("lr", o.lr);
  params.require(o.lr > 0, "lr", "must be > 0 (the Muon group's peak learning rate; the schedule scales it)");
  params.read("weight_decay", o.weight_decay);
  params.require(o.weight_decay >= 0, "weight_decay", "must be >= 0");
  params.read("momentum", o.momentum);
  params.require(o.momentum >= 0 && o.momentum < 1, "momentum", "must lie in [0, 1)");
  params.read("ns_steps", o.ns_steps);
  params.require(o.ns_steps >= 1 && o.ns_steps < 100, "ns_steps", "must lie in [1, 100)");
  return o;
}

std::string muon_text(const train::MuonOptions& o) {
  std::ostringstream out;
  out << std::setprecision(17) << "{lr: " << o.lr << ", weight_decay: " << o.weight_decay << ", momentum: " << o.momentum
      << ", ns_steps: " << o.ns_steps << "}";
  return out.str();
}

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
    hooks.resume_signature = [](config::YamlSection& params) { return muon_text(read_muon_params(params)); };
    return hooks;
  }
  throw std::logic_error("optimizer_hooks: no optimizer '" + optimizer + "'");
}

void check_optimizer_params(const std::string& optimizer, config::YamlSection& params) {
  if (optimizer == "muon") read_muon_params(params);
}

}  // namespace dflow::nodes
