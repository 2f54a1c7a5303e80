// Pipeline efficiency (DESIGN "Performance model"): tokens/s through the whole
// declared graph divided by tokens/s of a bare loop running the same model
// steps on the same batches, side by side in one process.
//
//   build/bench/bench_pipeline [STEPS]     (default 60; run from the repo root
//   after `build/dflow train` has created runs/demo/target and runs/demo/data)
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config/config.hpp"
#include "config/log.hpp"
#include "data/collate.hpp"
#include "nodes/trainable_state.hpp"
#include "nodes/trainer.hpp"

using namespace dflow;
using clock_type = std::chrono::steady_clock;

namespace {

std::vector<std::string> overrides(const std::string& out_dir, int64_t steps) {
  return {"run.out_dir=" + out_dir, "run.max_steps=" + std::to_string(steps), "metrics.sinks=[jsonl]",
          "checkpoint.every_steps=0", "run.log_level=warn"};
}

// The same work as the graph's nodes, in a plain loop: collate, target
// features, anchors, objective, backward, and AdamW every grad_accum batches.
double bare_loop_tokens_per_s(const nodes::RunContext& run, nodes::TrainableState& state, int64_t steps) {
  const auto plan = run.plans().get(0);
  const auto& target = *run.targets.front();
  auto embedding = target.embedding_weight().to(torch::kFloat32), lm_head = target.lm_head_weight().to(torch::kFloat32);
  int64_t tokens = 0;
  auto start = clock_type::now();
  double weight_sum = 0;
  for (const auto& batch : plan->batches()) {
    if (batch.step_in_epoch >= steps) break;
    auto host = data::collate(run.dataset, batch, run.pad_token_id);
    auto ids = torch::from_blob(host.input_ids.data(), {host.rows, host.padded_length}, torch::kInt64).clone();
    auto mask = torch::from_blob(host.loss_mask.data(), {host.rows, host.padded_length}, torch::kUInt8).clone();
    std::vector<int64_t> lengths64(host.lengths.begin(), host.lengths.end());
    auto lengths = torch::tensor(lengths64, torch::kInt64);
    torch::Tensor features;
    {
      torch::NoGradGuard no_grad;
      features = target.context_features(ids, run.feature_layer_ids);
    }
    dflow::drafter::AnchorSamplingOptions anchor_options;
    anchor_options.anchors_per_sequence = run.config.train.anchors_per_sequence;
    anchor_options.seed = run.config.run.seed;
    anchor_options.batch_index = batch.index_in_epoch;
    auto anchors = dflow::drafter::sample_anchors(mask, lengths, anchor_options);
    auto out = dflow::drafter::dflash_loss(*state.drafter, embedding, lm_head, features, ids, mask, lengths, anchors,
                                  run.objective);
    if (out.weight_sum > 0) (out.loss * out.weight_sum).backward();
    weight_sum += out.weight_sum;
    tokens += batch.real_tokens;
    if (batch.is_last_micro_of_step()) {
      state.optimizer->scale_grads(1.0 / weight_sum);
      state.optimizer->clip_grad_norm(run.config.train.grad_clip, state.optimizer->grad_norm());
      state.optimizer->step(state.schedule.lr_at(batch.step_in_epoch));
      state.optimizer->zero_grad();
      weight_sum = 0;
    }
  }
  return tokens / std::chrono::duration<double>(clock_type::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t steps = argc > 1 ? std::atoll(argv[1]) : 60;
  auto base = std::filesystem::temp_directory_path() / "dflow-bench-pipeline";
  std::filesystem::remove_all(base);
  log::set_level("warn");

  auto graph_config = config::load_config("", overrides((base / "graph").string(), steps));
  torch::set_num_threads(graph_config.run.torch_threads);
  auto started = clock_type::now();
  auto result = nodes::run_training(graph_config, {});
  const double graph_s = std::chrono::duration<double>(clock_type::now() - started).count();
  int64_t graph_tokens = 0;
  {
    std::ifstream in(result.metrics_path);
    for (std::string line; std::getline(in, line);) {
      auto r = nlohmann::json::parse(line);
      if (r.value("kind", "") == "step") graph_tokens += r["real_tokens"].get<int64_t>();
    }
  }
  // The graph's wall time includes building the run state (model load);
  // time the bare loop's setup the same way.
  started = clock_type::now();
  const nodes::RunContext bare(config::load_config("", overrides((base / "bare").string(), steps)), {}, nullptr);
  nodes::TrainableState bare_state(bare, nullptr);
  const double setup_s = std::chrono::duration<double>(clock_type::now() - started).count();
  const double bare_tps = bare_loop_tokens_per_s(bare, bare_state, steps);
  const double graph_tps = graph_tokens / (graph_s - setup_s);
  std::printf("steps %lld, real tokens %lld\n", static_cast<long long>(steps), static_cast<long long>(graph_tokens));
  std::printf("graph  %10.0f tok/s\nbare   %10.0f tok/s\npipeline efficiency %.3f\n", graph_tps, bare_tps,
              graph_tps / bare_tps);
  return 0;
}
