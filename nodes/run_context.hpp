#pragma once
// What a training run knows before its graph starts and never changes while
// it runs: the resolved config, the dataset and its epoch plans, the frozen
// target replicas, devices, the drafter's shape, where the run started from.
// Built once; every node receives it by const& (nodes/node_support.hpp).
// Mutable run-wide things live elsewhere, each with one owner: the trainable
// state travels with the model token (nodes/trainable_state.hpp), records
// and the end-of-run summary go through the journal (nodes/run_journal.hpp).
#include <torch/torch.h>

#include <any>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/batching_policy.hpp"
#include "data/dataset.hpp"
#include "data/plan.hpp"
#include "data/plan_cache.hpp"
#include "data/quarantine.hpp"
#include "drafter/drafter.hpp"
#include "drafter/kind.hpp"
#include "drafter/objective.hpp"
#include "target/target.hpp"
#include "target/target_head.hpp"
#include "nodes/progress.hpp"
#include "nodes/step_totals.hpp"
#include "train/checkpoint.hpp"
#include "train/distributed.hpp"
#include "train/optimizer.hpp"

namespace dflow::report {
class LiveServer;
}
namespace dflow::graph {
class NodeRegistry;
}

namespace dflow::nodes {

namespace fs = std::filesystem;

struct RunOptions {
  std::string resume;    // "", "latest" or a checkpoint path
  report::LiveServer* live = nullptr;  // --serve: records are published to it
  bool overwrite = false;  // a fresh run may delete the out_dir's checkpoints
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;                   // "cuda" devices mean cuda:local_rank with several ranks
  train::Distributed* dist = nullptr;   // several ranks: the process groups (null with one)
  // The node kinds the pipeline's types name (null: default_registry(), every
  // kind dflow has); tests and extensions add their own.
  const graph::NodeRegistry* registry = nullptr;
  const graph::NodeRegistry& node_kinds() const;
  // Run the node kinds' prepare hooks (false: a tool that builds the context
  // without a graph, such as `dflow cache-features` filling the cache a
  // features.cached node would refuse as incomplete).
  bool prepare_nodes = true;
  // Why the caller needs the whole target whatever the pipeline's nodes need
  // ("" when they decide, RunHooks::needs_target): `dflow cache-features`.
  std::string whole_target_because;
};

// How the declared pipeline forms batches: the policy its batching node
// picks from its params (RunHooks::batching). Part of what a resume must keep
// (the plan and its cursor depend on it).
struct Batching {
  std::string node;  // the batching node's name ("" when the pipeline has none)
  std::string type;  // its kind ("" when the pipeline has none)
  std::shared_ptr<const data::BatchingPolicy> policy = data::token_budget_batching();
  // "pad_bucket.fixed_batch {batch_size: 8}", "pad_bucket.pack {pack_window: 4096}"
  // (the node's kind and the policy's params; without a batching node the
  // policy's own name, "token_budget"): what the resume check compares.
  std::string signature() const;
};
// Throws ConfigError naming pipeline.nodes[i].params for bad params, or the
// second node of a pipeline that declares two batching nodes.
Batching batching_of(const config::PipelineConfig& pipeline, const graph::NodeRegistry& kinds);

// Node name -> "type params" of each node whose kind has a resume signature
// (RunHooks::resume_signature): what a resume must keep.
std::map<std::string, std::string> resume_signatures(const config::PipelineConfig& pipeline,
                                                     const graph::NodeRegistry& kinds);

// The checkpoint a resume starts from (nullopt for a fresh run), checked
// against this run: config keys that change what is computed (with the
// pipeline's batching), and the world size. Throws naming what differs.
std::optional<train::LoadedCheckpoint> open_resume_checkpoint(const config::Config& config, const RunOptions& options);

class RunContext {
 public:
  RunContext(config::Config config, RunOptions options, const train::LoadedCheckpoint* resume);

  config::Config config;
  std::string config_yaml;  // resolved, saved in every checkpoint
  RunOptions options;
  fs::path out_dir, checkpoints_dir, quarantine_path;

