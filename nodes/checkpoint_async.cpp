// checkpoint.async: writes snapshots taken by optimizer_step under the model
// token. Writing happens here, off the training path: training continues
// while the files are written, and a snapshot is immutable, so a slow disk
// can delay checkpoints (the edge backs up) but never change training.
// With several ranks, rank 0 writes and all ranks agree that it succeeded.
#include "config/log.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class CheckpointAsync final : public graph::FunctionBody {
 public:
  CheckpointAsync(const RunContext& run, RunJournal& journal, std::string name)
      : run_(run), journal_(journal), name_(std::move(name)) {}

  void process(graph::Inputs& in, graph::Emitter&) override {
    auto& snapshot = in.get<Snapshot>(0);
    const int64_t step = snapshot.state.global_step;
    fs::path dir;
    std::string failure;
    if (run_.options.rank == 0) {
      try {
        dir = train::write_checkpoint(run_.checkpoints_dir, snapshot.state, run_.config.checkpoint.keep,
                                      [&] { inject_node_faults(run_, name_, step - 1); });  // after step index step-1
      } catch (const std::exception& e) {
        failure = e.what();
        if (!run_.options.dist) throw;
      }
    }
    if (run_.options.dist) {
      // Rank 0 writes; every rank learns whether it succeeded, so that no
      // rank trains on past a checkpoint the run does not have.
      const bool saved = run_.options.dist->all_agree(failure.empty(), "agreement on checkpoint step-" + std::to_string(step));
      if (!saved)
        throw std::runtime_error("checkpoint step-" + std::to_string(step) + " was not saved: " +
                                 (failure.empty() ? "rank 0 reported a failed write" : failure));
      if (run_.options.rank != 0) return;
    }
    journal_.checkpoint_written(dir.string());
    journal_.publish_live({{"kind", "checkpoint"}, {"global_step", step}, {"path", dir.string()}});
    log::info("checkpoint", log::str("wrote ", dir.string()));
  }

 private:
  const RunContext& run_;
  RunJournal& journal_;
  std::string name_;
};

}  // namespace

void register_checkpoint(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "checkpoint.async";
  spec.description = "writes snapshots atomically in the background (step-N/, latest, keep newest)";
  spec.inputs = {{"in", "Snapshot"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    const auto& env = environment(context);
    return std::make_unique<CheckpointAsync>(env.run, env.journal, context.name);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
