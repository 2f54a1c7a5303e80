// The memory fit's proof (nodes/drafter_memory_fit.hpp): a run whose fit
// says "fits" fits. Every registered drafter kind, with cross-entropy and
// with a teacher loss (kl), from the target in-process and from engine
// files, trains on the CPU under a counting allocator installed before
// anything loads, in a steady state where the edges between the feature
// source and drafter_step are full (the drafter is slowed, so the source
// runs ahead until its edges stop it). The measured peak is at most what
// the fit counts (the target's loaded weights, the step, and what waits
// beside it), and the fit over-counts by at most kOverCount.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "drafter/cpu_memory_counter.hpp"
#include "drafter/kind.hpp"
#include "engine_files.hpp"
#include "graph/description.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/registry.hpp"
#include "nodes/run_context.hpp"
#include "nodes/trainer.hpp"
#include "slowed.hpp"
#include "target/target_memory.hpp"
#include "train_fixture.hpp"

using namespace dflow;
using namespace dflow::testing;

namespace {

// What the fit may count beyond the measured peak. The fit sizes the worst
// micro-batch (every row full length with as many anchors as it can have,
// where these rows are prompts of up to 32 tokens and responses of up to
// 80, anchored on responses only) and every tensor an op could keep (the
// frozen head counted as the drafter's own copy, where the CPU run reads the
// target's in place). Measured over the cases below: 1.30 (DSpark, kl, the
// target in-process) to 2.74 (DSpine), the MESSAGE at the end.
constexpr double kOverCount = 3.5;

// Each kind at its defaults, but where they exceed the tiny target (hidden 64).
const std::map<std::string, std::vector<std::string>> kFitting = {
    {"dspine", {"model.drafter.transfer_rank=16", "model.drafter.message_size=16"}}};

struct Case {
  std::string kind, loss;
  bool engine = false;
};

config::Config case_config(const Case& c, const fs::path& dir, const fs::path& engine_dir) {
  std::vector<std::string> o{"model.drafter.kind=" + c.kind,
                             "pipeline.nodes.drafter.params.loss=" + c.loss,
                             "run.max_steps=10",
                             "train.anchors_per_sequence=8",
                             "guard.policy=none",
                             // No evaluation: its snapshots are host copies, which on a GPU are not the device's.
                             "eval.every_steps=0",
                             "eval.prompts=" + (dir / "no-prompts.jsonl").string()};
  if (const auto it = kFitting.find(c.kind); it != kFitting.end()) o.insert(o.end(), it->second.begin(), it->second.end());
  config::Config config = small_run_config(dir, o);
  if (c.engine) config = from_engine(config, engine_dir);
  // The source runs ahead of a slowed drafter until the edges carrying its
  // batches are full: 0.2 s a step against a tiny target's few milliseconds,
  // with more micro-batches (10) than the edges and the step hold (4 + 2 + 1).
  return slowed(config, "drafter", 0.2);
}

// The fit the run makes at start, with unbounded memory (its figure, not its verdict),
// and what the loaded target holds on the device (its weights: out of the available memory at start).
std::pair<nodes::MemoryFit, double> fit_of(const config::Config& config) {
  nodes::RunOptions options;
  options.prepare_nodes = false;
  nodes::RunContext run(config, options, nullptr);
  std::string teacher;
  dflow::drafter::ObjectiveOptions objective =
      nodes::drafter_kind_choice(config, nodes::default_registry(), &teacher).objective;
  objective.loss_decay_gamma = run.objective.loss_decay_gamma;
  const nodes::MemoryFit fit = nodes::run_memory_fit(run, objective, 1e18);
  const auto& head = run.target_config;
  const double target = run.targets.empty()
                            ? 2.0 * static_cast<double>(head.vocab_size * head.hidden_size) * 4 + head.hidden_size * 4
                            : static_cast<double>(dflow::target::target_resident_bytes(
                                  head, 4, dflow::target::checkpoint_stores_lm_head(config.model.target.path)));
  return {fit, target};
}

}  // namespace

TEST_CASE("Nodes.MemoryFitProof.every_kind_and_loss_peaks_within_the_fit_with_the_edges_into_the_drafter_full") {
  const fs::path engine_dir = fresh_dir("fit-proof-engine");
  write_dflow_features_as_engine_files(small_run_config(fresh_dir("fit-proof-writer")), engine_dir);
  double lowest = 1e9, highest = 0;
  for (const std::string& kind : dflow::drafter::drafter_kind_names())
    for (const std::string loss : {"ce", "kl"})
      for (const bool engine : {false, true}) {
        const Case c{kind, loss, engine};
        CAPTURE(kind);
        CAPTURE(loss);
        CAPTURE(engine);
        const fs::path dir = fresh_dir("fit-proof-" + kind + "-" + loss + (engine ? "-engine" : ""));
        const config::Config config = case_config(c, dir, engine_dir);
        const auto [fit, target_bytes] = fit_of(config);
        REQUIRE(fit.beside.queued_batches == 4 + 2);  // target -> reorder, reorder -> drafter.batch
        CHECK(fit.beside.eval_drafter_bytes == 0);    // eval is off

        double peak = 0;
        nodes::TrainResult result;
        {
          dflow::drafter::CpuMemoryCounter counter;
          result = nodes::run_training(config, {});
          peak = static_cast<double>(counter.peak_bytes());
        }
        REQUIRE(result.completed_steps == 10);
        // The steady state: every edge that carries FeatureBatches was full.
        const auto graph = graph::describe(config.pipeline, nodes::default_registry());
        for (const auto& edge : graph.edges) {
          if (edge.type != "FeatureBatch") continue;
          for (const auto& seen : result.telemetry["edges"])
            if (seen["name"] == edge.name) CHECK_MESSAGE(seen["high_water"] == edge.capacity, edge.name);
        }
        const double counted = target_bytes + fit.needed_bytes + fit.beside.total_bytes();
        CAPTURE(peak);
        CAPTURE(counted);
        CHECK(peak <= counted);
        CHECK(counted <= kOverCount * peak);
        lowest = std::min(lowest, counted / peak);
        highest = std::max(highest, counted / peak);
      }
  MESSAGE("fit / measured peak: " << lowest << " to " << highest);
}
