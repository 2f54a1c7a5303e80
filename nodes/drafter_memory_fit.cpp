// The fit check of nodes/drafter_memory_fit.hpp, and its log line at start.
#include "nodes/drafter_memory_fit.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <vector>

#include "config/log.hpp"
#include "drafter/kind.hpp"
#include "graph/description.hpp"
#include "nodes/node_kind.hpp"
#include "nodes/run_context.hpp"
#include "target/target_memory.hpp"
#include "train/devices.hpp"

namespace dflow::nodes {

namespace {

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::string mib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return text;
}

struct Checker {
  const drafter::DrafterSpec& spec;
  const config::DataConfig& data;
  torch::Dtype dtype;
  const drafter::ObjectiveOptions& objective;

  drafter::DrafterMemoryShape shape(int64_t length, int64_t anchors, bool recompute) const {
    return micro_batch_shape(spec, data, length, anchors, dtype, objective, recompute);
  }
  // The micro-batch of the bucket that needs the most, and its bytes.
  std::pair<drafter::DrafterMemoryShape, double> largest(int64_t anchors, bool recompute) const {
    std::pair<drafter::DrafterMemoryShape, double> worst{{}, -1};
    for (const int64_t length : checked_lengths(data)) {
      const auto s = shape(length, anchors, recompute);
      const double bytes = drafter::estimate_drafter_memory(spec, s).total_bytes();
      if (bytes > worst.second) worst = {s, bytes};
    }
    return worst;
  }
  // The largest anchors_per_sequence below max_length whose micro-batches all fit (0: none).
  int64_t largest_fitting(bool recompute, double available) const {
    int64_t low = 0, high = std::max(1, data.max_length - 1);
    while (low < high) {
      const int64_t mid = low + (high - low + 1) / 2;
      if (largest(mid, recompute).second <= available) low = mid; else high = mid - 1;
    }
    return low;
  }
};

}  // namespace

drafter::DrafterMemoryShape micro_batch_shape(const drafter::DrafterSpec& spec, const config::DataConfig& data,
                                            int64_t length, int64_t anchors_per_sequence, torch::Dtype dtype,
                                            const drafter::ObjectiveOptions& objective, bool recompute) {
  drafter::DrafterMemoryShape s;
  s.rows = std::max<int64_t>(1, data.tokens_per_batch / length);
  s.context_length = length;
  s.anchors_per_sequence = std::min<int64_t>(anchors_per_sequence, std::max<int64_t>(1, length - 1));
  s.dtype = dtype;
  s.recompute_layers = recompute;
  s.max_attention_scores_per_chunk = objective.max_attention_scores_per_chunk;
  s.max_logits_per_chunk = objective.max_logits_per_chunk;
  drafter::LossMix main_loss = objective.loss;  // as the objective runs it: with the records' expected acceptance
  main_loss.expected_acceptance = objective.expected_acceptance;
  s.loss_chunk_buffers = main_loss.chunk_buffers(objective.kl_temperature);
  // A kind may read the target's distribution whatever the loss (DSpine),
  // and so do the records' expected acceptance (eval.expected_acceptance).
  s.teacher = objective.needs_teacher() || drafter::drafter_kind(spec.kind).needs_teacher(objective.kind_options);
  s.kind_options = objective.kind_options;
  return s;
}

std::vector<int64_t> checked_lengths(const config::DataConfig& data) {
  std::vector<int64_t> lengths;
  for (const int bucket : data.buckets)
    if (bucket < data.max_length) lengths.push_back(bucket);
  lengths.push_back(data.max_length);
  return lengths;
}

TargetForwardFit largest_target_forward(const target::HFConfig& target, const config::DataConfig& data,
                                        int64_t features, int64_t element_bytes, bool cuda) {
  TargetForwardFit largest;
  for (const int64_t length : checked_lengths(data)) {
    target::TargetForwardShape shape;
    shape.rows = std::max<int64_t>(1, data.tokens_per_batch / length);
    shape.length = length;
    shape.element_bytes = element_bytes;
    shape.features = features;
    shape.cuda = cuda;
    const double bytes = target::estimate_target_forward(target, shape).total_bytes();
    if (bytes > largest.bytes) largest = {bytes, shape.rows, length};
  }
  return largest;
}