  // Data and plan.
  data::Dataset dataset;
  Batching batching;
  const data::PlanCache& plans() const { return *plans_; }  // thread-safe
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;   // epochs * steps_per_epoch: what the LR schedule spans
  int64_t stop_step = 0;     // steps this invocation ends after (max_steps or total)
  int64_t batches_per_step() const { return int64_t{options.world_size} * config.train.grad_accum; }

  // Models.
  // One per devices.target entry when some node needs the whole target in
  // process (RunHooks::needs_target); empty when the features come from
  // elsewhere (a cache, a serving engine) and only the head is loaded.
  std::vector<std::unique_ptr<target::TargetModel>> targets;
  // The target's embedding and LM head (always): targets.front()'s own
  // tensors when loaded whole, else read alone from the checkpoint, in
  // model.target.dtype on the drafter's device.
  std::shared_ptr<const target::TargetHead> target_head;
  target::HeadConfig target_config;  // config.json's facts (sizes, vocabulary, eos, architecture)
  drafter::DrafterSpec drafter_spec;
  std::vector<int64_t> feature_layer_ids;
  // What the drafter is trained against (train/trained_against.hpp): every
  // checkpoint records it, and a resume checks the target against it.
  nlohmann::json trained_against;
  torch::Device drafter_device{torch::kCPU};
  torch::Dtype drafter_dtype = torch::kFloat32;
  drafter::ObjectiveOptions objective;
  // Who needs the target's last hidden state after its final norm with
  // every batch (FeatureBatch::teacher_hidden), and why: "node 'drafter'
  // (drafter_step) trains with loss: kl" (RunHooks::teacher); empty when
  // nobody does. A feature source that cannot give it refuses the run
  // naming itself and this.
  std::string teacher_because;
  bool needs_teacher() const { return !teacher_because.empty(); }
  // Whether the drafter's loss reads the target's distribution, so that the
  // step records' acceptance rate per slot is the expected acceptance under
  // it, sum min(p, q) (else q of the data's token), and implies a tau.
  bool accept_rate_from_target = false;
  // The drafter kind's extra loss terms as the step record names them.
  std::vector<drafter::RecordTerm> record_terms() const;
  // One micro-batch's (or step's) zero totals, sized for this run.
  StepTotals step_totals_zeros() const;
  int64_t pad_token_id = 0;

  // Where this invocation starts.
  Progress start;                        // completed steps and cursor at start
  std::string resumed_from;              // checkpoint dir, or empty
  // Samples excluded from training when the run started (quarantine.jsonl
  // and the checkpoint): the loader drops them (drafter_step masks them in
  // packed rows). Fixed for the invocation, so
  // the loader running ahead stays deterministic; samples quarantined later
  // are in the trainable state's live set.
  data::SampleSet quarantined_at_start;
  std::chrono::steady_clock::time_point started_at = std::chrono::steady_clock::now();

  // What node kinds read and checked before the graph is built
  // (RunHooks::prepare), by node name: bad input fails before any node exists.
  std::map<std::string, std::any> prepared;
  template <class T>
  const T& prepared_for(const std::string& node) const {
    const auto it = prepared.find(node);
    const T* value = it == prepared.end() ? nullptr : std::any_cast<T>(&it->second);
    if (!value) throw std::logic_error("node '" + node + "': what its kind prepares was not prepared before the graph");
    return *value;
  }
  // Some node wants a fresh run's untrained drafter (RunHooks::wants_untrained_state).
  bool wants_untrained_state = false;
  // The optimizer the pipeline's optimizer node picks (RunHooks::optimizer;
  // AdamW without one), over the drafter's trainable parameters by name.
  std::unique_ptr<train::Optimizer> make_optimizer(std::vector<std::pair<std::string, torch::Tensor>> parameters) const;

  // Fault injection: the fault of `kind` for `node` (or any node) at `step`, if declared.
  const config::FaultDecl* fault(const std::string& kind, const std::string& node, int64_t step) const;

 private:
  void load_models(const train::LoadedCheckpoint* resume);
  void plan_run();
  void start_from(const train::LoadedCheckpoint& checkpoint);
  std::unique_ptr<data::PlanCache> plans_;
};

}  // namespace dflow::nodes
