// load.shards: the source. Walks the epoch plans from the run's cursor and
// emits this rank's planned batches in order; the pad node collates their
// samples from the memory-mapped shards. With several ranks it emits only
// this rank's share of each step (the plan's split); in a short last step
// where this rank has no batch it emits an empty placeholder (no rows), so
// that every rank takes part in every step's all-reduce and applies the same
// update. Samples quarantined when the run started are dropped from their
// batches here (the plan, its steps and cursors are unchanged; a batch may be
// left empty), except from packed rows: drafter_step masks those, as it does
// samples quarantined later, since a row without them would pack and draw
// anchors differently and a resumed run would not be the uninterrupted one.
#include "nodes/messages.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class LoadShards final : public graph::SourceBody {
 public:
  LoadShards(const RunContext& run, RunJournal& journal)
      : run_(run), journal_(journal), epoch_(run.start.cursor.epoch) {
    // A cursor always sits on a step boundary (optimizer_step advances it).
    step_ = run.start.cursor.next_batch / run.batches_per_step();
  }

  bool next(graph::Emitter& out) override {
    while (epoch_ < run_.config.train.epochs) {
      const auto plan = run_.plans().get(epoch_);
      if (step_ >= plan->steps_per_epoch()) {
        ++epoch_, step_ = 0, micro_ = 0;
        continue;
      }
      const int rank = run_.options.rank;
      const int micros = plan->micros_in_step(step_, rank);
      const int64_t global_step = int64_t{epoch_} * run_.steps_per_epoch + step_;
      if (global_step >= run_.stop_step) break;
      LoadedBatch loaded;
      loaded.position = StepPosition{epoch_, step_, plan->steps_per_epoch(), global_step, micro_, std::max(micros, 1)};
      if (micros == 0) {
        loaded.plan = placeholder(*plan);
      } else {
        // Within a step, batch j goes to rank j % world_size (data/plan.cpp).
        const int64_t index = step_ * plan->batches_per_step() + rank + int64_t{micro_} * run_.options.world_size;
        const data::PlannedBatch& planned = plan->batches()[static_cast<size_t>(index)];
        loaded.plan = planned.packed() ? planned
                                       : data::without_samples(planned, run_.quarantined_at_start, run_.dataset.lengths());
        // Samples, not rows (drafter_step counts those of packed rows).
        loaded.excluded_samples = static_cast<int64_t>(planned.sample_ids.size() - loaded.plan.sample_ids.size());
      }
      if (++micro_ >= loaded.position.micros_in_step) ++step_, micro_ = 0;
      const auto cost = static_cast<uint64_t>(loaded.plan.padded_tokens);
      out.emit(graph::make_message(seq_++, cost, std::move(loaded)));
      return true;
    }
    journal_.source_exhausted = true;
    return false;
  }

 private:
  // No rows: drafter_step contributes zero gradients and zero sums for it.
  data::PlannedBatch placeholder(const data::EpochPlan& plan) const {
    data::PlannedBatch batch;
    batch.epoch = epoch_;
    batch.index_in_epoch = step_ * plan.batches_per_step();
    batch.step_in_epoch = step_;
    batch.rank = run_.options.rank;
    batch.micros_in_step = 1;
    batch.padded_length = run_.config.data.buckets.front();
    return batch;
  }

  const RunContext& run_;
  RunJournal& journal_;
  int epoch_;
  int64_t step_ = 0;
  int micro_ = 0;
  uint64_t seq_ = 0;
};

}  // namespace

void register_load_shards(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "load.shards";
  spec.description = "source: walks the epoch plans from the cursor and emits this rank's planned batches";
  spec.kind = graph::NodeKind::source;
  spec.outputs = {{"out", "LoadedBatch"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& env = environment(context);
    return std::make_unique<LoadShards>(env.run, env.journal);
  };
  add_node_kind(registry, std::move(spec), RunHooks{.capture = CaptureRole::loader});
}

}  // namespace dflow::nodes
