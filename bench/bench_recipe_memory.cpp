// The table of docs/gpus.md "Memory per GPU", from the memory model
// (drafter/drafter_memory.hpp) as drafter_step's fit check applies it at start
// (nodes/drafter_memory_fit.hpp): the config's drafter, data and
// anchors_per_sequence, with a target preset's shapes (no weights are made or
// read). The resident part (the target's weights, counted from its shapes;
// the drafter's parameters and optimizer state), then each micro-batch the
// fit check checks (tokens_per_batch / length rows of each bucket length,
// every row with as many anchors as it can have). Then, for each GPU size,
// what the fit check says with the target's weights beside the drafter (both
// on one device, as the recipe's devices put them).
//
//   bench_recipe_memory [--config examples/qwen3-8b.yaml] [--preset qwen3-8b] [--gpus-gib 140.4,79.6]
#include <torch/torch.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "drafter/drafter_memory.hpp"
#include "drafter/objective.hpp"
#include "target/tiny_target.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "train/devices.hpp"

namespace {

using namespace dflow;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Options {
  std::string config = "examples/qwen3-8b.yaml", preset = "qwen3-8b";
  std::vector<double> gpus_gib = {140.4, 79.6};  // an H200's and an H100's memory as nvidia-smi reports it
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--config") o.config = value;
    else if (arg == "--preset") o.preset = value;
    else if (arg == "--gpus-gib") {
      o.gpus_gib.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) o.gpus_gib.push_back(std::stod(item));
    } else throw std::invalid_argument("unknown option " + arg);
  }
  return o;
}