BesideTheStep beside_the_step(const config::Config& config, const graph::NodeRegistry& kinds,
                              const drafter::DrafterSpec& spec, torch::Dtype dtype, bool teacher, int rank) {
  BesideTheStep beside;
  const double e = static_cast<double>(c10::elementSize(dtype)), h = static_cast<double>(spec.hidden_size);
  // The sources emit each FeatureBatch on the drafter's device (in its
  // dtype); an edge's credit is taken before its producer makes the item,
  // so the edges' capacities bound what exists beside the step's own batch.
  const graph::GraphDescription graph = graph::describe(config.pipeline, kinds);
  for (const auto& edge : graph.edges)
    if (edge.type == "FeatureBatch")
      beside.queued_batches += static_cast<int64_t>(edge.capacity) * graph.nodes[static_cast<size_t>(edge.to_node)].replicas;
  double largest_tokens = 0;
  for (const int64_t length : checked_lengths(config.data))
    largest_tokens = std::max(largest_tokens, static_cast<double>(std::max<int64_t>(1, config.data.tokens_per_batch / length) * length));
  const double per_token = (static_cast<double>(spec.num_features()) + (teacher ? 1.0 : 0.0)) * h * e;
  beside.queued_bytes = static_cast<double>(beside.queued_batches) * largest_tokens * per_token;

  const double parameters = drafter::drafter_parameter_count(spec);
  // A node's own copy of the drafter, on rank 0: its weights (and a kind's
  // fixed tensors) in the drafter's dtype, and what drafting a prompt of up
  // to max_length tokens holds: its context features and each layer's K/V.
  if (rank == 0) {
    for (const auto& node : config.pipeline.nodes) {
      const RunHooks* hooks = run_hooks(kinds, node.type);
      if (!hooks || !hooks->holds_drafter_copy || (hooks->off_because && !hooks->off_because(config, node).empty()))
        continue;
      const double kv = static_cast<double>(2 * spec.num_key_value_heads * spec.head_dim * spec.num_layers);
      const double context = static_cast<double>(config.data.max_length) * (static_cast<double>(spec.num_features()) * h + kv);
      beside.eval_drafter_bytes +=
          (parameters + static_cast<double>(drafter::drafter_kind(spec.kind).frozen_count(spec)) + context) * e;
    }
  }
  // Rollback's candidate and good snapshots: the parameters in their dtype,
  // the optimizer's state (AdamW's two float32 moments, a bf16 drafter's float32 masters).
  if (config.guard.policy == "rollback") {
    const double masters = dtype == torch::kFloat32 ? 0 : 4;
    beside.rollback_bytes = 2 * parameters * (e + 2 * 4 + masters);
  }
  return beside;
}

MemoryFit check_memory_fit(const drafter::DrafterSpec& spec, const config::DataConfig& data,
                           int64_t anchors_per_sequence, torch::Dtype dtype, const drafter::ObjectiveOptions& objective,
                           double available_bytes, const BesideTheStep& beside) {
  const Checker checker{spec, data, dtype, objective};
  const bool recompute = objective.recompute_layers;
  const double available = available_bytes - beside.total_bytes();
  MemoryFit fit;
  fit.max_length = data.max_length;
  fit.beside = beside;
  std::tie(fit.largest_batch, fit.needed_bytes) = checker.largest(anchors_per_sequence, recompute);
  fit.available_bytes = available;
  fit.fits = fit.needed_bytes <= available;
  fit.per_anchor_bytes =
      drafter::estimate_drafter_memory(spec, checker.shape(data.max_length, anchors_per_sequence, false))
          .per_anchor_bytes;
  fit.per_anchor_recomputed_bytes =
      drafter::estimate_drafter_memory(spec, checker.shape(data.max_length, anchors_per_sequence, true))
          .per_anchor_bytes;
  fit.largest_fitting_anchors = checker.largest_fitting(recompute, available);
  fit.largest_fitting_anchors_other = checker.largest_fitting(!recompute, available);
  return fit;
}

