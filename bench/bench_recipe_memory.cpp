// The table of docs/gpus.md "Memory per GPU", from the memory model
// (drafter/drafter_memory.hpp) as drafter_step's fit check applies it at start
// (nodes/drafter_memory_fit.hpp): the config's drafter, data and
// anchors_per_sequence, with a target preset's shapes or a checkpoint's
// config.json (no weights are made or read). The resident part (the target's
// text model, counted from its shapes by target/target_memory.hpp; the
// drafter's parameters and optimizer state), then each micro-batch the fit
// check checks (tokens_per_batch / length rows of each bucket length, every
// row with as many anchors as it can have), and the target's forward over its
// largest micro-batch. Then, for each GPU size, what the fit check says with
// the target's weights and forward beside the drafter (both on one device, as
// the recipe's devices put them).
//
//   bench_recipe_memory [--config examples/qwen3-8b.yaml] [--preset qwen3-8b | --target-config DIR]
//                       [--gpus-gib 140.4,79.6]
#include <torch/torch.h>

#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "drafter/drafter_memory.hpp"
#include "drafter/objective.hpp"
#include "target/hf_config.hpp"
#include "target/target_memory.hpp"
#include "target/tiny_target.hpp"
#include "nodes/drafter_kind_choice.hpp"
#include "nodes/drafter_memory_fit.hpp"
#include "nodes/registry.hpp"
#include "train/devices.hpp"

