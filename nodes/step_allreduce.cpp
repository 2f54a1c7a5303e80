#include "nodes/step_allreduce.hpp"

#include <chrono>
#include <unordered_map>

#include "train/distributed.hpp"

namespace dflow::nodes {

namespace {

// The step's batches in plan order: [first, end) of the epoch's batches.
std::pair<int64_t, int64_t> step_range(const data::EpochPlan& plan, int64_t step) {
  const int64_t first = step * plan.batches_per_step();
  return {first, std::min(plan.num_batches(), first + plan.batches_per_step())};
}

// Layout of the float64 vector the ranks sum: scalars, per-position counts,
// per-bucket batches / loss sums / tokens, one busy-time slot per rank, and
// one slot per planned sample of the step (its length + 1 on the rank that
// trained on it; 0 where it was quarantined). Sums of integers below 2^53
// are exact in float64.
struct Packing {
  size_t positions = 0, buckets = 0, ranks = 0, samples = 0;
  static constexpr size_t kScalars = 7;
  size_t correct() const { return kScalars; }
  size_t count() const { return correct() + positions; }
  size_t bucket() const { return count() + positions; }
  size_t bucket_ce() const { return bucket() + buckets; }
  size_t bucket_weight() const { return bucket_ce() + buckets; }
  size_t bucket_tokens() const { return bucket_weight() + buckets; }
  size_t busy() const { return bucket_tokens() + buckets; }
  size_t lengths() const { return busy() + ranks; }
  size_t size() const { return lengths() + samples; }
};

}  // namespace

void allreduce_step(RunState& state, StepStats& step) {
  using clock = std::chrono::steady_clock;
  auto& dist = *state.options.dist;
  const auto arrived = clock::now();
  const auto& p = step.position;
  const auto& plan = state.plan(p.epoch);
  auto& s = step.sums;
  const std::string what = "all-reduce of step " + std::to_string(p.global_step + 1);

  // Gradients first (the bulk), then the step's sums in one small vector.
  std::vector<torch::Tensor> parameters;
  for (const auto& [name, t] : state.drafter_parameters()) parameters.push_back(t);
  dist.allreduce_gradients(parameters, what + " (gradients)");

  const auto [first, end] = step_range(plan, p.step_in_epoch);
  Packing layout;
  layout.positions = static_cast<size_t>(state.drafter->spec().block_size);
  layout.buckets = state.config.data.buckets.size();
  layout.ranks = static_cast<size_t>(dist.world_size());
  std::vector<size_t> offset_of_batch;  // first sample slot of each batch of the step
  for (int64_t i = first; i < end; ++i) {
    offset_of_batch.push_back(layout.samples);
    layout.samples += plan.batches()[static_cast<size_t>(i)].sample_ids.size();
  }

  std::vector<double> v(layout.size(), 0.0);
  v[0] = s.weighted_ce_sum, v[1] = s.weight_sum, v[2] = static_cast<double>(s.anchors);
  v[3] = static_cast<double>(s.real_tokens), v[4] = static_cast<double>(s.padded_tokens);
  v[5] = static_cast<double>(s.micro_batches), v[6] = static_cast<double>(s.excluded_samples);
  for (size_t k = 0; k < s.correct_per_position.size() && k < layout.positions; ++k) {
    v[layout.correct() + k] = s.correct_per_position[k];
    v[layout.count() + k] = s.count_per_position[k];
  }
  for (size_t b = 0; b < s.batches_per_bucket.size() && b < layout.buckets; ++b)
    v[layout.bucket() + b] = static_cast<double>(s.batches_per_bucket[b]);
  for (size_t b = 0; b < s.bucket_ce_sum.size() && b < layout.buckets; ++b) {
    v[layout.bucket_ce() + b] = s.bucket_ce_sum[b];
    v[layout.bucket_weight() + b] = s.bucket_weight_sum[b];
    v[layout.bucket_tokens() + b] = static_cast<double>(s.bucket_real_tokens[b]);
  }
  const auto since = state.last_allreduce_end == clock::time_point{} ? state.started_at : state.last_allreduce_end;
  v[layout.busy() + dist.rank()] = std::chrono::duration<double>(arrived - since).count();
  // This rank's micro-batch m is the step's batch rank + m * world_size; rows
  // quarantined after planning are absent from its sample ids.
  std::unordered_map<int64_t, int64_t> trained;  // sample id -> length
  for (size_t i = 0; i < s.sample_ids.size() && i < s.sample_lengths.size(); ++i) trained[s.sample_ids[i]] = s.sample_lengths[i];
  for (int64_t j = dist.rank(); first + j < end; j += dist.world_size()) {
    const auto& batch = plan.batches()[static_cast<size_t>(first + j)];
    for (size_t r = 0; r < batch.sample_ids.size(); ++r)
      if (auto it = trained.find(batch.sample_ids[r]); it != trained.end())
        v[layout.lengths() + offset_of_batch[static_cast<size_t>(j)] + r] = static_cast<double>(it->second + 1);
  }

  dist.allreduce_sum(v, what + " (sums)");

  s.weighted_ce_sum = v[0], s.weight_sum = v[1], s.anchors = static_cast<int64_t>(v[2]);
  s.real_tokens = static_cast<int64_t>(v[3]), s.padded_tokens = static_cast<int64_t>(v[4]);
  s.micro_batches = static_cast<int64_t>(v[5]);
  s.correct_per_position.assign(v.begin() + layout.correct(), v.begin() + layout.count());
  s.count_per_position.assign(v.begin() + layout.count(), v.begin() + layout.bucket());
  s.batches_per_bucket.assign(layout.buckets, 0);
  for (size_t b = 0; b < layout.buckets; ++b) s.batches_per_bucket[b] = static_cast<int64_t>(v[layout.bucket() + b]);
  step.rank_busy_s.assign(v.begin() + layout.busy(), v.begin() + layout.lengths());
  s.excluded_samples = static_cast<int64_t>(v[6]);
  s.bucket_ce_sum.assign(v.begin() + layout.bucket_ce(), v.begin() + layout.bucket_weight());
  s.bucket_weight_sum.assign(v.begin() + layout.bucket_weight(), v.begin() + layout.bucket_tokens());
  s.bucket_real_tokens.assign(layout.buckets, 0);
  for (size_t b = 0; b < layout.buckets; ++b) s.bucket_real_tokens[b] = static_cast<int64_t>(v[layout.bucket_tokens() + b]);
  s.sample_ids.clear();
  s.sample_lengths.clear();
  for (int64_t i = first, slot = 0; i < end; ++i)
    for (const int64_t id : plan.batches()[static_cast<size_t>(i)].sample_ids) {
      const double length_plus_one = v[layout.lengths() + static_cast<size_t>(slot++)];
      if (length_plus_one < 0.5) continue;  // quarantined: not trained on
      s.sample_ids.push_back(id);
      s.sample_lengths.push_back(static_cast<int64_t>(length_plus_one) - 1);
    }

  state.last_allreduce_end = clock::now();
  step.allreduce_s = std::chrono::duration<double>(state.last_allreduce_end - arrived).count();
}

}  // namespace dflow::nodes