// A dense decoder's parameters from its shapes (Qwen3: q/k norms, untied or tied LM head).
struct TargetCount {
  double layer = 0, embedding = 0, total = 0;
};
TargetCount count_target(const model::HFConfig& c) {
  if (c.moe.num_experts > 0) throw std::invalid_argument("the target row counts dense layers; this preset has experts");
  const double h = static_cast<double>(c.hidden_size), i = static_cast<double>(c.intermediate_size);
  const double qd = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double kd = static_cast<double>(c.num_key_value_heads * c.head_dim);
  TargetCount t;
  t.layer = 2 * h * qd + 2 * h * kd + 3 * h * i + 2 * h + (c.qk_norm ? 2 * static_cast<double>(c.head_dim) : 0);
  t.embedding = static_cast<double>(c.vocab_size) * h;
  t.total = static_cast<double>(c.num_hidden_layers) * t.layer + t.embedding * (c.tie_word_embeddings ? 1 : 2) + h;
  return t;
}

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / kGiB);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const auto config = config::load_config(o.config, {});
    const model::HFConfig target = model::tiny_target_config(model::preset_target_options(o.preset));
    model::DrafterOptions options;
    options.num_layers = config.model.drafter.num_layers;
    options.block_size = config.model.drafter.block_size;
    options.num_target_features = config.model.drafter.num_target_features;
    const auto& ids = config.model.drafter.target_layer_ids;
    options.target_layer_ids.assign(ids.begin(), ids.end());
    if (config.model.drafter.mask_token_id >= 0) options.mask_token_id = config.model.drafter.mask_token_id;
    options.layer_types = config.model.drafter.layer_types;
    options.sliding_window = config.model.drafter.sliding_window;
    const model::DrafterSpec spec = model::make_drafter_spec(target, options);
    const torch::Dtype dtype = train::parse_dtype(config.model.drafter.dtype);
    const torch::Dtype target_dtype = train::parse_dtype(config.model.target.dtype);
    const model::ObjectiveOptions objective;  // the default chunk budgets; recompute off
    const int64_t anchors = config.train.anchors_per_sequence;

    const TargetCount t = count_target(target);
    const double target_bytes = t.total * static_cast<double>(c10::elementSize(target_dtype));
    // The drafter reads the target's embedding and LM head in place when both
    // sit on one device in one dtype (the recipe's); otherwise it holds a copy.
    const bool shared = config.devices.target.size() == 1 && config.devices.target.front() == config.devices.drafter &&
                        target_dtype == dtype;
    const model::DrafterMemoryEstimate fixed = model::estimate_drafter_memory(
        spec, nodes::micro_batch_shape(config.data, config.data.max_length, anchors, dtype, objective, false));
    const double resident = target_bytes + fixed.parameter_bytes + (shared ? 0 : fixed.frozen_bytes);
    const double trainable = fixed.parameter_bytes / (2.0 * static_cast<double>(c10::elementSize(dtype)) + 8 +
                                                      (dtype == torch::kFloat32 ? 0 : 4));

    std::printf("bench_recipe_memory: %s with the %s preset's shapes; drafter %s, target %s; the memory model of "
                "drafter/drafter_memory.hpp over the micro-batches drafter_step's fit check checks\n\n",
                o.config.c_str(), o.preset.c_str(), config.model.drafter.dtype.c_str(), config.model.target.dtype.c_str());
    std::printf("| what | size |\n| --- | --- |\n");
    std::printf("| target, %s: %.2f B parameters (%lld layers x %.1f M, embedding and %s LM head %.0f M each) | %s |\n",
                config.model.target.dtype.c_str(), t.total / 1e9, static_cast<long long>(target.num_hidden_layers),
                t.layer / 1e6, target.tie_word_embeddings ? "tied" : "untied", t.embedding / 1e6,
                gib(target_bytes).c_str());
    std::printf("| drafter, %.2f B trainable: weights and gradients in %s, fp32 masters and two fp32 Adam moments | %s |\n",
                trainable / 1e9, config.model.drafter.dtype.c_str(), gib(fixed.parameter_bytes).c_str());
    std::printf("| the drafter's frozen embedding and LM head | %s |\n",
                shared ? "0 (the target's, read in place)" : gib(fixed.frozen_bytes).c_str());
    std::printf("| **resident** | **%s** |\n\n", gib(resident).c_str());

    // Per micro-batch of each length the fit check checks: rows x anchors at most.
    std::printf("| micro-batch | anchors at most | recompute | per anchor MiB | activations | context + transient | "
                "total with the resident part |\n| --- | --- | --- | --- | --- | --- | --- |\n");
    for (const int64_t length : nodes::checked_lengths(config.data))
      for (const bool recompute : {false, true}) {
        const auto shape = nodes::micro_batch_shape(config.data, length, anchors, dtype, objective, recompute);
        const model::DrafterMemoryEstimate e = model::estimate_drafter_memory(spec, shape);
        const double activations = e.per_anchor_bytes * static_cast<double>(e.anchors);
        std::printf("| %lld x %lld tokens | %lld (%lld a row) | %s | %.1f | %s | %s | %s |\n",
                    static_cast<long long>(shape.rows), static_cast<long long>(length),
                    static_cast<long long>(e.anchors), static_cast<long long>(shape.anchors_per_sequence),
                    recompute ? "on" : "off", e.per_anchor_bytes / 1048576.0, gib(activations).c_str(),
                    gib(e.context_bytes + e.transient_bytes).c_str(),
                    gib(resident + activations + e.context_bytes + e.transient_bytes).c_str());
      }
    std::printf("\nThe target's forward under no-grad is not in the model.\n");
    for (const double gpu : o.gpus_gib) {
      const double free = gpu * kGiB - target_bytes;
      const nodes::MemoryFit on = nodes::check_memory_fit(spec, config.data, anchors, dtype, objective, free);
      std::printf("A %.1f GiB GPU (%s free beside the target): the fit check says %s; the largest anchors_per_sequence "
                  "that fits: %lld (%lld with recompute)\n",
                  gpu, gib(free).c_str(), on.fits ? "fits" : "does not fit",
                  static_cast<long long>(on.largest_fitting_anchors),
                  static_cast<long long>(on.largest_fitting_anchors_other));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_recipe_memory: %s\n", e.what());
    return 1;
  }
  return 0;
}
