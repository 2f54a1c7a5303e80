// checkpoint.async: writes snapshots taken by optimizer_step under the model
// token. Writing happens here, off the training path: training continues
// while the files are written, and a snapshot is immutable, so a slow disk
// can delay checkpoints (the edge backs up) but never change training.
// With several ranks, rank 0 writes and all ranks agree that it succeeded.
// A write that fails (a full disk) leaves the previous checkpoints and
// `latest` as they were; checkpoint.on_write_error says whether the run stops
// (halt) or records it and trains on (continue: the next checkpoint tries again).
#include "config/log.hpp"
#include "nodes/messages.hpp"
#include "nodes/node_support.hpp"
#include "nodes/registry.hpp"

namespace dflow::nodes {

namespace {

class CheckpointAsync final : public graph::FunctionBody {
 public:
  CheckpointAsync(const RunEnvironment& env, std::string name)
      : run_(env.run), journal_(env.journal), checkpoints_(env.checkpoints), name_(std::move(name)) {}

  void process(graph::Inputs& in, graph::Emitter&) override {
    auto& snapshot = in.get<Snapshot>(0);
    const int64_t step = snapshot.state.global_step;
    std::optional<fs::path> dir;
    std::string failure;
    if (run_.options.rank == 0) {
      try {
        dir = checkpoints_.write(snapshot.state, [&] { inject_node_faults(run_, name_, step - 1); });  // after step index step-1
      } catch (const std::exception& e) {
        failure = e.what();
      }
    }
    bool saved = failure.empty();
    if (run_.options.dist) {
      // Rank 0 writes; every rank learns whether it succeeded, so that all
      // ranks stop (or train on) alike.
      saved = run_.options.dist->all_agree(saved, "agreement on checkpoint step-" + std::to_string(step));
    }
    if (!saved) {
      const std::string message = (failure.empty() ? "checkpoint step-" + std::to_string(step) +
                                                         " was not saved: rank 0 reported a failed write"
                                                   : failure) +
                                  "; " + kept();
      if (run_.config.checkpoint.on_write_error != "continue")
        throw std::runtime_error(message + " (checkpoint.on_write_error: halt)");
      if (run_.options.rank != 0) return;
      log::warn("checkpoint", message + "; training goes on (checkpoint.on_write_error: continue), the next checkpoint tries again");
      const nlohmann::json alarm = {{"kind", "alarm"}, {"alarm", "checkpoint_not_saved"}, {"global_step", step},
                                    {"message", message}};
      journal_.write(alarm);
      journal_.checkpoint_failed(step, message);
      return;
    }
    if (run_.options.rank != 0) return;
    if (!dir) {  // declined by the writer (after the agreement, which every rank takes part in)
      log::info("checkpoint", log::str("step-", step, " not written: the run halted and saved its final checkpoint"));
      return;
    }
    journal_.checkpoint_written(dir->string());
    journal_.publish_live({{"kind", "checkpoint"}, {"global_step", step}, {"path", dir->string()}});
    log::info("checkpoint", log::str("wrote ", dir->string()));
  }

 private:
  // What is still saved, for the error: "latest is step-40 (intact)".
  std::string kept() const {
    try {
      return "latest is " + train::resolve_checkpoint(run_.checkpoints_dir, "latest").filename().string() +
             " (intact)";
    } catch (const std::exception&) {
      return "no earlier checkpoint in " + run_.checkpoints_dir.string();
    }
  }

  const RunContext& run_;
  RunJournal& journal_;
  train::CheckpointWriter& checkpoints_;
  std::string name_;
};

}  // namespace

void register_checkpoint(graph::NodeRegistry& registry) {
  graph::NodeSpec spec;
  spec.type = "checkpoint.async";
  spec.description = "writes snapshots atomically in the background (step-N/, latest, keep newest)";
  spec.inputs = {{"in", "Snapshot"}};
  spec.make = [](graph::NodeContext& context) -> std::unique_ptr<graph::NodeBody> {
    return std::make_unique<CheckpointAsync>(environment(context), context.name);
  };
  registry.add(std::move(spec));
}

}  // namespace dflow::nodes
