// capture.load: the capture graph's source (nodes/capture_nodes.hpp). Emits
// the job's batches in plan order; with several ranks the job holds this
// rank's share (index % world_size == rank) and only the batches that hold a
// sample the cache lacks, so a rerun starts where the published shards end.
#include "nodes/capture_nodes.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"

namespace dflow::nodes {

namespace {

class CaptureLoad final : public graph::SourceBody {
 public:
  CaptureLoad(const RunContext& run, RunJournal& journal, const CaptureJob& job)
      : journal_(journal), job_(job), steps_per_epoch_(run.plans().get(0)->steps_per_epoch()) {}

  bool next(graph::Emitter& out) override {
    if (next_ >= job_.todo.size()) {
      journal_.source_exhausted = true;
      return false;
    }
    LoadedBatch loaded;
    loaded.plan = *job_.todo[next_];
    // global_step: the batch's place in this capture (what faults and records count).
    loaded.position = StepPosition{0, loaded.plan.step_in_epoch, steps_per_epoch_, static_cast<int64_t>(next_), 0, 1};
    const auto cost = static_cast<uint64_t>(loaded.plan.padded_tokens);
    out.emit(graph::make_message(next_++, cost, std::move(loaded)));
    return true;
  }

 private:
  RunJournal& journal_;
  const CaptureJob& job_;
  int64_t steps_per_epoch_;
  size_t next_ = 0;
};

}  // namespace

void register_capture_load(graph::NodeRegistry& registry, CaptureJob& job) {
  graph::NodeSpec load;
  load.type = "capture.load";
  load.description = "source: epoch 0's batches of this rank that hold a sample the feature cache lacks";
  load.kind = graph::NodeKind::source;
  load.outputs = {{"out", "LoadedBatch"}};
  load.make = [&job](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& env = environment(context);
    return std::make_unique<CaptureLoad>(env.run, env.journal, job);
  };
  registry.add(std::move(load));
}

void register_capture_nodes(graph::NodeRegistry& registry, CaptureJob& job) {
  register_capture_load(registry, job);
  register_capture_target(registry);
  register_capture_write(registry, job);
}

void naming_capture_batch(const data::PlannedBatch& plan, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    throw std::runtime_error("batch " + std::to_string(plan.index_in_epoch) + " of epoch " + std::to_string(plan.epoch) +
                             " (" + std::to_string(plan.num_samples()) + " samples, first " +
                             (plan.sample_ids.empty() ? std::string("-") : std::to_string(plan.sample_ids.front())) +
                             "): " + e.what());
  }
}

}  // namespace dflow::nodes
