// load.shards: the source. Walks the epoch plans from the run's cursor and
// reads each planned batch's samples from the memory-mapped shards. Samples
// quarantined when the run started are dropped from their batches here (the
// plan, its steps and cursors are unchanged; a batch may be left empty).
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class LoadShards final : public graph::SourceBody {
 public:
  explicit LoadShards(RunState& state) : state_(state), epoch_(state.cursor.epoch), next_(state.cursor.next_batch) {}

  bool next(graph::Emitter& out) override {
    while (epoch_ < state_.config.train.epochs) {
      const auto& plan = state_.plan(epoch_);
      const auto batches = plan.batches();  // plan order; O(1) per emitted batch
      while (next_ < plan.num_batches() && batches[next_].rank != state_.options.rank) ++next_;
      if (next_ >= plan.num_batches()) {
        ++epoch_, next_ = 0;
        continue;
      }
      const data::PlannedBatch& planned = batches[next_++];
      const data::PlannedBatch batch =
          data::without_samples(planned, state_.quarantined_at_start, state_.dataset.lengths());
      StepPosition position{batch.epoch,
                            batch.step_in_epoch,
                            plan.steps_per_epoch(),
                            int64_t{batch.epoch} * state_.steps_per_epoch + batch.step_in_epoch,
                            batch.micro_in_step,
                            batch.micros_in_step};
      if (position.global_step >= state_.stop_step) break;
      LoadedBatch loaded{batch, position, data::collate(state_.dataset, batch, state_.pad_token_id),
                         planned.rows() - batch.rows()};
      out.emit(graph::make_message(seq_++, static_cast<uint64_t>(batch.padded_tokens), std::move(loaded)));
      return true;
    }
    state_.source_exhausted = true;
    return false;
  }

 private:
  RunState& state_;
  int epoch_;
  int64_t next_;
  uint64_t seq_ = 0;
};

}  // namespace

void register_load_shards(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "load.shards";
  spec.description = "source: walks the epoch plans from the cursor and reads each batch from the shards";
  spec.kind = graph::NodeKind::source;
  spec.outputs = {{"out", "LoadedBatch"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<LoadShards>(run_state(context));
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
