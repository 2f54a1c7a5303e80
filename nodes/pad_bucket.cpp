// pad_bucket.token_budget, pad_bucket.fixed_batch and pad_bucket.pack: a
// planned batch's rows collated from the memory-mapped shards straight into
// padded tensors (one copy; pinned host memory when a target worker is on
// CUDA). Each kind also picks the run's batching policy from its params
// (data/batching_policy.hpp: token-budget length buckets, a fixed number of
// rows padded to the longest as most peers batch, or several whole samples
// packed per row with per-token positions and document ids); the run context
// builds the epoch plans with it, and a resume with another one is refused.
#include "nodes/pad_bucket.hpp"

#include "nodes/feature_source.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_params.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

const config::KeySet<FixedBatchParams>& fixed_batch_keys() {
  static const config::KeySet<FixedBatchParams> keys = [] {
    config::KeySet<FixedBatchParams> k;
    k.add("batch_size", [](FixedBatchParams& p) -> auto& { return p.batch_size; }, config::OnResume::must_match,
          "rows per micro-batch", config::must<int>([](int v) { return v >= 1; }, "must be >= 1 (rows per micro-batch)"));
    return k;
  }();
  return keys;
}

const config::KeySet<PackParams>& pack_keys() {
  static const config::KeySet<PackParams> keys = [] {
    config::KeySet<PackParams> k;
    k.add("pack_window", [](PackParams& p) -> auto& { return p.pack_window; }, config::OnResume::must_match,
          "samples packed together (best-fit decreasing within each window)",
          config::must<int>([](int v) { return v >= 1; }, "must be >= 1 (samples packed together, longest first)"));
    return k;
  }();
  return keys;
}

}  // namespace

FixedBatchParams read_fixed_batch_params(config::YamlSection& params) { return read_params(fixed_batch_keys(), params); }

PackParams read_pack_params(config::YamlSection& params) { return read_params(pack_keys(), params); }

namespace {

class PadBucket final : public graph::FunctionBody {
 public:
  explicit PadBucket(const RunContext& run) : run_(run) {
    for (const auto& t : run.targets) pin_ = pin_ || t->device().is_cuda();
    // Head only (no target in process): the ids go to the drafter's device instead.
    if (run.targets.empty()) pin_ = run.drafter_device.is_cuda();
  }

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& loaded = graph::payload<LoadedBatch>(message);
    PaddedBatch padded;
    with_batch_context(loaded.plan, loaded.position, [&] {
      padded = collate_padded(run_, loaded.plan, loaded.position, loaded.excluded_samples, pin_);
    });
    out.emit(graph::make_message(message.seq, message.cost, std::move(padded)));
  }

 private:
  const RunContext& run_;
  bool pin_ = false;
};

using PickPolicy = std::function<std::shared_ptr<const data::BatchingPolicy>(config::YamlSection& params)>;

// `param_docs`: the docs of the KeySet the policy reads its params with (none: it takes none).
void register_kind(graph::NodeRegistry& registry, const std::string& type, const std::string& description,
                   PickPolicy policy, std::vector<config::KeyDoc> param_docs) {
  graph::NodeSpec spec;
  spec.type = type;
  spec.description = description;
  if (!param_docs.empty()) spec.check_params = [policy](config::YamlSection& params) { policy(params); };
  spec.params = std::move(param_docs);
  spec.inputs = {{"in", "LoadedBatch"}};
  spec.outputs = {{"out", "PaddedBatch"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<PadBucket>(environment(context).run);
  };
  add_node_kind(registry, std::move(spec), RunHooks{.batching = std::move(policy)});
}

}  // namespace

void register_pad_bucket(graph::NodeRegistry& registry) {
  register_kind(registry, "pad_bucket.token_budget",
                "length buckets, rows x bucket length <= data.tokens_per_batch; pads rows to the bucket length",
                [](config::YamlSection&) { return data::token_budget_batching(); }, {});
  register_kind(registry, "pad_bucket.fixed_batch",
                "params.batch_size rows per batch padded to the longest (the common baseline, for comparison)",
                [](config::YamlSection& params) { return data::fixed_size_batching(read_fixed_batch_params(params).batch_size); },
                fixed_batch_keys().docs());
  register_kind(registry, "pad_bucket.pack",
                "several whole samples per row up to data.max_length (best-fit decreasing over params.pack_window "
                "samples), rows x max_length <= data.tokens_per_batch; per-sample attention and positions",
                [](config::YamlSection& params) { return data::packed_batching(read_pack_params(params).pack_window); },
                pack_keys().docs());
}

}  // namespace dflow::nodes
