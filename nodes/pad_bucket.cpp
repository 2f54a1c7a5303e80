// pad_bucket.token_budget and pad_bucket.fixed_batch: a planned batch's rows
// as padded tensors (pinned host memory when a target worker is on CUDA).
// The declared kind is also the run's batching policy: RunState builds the
// epoch plans in the matching data::BatchMode (token-budget length buckets,
// or a fixed number of rows padded to the longest, as most peers batch).
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class PadBucket final : public graph::FunctionBody {
 public:
  explicit PadBucket(RunState& state) : state_(state) {
    for (const auto& t : state.targets) pin_ = pin_ || t->device().is_cuda();
  }

  void process(graph::Inputs& in, graph::Emitter& out) override {
    auto message = in[0];
    auto& loaded = graph::payload<LoadedBatch>(message);
    const int64_t rows = loaded.host.rows, length = loaded.host.padded_length;
    auto options = torch::TensorOptions().pinned_memory(pin_);
    PaddedBatch padded{loaded.plan, loaded.position, torch::empty({rows, length}, options.dtype(torch::kInt64)),
                       torch::empty({rows, length}, options.dtype(torch::kUInt8)),
                       torch::empty({rows}, options.dtype(torch::kInt64))};
    std::memcpy(padded.input_ids.data_ptr<int64_t>(), loaded.host.input_ids.data(), rows * length * sizeof(int64_t));
    std::memcpy(padded.loss_mask.data_ptr<uint8_t>(), loaded.host.loss_mask.data(), rows * length);
    auto* lengths = padded.lengths.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) lengths[r] = loaded.host.lengths[r];
    padded.excluded_rows = loaded.excluded_rows;
    out.emit(graph::make_message(message.seq, message.cost, std::move(padded)));
  }

 private:
  RunState& state_;
  bool pin_ = false;
};

void register_kind(graph::NodeRegistry& registry, const std::string& type, const std::string& description) {
  graph::NodeSpec spec;
  spec.type = type;
  spec.description = description;
  spec.inputs = {{"in", "LoadedBatch"}};
  spec.outputs = {{"out", "PaddedBatch"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<PadBucket>(run_state(context));
  };
  registry.add(std::move(spec));
}

}  // namespace

void register_pad_bucket(graph::NodeRegistry& registry) {
  register_kind(registry, "pad_bucket.token_budget",
                "length buckets, rows x bucket length <= data.tokens_per_batch; pads rows to the bucket length");
  register_kind(registry, "pad_bucket.fixed_batch",
                "data.batch_size rows per batch padded to the longest (the common baseline, for comparison)");
}

}  // namespace dflow::nodes
