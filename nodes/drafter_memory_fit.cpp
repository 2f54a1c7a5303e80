// The fit check of nodes/drafter_memory_fit.hpp, and its log line at start.
#include "nodes/drafter_memory_fit.hpp"

#include <algorithm>
#include <cstdio>
#include <tuple>
#include <vector>

#include "config/log.hpp"
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
  const model::DrafterSpec& spec;
  const config::DataConfig& data;
  torch::Dtype dtype;
  const model::ObjectiveOptions& objective;

  model::DrafterMemoryShape shape(int64_t length, int64_t anchors, bool recompute) const {
    return micro_batch_shape(data, length, anchors, dtype, objective, recompute);
  }
  // The micro-batch of the bucket that needs the most, and its bytes.
  std::pair<model::DrafterMemoryShape, double> largest(int64_t anchors, bool recompute) const {
    std::pair<model::DrafterMemoryShape, double> worst{{}, -1};
    for (const int64_t length : checked_lengths(data)) {
      const auto s = shape(length, anchors, recompute);
      const double bytes = model::estimate_drafter_memory(spec, s).total_bytes();
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

model::DrafterMemoryShape micro_batch_shape(const config::DataConfig& data, int64_t length, int64_t anchors_per_sequence,
                                            torch::Dtype dtype, const model::ObjectiveOptions& objective, bool recompute) {
  model::DrafterMemoryShape s;
  s.rows = std::max<int64_t>(1, data.tokens_per_batch / length);
  s.context_length = length;
  s.anchors_per_sequence = std::min<int64_t>(anchors_per_sequence, std::max<int64_t>(1, length - 1));
  s.dtype = dtype;
  s.recompute_layers = recompute;
  s.max_attention_scores_per_chunk = objective.max_attention_scores_per_chunk;
  s.max_logits_per_chunk = objective.max_logits_per_chunk;
  s.loss_chunk_buffers = objective.loss.chunk_buffers(objective.kl_temperature);
  s.teacher = objective.loss.needs_teacher();
  return s;
}

std::vector<int64_t> checked_lengths(const config::DataConfig& data) {
  std::vector<int64_t> lengths;
  for (const int bucket : data.buckets)
    if (bucket < data.max_length) lengths.push_back(bucket);
  lengths.push_back(data.max_length);
  return lengths;
}

TargetForwardFit largest_target_forward(const model::HFConfig& target, const config::DataConfig& data,
                                        int64_t features, int64_t element_bytes, bool cuda) {
  TargetForwardFit largest;
  for (const int64_t length : checked_lengths(data)) {
    model::TargetForwardShape shape;
    shape.rows = std::max<int64_t>(1, data.tokens_per_batch / length);
    shape.length = length;
    shape.element_bytes = element_bytes;
    shape.features = features;
    shape.cuda = cuda;
    const double bytes = model::estimate_target_forward(target, shape).total_bytes();
    if (bytes > largest.bytes) largest = {bytes, shape.rows, length};
  }
  return largest;
}

MemoryFit check_memory_fit(const model::DrafterSpec& spec, const config::DataConfig& data, int64_t anchors_per_sequence,
                           torch::Dtype dtype, const model::ObjectiveOptions& objective, double available_bytes) {
  const Checker checker{spec, data, dtype, objective};
  const bool recompute = objective.recompute_layers;
  MemoryFit fit;
  fit.max_length = data.max_length;
  std::tie(fit.largest_batch, fit.needed_bytes) = checker.largest(anchors_per_sequence, recompute);
  fit.available_bytes = available_bytes;
  fit.fits = fit.needed_bytes <= available_bytes;
  fit.per_anchor_bytes =
      model::estimate_drafter_memory(spec, checker.shape(data.max_length, anchors_per_sequence, false)).per_anchor_bytes;
  fit.per_anchor_recomputed_bytes =
      model::estimate_drafter_memory(spec, checker.shape(data.max_length, anchors_per_sequence, true)).per_anchor_bytes;
  fit.largest_fitting_anchors = checker.largest_fitting(recompute, available_bytes);
  fit.largest_fitting_anchors_other = checker.largest_fitting(!recompute, available_bytes);
  return fit;
}

std::string MemoryFit::describe(const std::string& node, const std::string& device) const {
  const bool recompute = largest_batch.recompute_layers;
  const std::string beside =
      target_forward.bytes > 0 ? log::str(" (after about ", gib(target_forward.bytes), " for the target's forward of ",
                                          target_forward.rows, " rows x ", target_forward.length, " tokens beside it)")
                               : std::string();
  std::string text = log::str(
      node, ": drafter memory per anchor at ", max_length,
      " tokens: ", mib(per_anchor_bytes), " (", mib(per_anchor_recomputed_bytes),
      " with recompute); the largest micro-batch (", largest_batch.rows, " rows x ", largest_batch.context_length,
      " tokens x ", largest_batch.anchors_per_sequence, " anchors, recompute ", recompute ? "on" : "off",
      ") needs about ", gib(needed_bytes), " of ", gib(available_bytes), " available on ", device, beside, ": ",
      fits ? "fits" : "does not fit", "; the largest anchors_per_sequence that fits: ", largest_fitting_anchors, " (",
      largest_fitting_anchors_other, " with recompute ", recompute ? "off" : "on", ")");
  if (!fits) text += "; lower train.anchors_per_sequence or data.tokens_per_batch, or set params.recompute: true";
  return text;
}

void log_memory_fit(const RunContext& run, const model::ObjectiveOptions& objective, const std::string& node) {
  const double available = train::available_memory_bytes(run.drafter_device);
  if (available <= 0) return;
  // Each replica on the drafter's device runs its forward beside the others.
  TargetForwardFit target;
  for (const auto& replica : run.targets) {
    if (replica->device() != run.drafter_device) continue;
    const auto features = static_cast<int64_t>(run.feature_layer_ids.size()) + (run.needs_teacher() ? 1 : 0);
    const TargetForwardFit one =
        largest_target_forward(replica->config(), run.config.data, features,
                               static_cast<int64_t>(c10::elementSize(replica->dtype())), replica->device().is_cuda());
    target = {target.bytes + one.bytes, one.rows, one.length};
  }
  MemoryFit fit = check_memory_fit(run.drafter_spec, run.config.data, run.config.train.anchors_per_sequence,
                                   run.drafter_dtype, objective, available - target.bytes);
  fit.target_forward = target;
  const std::string text = fit.describe(node, run.drafter_device.str());
  if (fit.fits) log::info("memory", text); else log::warn("memory", text);
}

}  // namespace dflow::nodes