std::string MemoryFit::describe(const std::string& node, const std::string& device) const {
  const bool recompute = largest_batch.recompute_layers;
  // Appended piece by piece: GCC 12 warns wrongly on "literal" + string and
  // on a vector of strings growing here (its bugs 105651, 105329).
  std::string after;
  auto beside_part = [&after](const std::string& part) {
    after.append(after.empty() ? " (after about " : ", ").append(part);
  };
  if (beside.target_forward.bytes > 0)
    beside_part(log::str(gib(beside.target_forward.bytes), " for the target's forward of ", beside.target_forward.rows,
                         " rows x ", beside.target_forward.length, " tokens"));
  if (beside.queued_batches > 0)
    beside_part(log::str(gib(beside.queued_bytes), " for the ", beside.queued_batches,
                         " feature batches its input edges can hold"));
  if (beside.eval_drafter_bytes > 0) beside_part(log::str(gib(beside.eval_drafter_bytes), " for eval's drafter"));
  if (beside.rollback_bytes > 0) beside_part(log::str(gib(beside.rollback_bytes), " for rollback's snapshots"));
  if (!after.empty()) after.append(" beside it)");
  std::string text = log::str(
      node, ": drafter memory per anchor at ", max_length,
      " tokens: ", mib(per_anchor_bytes), " (", mib(per_anchor_recomputed_bytes),
      " with recompute); the largest micro-batch (", largest_batch.rows, " rows x ", largest_batch.context_length,
      " tokens x ", largest_batch.anchors_per_sequence, " anchors, recompute ", recompute ? "on" : "off",
      ") needs about ", gib(needed_bytes), " of ", gib(available_bytes), " available on ", device, after, ": ",
      fits ? "fits" : "does not fit", "; the largest anchors_per_sequence that fits: ", largest_fitting_anchors, " (",
      largest_fitting_anchors_other, " with recompute ", recompute ? "off" : "on", ")");
  if (!fits) text += "; lower train.anchors_per_sequence or data.tokens_per_batch, or set params.recompute: true";
  return text;
}

MemoryFit run_memory_fit(const RunContext& run, const drafter::ObjectiveOptions& objective, double available_bytes) {
  BesideTheStep beside = beside_the_step(run.config, run.options.node_kinds(), run.drafter_spec, run.drafter_dtype,
                                         run.needs_teacher(), run.options.rank);
  // Each replica on the drafter's device runs its forward beside the others.
  for (const auto& replica : run.targets) {
    if (replica->device() != run.drafter_device) continue;
    const auto features = static_cast<int64_t>(run.feature_layer_ids.size()) + (run.needs_teacher() ? 1 : 0);
    const TargetForwardFit one =
        largest_target_forward(replica->config(), run.config.data, features,
                               static_cast<int64_t>(c10::elementSize(replica->dtype())), replica->device().is_cuda());
    beside.target_forward = {beside.target_forward.bytes + one.bytes, one.rows, one.length};
  }
  return check_memory_fit(run.drafter_spec, run.config.data, run.config.train.anchors_per_sequence, run.drafter_dtype,
                          objective, available_bytes, beside);
}

void log_memory_fit(const RunContext& run, const drafter::ObjectiveOptions& objective, const std::string& node) {
  const double available = train::available_memory_bytes(run.drafter_device);
  if (available <= 0) return;
  const MemoryFit fit = run_memory_fit(run, objective, available);
  const std::string text = fit.describe(node, run.drafter_device.str());
  if (fit.fits) log::info("memory", text); else log::warn("memory", text);
}

}  // namespace dflow::nodes
