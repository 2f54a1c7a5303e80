#include "nodes/step_allreduce.hpp"

#include <chrono>
#include <unordered_map>

#include "nodes/trainable_state.hpp"
#include "train/distributed.hpp"

namespace dflow::nodes {

namespace {

// The step's batches in plan order: [first, end) of the epoch's batches.
std::pair<int64_t, int64_t> step_range(const data::EpochPlan& plan, int64_t step) {
  const int64_t first = step * plan.batches_per_step();
  return {first, std::min(plan.num_batches(), first + plan.batches_per_step())};
}

}  // namespace

void allreduce_step(const RunContext& run, StepStats& step) {
  using clock = std::chrono::steady_clock;
  auto& dist = *run.options.dist;
  auto& state = *step.token;
  const auto arrived = clock::now();
  const auto& p = step.position;
  const auto plan = run.plans().get(p.epoch);
  auto& s = step.totals;
  const std::string what = "all-reduce of step " + std::to_string(p.global_step + 1);

  // Gradients first (the bulk), then the step's sums in one small vector.
  dist.allreduce_gradients(state.parameter_tensors(), what + " (gradients)");

  // The vector the ranks sum: the totals' summed fields, one busy-time slot
  // per rank, and one slot per planned sample of the step (its length + 1 on
  // the rank that trained on it; 0 where it was quarantined).
  std::vector<double> v;
  s.pack_into(v);
  const size_t busy_at = v.size();
  const size_t lengths_at = busy_at + static_cast<size_t>(dist.world_size());
  const auto [first, end] = step_range(*plan, p.step_in_epoch);
  std::vector<size_t> slot_of_batch;  // first sample slot of each batch of the step
  size_t slots = lengths_at;
  for (int64_t i = first; i < end; ++i) {
    slot_of_batch.push_back(slots);
    slots += plan->batches()[static_cast<size_t>(i)].sample_ids.size();
  }
  v.resize(slots, 0.0);
  const auto since = state.last_allreduce_end == clock::time_point{} ? run.started_at : state.last_allreduce_end;
  v[busy_at + static_cast<size_t>(dist.rank())] = std::chrono::duration<double>(arrived - since).count();
  // This rank's micro-batch m is the step's batch rank + m * world_size; rows
  // quarantined after planning are absent from its sample ids.
  std::unordered_map<int64_t, int64_t> trained;  // sample id -> length
  for (size_t i = 0; i < s.sample_ids.size() && i < s.sample_lengths.size(); ++i) trained[s.sample_ids[i]] = s.sample_lengths[i];
  for (int64_t j = dist.rank(); first + j < end; j += dist.world_size()) {
    const auto& batch = plan->batches()[static_cast<size_t>(first + j)];
    for (size_t r = 0; r < batch.sample_ids.size(); ++r)
      if (auto it = trained.find(batch.sample_ids[r]); it != trained.end())
        v[slot_of_batch[static_cast<size_t>(j)] + r] = static_cast<double>(it->second + 1);
  }

  dist.allreduce_sum(v, what + " (sums)");

  s.unpack_from(v, 0);
  step.rank_busy_s.assign(v.begin() + static_cast<std::ptrdiff_t>(busy_at),
                          v.begin() + static_cast<std::ptrdiff_t>(lengths_at));
  s.sample_ids.clear();
  s.sample_lengths.clear();
  size_t slot = lengths_at;
  for (int64_t i = first; i < end; ++i)
    for (const int64_t id : plan->batches()[static_cast<size_t>(i)].sample_ids) {
      const double length_plus_one = v[slot++];
      if (length_plus_one < 0.5) continue;  // quarantined: not trained on
      s.sample_ids.push_back(id);
      s.sample_lengths.push_back(static_cast<int64_t>(length_plus_one) - 1);
    }

  state.last_allreduce_end = clock::now();
  step.allreduce_s = std::chrono::duration<double>(state.last_allreduce_end - arrived).count();
}

}  // namespace dflow::nodes