namespace {

using namespace dflow;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Options {
  std::string config = "examples/qwen3-8b.yaml", preset = "qwen3-8b", target_config;
  std::vector<double> gpus_gib = {140.4, 79.6};  // an H200's and an H100's memory as nvidia-smi reports it
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--config") o.config = value;
    else if (arg == "--preset") o.preset = value;
    else if (arg == "--target-config") o.target_config = value;
    else if (arg == "--gpus-gib") {
      o.gpus_gib.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) o.gpus_gib.push_back(std::stod(item));
    } else throw std::invalid_argument("unknown option " + arg);
  }
  return o;
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
    const dflow::target::HFConfig target =
        o.target_config.empty() ? dflow::target::tiny_target_config(dflow::target::preset_target_options(o.preset))
                                : dflow::target::load_hf_config(o.target_config);
    const std::string target_name = o.target_config.empty() ? "the " + o.preset + " preset's" : o.target_config + "'s";
    dflow::drafter::DrafterOptions options;
    options.num_layers = config.model.drafter.num_layers;
    options.block_size = config.model.drafter.block_size;
    options.num_target_features = config.model.drafter.num_target_features;
    const auto& ids = config.model.drafter.target_layer_ids;
    options.target_layer_ids.assign(ids.begin(), ids.end());
    if (config.model.drafter.mask_token_id >= 0) options.mask_token_id = config.model.drafter.mask_token_id;
    options.layer_types = config.model.drafter.layer_types;
    options.sliding_window = config.model.drafter.sliding_window;
    options.intermediate_size = config.model.drafter.intermediate_size;
    // The drafter node's kind, loss and params, as the run and dflow init read them.
    std::string teacher;
    const nodes::DrafterKindChoice choice = nodes::drafter_kind_choice(config, nodes::default_registry(), &teacher);
    options.kind = choice.kind;
    options.kind_fields = choice.fields;
    const dflow::drafter::DrafterSpec spec = dflow::drafter::make_drafter_spec(target, options);
    const torch::Dtype dtype = train::parse_dtype(config.model.drafter.dtype);
    const torch::Dtype target_dtype = train::parse_dtype(config.model.target.dtype);
    const dflow::drafter::ObjectiveOptions& objective = choice.objective;
    const int64_t anchors = config.train.anchors_per_sequence;

    const auto target_element = static_cast<int64_t>(c10::elementSize(target_dtype));
    const auto target_bytes = static_cast<double>(dflow::target::target_resident_bytes(target, target_element, false));
    // The drafter reads the target's embedding and LM head in place when both
    // sit on one device in one dtype (the recipe's); otherwise it holds a copy.
    const bool shared = config.devices.target.size() == 1 && config.devices.target.front() == config.devices.drafter &&
                        target_dtype == dtype;
    const dflow::drafter::DrafterMemoryEstimate fixed = dflow::drafter::estimate_drafter_memory(
        spec, nodes::micro_batch_shape(spec, config.data, config.data.max_length, anchors, dtype, objective, false));
    const double resident = target_bytes + fixed.parameter_bytes + (shared ? 0 : fixed.frozen_bytes);
    const double trainable = fixed.parameter_bytes / (2.0 * static_cast<double>(c10::elementSize(dtype)) + 8 +
                                                      (dtype == torch::kFloat32 ? 0 : 4));

    std::printf("bench_recipe_memory: %s with %s shapes; drafter %s, target %s; the memory model of "
                "drafter/drafter_memory.hpp over the micro-batches drafter_step's fit check checks\n\n",
                o.config.c_str(), target_name.c_str(), config.model.drafter.dtype.c_str(),
                config.model.target.dtype.c_str());
    std::printf("| what | size |\n| --- | --- |\n");
    std::printf("| target's text model, %s: %.2f B parameters (%lld layers, embedding and %s LM head %.0f M each) | %s |\n",
                config.model.target.dtype.c_str(), target_bytes / static_cast<double>(target_element) / 1e9,
                static_cast<long long>(target.num_hidden_layers), target.tie_word_embeddings ? "tied" : "untied",
                static_cast<double>(target.vocab_size * target.hidden_size) / 1e6, gib(target_bytes).c_str());
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
        const auto shape = nodes::micro_batch_shape(spec, config.data, length, anchors, dtype, objective, recompute);
        const dflow::drafter::DrafterMemoryEstimate e = dflow::drafter::estimate_drafter_memory(spec, shape);
        const double activations = e.per_anchor_bytes * static_cast<double>(e.anchors);
        std::printf("| %lld x %lld tokens | %lld (%lld a row) | %s | %.1f | %s | %s | %s |\n",
                    static_cast<long long>(shape.rows), static_cast<long long>(length),
                    static_cast<long long>(e.anchors), static_cast<long long>(shape.anchors_per_sequence),
                    recompute ? "on" : "off", e.per_anchor_bytes / 1048576.0, gib(activations).c_str(),
                    gib(e.context_bytes + e.transient_bytes).c_str(),
                    gib(resident + activations + e.context_bytes + e.transient_bytes).c_str());
      }
    const int64_t features = spec.num_features() + (teacher.empty() ? 0 : 1);
    nodes::BesideTheStep beside =
        nodes::beside_the_step(config, nodes::default_registry(), spec, dtype, !teacher.empty(), /*rank=*/0);
    beside.target_forward = nodes::largest_target_forward(target, config.data, features, target_element, /*cuda=*/true);
    const nodes::TargetForwardFit& forward = beside.target_forward;
    std::printf("\nThe target's forward beside the drafter (target/target_memory.hpp, no grad), at its largest "
                "micro-batch (%lld x %lld tokens, %lld features): %s\n",
                static_cast<long long>(forward.rows), static_cast<long long>(forward.length),
                static_cast<long long>(features), gib(forward.bytes).c_str());
    std::printf("Beside it on the drafter's device: the %lld feature batches the edges into drafter_step can hold, %s; "
                "eval's drafter, %s; rollback's snapshots, %s\n",
                static_cast<long long>(beside.queued_batches), gib(beside.queued_bytes).c_str(),
                gib(beside.eval_drafter_bytes).c_str(), gib(beside.rollback_bytes).c_str());
    for (const double gpu : o.gpus_gib) {
      const double free = gpu * kGiB - target_bytes - beside.total_bytes();
      const nodes::MemoryFit on =
          nodes::check_memory_fit(spec, config.data, anchors, dtype, objective, gpu * kGiB - target_bytes, beside);
      std::printf("A %.1f GiB GPU (%s free beside the target's weights and forward and what waits beside the step): the fit check says %s; the largest anchors_per_sequence "
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
