#include "data/plan.hpp"

#include <algorithm>
#include <fmt/format.h>

#include "data/batching_policy.hpp"
#include "data/data_error.hpp"

namespace dflow::data {

double PlannedBatch::padding_efficiency() const {
  return padded_tokens > 0 ? static_cast<double>(real_tokens) / static_cast<double>(padded_tokens) : 0.0;
}

EpochPlan::EpochPlan(PlanOptions options, uint64_t data_fingerprint, std::vector<PlannedBatch> batches)
    : options_(std::move(options)), data_fingerprint_(data_fingerprint), batches_(std::move(batches)) {
  // Steps are groups of world_size * grad_accum consecutive batches; within a
  // step, batch j goes to rank j % world_size as its micro-batch j / world_size.
  const int64_t per_step = batches_per_step();
  for (size_t i = 0; i < batches_.size(); ++i) {
    auto& batch = batches_[i];
    const auto index = static_cast<int64_t>(i);
    batch.epoch = options_.epoch;
    batch.index_in_epoch = index;
    batch.step_in_epoch = index / per_step;
    const int64_t j = index % per_step;
    batch.rank = static_cast<int>(j % options_.world_size);
    batch.micro_in_step = static_cast<int>(j / options_.world_size);
    batch.micros_in_step = micros_in_step(batch.step_in_epoch, batch.rank);
  }
}

int64_t EpochPlan::steps_per_epoch() const {
  return (num_batches() + batches_per_step() - 1) / batches_per_step();
}

int64_t EpochPlan::num_samples() const {
  int64_t samples = 0;
  for (const auto& batch : batches_) samples += batch.num_samples();
  return samples;
}

int EpochPlan::micros_in_step(int64_t step, int rank) const {
  check_rank(rank);
  const int64_t first = step * batches_per_step();
  const int64_t batches_in_step = std::clamp<int64_t>(num_batches() - first, 0, batches_per_step());
  if (rank >= batches_in_step) return 0;
  return static_cast<int>((batches_in_step - rank + options_.world_size - 1) / options_.world_size);
}

void EpochPlan::check_rank(int rank) const {
  if (rank < 0 || rank >= options_.world_size) {
    throw DataError(fmt::format("rank {} is outside [0, world_size {})", rank, options_.world_size));
  }
}

std::vector<const PlannedBatch*> EpochPlan::batches_for_rank(int rank) const {
  return batches_for_rank(rank, begin());
}

std::vector<const PlannedBatch*> EpochPlan::batches_for_rank(int rank, const PlanCursor& from) const {
  check_rank(rank);
  std::vector<const PlannedBatch*> mine;
  for (const auto& batch : remaining(from)) {
    if (batch.rank == rank) mine.push_back(&batch);
  }
  return mine;
}

std::span<const PlannedBatch> EpochPlan::remaining(const PlanCursor& cursor) const {
  if (cursor.epoch != options_.epoch) {
    throw DataError(fmt::format("plan cursor is for epoch {} but this plan is for epoch {}; build the plan of the "
                                "cursor's epoch",
                                cursor.epoch, options_.epoch));
  }
  if (cursor.next_batch < 0 || cursor.next_batch > num_batches()) {
    throw DataError(fmt::format("plan cursor points at batch {} of epoch {}, which has {} batches; was the "
                                "checkpoint made with another dataset or batching config?",
                                cursor.next_batch, cursor.epoch, num_batches()));
  }
  return std::span<const PlannedBatch>(batches_).subspan(static_cast<size_t>(cursor.next_batch));
}

PlanCursor EpochPlan::cursor_at_step(int64_t step) const {
  if (step < 0 || step > steps_per_epoch()) {
    throw DataError(fmt::format("step {} is outside epoch {}, which has {} steps", step, options_.epoch,
                                steps_per_epoch()));
  }
  return PlanCursor{options_.epoch, std::min(num_batches(), step * batches_per_step())};
}

int64_t EpochPlan::real_tokens() const {
  int64_t tokens = 0;
  for (const auto& batch : batches_) tokens += batch.real_tokens;
  return tokens;
}

int64_t EpochPlan::padded_tokens() const {
  int64_t tokens = 0;
  for (const auto& batch : batches_) tokens += batch.padded_tokens;
  return tokens;
}

double EpochPlan::padding_efficiency() const {
  const int64_t padded = padded_tokens();
  return padded > 0 ? static_cast<double>(real_tokens()) / static_cast<double>(padded) : 0.0;
}

int64_t EpochPlan::max_padded_tokens() const {
  int64_t most = 0;
  for (const auto& batch : batches_) most = std::max(most, batch.padded_tokens);
  return most;
}

std::vector<int64_t> EpochPlan::batches_per_bucket() const {
  std::vector<int64_t> counts(options_.buckets.size(), 0);
  for (const auto& batch : batches_) counts[static_cast<size_t>(batch.bucket_index)] += 1;
  return counts;
}

std::string EpochPlan::summary() const {
  std::vector<std::string> per_bucket;
  const auto counts = batches_per_bucket();
  for (size_t b = 0; b < counts.size(); ++b) per_bucket.push_back(fmt::format("{}:{}", options_.buckets[b], counts[b]));
  const std::string mode = options_.batching ? options_.batching->name() : token_budget_batching()->name();
  int64_t rows = 0;
  for (const auto& batch : batches_) rows += batch.rows();
  return fmt::format("[data] epoch {} plan ({}): {} samples in {} rows, {} batches, {} steps of {} batches (world_size {} x "
                     "grad_accum {}), padding efficiency {:.1f}% ({} real / {} padded tokens), batches per bucket {}",
                     options_.epoch, mode, num_samples(), rows, num_batches(), steps_per_epoch(), batches_per_step(), options_.world_size,
                     options_.grad_accum, 100.0 * padding_efficiency(), real_tokens(), padded_tokens(),
                     fmt::join(per_bucket, " "));
}

}  // namespace dflow::data
